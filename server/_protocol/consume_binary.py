"""The binary ``/consume`` answer (``application/vnd.llog.consume.v2``): layout, encoder, parser.

A client that sends ``Accept: application/vnd.llog.consume.v2`` with its
(JSON) consume request gets this answer instead of JSON: each partition's
records as the stored RecordBatch v2 batches themselves (S3 range or tail
cache), written out as they are with only each batch's ``baseOffset`` set:
no JSON, no base64, no per-record work on the broker. Without that header
the answer stays JSON. (The values-only ``consume.v1`` answer is no longer
served: a client asking for it gets JSON.)

Layout (integers big-endian; offsets signed, counts and lengths unsigned)::

    offset  size  field
    0       4     magic            b"LLC1"
    4       2     version          2
    6       2     flags            0 (reserved; a reader refuses other values)
    8       4     partition_count  P, one per requested topic-partition, in request order
    12      4     record_count     records in the whole answer (from each first_offset on)
    16      8     payload_bytes    bytes of the batches in the whole answer
    24      4     waited_ms        time spent long-polling
    28      ...   P partitions, back to back, each:
                    2     topic_length       T (1..249, MAX_TOPIC_LENGTH)
                    T     topic              UTF-8
                    4     partition          0 .. 2**31-1
                    8     high_watermark     i64; -1 when unknown (JSON null)
                    8     log_start_offset   i64
                    8     next_fetch_offset  i64: send it as the next fetch_offset
                    8     first_offset       i64: the first record to take (next_fetch_offset when none)
                    4     error_length       E; 0 when the partition is ok
                    E     error              UTF-8 JSON object {"error_code", "error_type", "error",
                                             "retriable"}, the JSON answer's fields (only when E > 0)
                    4     batches_length     B (0 when no records)
                    B     batches            whole RecordBatch v2 batches; each baseOffset is the Kafka
                                             offset (llog offset - 1) of its first record, and they
                                             follow each other without a gap

Batches are whole, as in Kafka: the first may begin before ``first_offset``
(a fetch inside a batch), and a reader skips its records below
``first_offset``. When B > 0, ``next_fetch_offset`` is one past the last
record of the last batch. The small per-partition fields are fixed-width;
only an error (rare, and text anyway) is JSON.

The broker encodes with :func:`encode_binary_consume` into a list of buffers
(the batches are views of the stored bytes, so the answer is written without
joining them). Clients decode with :func:`parse_binary_consume`, which checks
every batch's CRC-32C but decodes no record until asked
(:meth:`BinaryConsumedPartition.records`); every malformed answer is a
:class:`MalformedAnswer` naming the field and the byte offset.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from typing import Any, Sequence

from .._errors import LlogError
from .http_json import MAX_INT32, ConsumedPartition
from .kafka_batch import Record, kafka_offset, llog_offset
from .stored_batches import StoredBatches
from .outcomes import error_code, error_type_of
from .frame import Frame

__all__ = [
    "CONSUME_BINARY_CONTENT_TYPE",
    "CONSUME_MAGIC",
    "BinaryConsumeAnswer",
    "BinaryConsumedPartition",
    "MalformedAnswer",
    "PartitionError",
    "accepts_binary_consume",
    "encode_binary_consume",
    "parse_binary_consume",
]

CONSUME_BINARY_CONTENT_TYPE = "application/vnd.llog.consume.v2"
CONSUME_MAGIC = b"LLC1"
CONSUME_VERSION = 2
_HEADER = struct.Struct(">4sHHIIQI")
_TOPIC_LENGTH = struct.Struct(">H")
_FIXED = struct.Struct(">IqqqqI")  # partition, high_watermark, log_start, next_fetch, first_offset, error_length
_U32 = struct.Struct(">I")
_UNKNOWN = -1
_SMALL = 64 * 1024
"""Sections shorter than this are copied into the surrounding header bytes:
fewer, larger socket writes (Nagle is off) for a negligible copy."""


class MalformedAnswer(LlogError):
    """A binary consume answer does not follow its layout; names the field."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class PartitionError:
    """A partition's error in a consume answer (the JSON answer's fields)."""

    error_code: str
    error_type: str
    error: str
    retriable: bool


@dataclass(frozen=True)
class BinaryConsumedPartition:
    """One partition of a parsed binary consume answer."""

    topic: str
    partition: int
    high_watermark: int | None
    log_start_offset: int
    next_fetch_offset: int
    first_offset: int
    error: PartitionError | None
    batches: StoredBatches
    """The checked batches; their first record is at offset ``batch_base``."""
    batch_base: int

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def record_count(self) -> int:
        """Records from ``first_offset`` on."""
        return self.next_fetch_offset - self.first_offset if len(self.batches) else 0

    def records(self) -> list[tuple[int, Record]]:
        """``(offset, record)`` from ``first_offset`` on (decodes the batches)."""
        skip = self.first_offset - self.batch_base
        return [(self.batch_base + k, r) for k, r in enumerate(self.batches.all_records()) if k >= skip]

    def payloads(self) -> list[bytes | None]:
        return [r.value for _, r in self.records()]


@dataclass(frozen=True)
class BinaryConsumeAnswer:
    """A parsed binary consume answer: partitions in request order."""

    partitions: tuple[BinaryConsumedPartition, ...]
    record_count: int
    payload_bytes: int
    waited_ms: int


def accepts_binary_consume(accept: str | None) -> bool:
    """Whether an ``Accept`` header asks for the binary answer: it lists
    ``application/vnd.llog.consume.v2`` (with no ``q=0``)."""
    for item in (accept or "").split(","):
        media, *params = (p.strip().lower() for p in item.split(";"))
        if media == CONSUME_BINARY_CONTENT_TYPE:
            return all(_quality(p) != 0 for p in params)
    return False


