"""The admin APIs: CreateTopics, DeleteTopics, CreatePartitions, DescribeConfigs and
IncrementalAlterConfigs over the catalogue (what ``kafka-topics`` and ``kafka-configs``
send), and DeleteRecords over the log start (``kafka-delete-records``, Kafka Streams).

Topics are the catalogue's (``server/_catalogue``), as ``/topics`` serves them:
``num_partitions`` -1 is ``LLOG_TOPIC_DEFAULT_PARTITIONS``, configs are Kafka's
keys the catalogue knows, a replication factor is accepted and ignored (S3
holds the bytes; every topic reports 1). Replica assignments are refused.

DeleteRecords moves each partition's log start to the Kafka offset named
(-1: the high watermark) through ``RecordDeletion`` (SPEC 7.13); the answer's
``low_watermark`` is the start after it, in Kafka's offsets. An offset past
the high watermark (or below -1) is OFFSET_OUT_OF_RANGE, as in Kafka.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafka.protocol.admin import (
    CreatePartitionsResponse, CreateTopicsResponse, DeleteRecordsResponse, DeleteTopicsResponse,
    DescribeConfigsResponse, IncrementalAlterConfigsResponse,
)

from .._errors import InvalidRequest, LlogError, OffsetOutOfRange, TopicAlreadyExists, UnknownTopic
from .._protocol.kafka_batch import kafka_offset, llog_offset
from .._protocol.keys import validate_topic
from .cluster import topic_uuid
from .errors import Code, attempt, error_code

if TYPE_CHECKING:
    from .codec import KafkaRequest
    from .service import KafkaService

__all__ = ["HANDLERS"]

_TOPIC_CONFIG = 2  # resource types of DescribeConfigs and IncrementalAlterConfigs
_BROKER_CONFIG = 4
_SET, _DELETE = 0, 1  # IncrementalAlterConfigs operations (APPEND and SUBTRACT are for list configs)


def describe_configs(svc: KafkaService, req: KafkaRequest) -> Any:
    R = DescribeConfigsResponse
    results = []
    for res in req.body.resources:
        wanted = None if res.configuration_keys is None else set(res.configuration_keys)
        code, message, configs = attempt(lambda: _configs(svc, res.resource_type, res.resource_name))
        entries = [R.DescribeConfigsResult.DescribeConfigsResourceResult(
            name=k, value=str(val), read_only=False, is_default=False, config_source=1, is_sensitive=False,
            synonyms=[], config_type=0, documentation=None)
            for k, val in sorted((configs or {}).items()) if wanted is None or k in wanted]
        results.append(R.DescribeConfigsResult(error_code=code, error_message=message, resource_type=res.resource_type,
                                               resource_name=res.resource_name, configs=entries))
    return R[req.version](throttle_time_ms=0, results=results)


def _configs(svc: KafkaService, resource_type: int, name: str) -> dict[str, str]:
    if resource_type == _TOPIC_CONFIG:
        return svc.parts.topics.describe(name).config.to_kafka()
    if resource_type == _BROKER_CONFIG:
        return {}
    raise InvalidRequest(f"resource type {resource_type} is not described")


def create_topics(svc: KafkaService, req: KafkaRequest) -> Any:
    R = CreateTopicsResponse
    out = []
    for t in req.body.topics:
        code, message, record = attempt(lambda: _create(svc, t, req.body.validate_only), _create_error)
        out.append(R.CreatableTopicResult(
            name=t.name, topic_id=topic_uuid(record.topic_id) if record else None, error_code=code,
            error_message=message, num_partitions=record.partitions if record else -1,
            replication_factor=1 if record else -1, configs=[
                R.CreatableTopicResult.CreatableTopicConfigs(name=k, value=str(val), read_only=False, config_source=5,
                                                             is_sensitive=False)
                for k, val in sorted(record.config.to_kafka().items())] if record else []))
    return R[req.version](throttle_time_ms=0, topics=out)


def _create(svc: KafkaService, t: Any, validate_only: bool) -> Any:
    """The created topic's record; None when only validating."""
    if t.assignments:
        raise InvalidRequest("replica assignments are not supported: llog keeps no replicas")
    count = None if t.num_partitions == -1 else t.num_partitions
    config = {c.name: c.value for c in t.configs}
    if not validate_only:
        return svc.parts.topics.create(t.name, count, config or None)
    validate_topic(t.name)
    if svc.parts.topics.catalogue.get(t.name) is not None:
        raise TopicAlreadyExists(f"topic {t.name!r} already exists")
    return None


