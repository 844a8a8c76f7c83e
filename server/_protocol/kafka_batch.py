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
from .kafka_records import (
    Record,
    RecordColumns,
    TimestampType,
    parse_columns,
    parse_records,
    record_parts,
    value_parts,
)

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
    "build_values_batch",
    "with_producer",
    "with_log_append_time",
    "read_header",
    "check_batch",
    "split_batches",
    "decode_records",
    "decode_columns",
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


def _assemble(
    parts: list[bytes], count: int, base_ts: int, max_ts: int, *, compression: Compression = Compression.NONE,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME, producer_id: int = -1, producer_epoch: int = -1,
    base_sequence: int = -1, base_offset: int = 0, partition_leader_epoch: int = -1,
) -> bytes:
    payload = _compress(compression, b"".join(parts))
    attributes = int(compression) | (_TIMESTAMP_TYPE_BIT if timestamp_type is TimestampType.LOG_APPEND_TIME else 0)
    header = bytearray(HEADER_SIZE)
    _HEADER.pack_into(header, 0, base_offset, HEADER_SIZE + len(payload) - 12, partition_leader_epoch, MAGIC, 0,
                      attributes, count - 1, base_ts, max_ts, producer_id, producer_epoch, base_sequence, count)
    crc = google_crc32c.extend(google_crc32c.value(bytes(header[_CRC_START:])), payload)
    struct.pack_into(">I", header, 17, crc)
    return bytes(header) + payload


def build_batch(
    records: Sequence[Record],
    *,
    now_ms: int | None = None,
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
    A record whose ``timestamp_ms`` is None gets ``now_ms``; ``base_timestamp``
    defaults to the first record's timestamp."""
    if not records:
        raise ValueError("a batch holds at least one record")
    stamps = [r.timestamp_ms if r.timestamp_ms is not None else now_ms for r in records]
    if None in stamps:
        raise ValueError("a record without a timestamp needs now_ms")
    base_ts = stamps[0] if base_timestamp is None else base_timestamp
    return _assemble(
        record_parts(records, stamps, base_ts), len(records), base_ts, max(stamps),  # type: ignore[arg-type]
        compression=compression, timestamp_type=timestamp_type, producer_id=producer_id,
        producer_epoch=producer_epoch, base_sequence=base_sequence, base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
    )


def build_values_batch(values: Sequence[bytes], timestamp_ms: int, *, producer_id: int = -1,
                       producer_epoch: int = -1, base_sequence: int = -1) -> bytes:
    """One uncompressed batch of value-only records (null key, no headers), all at
    ``timestamp_ms``: the fast path for a plain list of payloads."""
    if not values:
        raise ValueError("a batch holds at least one record")
    return _assemble(value_parts(values), len(values), timestamp_ms, timestamp_ms, producer_id=producer_id,
                     producer_epoch=producer_epoch, base_sequence=base_sequence)


def with_log_append_time(batch: bytes | memoryview, now_ms: int) -> bytes:
    """The batch stamped with the log's append time: the timestamp-type bit set and
    ``maxTimestamp`` = ``now_ms`` (what every record of it then reads as), CRC recomputed."""
    out = bytearray(batch)
    attributes = struct.unpack_from(">h", out, 21)[0] | _TIMESTAMP_TYPE_BIT
    struct.pack_into(">h", out, 21, attributes)
    struct.pack_into(">q", out, 35, now_ms)
    struct.pack_into(">I", out, 17, crc32c(memoryview(out)[_CRC_START:]))
    return bytes(out)


def with_producer(batch: bytes | memoryview, producer_id: int, producer_epoch: int, base_sequence: int) -> bytes:
    """The batch carrying an idempotent producer's fields (SPEC 7.12), CRC recomputed:
    one batch built once can be sent under many sequences."""
    out = bytearray(batch)
    struct.pack_into(">qhi", out, 43, producer_id, producer_epoch, base_sequence)
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


def decode_records(batch: bytes | memoryview, pos: int = 0, *, verified: bool = False) -> tuple[BatchHeader, list[Record]]:
    """The header and records of the batch at ``pos``. The CRC is checked unless
    ``verified`` (the caller checked this exact batch already, e.g. :class:`StoredBatches`).
    A LogAppendTime batch's records all read as its ``maxTimestamp``."""
    h = read_header(batch, pos) if verified else check_batch(batch, pos)
    data = _decompress(h.compression, bytes(batch[pos + HEADER_SIZE:pos + h.size]))
    log_append = h.max_timestamp if h.attributes & _TIMESTAMP_TYPE_BIT else None
    return h, parse_records(data, h.records_count, h.base_timestamp, log_append)


def decode_columns(batch: bytes | memoryview, pos: int = 0) -> tuple[RecordColumns, TimestampType]:
    """The records of an already checked batch at ``pos`` as columns, and its timestamp type."""
    h = read_header(batch, pos)
    data = _decompress(h.compression, bytes(batch[pos + HEADER_SIZE:pos + h.size]))
    log_append = h.max_timestamp if h.attributes & _TIMESTAMP_TYPE_BIT else None
    return parse_columns(data, h.records_count, h.base_timestamp, log_append), h.timestamp_type


def iter_records(slice_: bytes | memoryview) -> Iterable[tuple[BatchHeader, Record]]:
    """Every record of a slice of whole batches, with its batch's header."""
    for pos, _ in split_batches(slice_):
        header, records = decode_records(slice_, pos)
        for r in records:
            yield header, r
