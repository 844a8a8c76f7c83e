"""ElectLeaders, the partition reassignments and the client quotas: operators' requests that
llog has nothing to do for, answered with what is true rather than a closed connection.

- **ElectLeaders** (``kafka-leader-election``): every partition already has
  the leader Metadata names (there are no replicas to choose among), so a
  partition named is ELECTION_NOT_NEEDED (84) and "every partition" (null)
  answers none, as Kafka leaves out the partitions that need no election.
  A partition that does not exist is UNKNOWN_TOPIC_OR_PARTITION (3).
- **ListPartitionReassignments** (``kafka-reassign-partitions --list``): none
  is ever in progress. **AlterPartitionReassignments**: each partition is
  INVALID_REPLICA_ASSIGNMENT (39): llog keeps no replicas to move.
- **DescribeClientQuotas** (``kafka-configs --describe --entity-type
  clients``): none is set. **AlterClientQuotas**: each entry is
  INVALID_REQUEST (42): llog enforces no quotas, and a quota accepted but
  never enforced would mislead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafka.protocol.admin import (
    AlterClientQuotasResponse, AlterPartitionReassignmentsResponse, DescribeClientQuotasResponse,
    ElectLeadersResponse, ListPartitionReassignmentsResponse,
)

from .._errors import LlogError
from .errors import Code, error_code

if TYPE_CHECKING:
    from .codec import KafkaRequest
    from .service import KafkaService

__all__ = ["HANDLERS"]

NO_REPLICAS = "llog keeps no replicas: S3 holds each partition's bytes, and any broker serves it"
NO_QUOTAS = "llog enforces no client quotas"


def elect_leaders(svc: KafkaService, req: KafkaRequest) -> Any:
    R = ElectLeadersResponse
    P = R.ReplicaElectionResult.PartitionResult
    results = []
    for t in req.body.topic_partitions or []:  # null: every partition, none of which needs an election
        parts = []
        for p in t.partitions:
            try:
                svc.parts.topics.live_partition(t.topic, p)
                code, message = Code.ELECTION_NOT_NEEDED, "the partition has its leader: " + NO_REPLICAS
            except LlogError as exc:
                code, message = error_code(exc), str(exc)
            parts.append(P(partition_id=p, error_code=code, error_message=message))
        results.append(R.ReplicaElectionResult(topic=t.topic, partition_result=parts))
    return R[req.version](throttle_time_ms=0, error_code=Code.NONE, replica_election_results=results)


def list_partition_reassignments(svc: KafkaService, req: KafkaRequest) -> Any:
    return ListPartitionReassignmentsResponse[req.version](throttle_time_ms=0, error_code=Code.NONE,
                                                           error_message=None, topics=[])


def alter_partition_reassignments(svc: KafkaService, req: KafkaRequest) -> Any:
    R = AlterPartitionReassignmentsResponse
    P = R.ReassignableTopicResponse.ReassignablePartitionResponse
    return R[req.version](throttle_time_ms=0, allow_replication_factor_change=False, error_code=Code.NONE,
                          error_message=None, responses=[
        R.ReassignableTopicResponse(name=t.name, partitions=[
            P(partition_index=p.partition_index, error_code=Code.INVALID_REPLICA_ASSIGNMENT, error_message=NO_REPLICAS)
            for p in t.partitions]) for t in req.body.topics])


def describe_client_quotas(svc: KafkaService, req: KafkaRequest) -> Any:
    return DescribeClientQuotasResponse[req.version](throttle_time_ms=0, error_code=Code.NONE, error_message=None,
                                                     entries=[])


def alter_client_quotas(svc: KafkaService, req: KafkaRequest) -> Any:
    R = AlterClientQuotasResponse
    return R[req.version](throttle_time_ms=0, entries=[
        R.EntryData(error_code=Code.INVALID_REQUEST, error_message=NO_QUOTAS, entity=[
            R.EntryData.EntityData(entity_type=e.entity_type, entity_name=e.entity_name) for e in entry.entity])
        for entry in req.body.entries])


HANDLERS = {43: elect_leaders, 46: list_partition_reassignments, 45: alter_partition_reassignments,
            48: describe_client_quotas, 49: alter_client_quotas}
