"""DescribeLogDirs and DescribeProducers: what a partition's log stores, and who writes it.

**DescribeLogDirs** (``kafka-log-dirs``; Kafka UIs sum it into topic sizes)
asks each broker for the logs it holds. An llog broker holds none (S3 does),
so each answers for the partitions Metadata names it leader of (``nodes.py``),
in one log dir named by where the logs are stored (``s3://bucket/root``):
summed over the brokers, every partition counts once, as the one replica
Metadata lists. A partition's size is what retention counts, its stored bytes
from the entry holding the log start on (``_log.stored``); ``offset_lag`` is 0
(no replicas); the volume's total and usable bytes are -1 (unknown: S3 has no
size). A topic asked for that does not exist is left out, as Kafka leaves out
what it does not host; Oxia failing is KAFKA_STORAGE_ERROR on the log dir.

**DescribeProducers** (``kafka-transactions describe-producers``) lists the
idempotent producers a partition keeps state for (SPEC 7.12): id, epoch, last
sequence and when it last wrote (the broker's clock, by which its state
expires). Any broker answers for any partition (any broker writes any).
There are no transactions: the coordinator epoch and the transaction's start
are -1.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafka.protocol.admin import DescribeLogDirsResponse, DescribeProducersResponse

from .._errors import LlogError, UnknownTopic
from .errors import Code, attempt, error_code

if TYPE_CHECKING:
    from .codec import KafkaRequest
    from .service import KafkaService

__all__ = ["HANDLERS"]

_DIR = DescribeLogDirsResponse.DescribeLogDirsResult


def describe_log_dirs(svc: KafkaService, req: KafkaRequest) -> Any:
    logs = svc.parts.logs
    try:
        topics = _held(svc, req.body.topics)
        code = Code.NONE
    except LlogError as exc:
        topics, code = [], error_code(exc)
    result = _DIR(error_code=code, log_dir=logs.location, total_bytes=-1, usable_bytes=-1, topics=[
        _DIR.DescribeLogDirsTopic(name=name, partitions=[
            _DIR.DescribeLogDirsTopic.DescribeLogDirsPartition(partition_index=p, partition_size=size, offset_lag=0,
                                                              is_future_key=False)
            for p, size in sizes]) for name, sizes in topics])
    return DescribeLogDirsResponse[req.version](throttle_time_ms=0, error_code=Code.NONE, results=[result])


def _held(svc: KafkaService, asked: Any) -> list[tuple[str, list[tuple[int, int]]]]:
    """``(topic, [(partition, stored bytes)])`` for the partitions asked (None: every topic's) that
    Metadata names this broker leader of."""
    topics = svc.parts.topics
    if asked is None:
        wanted = {t.name: None for t in topics.catalogue.list()}
    else:
        wanted = {t.topic: set(t.partitions) for t in asked}
    me = svc.nodes.me.node_id
    held: dict[str, list[int]] = {}
    for name, partitions in wanted.items():
        try:
            count = topics.describe(name).partitions
        except UnknownTopic:
            continue
        mine = [p for p in range(count)
                if (partitions is None or p in partitions) and svc.nodes.leader(name, p).node_id == me]
        if mine:
            held[name] = mine
    sizes = iter(svc.parts.logs.stored_bytes([(name, p) for name, mine in held.items() for p in mine]))
    return [(name, [(p, next(sizes)) for p in mine]) for name, mine in held.items()]


def describe_producers(svc: KafkaService, req: KafkaRequest) -> Any:
    R = DescribeProducersResponse
    P = R.TopicResponse.PartitionResponse
    out = []
    for t in req.body.topics:
        parts = []
        for p in t.partition_indexes:
            code, message, states = attempt(lambda: svc.parts.logs.producers(t.name, p))
            parts.append(P(partition_index=p, error_code=code, error_message=message, active_producers=[
                P.ProducerState(producer_id=pid, producer_epoch=e.epoch, last_sequence=e.last_seq,
                                last_timestamp=e.last_ms, coordinator_epoch=-1, current_txn_start_offset=-1)
                for pid, e in sorted((states or {}).items())]))
        out.append(R.TopicResponse(name=t.name, partitions=parts))
    return R[req.version](throttle_time_ms=0, topics=out)


HANDLERS = {35: describe_log_dirs, 61: describe_producers}
