"""Produce and InitProducerId.

**Produce** (v3+: RecordBatch v2 only). Each partition's records must be one
RecordBatch v2 batch, as Kafka requires of magic 2; it is checked (lengths,
CRC-32C, counts: CORRUPT_MESSAGE otherwise) and stored as sent, through the
same ``Appends`` as HTTP ``/produce`` (topic checks and auto-creation,
``max.message.bytes``, ``LogAppendTime``, the producer's buffer). The
request's partitions share one flush. ``acks`` 1 and -1 (all) both answer
after the commit: a commit in Oxia is the only acknowledgement llog has;
``acks=0`` answers nothing (the batches are submitted all the same).

Offsets are Kafka's: ``base_offset`` is ``kafka_offset`` of llog's first
offset. An idempotent batch already stored (SPEC 7.12) is answered with the
offset it got the first time, or DUPLICATE_SEQUENCE_NUMBER when the log no
longer remembers it (Kafka's clients count that as written). Transactional
and control batches are refused (INVALID_RECORD): llog has no transactions.

**InitProducerId** hands out the idempotent producer ids of ``ProducerIds``
(v3+: a producer's own id and epoch bump its epoch). A ``transactional_id``
is answered UNSUPPORTED_VERSION.
"""

from __future__ import annotations

from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import TYPE_CHECKING, Any, Callable

from kafka.protocol.producer import InitProducerIdResponse, ProduceResponse

from .._errors import BackPressureRejected, InvalidRequest, LlogError, OutcomeUnknown, ProducerClosed
from .._protocol.http_json import InvalidField
from .._protocol.kafka_batch import kafka_offset
from .._protocol.kafka_records import TimestampType
from .._protocol.stored_batches import StoredBatches
from .._protocol.structs import SharedAppendGroup
from .errors import Code, error_code

if TYPE_CHECKING:
    from .codec import KafkaRequest
    from .service import KafkaService

__all__ = ["HANDLERS", "start_produce"]

_DUPLICATE_SEQUENCE_NUMBER = 46
_TP = ProduceResponse.TopicProduceResponse
_PP = _TP.PartitionProduceResponse


class _Slot:
    """One partition of the request and what became of it."""

    __slots__ = ("topic", "partition", "group", "code", "message", "base_offset")

    def __init__(self, topic: str, partition: int) -> None:
        self.topic, self.partition = topic, partition
        self.group: SharedAppendGroup | None = None
        self.code, self.message, self.base_offset = Code.NONE, None, -1

    def fail(self, exc: BaseException) -> None:
        self.code, self.message = error_code(exc), str(exc)
        if isinstance(exc, InvalidField) and exc.field == "partition":  # past the topic's partition count
            self.code = Code.UNKNOWN_TOPIC_OR_PARTITION


def _group(topic: str, partition: int, records: bytes | None) -> SharedAppendGroup:
    if not records:
        raise InvalidRequest(f"{topic}:{partition}: no records")
    batches = StoredBatches.check(records)
    if batches.batch_count != 1:
        raise InvalidRequest(f"{topic}:{partition}: {batches.batch_count} batches; a produce request carries "
                             "exactly one RecordBatch v2 batch per partition")
    h = batches.header(0)
    if h.is_transactional or h.is_control:
        raise InvalidRequest(f"{topic}:{partition}: a transactional or control batch; llog has no transactions")
    return SharedAppendGroup(topic, partition, batches)


def start_produce(svc: KafkaService, req: KafkaRequest) -> Callable[[], Any]:
    """Check and submit the request's batches now; what waits for their flush and answers.

    Called in request order on the connection's reader thread, so the batches of
    pipelined requests reach the producer in the order the client sent them (as
    Kafka, which handles a connection's requests one at a time): a client's
    batches of one partition keep their order, idempotent or not. Only the wait
    for the flush runs on the handler pool, beside the next requests' submits."""
    body = req.body
    slots: list[_Slot] = []
    for t in body.topic_data:
        for p in t.partition_data:
            slot = _Slot(t.name, p.index)
            slots.append(slot)
            try:
                if body.transactional_id is not None:
                    raise InvalidRequest("transactions are not supported by llog (KAFKA_API.md)")
                if svc.parts.appends is None:
                    raise ProducerClosed("this broker does not write (role read)")
                slot.group = svc.parts.appends.prepare([_group(t.name, p.index, p.records)])[0]
            except LlogError as exc:
                slot.fail(exc)
    todo = [s for s in slots if s.group is not None]
    future = _submit(svc, todo) if todo else None

    def finish() -> Any:
        if future is not None and body.acks != 0:
            _results(svc, todo, future, body.timeout_ms)
        return None if body.acks == 0 else _answer(req, slots)

    return finish


