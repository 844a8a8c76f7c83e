"""Kafka's RecordBatch v2 (magic 2): the ``kafka-batch-v2`` storage encoding (SPEC 6.3).

A stored slice of this encoding is one or more whole batches back to back.
The broker stores a client's batch as it came and a fetch returns the stored
bytes with only ``baseOffset`` rewritten: the CRC covers ``attributes`` to the
end, so neither ``baseOffset`` nor ``partitionLeaderEpoch`` is under it, and
produce and fetch cost no per-record work. Records are decoded only where one
must be looked at (HTTP consume, Spark).

Batch header, 61 bytes, big-endian::

    offset size field
     0     8    baseOffset            int64   stored as written (0 from clients); a reader sets
                                              it to kafka_offset(the batch's first llog offset)
     8     4    batchLength           int32   bytes after this field: total length - 12
    12     4    partitionLeaderEpoch  int32   not checked, not covered by the CRC
    16     1    magic                 int8    2
    17     4    crc                   uint32  CRC-32C (Castagnoli) of bytes [21, end)
    21     2    attributes            int16   bits 0-2 compression (0 none, 1 gzip, 2 snappy,
                                              3 lz4, 4 zstd), bit 3 timestamp type (0 CreateTime,
                                              1 LogAppendTime), bit 4 transactional, bit 5 control
    23     4    lastOffsetDelta       int32   recordsCount - 1
    27     8    baseTimestamp         int64   ms
    35     8    maxTimestamp          int64   ms
    43     8    producerId            int64   -1: none
    51     2    producerEpoch         int16
    53     4    baseSequence          int32
    57     4    recordsCount          int32   >= 1
    61     ...  records               compressed as one block when bits 0-2 are not 0

One record (varints are zigzag, as protobuf's ``sint``)::

    length varint            bytes of the record after this field
    attributes int8          0
    timestampDelta varlong   from baseTimestamp
    offsetDelta varint       0, 1, 2, ... in order
    keyLength varint         -1: null key
    key bytes
    valueLength varint       -1: null value (a tombstone)
    value bytes
    headersCount varint
    headers                  headersCount times: keyLength varint, key (UTF-8),
                             valueLength varint (-1: null), value

Offsets: llog's offsets start at 1 (SPEC 1.1), Kafka's at 0.
:func:`kafka_offset` and :func:`llog_offset` are the one mapping.

Compressed records are decompressed with ``cramjam`` (gzip, snappy raw or in
xerial framing as Java clients write it, lz4 frame, zstd).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum
from typing import Iterable, Iterator, Sequence

import cramjam
import google_crc32c

from .._errors import CorruptBatch

__all__ = [
    "ENCODING",
    "HEADER_SIZE",
    "Compression",
    "TimestampType",
    "Record",
    "BatchHeader",
    "kafka_offset",
    "llog_offset",
    "crc32c",
    "build_batch",
    "read_header",
    "check_batch",
    "split_batches",
    "decode_records",
    "with_base_offset",
    "iter_records",
]

ENCODING = "kafka-batch-v2"
"""The ``encoding`` of index entries, pending appends and compaction records whose bytes are this format."""

HEADER_SIZE = 61
MAGIC = 2
_HEADER = struct.Struct(">qiibIhiqqqhii")
_CRC_START = 21
_COMPRESSION_MASK = 0x07
_TIMESTAMP_TYPE_BIT = 0x08
_TRANSACTIONAL_BIT = 0x10
_CONTROL_BIT = 0x20
_XERIAL_MAGIC = b"\x82SNAPPY\x00"


class Compression(IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


class TimestampType(IntEnum):
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


def kafka_offset(offset: int) -> int:
    """The Kafka offset of llog offset ``offset`` (llog starts at 1, Kafka at 0)."""
    return offset - 1


def llog_offset(kafka: int) -> int:
    """The llog offset of Kafka offset ``kafka``."""
    return kafka + 1


def crc32c(data: bytes | bytearray | memoryview) -> int:
    """CRC-32C (Castagnoli); the C library takes only ``bytes``, so views are copied (a memcpy)."""
    return google_crc32c.value(data if type(data) is bytes else bytes(data))


@dataclass(frozen=True, slots=True)
class Record:
    """One record: what a producer sends and a consumer reads."""

    value: bytes | None
    key: bytes | None = None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    timestamp_ms: int = 0
    offset_delta: int = 0
    """Position in its batch (decoded records only)."""


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """The 61-byte header of one batch (see the module docstring)."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Bytes of the whole batch."""
        return self.batch_length + 12

    @property
    def compression(self) -> Compression:
        return Compression(self.attributes & _COMPRESSION_MASK)

    @property
    def timestamp_type(self) -> TimestampType:
        return TimestampType.LOG_APPEND_TIME if self.attributes & _TIMESTAMP_TYPE_BIT else TimestampType.CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & _TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & _CONTROL_BIT)


