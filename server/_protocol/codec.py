"""Byte codecs: ``bytes-batch-v1`` record batches and ``LLS1`` shared WAL blobs.

bytes-batch-v1 (all integers unsigned big-endian)::

    offset  size  field
    0       4     magic          b"LLB1"
    4       2     version        1
    6       2     flags          0 (reserved; a reader rejects other values)
    8       4     record_count   N
    12      4     records_length L = byte length of the records section
    16      4     crc32          zlib.crc32 of the records section
    20      L     records        N x (u32 length, length bytes of payload)

The header is 20 bytes, so a batch is exactly ``20 + L`` bytes long. The
length field lets a reader tell a truncated slice from a corrupted one before
it checksums; the CRC covers every record byte, so any flipped bit is caught.
Record payloads are opaque bytes (an empty payload is allowed); a batch holds
at most 2**32-1 records and the records section at most 2**32-1 bytes.

LLS1 shared WAL blob (the seed's layout)::

    offset   size  field
    0        4     magic          b"LLS1"
    4        4     header_length  H (u32 big-endian)
    8        H     header         UTF-8 JSON object, compact, keys in this order:
                                  {"version": 1, "created_at_ms": int,
                                   "partitions": [{"topic", "partition",
                                   "msg_count", "encoding", "body_offset",
                                   "body_length"}, ...]}
    8+H      ...   bodies         the bytes-batch-v1 bodies, concatenated in
                                  ``partitions`` order

``body_offset`` is the absolute byte position of a body from the start of the
blob, the same number the index entry stores as ``byte_offset``: a reader can
range-GET ``[body_offset, body_offset + body_length)`` with no other
knowledge. Because the header's length depends on the digits of the offsets
it holds, the encoder iterates to a fixed point (the length only grows, so it
settles in a couple of rounds).
"""

from __future__ import annotations

import array
import bisect
import itertools
import json
import struct
import zlib
from dataclasses import dataclass
from typing import Iterator, Sequence, overload

from .._errors import CorruptBatch, InvalidRequest

__all__ = [
    "BATCH_ENCODING",
    "BATCH_MAGIC",
    "BATCH_HEADER_SIZE",
    "SHARED_MAGIC",
    "encode_batch",
    "batch_header",
    "decode_batch",
    "BatchBounds",
    "decode_batch_bounds",
    "EncodedRecords",
    "join_payloads",
    "batch_encoded_size",
    "SharedBlobPart",
    "SharedBlobHeader",
    "encode_shared_blob",
    "decode_shared_header",
]

BATCH_ENCODING = "bytes-batch-v1"
BATCH_MAGIC = b"LLB1"
BATCH_VERSION = 1
_BATCH_HEADER = struct.Struct(">4sHHIII")
BATCH_HEADER_SIZE = _BATCH_HEADER.size  # 20
_U32 = struct.Struct(">I")
_U32_MAX = 0xFFFFFFFF

SHARED_MAGIC = b"LLS1"
SHARED_VERSION = 1
_SHARED_PREFIX = struct.Struct(">4sI")


def batch_encoded_size(payloads: Sequence[bytes]) -> int:
    """Bytes :func:`encode_batch` will produce for ``payloads``."""
    return BATCH_HEADER_SIZE + 4 * len(payloads) + sum(len(p) for p in payloads)


def batch_header(count: int, sections: Sequence[bytes | memoryview]) -> bytes:
    """The 20-byte header of a batch of ``count`` records whose records section
    is ``sections`` joined, checksummed piece by piece (no join copy); the
    caller vouches that the sections are ``count`` length-prefixed records."""
    length = sum(len(s) for s in sections)
    if count > _U32_MAX or length > _U32_MAX:
        raise InvalidRequest(f"a batch holds at most {_U32_MAX} records and {_U32_MAX} record bytes")
    crc = 0
    for s in sections:
        crc = zlib.crc32(s, crc)
    return _BATCH_HEADER.pack(BATCH_MAGIC, BATCH_VERSION, 0, count, length, crc)


