"""What Kafka's admin tools ask besides topics and groups, over the in-memory stores:
DescribeLogDirs (a partition's stored bytes, under the broker Metadata names its leader),
DescribeProducers (the idempotent producers a partition keeps state for), the ACL APIs
(SECURITY_DISABLED, as a Kafka broker without an authorizer answers), and the leader
elections, reassignments and client quotas llog has nothing to do for."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AclBinding, AclBindingFilter, AdminClient, AclOperation, AclPermissionType, ResourcePatternType, \
    ResourceType
from kafka import KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.admin import ACLFilter, ACLOperation, ACLPermissionType, ACLResourcePatternType, ResourcePatternFilter
from kafka.admin import ResourceType as KpResourceType
from kafka.errors import SecurityDisabledError, UnknownTopicOrPartitionError
from kafka.protocol.admin import DescribeLogDirsRequest, DescribeLogDirsResponse

from server._broker.kafka_front import KafkaFront
from server._broker.log_description import LogDescriptions
from server._errors import UnknownTopic
from server._catalogue.topic_config import TopicDefaults
from tests._stored_reference import read_stored
from server._protocol.structs import SharedAppendGroup
from tests.unit.test_broker import Cluster
from tests.unit.test_kafka_listener import _admin, _connect, _encoded, _request, _wait_until
from tests.unit.test_kafka_listener import kafka, kafka_cluster  # noqa: F401 - the fixtures


def _sizes(answer) -> dict[tuple[str, int], int]:
    return {(t.name, p.partition_index): p.partition_size for r in answer.results for t in r.topics
            for p in t.partitions}


def test_each_partition_is_described_once_under_the_broker_metadata_names_its_leader() -> None:
    with Cluster() as cluster:
        brokers = [cluster.broker(topics=TopicDefaults(partitions=6), kafka_port=0, broker_id=f"b{i}")
                   for i in range(2)]
        fronts = [KafkaFront(b, cluster.meta, location="s3://bucket/llog") for b in brokers]
        try:
            assert _wait_until(lambda: all(len(f.service.nodes.live()) == 2 for f in fronts))
            appends = brokers[0].appends
            for round_ in range(2):  # two WAL entries in each partition
                appends.submit(appends.prepare([SharedAppendGroup("sized", p, [b"x" * (100 * (p + 1))] * 5)
                                                for p in range(6)])).result(10)
            layout = brokers[0].layout
            stored = {("sized", p): read_stored(cluster.meta, layout.partition("sized", p)).total_bytes
                      for p in range(6)}
            assert all(size > 100 * (p + 1) * 10 for (_, p), size in stored.items())  # the records, and more
            seen: dict[tuple[str, int], int] = {}
            for front in fronts:
                s = _connect(f"127.0.0.1:{front.port}")
                for version, topics, correlation in ((4, None, 1), (1, [("sized", [0, 1, 2, 3, 4, 5, 9]),
                                                                        ("missing", [0])], 2)):
                    request = DescribeLogDirsRequest[version](topics=None if topics is None else [
                        DescribeLogDirsRequest[version].DescribableLogDirTopic(topic=n, partitions=ps)
                        for n, ps in topics])
                    raw = _request(s, _encoded(request, version, correlation))
                    answer = DescribeLogDirsResponse[version].decode(raw[5 if version >= 2 else 4:])  # header v1: tags
                    (result,) = answer.results
                    assert (result.error_code, result.log_dir) == (0, "s3://bucket/llog")
                    mine = {("sized", p): stored[("sized", p)] for p in range(6)
                            if front.service.nodes.leader("sized", p).node_id == front.service.nodes.me.node_id}
                    assert _sizes(answer) == mine, f"version {version}"
                    if version == 4:
                        assert (result.total_bytes, result.usable_bytes) == (-1, -1)
                s.close()
                seen.update(mine)
            assert seen == stored  # every partition under exactly one of the two brokers
        finally:
            for f in fronts:
                f.close()


def test_a_topic_of_many_partitions_is_sized_in_chunks_each_as_read_alone() -> None:
    """Past 16 partitions the sizes are read in chunks on a few threads: every one lands in its place."""
    with Cluster() as cluster:
        broker = cluster.broker(topics=TopicDefaults(partitions=40))
        appends = broker.appends
        appends.submit(appends.prepare([SharedAppendGroup("wide", p, [b"x" * (10 * p + 1)] * (1 + p % 3))
                                        for p in range(0, 40, 2)])).result(10)  # odd ones stay empty
        logs = LogDescriptions(cluster.meta, broker.layout, broker.topics, "s3://bucket/llog")
        wanted = [39, *range(39)]
        alone = [read_stored(cluster.meta, broker.layout.partition("wide", p)) for p in wanted]
        assert logs.stored_bytes([("wide", p) for p in wanted]) == [0 if s is None else s.total_bytes for s in alone]
        assert all(size > 0 for size in logs.stored_bytes([("wide", p) for p in range(0, 40, 2)]))
        with pytest.raises(UnknownTopic):
            logs.stored_bytes([("wide", 3), ("wide", 40)])


def test_kafka_python_describes_log_dirs_and_producers(kafka):  # noqa: F811
    broker, bootstrap = kafka
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True)
    for i in range(20):
        producer.send("producers", value=b"v%d" % i, partition=i % 2)
    producer.flush()
    producer.close()
    admin = _admin(bootstrap)
    dirs = admin.describe_log_dirs(["producers"])
    text = str(dirs)
    assert "producers" in text and "/llog" in text, text
    states = admin.describe_producers([TopicPartition("producers", p) for p in (0, 1, 3)])
    for p in (0, 1):
        (active,) = states[TopicPartition("producers", p)].active_producers
        assert (active.producer_epoch, active.last_sequence) == (0, 9)
        assert active.producer_id >= 0 and active.last_timestamp > 0
        assert active.coordinator_epoch == -1
    assert states[TopicPartition("producers", 3)].active_producers == []  # a partition nothing wrote
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.describe_producers([TopicPartition("producers", 9)])  # the topic has 4


def test_the_acl_apis_say_security_is_disabled(kafka):  # noqa: F811
    _, bootstrap = kafka
    with pytest.raises(SecurityDisabledError):
        _admin(bootstrap).describe_acls(ACLFilter(principal=None, host="*", operation=ACLOperation.ANY,
                                                  permission_type=ACLPermissionType.ANY,
                                                  resource_pattern=ResourcePatternFilter(KpResourceType.ANY, None,
                                                                                         ACLResourcePatternType.ANY)))
    admin = AdminClient({"bootstrap.servers": bootstrap})
    everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                                  AclPermissionType.ANY)
    assert admin.describe_acls(everything).result(10) == []  # librdkafka lists none (it drops the top-level code)
    (deleted,) = admin.delete_acls([everything]).values()
    with pytest.raises(KafkaException, match="No Authorizer is configured"):
        deleted.result(10)
    binding = AclBinding(ResourceType.TOPIC, "t", ResourcePatternType.LITERAL, "User:a", "*", AclOperation.READ,
                         AclPermissionType.ALLOW)
    (created,) = admin.create_acls([binding]).values()
    with pytest.raises(KafkaException, match="No Authorizer is configured"):
        created.result(10)


def test_leader_elections_reassignments_and_quotas_are_answered_with_what_is_true(kafka):  # noqa: F811
    """Nothing to elect (ELECTION_NOT_NEEDED for a partition named, none for "all"), no
    reassignment in progress and none possible (INVALID_REPLICA_ASSIGNMENT), no quota set and
    none accepted (INVALID_REQUEST); an unknown partition is UNKNOWN_TOPIC_OR_PARTITION."""
    from kafka.protocol.admin import (AlterClientQuotasRequest, AlterClientQuotasResponse,
                                      DescribeClientQuotasRequest, DescribeClientQuotasResponse, ElectLeadersRequest,
                                      ElectLeadersResponse)

    broker, bootstrap = kafka
    admin = _admin(bootstrap)
    admin.create_topics([NewTopic("elected", 2, 1)])
    answer = admin.elect_leaders(0, {"elected": [0, 1, 7]}, raise_errors=False)
    (result,) = answer.replica_election_results
    assert [(p.partition_id, p.error_code) for p in result.partition_result] == [(0, 84), (1, 84), (7, 3)]
    s = _connect(bootstrap)
    every = ElectLeadersRequest[2](election_type=1, topic_partitions=None, timeout_ms=1000)  # kafka-python lists them
    assert ElectLeadersResponse[2].decode(_request(s, _encoded(every, 2, 9))[5:]).replica_election_results == []
    assert admin.list_partition_reassignments() == {}
    refused = admin.alter_partition_reassignments({TopicPartition("elected", 0): [1, 2]})
    assert [(tp, err.__name__) for tp, err in refused.items()] == [(TopicPartition("elected", 0),
                                                                    "InvalidReplicationAssignmentError")]  # code 39
    for version in (0, 1):
        described = DescribeClientQuotasRequest[version](components=[
            DescribeClientQuotasRequest[version].ComponentData(entity_type="client-id", match_type=2, match=None)],
            strict=False)
        raw = _request(s, _encoded(described, version, 10 + version))
        answer = DescribeClientQuotasResponse[version].decode(raw[5 if version else 4:])
        assert (answer.error_code, answer.entries) == (0, [])
        E = AlterClientQuotasRequest[version].EntryData
        alter = AlterClientQuotasRequest[version](validate_only=False, entries=[E(
            entity=[E.EntityData(entity_type="client-id", entity_name="app")],
            ops=[E.OpData(key="producer_byte_rate", value=1024.0, remove=False)])])
        raw = _request(s, _encoded(alter, version, 20 + version))
        (entry,) = AlterClientQuotasResponse[version].decode(raw[5 if version else 4:]).entries
        assert (entry.error_code, entry.error_message) == (42, "llog enforces no client quotas")
        assert [(e.entity_type, e.entity_name) for e in entry.entity] == [("client-id", "app")]
    s.close()
