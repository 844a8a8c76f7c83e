"""ApiVersions, Metadata, DescribeCluster, FindCoordinator: who serves what.

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

from kafka.protocol.admin import DescribeClusterResponse
from kafka.protocol.metadata import FindCoordinatorResponse, MetadataResponse

from .._errors import InvalidRequest, LlogError, UnknownTopic
from .._protocol.keys import validate_topic
from .codec import api_versions_response
from .errors import Code

if TYPE_CHECKING:
    from .codec import KafkaRequest
    from .service import KafkaService

__all__ = ["HANDLERS"]

log = logging.getLogger(__name__)

_MT = MetadataResponse.MetadataResponseTopic
_MP = _MT.MetadataResponsePartition


def api_versions(svc: KafkaService, req: KafkaRequest) -> Any:
    return api_versions_response(req.version)


def topic_uuid(topic_id: str) -> uuid.UUID | None:
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
        except LlogError:  # the catalogue could not be read (Oxia away): retriable, as a leader election
            topics.append(_MT(error_code=Code.LEADER_NOT_AVAILABLE, name=name, partitions=[]))
            continue
        parts = []
        for p in range(record.partitions):
            leader = svc.nodes.leader(name, p).node_id
            parts.append(_MP(error_code=0, partition_index=p, leader_id=leader, leader_epoch=0,
                             replica_nodes=[leader], isr_nodes=[leader], offline_replicas=[]))
        topics.append(_MT(error_code=0, name=name, topic_id=topic_uuid(record.topic_id), is_internal=False,
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


HANDLERS = {18: api_versions, 3: metadata, 60: describe_cluster, 10: find_coordinator}