# -- varints --------------------------------------------------------------------------------------


def _put_varint(out: bytearray, n: int) -> None:
    z = (n << 1) ^ (n >> 63)
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)


def _get_varint(buf: bytes, pos: int) -> tuple[int, int]:
    shift = z = 0
    while True:
        if pos >= len(buf):
            raise CorruptBatch("a record ends inside a varint")
        b = buf[pos]
        pos += 1
        z |= (b & 0x7F) << shift
        if not b & 0x80:
            return (z >> 1) ^ -(z & 1), pos
        shift += 7
        if shift > 63:
            raise CorruptBatch("a varint is longer than 10 bytes")


# -- building -------------------------------------------------------------------------------------


def _compress(codec: Compression, data: bytes) -> bytes:
    if codec is Compression.NONE:
        return data
    if codec is Compression.GZIP:
        return bytes(cramjam.gzip.compress(data))
    if codec is Compression.SNAPPY:
        return _xerial(data)
    if codec is Compression.LZ4:
        return bytes(cramjam.lz4.compress(data))
    return bytes(cramjam.zstd.compress(data))


def _xerial(data: bytes, block: int = 32 * 1024) -> bytes:
    """Snappy in the xerial framing Java clients write: magic, version 1, compat 1, then blocks."""
    out = bytearray(_XERIAL_MAGIC + struct.pack(">ii", 1, 1))
    for i in range(0, len(data), block):
        chunk = bytes(cramjam.snappy.compress_raw(data[i:i + block]))
        out += struct.pack(">i", len(chunk)) + chunk
    return bytes(out)


def build_batch(
    records: Sequence[Record],
    *,
    base_timestamp: int | None = None,
    compression: Compression = Compression.NONE,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    base_offset: int = 0,
    partition_leader_epoch: int = -1,
) -> bytes:
    """One batch of ``records`` (at least one), offset deltas 0..n-1 in order.
    ``base_timestamp`` defaults to the first record's timestamp."""
    if not records:
        raise ValueError("a batch holds at least one record")
    base_ts = records[0].timestamp_ms if base_timestamp is None else base_timestamp
    body = bytearray()
    rec = bytearray()
    for delta, r in enumerate(records):
        rec.clear()
        rec.append(0)
        _put_varint(rec, r.timestamp_ms - base_ts)
        _put_varint(rec, delta)
        for field in (r.key, r.value):
            if field is None:
                _put_varint(rec, -1)
            else:
                _put_varint(rec, len(field))
                rec += field
        _put_varint(rec, len(r.headers))
        for hkey, hvalue in r.headers:
            k = hkey.encode("utf-8")
            _put_varint(rec, len(k))
            rec += k
            if hvalue is None:
                _put_varint(rec, -1)
            else:
                _put_varint(rec, len(hvalue))
                rec += hvalue
        _put_varint(body, len(rec))
        body += rec
    payload = _compress(compression, bytes(body))
    attributes = int(compression) | (_TIMESTAMP_TYPE_BIT if timestamp_type is TimestampType.LOG_APPEND_TIME else 0)
    max_ts = max(r.timestamp_ms for r in records)
    out = bytearray(HEADER_SIZE) + payload
    _HEADER.pack_into(out, 0, base_offset, len(out) - 12, partition_leader_epoch, MAGIC, 0, attributes,
                      len(records) - 1, base_ts, max_ts, producer_id, producer_epoch, base_sequence, len(records))
    struct.pack_into(">I", out, 17, crc32c(memoryview(out)[_CRC_START:]))
    return bytes(out)


# -- reading --------------------------------------------------------------------------------------


def read_header(buf: bytes | memoryview, pos: int = 0) -> BatchHeader:
    """The header of the batch at ``pos`` (its magic and length checked, not its CRC)."""
    if len(buf) - pos < HEADER_SIZE:
        raise CorruptBatch(f"a batch needs {HEADER_SIZE} header bytes, {len(buf) - pos} left")
    h = BatchHeader(*_HEADER.unpack_from(buf, pos))
    if h.magic != MAGIC:
        raise CorruptBatch(f"batch magic is {h.magic}, only 2 (RecordBatch v2) is stored")
    if h.batch_length < HEADER_SIZE - 12 or pos + h.size > len(buf):
        raise CorruptBatch(f"batchLength {h.batch_length} does not fit the {len(buf) - pos} bytes left")
    return h