def _create_error(exc: LlogError) -> int:
    code = error_code(exc)
    if code == Code.INVALID_RECORD:  # a name, a count or a config the catalogue refused
        message = str(exc)
        if "partition" in message:
            return Code.INVALID_PARTITIONS
        return Code.INVALID_CONFIG if "config" in message or "." in message.split(" ")[0] else \
            Code.INVALID_TOPIC_EXCEPTION
    return code


def delete_topics(svc: KafkaService, req: KafkaRequest) -> Any:
    R = DeleteTopicsResponse
    v = req.version
    names = [t.name for t in req.body.topics] if v >= 6 else list(req.body.topic_names)
    out = []
    for name in names:
        code, message, topic_id = attempt(lambda: _delete(svc, name))
        out.append(R.DeletableTopicResult(name=name, topic_id=topic_id, error_code=code, error_message=message))
    return R[v](throttle_time_ms=0, responses=out)


def _delete(svc: KafkaService, name: str | None) -> Any:
    if name is None:
        raise UnknownTopic("llog deletes topics by name, not by id")
    validate_topic(name)
    return topic_uuid(svc.parts.topics.delete(name).topic_id)


def create_partitions(svc: KafkaService, req: KafkaRequest) -> Any:
    R = CreatePartitionsResponse
    out = []
    for t in req.body.topics:
        code, message, _ = attempt(lambda: _add_partitions(svc, t, req.body.validate_only), _create_error)
        out.append(R.CreatePartitionsTopicResult(name=t.name, error_code=code, error_message=message))
    return R[req.version](throttle_time_ms=0, results=out)


def _add_partitions(svc: KafkaService, t: Any, validate_only: bool) -> None:
    if t.assignments:
        raise InvalidRequest("replica assignments are not supported: llog keeps no replicas")
    validate_topic(t.name)
    if not validate_only:
        svc.parts.topics.add_partitions(t.name, t.count)
        return
    current = svc.parts.topics.describe(t.name)
    if t.count <= current.partitions:
        raise InvalidRequest(f"topic {t.name!r} has {current.partitions} partitions already; "
                             "a topic's partition count can only grow")


def incremental_alter_configs(svc: KafkaService, req: KafkaRequest) -> Any:
    R = IncrementalAlterConfigsResponse
    out = []
    for res in req.body.resources:
        code, message, _ = attempt(lambda: _alter(svc, res, req.body.validate_only), _create_error)
        out.append(R.AlterConfigsResourceResponse(error_code=code, error_message=message,
                                                  resource_type=res.resource_type, resource_name=res.resource_name))
    return R[req.version](throttle_time_ms=0, responses=out)


def _alter(svc: KafkaService, res: Any, validate_only: bool) -> None:
    if res.resource_type != _TOPIC_CONFIG:
        raise InvalidRequest(f"resource type {res.resource_type} has no configs llog changes")
    changes: dict[str, Any] = {}
    for c in res.configs:
        if c.config_operation not in (_SET, _DELETE):
            raise InvalidRequest(f"{c.name}: only SET and DELETE apply to llog's topic configs")
        changes[c.name] = c.value if c.config_operation == _SET else None
    validate_topic(res.resource_name)
    if not validate_only:
        svc.parts.topics.alter_config(res.resource_name, changes)


def delete_records(svc: KafkaService, req: KafkaRequest) -> Any:
    R = DeleteRecordsResponse
    P = R.DeleteRecordsTopicResult.DeleteRecordsPartitionResult
    out = []
    for t in req.body.topics:
        parts = []
        for p in t.partitions:
            code, _, start = attempt(lambda: _delete_below(svc, t.name, p.partition_index, p.offset))
            parts.append(P(partition_index=p.partition_index, error_code=code,
                           low_watermark=-1 if start is None else kafka_offset(start)))
        out.append(R.DeleteRecordsTopicResult(name=t.name, partitions=parts))
    return R[req.version](throttle_time_ms=0, topics=out)


def _delete_below(svc: KafkaService, topic: str, partition: int, offset: int) -> int:
    """The log start after deleting below Kafka offset ``offset`` (-1: the high watermark)."""
    if offset < -1:
        raise OffsetOutOfRange(f"offset {offset}: DeleteRecords takes an offset >= 0, or -1 for the high watermark")
    return svc.parts.records.delete(topic, partition, None if offset == -1 else llog_offset(offset)).log_start_offset


HANDLERS = {
    19: create_topics, 20: delete_topics, 37: create_partitions, 32: describe_configs, 44: incremental_alter_configs,
    21: delete_records,
}
