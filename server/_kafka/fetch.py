"""Fetch, ListOffsets and OffsetForLeaderEpoch: reading, in Kafka's offsets.

**Fetch** is one ``/consume`` (``BrokerConsumeService``): the same tail cache,
storage reads, long-poll (``max_wait_ms`` capped by
``LLOG_BROKER_MAX_WAIT_MS``, ``min_bytes``) and byte limits (``max_bytes``,
``partition_max_bytes``: whole batches, the first one even if larger). The
records are the stored batches with ``baseOffset`` set to the Kafka offset of
their first record (``kafka_offset``); a fetch starting inside a batch gets the
whole batch and the client skips what it did not ask for, as from Kafka. The
high watermark and last stable offset are the next Kafka offset to be
written; there are no aborted transactions; ``preferred_read_replica`` is -1.
A fetch past the high watermark is OFFSET_OUT_OF_RANGE, as in Kafka (the HTTP
contract waits instead). Fetch sessions (KIP-227, ``fetch_sessions.py``)
keep a client's partitions between fetches: an incremental fetch names only
what changed, and its answer only the partitions with records or news.

**ListOffsets**: ``-2`` earliest (the log start), ``-1`` latest (the high
watermark), ``-3`` the record with the largest timestamp, any other value the
first record at or after that time (``_log/timestamps.py``), -1 when none is.

**OffsetForLeaderEpoch**: llog has one leader epoch, 0; its end offset is the
high watermark.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafka.protocol.consumer import FetchResponse, ListOffsetsResponse, OffsetForLeaderEpochResponse

from .._errors import LlogError, UnknownTopic
from .._log.timestamps import max_timestamp_offset, offset_for_timestamp
from .._protocol.http_json import ConsumePartition, ConsumeRequest
from .._protocol.kafka_batch import kafka_offset, llog_offset
from .._protocol.keys import TopicPartition, is_valid, validate_topic
from .errors import Code, error_code
from .fetch_sessions import SessionPartition, forgotten_of
from .gather import RecordParts

if TYPE_CHECKING:
    from .codec import KafkaRequest
    from .service import KafkaService

__all__ = ["HANDLERS"]

_FT = FetchResponse.FetchableTopicResponse
_FP = _FT.PartitionData
_EARLIEST, _LATEST, _MAX_TIMESTAMP = -2, -1, -3


def fetch(svc: KafkaService, req: KafkaRequest) -> Any:
    body, v = req.body, req.version
    if svc.parts.consume is None:
        return FetchResponse[v](throttle_time_ms=0, error_code=Code.NOT_LEADER_OR_FOLLOWER, session_id=0,
                                responses=[])
    asked: dict[tuple[str, int], SessionPartition] = {}
    for t in body.topics:
        for p in t.partitions:
            asked.setdefault((t.topic, p.partition), SessionPartition(p.fetch_offset, max(p.partition_max_bytes, 0)))
    ctx = svc.fetch_sessions.begin(body.session_id if v >= 7 else 0, body.session_epoch if v >= 7 else -1,
                                   list(asked.items()), forgotten_of(body, v))
    svc.metrics.inc("kafka_fetches_total", session=ctx.kind)
    svc.metrics.set_gauge("kafka_fetch_sessions", len(svc.fetch_sessions))
    if ctx.error != Code.NONE:
        return FetchResponse[v](throttle_time_ms=0, error_code=ctx.error, session_id=0, responses=[])
    wanted, refused = [], []
    for (topic, partition), part in ctx.partitions:
        if not is_valid(validate_topic, topic) or partition < 0 or part.fetch_offset < 0:
            code = Code.OFFSET_OUT_OF_RANGE if part.fetch_offset < 0 else Code.UNKNOWN_TOPIC_OR_PARTITION
            refused.append((topic, _FP(partition_index=partition, error_code=code, high_watermark=-1,
                                       last_stable_offset=-1, log_start_offset=-1, aborted_transactions=None,
                                       preferred_read_replica=-1, records=b"")))
            continue
        wanted.append(ConsumePartition(topic, partition, llog_offset(part.fetch_offset), part.max_bytes))
    result = svc.parts.consume.consume(ConsumeRequest(
        tuple(wanted), max_wait_ms=min(max(body.max_wait_ms, 0), svc.limits.max_wait_ms_cap),
        min_bytes=max(body.min_bytes, 0), max_bytes=max(body.max_bytes, 0) if v >= 3 else 1 << 31))
    answers = [(part.topic, _partition(part)) for part in result.partitions] + refused
    named = ctx.answered(((t, a.partition_index), a.error_code, a.high_watermark, a.log_start_offset,
                          bool(a.records)) for t, a in answers)
    by_topic: dict[str, list[Any]] = {}
    for topic, answer in answers:
        if (topic, answer.partition_index) in named:
            by_topic.setdefault(topic, []).append(answer)
    return FetchResponse[v](
        throttle_time_ms=0, error_code=0, session_id=ctx.session_id,
        responses=[_FT(topic=name, partitions=parts) for name, parts in by_topic.items()])


def _partition(part: Any) -> Any:
    hw = -1 if part.high_watermark is None else part.high_watermark  # llog's last offset N is Kafka's next, N
    code = error_code(part.error)
    records = RecordParts(piece for span in part.spans for piece in span.kafka_batches())
    if code == Code.NONE and hw >= 0 and kafka_offset(part.fetch_offset) > hw:
        code = Code.OFFSET_OUT_OF_RANGE
    return _FP(partition_index=part.partition, error_code=code, high_watermark=hw, last_stable_offset=hw,
               log_start_offset=kafka_offset(part.log_start_offset), aborted_transactions=None,
               preferred_read_replica=-1, records=records)


def list_offsets(svc: KafkaService, req: KafkaRequest) -> Any:
    R = ListOffsetsResponse
    asked = [(t.name, p.partition_index, p.timestamp) for t in req.body.topics for p in t.partitions]
    found = iter(_offsets_of(svc, asked))
    topics = []
    for t in req.body.topics:
        parts = []
        for p in t.partitions:
            code, offset, ts = next(found)
            parts.append(R.ListOffsetsTopicResponse.ListOffsetsPartitionResponse(
                partition_index=p.partition_index, error_code=code, timestamp=ts, offset=offset, leader_epoch=0))
        topics.append(R.ListOffsetsTopicResponse(name=t.name, partitions=parts))
    return R[req.version](throttle_time_ms=0, topics=topics)


def _offsets_of(svc: KafkaService, asked: list[tuple[str, int, int]]) -> list[tuple[int, int, int]]:
    """``(error code, Kafka offset, timestamp)`` ListOffsets answers for each ``(topic, partition,
    timestamp)``: the earliest and latest from the partitions' control records, read together (a
    client asks for every partition it consumes at once); a time through the sparse index."""
    out: list[tuple[int, int, int]] = [(Code.NONE, -1, -1)] * len(asked)
    ends: list[int] = []
    for i, (topic, partition, timestamp) in enumerate(asked):
        try:
            _check(svc, topic, partition)
            if timestamp in (_EARLIEST, _LATEST):
                ends.append(i)
                continue
            reader = svc.parts.reader
            hit = (max_timestamp_offset(reader, topic, partition) if timestamp == _MAX_TIMESTAMP
                   else offset_for_timestamp(reader, topic, partition, timestamp))
            if hit is not None:
                out[i] = (Code.NONE, kafka_offset(hit.offset), hit.timestamp_ms)
        except LlogError as exc:
            out[i] = (error_code(exc), -1, -1)
    controls = svc.parts.reader.controls([TopicPartition(*asked[i][:2]) for i in ends]) if ends else []
    for i, control in zip(ends, controls):
        if isinstance(control, LlogError):
            out[i] = (error_code(control), -1, -1)
        elif asked[i][2] == _EARLIEST:
            out[i] = (Code.NONE, kafka_offset(control.log_start_offset), -1)
        else:
            out[i] = (Code.NONE, control.high_watermark, -1)
    return out


def _check(svc: KafkaService, topic: str, partition: int) -> None:
    """UnknownTopic unless this broker reads and ``topic``:``partition`` is a live topic's partition."""
    if svc.parts.reader is None or svc.parts.topics is None:
        raise UnknownTopic("this broker does not read (role write)")
    svc.parts.topics.live_partition(topic, partition)


def offset_for_leader_epoch(svc: KafkaService, req: KafkaRequest) -> Any:
    R = OffsetForLeaderEpochResponse
    T = R.OffsetForLeaderTopicResult
    asked = [(t.topic, p.partition, _LATEST) for t in req.body.topics for p in t.partitions]
    found = iter(_offsets_of(svc, asked))
    topics = []
    for t in req.body.topics:
        parts = []
        for p in t.partitions:
            code, end, _ = next(found)
            parts.append(T.EpochEndOffset(error_code=code, partition=p.partition, leader_epoch=0 if end >= 0 else -1,
                                          end_offset=end))
        topics.append(T(topic=t.topic, partitions=parts))
    return R[req.version](throttle_time_ms=0, topics=topics)


HANDLERS = {1: fetch, 2: list_offsets, 23: offset_for_leader_epoch}