def _quality(param: str) -> float | None:
    name, _, value = param.partition("=")
    if name.strip() != "q":
        return None
    try:
        return float(value)
    except ValueError:
        return None


# -- encoding -------------------------------------------------------------------------


def _error_json(part: ConsumedPartition) -> bytes:
    if part.error is None:
        return b""
    doc = {
        "error_code": error_code(part.error),
        "error_type": error_type_of(part.error),
        "error": str(part.error),
        "retriable": bool(part.error.retriable),
    }
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def encode_binary_consume(
    partitions: Sequence[ConsumedPartition], record_count: int, payload_bytes: int, waited_ms: int
) -> list[bytes | memoryview]:
    """The answer as buffers to write in order (layout in the module docstring);
    ``payload_bytes`` is the bytes of the spans' batches."""
    out: list[bytes | memoryview] = []
    small: list[bytes | memoryview] = [
        _HEADER.pack(CONSUME_MAGIC, CONSUME_VERSION, 0, len(partitions), record_count, payload_bytes, waited_ms)]
    for part in partitions:
        name = part.topic.encode("utf-8")
        error = _error_json(part)
        first = part.spans[0].first if part.spans else part.next_fetch_offset
        hw = _UNKNOWN if part.high_watermark is None else part.high_watermark
        small += [
            _TOPIC_LENGTH.pack(len(name)), name,
            _FIXED.pack(part.partition, hw, part.log_start_offset, part.next_fetch_offset, first, len(error)), error,
            _U32.pack(sum(s.payload_bytes for s in part.spans)),
        ]
        for span in part.spans:
            for piece in span.kafka_batches():
                if len(piece) < _SMALL:
                    small.append(piece)
                else:
                    out += [b"".join(small), piece]
                    small = []
    out.append(b"".join(small))
    return out


# -- parsing ----------------------------------------------------------------------------


def parse_binary_consume(body: bytes | memoryview) -> BinaryConsumeAnswer:
    """A checked binary consume answer (layout in the module docstring): every
    batch's length, CRC and length prefixes, and the counts against the header."""
    frame = Frame(body, MalformedAnswer, "answer")
    flags, count, records, nbytes, waited = frame.header(_HEADER, CONSUME_MAGIC, CONSUME_VERSION)
    if flags != 0:
        raise MalformedAnswer(f"header.flags must be 0, got {flags} at offset 6", "header.flags")
    pos = _HEADER.size
    parts = []
    for i in range(count):
        part, pos = _parse_partition(frame, pos, f"partitions[{i}]")
        parts.append(part)
    frame.trailing(pos, f"the {count} partitions header.partition_count announced", "partitions")
    got_records = sum(p.record_count for p in parts)
    got_bytes = sum(p.batches.nbytes for p in parts)
    if (got_records, got_bytes) != (records, nbytes):
        # Named after the count that is wrong, so the error points at its field.
        raise MalformedAnswer(
            f"header.record_count {records} and header.payload_bytes {nbytes} (offsets 12, 16) do not match "
            f"the partitions' {got_records} records of {got_bytes} bytes",
            "header.record_count" if got_records != records else "header.payload_bytes",
        )
    return BinaryConsumeAnswer(tuple(parts), records, nbytes, waited)


def _parse_partition(frame: Frame, pos: int, where: str) -> tuple[BinaryConsumedPartition, int]:
    topic, pos = frame.topic(pos, where)
    frame.need(pos, _FIXED.size, f"{where}.partition")
    partition, hw, log_start, next_fetch, first, elen = _FIXED.unpack_from(frame.view, pos)
    if partition > MAX_INT32:
        raise MalformedAnswer(
            f"{where}.partition must be between 0 and {MAX_INT32}, got {partition} at offset {pos}", f"{where}.partition"
        )
    if hw < _UNKNOWN:
        raise MalformedAnswer(f"{where}.high_watermark {hw} at offset {pos + 4} is below -1", f"{where}.high_watermark")
    pos += _FIXED.size
    error = None
    if elen:
        frame.need(pos, elen, f"{where}.error")
        error = _parse_error(frame.view[pos:pos + elen], pos, f"{where}.error")
        pos += elen
    batches, end = frame.kafka_batches(pos, f"{where}.batches")
    base = next_fetch
    if len(batches):
        base = llog_offset(batches.header(0).base_offset)
        for i in range(batches.batch_count):
            if batches.header(i).base_offset != kafka_offset(base) + batches.record_starts[i]:
                raise MalformedAnswer(f"{where}.batches: batch {i}'s baseOffset does not follow the one before",
                                      f"{where}.batches")
        if not base <= first < base + len(batches) or next_fetch != base + len(batches):
            raise MalformedAnswer(
                f"{where}: first_offset {first} and next_fetch_offset {next_fetch} do not fit the batches' "
                f"offsets {base}..{base + len(batches) - 1}", f"{where}.first_offset",
            )
    part = BinaryConsumedPartition(
        topic, partition, None if hw == _UNKNOWN else hw, log_start, next_fetch, first, error, batches, base
    )
    return part, end


def _parse_error(raw: memoryview, pos: int, field: str) -> PartitionError:
    try:
        doc: Any = json.loads(bytes(raw).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise MalformedAnswer(f"{field} at offset {pos} is not UTF-8 JSON: {exc}", field) from None
    types = {"error_code": str, "error_type": str, "error": str, "retriable": bool}
    if not isinstance(doc, dict) or any(not isinstance(doc.get(k), t) for k, t in types.items()):
        raise MalformedAnswer(
            f"{field} at offset {pos} must be an object with error_code, error_type, error (strings) "
            "and retriable (boolean)", field,
        )
    return PartitionError(doc["error_code"], doc["error_type"], doc["error"], doc["retriable"])
