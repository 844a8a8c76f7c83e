"""ApiVersions, Metadata, DescribeCluster, FindCoordinator, DescribeConfigs, CreateTopics, DeleteTopics.

Metadata names every live listener as a broker and each partition's leader
by ``nodes.py``'s rendezvous rule, with that one node as the replica set
(llog keeps no replicas: S3 holds the bytes). Topics are the catalogue's:
a topic that does not exist is created when the request allows it (v4+)
and ``LLOG_AUTO_CREATE_TOPICS`` is on, as a produce to it would be.
"""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING, Any

from kafka.protocol.admin import (
    CreateTopicsResponse, DeleteTopicsResponse, DescribeClusterResponse, DescribeConfigsResponse,
)
from kafka.protocol.metadata import FindCoordinatorResponse, MetadataResponse

from .._errors import InvalidRequest, LlogError, UnknownTopic
from .._protocol.keys import validate_topic
from .codec import api_versions_response
from .errors import Code, error_code

if TYPE_CHECKING:
    from .codec import KafkaRequest
    from .service import KafkaService

__all__ = ["HANDLERS"]

log = logging.getLogger(__name__)

_MT = MetadataResponse.MetadataResponseTopic
_MP = _MT.MetadataResponsePartition
_TOPIC_CONFIG = 2  # DescribeConfigs resource type
_BROKER_CONFIG = 4


def api_versions(svc: KafkaService, req: KafkaRequest) -> Any:
    return api_versions_response(req.version)