def encode_batch(payloads: Sequence[bytes]) -> bytes:
    """Encode payloads as one bytes-batch-v1 batch.

    :class:`EncodedRecords` are spliced: their verified records sections are
    joined as they are and checksummed once, with no per-record work."""
    if isinstance(payloads, EncodedRecords):
        records = payloads.records_section()
        if len(payloads) > _U32_MAX or len(records) > _U32_MAX:
            raise InvalidRequest(f"a batch holds at most {_U32_MAX} records and {_U32_MAX} record bytes")
        return _BATCH_HEADER.pack(
            BATCH_MAGIC, BATCH_VERSION, 0, len(payloads), len(records), zlib.crc32(records)
        ) + records
    if len(payloads) > _U32_MAX:
        raise InvalidRequest(f"a batch holds at most {_U32_MAX} records")
    pack = _U32.pack
    parts: list[bytes] = []
    append = parts.append
    for p in payloads:
        append(pack(len(p)))
        append(p)
    records = b"".join(parts)
    if len(records) > _U32_MAX:
        raise InvalidRequest(f"a batch's records section is at most {_U32_MAX} bytes")
    header = _BATCH_HEADER.pack(
        BATCH_MAGIC, BATCH_VERSION, 0, len(payloads), len(records), zlib.crc32(records)
    )
    return header + records


def _records_section(data: bytes | memoryview, expected_count: int | None) -> tuple[memoryview, int]:
    """The verified records section of one batch and its record count."""
    view = memoryview(data)
    if len(view) < BATCH_HEADER_SIZE:
        raise CorruptBatch(
            f"truncated batch: {len(view)} bytes is shorter than the {BATCH_HEADER_SIZE}-byte header"
        )
    magic, version, flags, count, length, crc = _BATCH_HEADER.unpack_from(view, 0)
    if magic != BATCH_MAGIC:
        raise CorruptBatch(f"bad batch magic {bytes(magic)!r}, expected {BATCH_MAGIC!r}")
    if version != BATCH_VERSION or flags != 0:
        raise CorruptBatch(f"unsupported batch version {version} flags {flags}")
    if len(view) != BATCH_HEADER_SIZE + length:
        raise CorruptBatch(
            f"batch length mismatch: header says {BATCH_HEADER_SIZE + length} bytes, "
            f"slice has {len(view)}"
        )
    records = view[BATCH_HEADER_SIZE:]
    if zlib.crc32(records) != crc:
        raise CorruptBatch("batch checksum mismatch: stored bytes are corrupted")
    if expected_count is not None and count != expected_count:
        raise CorruptBatch(f"batch holds {count} records, index says {expected_count}")
    return records, count


def decode_batch(data: bytes | memoryview, expected_count: int | None = None) -> list[bytes]:
    """Decode one bytes-batch-v1 batch, verifying length, CRC and count.

    Raises CorruptBatch with what was wrong; ``data`` must be the exact slice.
    """
    records, count = _records_section(data, expected_count)
    out: list[bytes] = []
    append = out.append
    unpack = _U32.unpack_from
    pos = 0
    end = len(records)
    raw = records.tobytes()
    for _ in range(count):
        if pos + 4 > end:
            raise CorruptBatch("batch records section ends inside a length prefix")
        (n,) = unpack(raw, pos)
        pos += 4
        if pos + n > end:
            raise CorruptBatch("batch records section ends inside a record")
        append(raw[pos:pos + n])
        pos += n
    if pos != end:
        raise CorruptBatch(f"{end - pos} trailing bytes after {count} records")
    return out