def check_batch(buf: bytes | memoryview, pos: int = 0) -> BatchHeader:
    """Everything a broker checks before it stores a batch: magic, length, CRC-32C,
    a record count of at least 1 that agrees with ``lastOffsetDelta``, known compression."""
    h = read_header(buf, pos)
    view = memoryview(buf)[pos + _CRC_START:pos + h.size]
    if crc32c(view) != h.crc:
        raise CorruptBatch(f"batch CRC-32C mismatch (stored {h.crc:#010x})")
    if h.records_count < 1 or h.last_offset_delta != h.records_count - 1:
        raise CorruptBatch(f"recordsCount {h.records_count} with lastOffsetDelta {h.last_offset_delta}")
    if h.attributes & _COMPRESSION_MASK > Compression.ZSTD:
        raise CorruptBatch(f"unknown compression type {h.attributes & _COMPRESSION_MASK}")
    return h


def split_batches(buf: bytes | memoryview) -> Iterator[tuple[int, BatchHeader]]:
    """``(position, header)`` of each batch of a slice that holds whole batches back to back."""
    pos = 0
    while pos < len(buf):
        h = read_header(buf, pos)
        yield pos, h
        pos += h.size


def with_base_offset(batch: bytes | memoryview, base_offset: int) -> bytes:
    """The batch with ``baseOffset`` set (outside the CRC, so the batch stays valid)."""
    return struct.pack(">q", base_offset) + bytes(batch[8:])


def _decompress(codec: Compression, data: bytes) -> bytes:
    try:
        if codec is Compression.GZIP:
            return bytes(cramjam.gzip.decompress(data))
        if codec is Compression.SNAPPY:
            if data[:8] == _XERIAL_MAGIC:
                return _unxerial(data)
            return bytes(cramjam.snappy.decompress_raw(data))
        if codec is Compression.LZ4:
            return bytes(cramjam.lz4.decompress(data))
        if codec is Compression.ZSTD:
            return bytes(cramjam.zstd.decompress(data))
    except cramjam.DecompressionError as exc:
        raise CorruptBatch(f"cannot decompress {codec.name.lower()} records: {exc}") from None
    return data


def _unxerial(data: bytes) -> bytes:
    out = bytearray()
    pos = 16
    while pos < len(data):
        if pos + 4 > len(data):
            raise CorruptBatch("xerial snappy block length cut short")
        (n,) = struct.unpack_from(">i", data, pos)
        pos += 4
        if n < 0 or pos + n > len(data):
            raise CorruptBatch("xerial snappy block runs past the end")
        out += cramjam.snappy.decompress_raw(data[pos:pos + n])
        pos += n
    return bytes(out)


def decode_records(batch: bytes | memoryview, pos: int = 0) -> tuple[BatchHeader, list[Record]]:
    """The header and records of the batch at ``pos``; the CRC is checked."""
    h = check_batch(batch, pos)
    data = _decompress(h.compression, bytes(batch[pos + HEADER_SIZE:pos + h.size]))
    out: list[Record] = []
    p = 0
    for _ in range(h.records_count):
        length, p = _get_varint(data, p)
        end = p + length
        if length < 1 or end > len(data):
            raise CorruptBatch("a record's length runs past the end of its batch")
        p += 1  # attributes
        ts_delta, p = _get_varint(data, p)
        offset_delta, p = _get_varint(data, p)
        key, p = _get_bytes(data, p, end)
        value, p = _get_bytes(data, p, end)
        count, p = _get_varint(data, p)
        if count < 0:
            raise CorruptBatch(f"negative header count {count}")
        headers = []
        for _ in range(count):
            hkey, p = _get_bytes(data, p, end)
            hvalue, p = _get_bytes(data, p, end)
            if hkey is None:
                raise CorruptBatch("a header has a null key")
            try:
                headers.append((hkey.decode("utf-8"), hvalue))
            except UnicodeDecodeError:
                raise CorruptBatch("a header key is not UTF-8") from None
        if p != end:
            raise CorruptBatch("a record's fields do not fill its length")
        out.append(Record(value, key, tuple(headers), h.base_timestamp + ts_delta, offset_delta))
    if p != len(data):
        raise CorruptBatch(f"{len(data) - p} bytes left after recordsCount {h.records_count} records")
    return h, out


def _get_bytes(data: bytes, pos: int, end: int) -> tuple[bytes | None, int]:
    n, pos = _get_varint(data, pos)
    if n == -1:
        return None, pos
    if n < 0 or pos + n > end:
        raise CorruptBatch("a key, value or header runs past the end of its record")
    return data[pos:pos + n], pos + n


def iter_records(slice_: bytes | memoryview) -> Iterable[tuple[BatchHeader, Record]]:
    """Every record of a slice of whole batches, with its batch's header."""
    for pos, _ in split_batches(slice_):
        header, records = decode_records(slice_, pos)
        for r in records:
            yield header, r