def _answer(req: KafkaRequest, slots: list[_Slot]) -> Any:
    by_topic: dict[str, list[Any]] = {}
    for s in slots:
        by_topic.setdefault(s.topic, []).append(_PP(
            index=s.partition, error_code=s.code, base_offset=s.base_offset, log_append_time_ms=_append_time(s),
            log_start_offset=-1, record_errors=[], error_message=s.message))
    return ProduceResponse[req.version](
        responses=[_TP(name=name, partition_responses=parts) for name, parts in by_topic.items()],
        throttle_time_ms=0)


def _append_time(s: _Slot) -> int:
    """The time a LogAppendTime topic's broker stamped on the stored batch; -1 for CreateTime (as Kafka)."""
    if s.code != Code.NONE or s.group is None:
        return -1
    h = s.group.payloads.header(0)
    return h.max_timestamp if h.timestamp_type is TimestampType.LOG_APPEND_TIME else -1


def _submit(svc: KafkaService, todo: list[_Slot]) -> Future | None:
    try:
        return svc.parts.appends.submit([s.group for s in todo])
    except (BackPressureRejected, ProducerClosed) as exc:
        for s in todo:
            s.fail(exc)
        return None


def _results(svc: KafkaService, todo: list[_Slot], future: Future, timeout_ms: int) -> None:
    wait_ms = min(svc.limits.produce_timeout_ms, max(timeout_ms, 1))
    try:
        results = future.result(wait_ms / 1000)
    except FutureTimeout:
        svc.metrics.inc("produce_timeouts_total")
        for s in todo:
            s.fail(OutcomeUnknown(f"no flush outcome within {wait_ms} ms; the batch may or may not be committed"))
        return
    for s, r in zip(todo, results):
        if r.error is not None:
            s.fail(r.error)
            svc.metrics.inc("produce_failed_batches_total", error=type(r.error).__name__)
        elif r.duplicate and r.start_offset is None:
            s.code, s.message = _DUPLICATE_SEQUENCE_NUMBER, "an older duplicate: already stored"
        else:
            s.base_offset = kafka_offset(r.start_offset)
            if not r.duplicate:
                svc.metrics.inc("produce_records_total", r.count)
                svc.metrics.inc("produce_payload_bytes_total", s.group.payload_bytes)


def init_producer_id(svc: KafkaService, req: KafkaRequest) -> Any:
    body = req.body
    R = InitProducerIdResponse[req.version]
    if body.transactional_id is not None:
        return R(throttle_time_ms=0, error_code=Code.UNSUPPORTED_VERSION, producer_id=-1, producer_epoch=-1)
    ids = svc.parts.producer_ids
    if ids is None:
        return R(throttle_time_ms=0, error_code=Code.NOT_COORDINATOR, producer_id=-1, producer_epoch=-1)
    pid = getattr(body, "producer_id", -1) if req.version >= 3 else -1
    epoch = getattr(body, "producer_epoch", -1) if req.version >= 3 else -1
    try:
        if pid is not None and pid >= 0:
            identity = ids.init(producer_id=pid, producer_epoch=max(epoch, 0))
        else:
            identity = ids.init()
    except LlogError as exc:
        return R(throttle_time_ms=0, error_code=error_code(exc), producer_id=-1, producer_epoch=-1)
    return R(throttle_time_ms=0, error_code=0, producer_id=identity.producer_id,
             producer_epoch=identity.producer_epoch)


HANDLERS = {22: init_producer_id}  # Produce: start_produce, through KafkaService.begin
