"""The binary ``/produce`` bodies: layouts, parser, encoders.

``application/vnd.llog.produce.v2`` (version 2): each partition's records
already as Kafka RecordBatch v2 batches (``kafka_batch.py``: key, value,
headers, timestamp), so the broker checks them (lengths, CRC-32C, counts)
and stores them as they are: no JSON, no base64, no per-record work on the
broker. ``application/vnd.llog.produce.v1`` (version 1): values only, as
``bytes-batch-v1`` batches, which the broker re-encodes as one RecordBatch
v2 batch each (null keys, no headers, the broker's time). The answer is the
same JSON as for a JSON body.

Version 2 is version 1's layout with ``version`` 2 and each batch field
replaced by ``u32 batches_length`` then that many bytes of whole RecordBatch
v2 batches (one or more; ``baseOffset`` is ignored, transactional and
control batches are refused).

Version 1 layout (all integers unsigned big-endian)::

    offset  size  field
    0       4     magic         b"LLP1"
    4       2     version       1
    6       2     flags         bit 0: FLUSH (flush these batches now, as JSON's
                                  ``"flush": true``); other bits are refused
    8       4     batch_count   B >= 1; 0 only with FLUSH set (a flush-only
                                  request: flush what the broker holds)
    12      ...   B batches, back to back, each:
                    2     topic_length  T (1..249, MAX_TOPIC_LENGTH)
                    T     topic         UTF-8, a valid topic name
                    4     partition     0 .. 2**31-1
                    20+L  batch         one bytes-batch-v1 batch: its 20-byte
                                        header gives record_count N >= 1 and
                                        records_length L; CRC-32 over the records

The body ends right after the last batch (trailing bytes are refused). A
batch's records section is ``N x (u32 length, payload)``, exactly what the
broker stores, which is why the client builds it. Batches map 1:1, in order,
to the answer's ``results`` (as ``topic_partitions`` items do in JSON); a
topic-partition may appear more than once.

Every malformed body is an :class:`~server._protocol.http_json.InvalidField` (HTTP
400) naming the field (``batches[2].partition``, ``header.magic``) and the
byte offset where it lies; the broker's record limit
(``LLOG_BROKER_MAX_RECORDS_PER_REQUEST``) is :class:`TooLarge` (HTTP 413), as
for JSON.
"""

from __future__ import annotations

import struct
from typing import Sequence

from .codec import EncodedRecords, batch_header, encode_batch
from .kafka_batch import BatchHeader
from .producer_state import NO_PRODUCER_ID
from .structs import SharedAppendGroup
from .http_json import MAX_INT32, InvalidField, ProduceRequest, TooLarge, parse_json_body, parse_produce
from .frame import Frame

__all__ = [
    "PRODUCE_BINARY_CONTENT_TYPE",
    "PRODUCE_BINARY_V2_CONTENT_TYPE",
    "PRODUCE_MAGIC",
    "FLAG_FLUSH",
    "BINARY_HEADER_SIZE",
    "binary_produce_header",
    "binary_batch_prefix",
    "encode_binary_produce",
    "encode_binary_produce_v2",
    "parse_binary_produce",
    "parse_produce_body",
]

PRODUCE_BINARY_CONTENT_TYPE = "application/vnd.llog.produce.v1"
PRODUCE_BINARY_V2_CONTENT_TYPE = "application/vnd.llog.produce.v2"
PRODUCE_MAGIC = b"LLP1"
PRODUCE_VERSION = 1
PRODUCE_VERSION_2 = 2
FLAG_FLUSH = 0x0001
_HEADER = struct.Struct(">4sHHI")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
BINARY_HEADER_SIZE = _HEADER.size


def binary_produce_header(batch_count: int, *, flush: bool = False, version: int = PRODUCE_VERSION) -> bytes:
    """The body's 12-byte header announcing ``batch_count`` batches."""
    return _HEADER.pack(PRODUCE_MAGIC, version, FLAG_FLUSH if flush else 0, batch_count)


def binary_batch_prefix(topic: str, partition: int, count: int, sections: Sequence[bytes | memoryview]) -> list[bytes]:
    """What precedes a batch's records section in the body: topic, partition
    and the bytes-batch-v1 header of ``count`` records in ``sections``
    (a client that already holds length-prefixed records sends them after it as they are)."""
    name = topic.encode("utf-8")
    return [_U16.pack(len(name)), name, _U32.pack(partition), batch_header(count, sections)]


def encode_binary_produce(groups: Sequence[tuple[str, int, Sequence[bytes]]], *, flush: bool = False) -> bytes:
    """A binary produce body of ``(topic, partition, payloads)`` groups, in order."""
    out = [binary_produce_header(len(groups), flush=flush)]
    for topic, partition, payloads in groups:
        name = topic.encode("utf-8")
        out += [_U16.pack(len(name)), name, _U32.pack(partition), encode_batch(payloads)]
    return b"".join(out)