@dataclass(frozen=True)
class BatchBounds:
    """A verified batch as positions rather than copies (see :func:`decode_batch_bounds`).

    Record ``i`` is ``records[starts[i] + 4 : starts[i + 1]]``: the 4-byte
    length prefix, then the payload, lie between two neighbouring positions;
    ``starts`` holds ``count + 1`` of them, from 0 to ``len(records)``."""

    records: memoryview
    starts: array.array
    """Machine ``q`` integers."""

    @property
    def count(self) -> int:
        return len(self.starts) - 1

    def payload(self, i: int) -> bytes:
        return self.records[self.starts[i] + 4:self.starts[i + 1]].tobytes()


def decode_batch_bounds(data: bytes | memoryview, expected_count: int | None = None) -> BatchBounds:
    """Verify one bytes-batch-v1 batch like :func:`decode_batch`, with the
    same checks and errors, but return where its records lie instead of
    copying each one out: a columnar reader then builds a whole column from
    the section in one copy (the Spark source makes an Arrow array of it)."""
    records, count = _records_section(data, expected_count)
    if 4 * count > len(records):
        # Checked before sizing ``starts`` from a count the bytes cannot hold
        # (a forged header would otherwise ask for gigabytes).
        raise CorruptBatch("batch records section ends inside a length prefix")
    starts = array.array("q", bytes(8 * (count + 1)))
    unpack = _U32.unpack_from
    pos = 0
    end = len(records)
    # Bounds are checked once, after the walk or when unpack_from runs off
    # the end: per record, this loop is the batch read's hottest Python code.
    try:
        for i in range(1, count + 1):
            pos += 4 + unpack(records, pos)[0]
            starts[i] = pos
    except struct.error:
        where = "a record" if pos > end else "a length prefix"
        raise CorruptBatch(f"batch records section ends inside {where}") from None
    if pos > end:
        raise CorruptBatch("batch records section ends inside a record")
    if pos != end:
        raise CorruptBatch(f"{end - pos} trailing bytes after {count} records")
    return BatchBounds(records, starts)


class EncodedRecords(Sequence[bytes]):
    """Payloads held as verified bytes-batch-v1 records sections, not as a list.

    What a client sends already encoded (the broker's binary produce body)
    stays in that form down to the WAL blob: :func:`encode_batch` joins the
    sections as they are. Indexing and iteration slice a payload out on
    demand (the tail cache and the tests do; the write path does not)."""

    __slots__ = ("parts", "_ends", "payload_bytes")

    def __init__(self, parts: Sequence[BatchBounds]) -> None:
        self.parts = tuple(parts)
        ends, n = [], 0
        for part in self.parts:
            n += part.count
            ends.append(n)
        self._ends = ends
        self.payload_bytes = sum(len(p.records) - 4 * p.count for p in self.parts)
        """Bytes of payload, length prefixes left out."""

    def __len__(self) -> int:
        return self._ends[-1] if self._ends else 0

    @overload
    def __getitem__(self, i: int) -> bytes: ...
    @overload
    def __getitem__(self, i: slice) -> list[bytes]: ...
    def __getitem__(self, i: int | slice) -> bytes | list[bytes]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError("record index out of range")
        k = bisect.bisect_right(self._ends, i)
        return self.parts[k].payload(i - (self._ends[k - 1] if k else 0))

    def __iter__(self) -> Iterator[bytes]:
        for part in self.parts:
            raw, starts = part.records.tobytes(), part.starts  # one copy, then bytes slices
            yield from [raw[a + 4:b] for a, b in zip(starts, itertools.islice(starts, 1, None))]

    def __repr__(self) -> str:
        return f"EncodedRecords({len(self)} records, {self.payload_bytes} payload bytes)"

    def records_section(self) -> bytes:
        """The records sections joined: a bytes-batch-v1 records section of all of them."""
        return b"".join(p.records for p in self.parts)


def join_payloads(seqs: Sequence[Sequence[bytes]]) -> Sequence[bytes]:
    """Several payload sequences as one, in order: :class:`EncodedRecords`
    when every one is (no per-record work), else a list."""
    if seqs and all(isinstance(s, EncodedRecords) for s in seqs):
        return EncodedRecords([p for s in seqs for p in s.parts])  # type: ignore[attr-defined]
    out: list[bytes] = []
    for s in seqs:
        out.extend(s)
    return out