def _topic_uuid(topic_id: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(topic_id)
    except ValueError:
        return None


def metadata(svc: KafkaService, req: KafkaRequest) -> Any:
    body = req.body
    v = req.version
    nodes = svc.nodes.live()
    create = v < 4 or bool(body.allow_auto_topic_creation)
    if body.topics is None or (v == 0 and not body.topics):  # v0: an empty list meant every topic
        names = [t.name for t in svc.parts.topics.catalogue.list()]
    else:
        names = [t.name for t in body.topics]
    topics = []
    for name in names:
        if name is None:
            topics.append(_MT(error_code=Code.UNKNOWN_TOPIC_ID, name=None, partitions=[]))
            continue
        try:
            validate_topic(name)
            record = svc.parts.topics.describe(name, create=create)
        except UnknownTopic:
            topics.append(_MT(error_code=Code.UNKNOWN_TOPIC_OR_PARTITION, name=name, partitions=[]))
            continue
        except InvalidRequest:
            topics.append(_MT(error_code=Code.INVALID_TOPIC_EXCEPTION, name=name, partitions=[]))
            continue
        parts = []
        for p in range(record.partitions):
            leader = svc.nodes.leader(name, p).node_id
            parts.append(_MP(error_code=0, partition_index=p, leader_id=leader, leader_epoch=0,
                             replica_nodes=[leader], isr_nodes=[leader], offline_replicas=[]))
        topics.append(_MT(error_code=0, name=name, topic_id=_topic_uuid(record.topic_id), is_internal=False,
                          partitions=parts))
    brokers = [MetadataResponse.MetadataResponseBroker(node_id=n.node_id, host=n.host, port=n.port, rack=None)
               for n in nodes]
    return MetadataResponse[v](throttle_time_ms=0, brokers=brokers, cluster_id=svc.cluster_id,
                               controller_id=nodes[0].node_id, topics=topics)


def describe_cluster(svc: KafkaService, req: KafkaRequest) -> Any:
    nodes = svc.nodes.live()
    brokers = [DescribeClusterResponse.DescribeClusterBroker(broker_id=n.node_id, host=n.host, port=n.port, rack=None)
               for n in nodes]
    return DescribeClusterResponse[req.version](throttle_time_ms=0, error_code=0, error_message=None,
                                                endpoint_type=1, cluster_id=svc.cluster_id,
                                                controller_id=nodes[0].node_id, brokers=brokers)


def find_coordinator(svc: KafkaService, req: KafkaRequest) -> Any:
    body = req.body
    v = req.version
    keys = list(body.coordinator_keys) if v >= 4 else [body.key]
    key_type = body.key_type if v >= 1 else 0
    found = []
    for key in keys:
        if key_type != 0:
            found.append((key, None, Code.COORDINATOR_NOT_AVAILABLE,
                          "transactions are not supported by llog (KAFKA_API.md)"))
        else:
            found.append((key, svc.nodes.coordinator(key), Code.NONE, None))
    if v >= 4:
        C = FindCoordinatorResponse.Coordinator
        return FindCoordinatorResponse[v](throttle_time_ms=0, coordinators=[
            C(key=k, node_id=n.node_id if n else -1, host=n.host if n else "", port=n.port if n else -1,
              error_code=code, error_message=msg) for k, n, code, msg in found])
    _, n, code, msg = found[0]
    return FindCoordinatorResponse[v](throttle_time_ms=0, error_code=code, error_message=msg,
                                      node_id=n.node_id if n else -1, host=n.host if n else "",
                                      port=n.port if n else -1)


def describe_configs(svc: KafkaService, req: KafkaRequest) -> Any:
    R = DescribeConfigsResponse
    results = []
    for res in req.body.resources:
        wanted = None if res.configuration_keys is None else set(res.configuration_keys)
        configs: dict[str, str] = {}
        code, message = Code.NONE, None
        if res.resource_type == _TOPIC_CONFIG:
            try:
                configs = svc.parts.topics.describe(res.resource_name).config.to_kafka()
            except LlogError as exc:
                code, message = error_code(exc), str(exc)
        elif res.resource_type != _BROKER_CONFIG:
            code, message = Code.INVALID_REQUEST, f"resource type {res.resource_type} is not described"
        entries = [R.DescribeConfigsResult.DescribeConfigsResourceResult(
            name=k, value=str(val), read_only=False, is_default=False, config_source=1, is_sensitive=False,
            synonyms=[], config_type=0, documentation=None)
            for k, val in sorted(configs.items()) if wanted is None or k in wanted]
        results.append(R.DescribeConfigsResult(error_code=code, error_message=message, resource_type=res.resource_type,
                                               resource_name=res.resource_name, configs=entries))
    return R[req.version](throttle_time_ms=0, results=results)


def create_topics(svc: KafkaService, req: KafkaRequest) -> Any:
    R = CreateTopicsResponse
    out = []
    for t in req.body.topics:
        code, message, record = Code.NONE, None, None
        try:
            if t.assignments:
                raise InvalidRequest("replica assignments are not supported: llog keeps no replicas")
            count = None if t.num_partitions == -1 else t.num_partitions
            config = {c.name: c.value for c in t.configs}
            if req.body.validate_only:
                validate_topic(t.name)
                record = svc.parts.topics.catalogue.get(t.name)
                if record is not None:
                    code, message = Code.TOPIC_ALREADY_EXISTS, f"topic {t.name!r} already exists"
                record = None
            else:
                record = svc.parts.topics.create(t.name, count, config or None)
        except LlogError as exc:
            code, message = _create_error(exc), str(exc)
        out.append(R.CreatableTopicResult(
            name=t.name, topic_id=_topic_uuid(record.topic_id) if record else None, error_code=code,
            error_message=message, num_partitions=record.partitions if record else -1,
            replication_factor=1 if record else -1, configs=[
                R.CreatableTopicResult.CreatableTopicConfigs(name=k, value=str(val), read_only=False, config_source=5,
                                                             is_sensitive=False)
                for k, val in sorted(record.config.to_kafka().items())] if record else []))
    return R[req.version](throttle_time_ms=0, topics=out)


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
        code, message, topic_id = Code.NONE, None, None
        try:
            if name is None:
                raise UnknownTopic("llog deletes topics by name, not by id")
            validate_topic(name)
            topic_id = _topic_uuid(svc.parts.topics.delete(name).topic_id)
        except LlogError as exc:
            code, message = error_code(exc), str(exc)
        out.append(R.DeletableTopicResult(name=name, topic_id=topic_id, error_code=code, error_message=message))
    return R[v](throttle_time_ms=0, responses=out)


HANDLERS = {
    18: api_versions, 3: metadata, 60: describe_cluster, 10: find_coordinator, 32: describe_configs,
    19: create_topics, 20: delete_topics,
}