def encode_binary_produce_v2(groups: Sequence[tuple[str, int, bytes]], *, flush: bool = False) -> bytes:
    """A version 2 body of ``(topic, partition, RecordBatch v2 batches)`` groups, in order."""
    out = [binary_produce_header(len(groups), flush=flush, version=PRODUCE_VERSION_2)]
    for topic, partition, batches in groups:
        name = topic.encode("utf-8")
        out += [_U16.pack(len(name)), name, _U32.pack(partition), _U32.pack(len(batches)), batches]
    return b"".join(out)


def parse_binary_produce(body: bytes, *, max_records: int, version: int = PRODUCE_VERSION) -> ProduceRequest:
    """A validated binary produce body of ``version`` (layouts in the module docstring)."""
    frame = Frame(body, InvalidField, "body")
    flags, count = frame.header(_HEADER, PRODUCE_MAGIC, version)
    if flags & ~FLAG_FLUSH:
        raise InvalidField(
            f"header.flags {flags:#06x} at offset 6 sets unknown bits (only bit 0, FLUSH, is defined)", "header.flags"
        )
    if count == 0 and not flags & FLAG_FLUSH:
        raise InvalidField(
            "header.batch_count must be at least 1, got 0 at offset 8 (only a flush-only request, "
            "flags bit 0 set, may hold no batch)", "header.batch_count",
        )
    pos = _HEADER.size
    groups: list[SharedAppendGroup] = []
    total = nbytes = 0
    for i in range(count):
        where = f"batches[{i}]"
        group, pos = _parse_batch(frame, pos, where, version)
        total += len(group.payloads)
        if total > max_records:
            raise TooLarge(
                f"the request holds more than {max_records} records "
                "(LLOG_BROKER_MAX_RECORDS_PER_REQUEST); split it",
                "batches",
            )
        nbytes += group.payload_bytes
        groups.append(group)
    frame.trailing(pos, f"the {count} batches header.batch_count announced", "batches")
    return ProduceRequest(tuple(groups), total, nbytes, bool(flags & FLAG_FLUSH))


def _parse_batch(frame: Frame, pos: int, where: str, version: int) -> tuple[SharedAppendGroup, int]:
    """One batch of the body starting at ``pos``: its group and where the next begins."""
    topic, pos = frame.topic(pos, where)
    frame.need(pos, 4, f"{where}.partition")
    (partition,) = _U32.unpack_from(frame.view, pos)
    if partition > MAX_INT32:
        raise InvalidField(
            f"{where}.partition must be between 0 and {MAX_INT32}, got {partition} at offset {pos}",
            f"{where}.partition",
        )
    if version == PRODUCE_VERSION_2:
        batches, end = frame.kafka_batches(pos + 4, f"{where}.batches")
        if not len(batches):
            raise InvalidField(f"{where}.batches at offset {pos + 8} holds no batch; send at least one",
                               f"{where}.batches")
        for i in range(batches.batch_count):
            h = batches.header(i)
            if h.is_transactional or h.is_control:
                raise InvalidField(f"{where}.batches: batch {i} is transactional or a control batch; "
                                   "transactions are not supported", f"{where}.batches")
            if h.producer_id != NO_PRODUCER_ID:
                _check_idempotent(h, i, batches.batch_count, f"{where}.batches")
        return SharedAppendGroup(topic, partition, batches), end
    field = f"{where}.batch"
    bounds, end = frame.batch(pos + 4, field)
    if bounds.count == 0:
        raise InvalidField(f"{field} at offset {pos + 4} holds no records; send at least one", field)
    return SharedAppendGroup(topic, partition, EncodedRecords([bounds])), end


def _check_idempotent(h: BatchHeader, i: int, count: int, field: str) -> None:
    """An idempotent batch (SPEC 7.12) is alone in its item, as Kafka requires of
    a produce request's partition (its fields were checked with the batch)."""
    if count > 1:
        raise InvalidField(f"{field}: batch {i} carries producer id {h.producer_id}; an idempotent batch must be "
                           f"the only batch of its item, not one of {count}", field)


def parse_produce_body(body: bytes, content_type: str | None, *, max_records: int) -> ProduceRequest:
    """A /produce body by its ``Content-Type``: the binary layout for
    ``application/vnd.llog.produce.v1``, JSON for anything else (the JSON
    contract never required the header)."""
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if media == PRODUCE_BINARY_CONTENT_TYPE:
        return parse_binary_produce(body, max_records=max_records)
    if media == PRODUCE_BINARY_V2_CONTENT_TYPE:
        return parse_binary_produce(body, max_records=max_records, version=PRODUCE_VERSION_2)
    return parse_produce(parse_json_body(body), max_records=max_records)