@dataclass(frozen=True)
class SharedBlobPart:
    """One partition's body inside an LLS1 blob (a header entry)."""

    topic: str
    partition: int
    msg_count: int
    encoding: str
    body_offset: int
    """Absolute position of the body from the start of the blob."""
    body_length: int

    def to_json(self) -> dict:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "msg_count": self.msg_count,
            "encoding": self.encoding,
            "body_offset": self.body_offset,
            "body_length": self.body_length,
        }


@dataclass(frozen=True)
class SharedBlobHeader:
    version: int
    created_at_ms: int
    partitions: tuple[SharedBlobPart, ...]
    header_length: int
    """H: bytes of JSON; the bodies start at ``8 + H``."""


def _header_json(created_at_ms: int, parts: list[SharedBlobPart]) -> bytes:
    doc = {
        "version": SHARED_VERSION,
        "created_at_ms": created_at_ms,
        "partitions": [p.to_json() for p in parts],
    }
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def encode_shared_blob(
    groups: Sequence[tuple[str, int, int, bytes]], created_at_ms: int, encoding: str = BATCH_ENCODING
) -> tuple[bytes, list[SharedBlobPart]]:
    """Pack ``(topic, partition, msg_count, body)`` groups, each body of ``encoding``, into one LLS1 blob.

    Returns the blob and, per group in order, its header entry (whose
    ``body_offset``/``body_length`` are the index's ``byte_offset``/``byte_length``).
    """

    def layout(base: int) -> list[SharedBlobPart]:
        parts = []
        pos = base
        for topic, partition, count, body in groups:
            parts.append(SharedBlobPart(topic, partition, count, encoding, pos, len(body)))
            pos += len(body)
        return parts

    header_len = 0
    while True:
        parts = layout(_SHARED_PREFIX.size + header_len)
        header = _header_json(created_at_ms, parts)
        if len(header) == header_len:
            break
        header_len = len(header)
    blob = b"".join([_SHARED_PREFIX.pack(SHARED_MAGIC, len(header)), header, *(g[3] for g in groups)])
    return blob, parts


def decode_shared_header(data: bytes | memoryview) -> SharedBlobHeader:
    """Parse the LLS1 prefix and JSON header (``data`` needs only those bytes)."""
    view = memoryview(data)
    if len(view) < _SHARED_PREFIX.size:
        raise CorruptBatch("truncated LLS1 blob: shorter than its 8-byte prefix")
    magic, header_len = _SHARED_PREFIX.unpack_from(view, 0)
    if magic != SHARED_MAGIC:
        raise CorruptBatch(f"bad shared blob magic {bytes(magic)!r}, expected {SHARED_MAGIC!r}")
    end = _SHARED_PREFIX.size + header_len
    if len(view) < end:
        raise CorruptBatch(f"truncated LLS1 header: need {end} bytes, have {len(view)}")
    try:
        doc = json.loads(bytes(view[_SHARED_PREFIX.size:end]).decode("utf-8"))
        parts = tuple(
            SharedBlobPart(
                topic=str(p["topic"]),
                partition=int(p["partition"]),
                msg_count=int(p["msg_count"]),
                encoding=str(p["encoding"]),
                body_offset=int(p["body_offset"]),
                body_length=int(p["body_length"]),
            )
            for p in doc["partitions"]
        )
        version = int(doc["version"])
        if version != SHARED_VERSION:
            raise CorruptBatch(f"unsupported LLS1 header version {version}")
        return SharedBlobHeader(version, int(doc["created_at_ms"]), parts, header_len)
    except (ValueError, KeyError, TypeError) as exc:
        raise CorruptBatch(f"unreadable LLS1 header: {exc}") from exc
