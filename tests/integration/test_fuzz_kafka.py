"""Thousands of random and mutated Kafka frames against a real broker's Kafka listener:
every one is answered (with its correlation id) or its connection closed, as Kafka
closes one; no handler fails; and the broker serves a real client afterwards.

The corpus is well-formed requests of every API served, each encoded by kafka-python
at a random version of its range; the mutations flip bits, cut, extend, lie in the
size field, swap the API key or version, or replace the frame with noise. Seeded:
a failure names the seed and the frame to replay."""

from __future__ import annotations

import random
import socket
import struct

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.protocol.admin import (
    AlterClientQuotasRequest, CreateTopicsRequest, DeleteRecordsRequest, DescribeAclsRequest, DescribeGroupsRequest,
    DescribeLogDirsRequest, DescribeProducersRequest, ElectLeadersRequest, ListGroupsRequest,
)
from kafka.protocol.consumer import (
    FetchRequest, HeartbeatRequest, JoinGroupRequest, ListOffsetsRequest, OffsetCommitRequest, OffsetFetchRequest,
)
from kafka.protocol.metadata import ApiVersionsRequest, FindCoordinatorRequest, MetadataRequest
from kafka.protocol.producer import InitProducerIdRequest, ProduceRequest

from server._kafka.codec import APIS
from tests._kafka_frames import FrameConnection, mutate_frame
from server._protocol.kafka_batch import build_batch
from server._protocol.kafka_records import Record

FRAMES = 2000
SEED = 20261127


@pytest.fixture
def listener(session_broker):
    broker = session_broker(LLOG_KAFKA_PORT="0", LLOG_BROKER_MAX_WAIT_MS="100",
                            LLOG_KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS="0")
    return broker


def _corpus(topic: str) -> list:
    batch = build_batch([Record(b"value", b"key", (("h", b"1"),))], now_ms=1_700_000_000_000)
    P, F, L = ProduceRequest, FetchRequest, ListOffsetsRequest
    J, C = JoinGroupRequest, OffsetCommitRequest
    return [
        (ApiVersionsRequest, dict(client_software_name="fuzz", client_software_version="1")),
        (MetadataRequest, dict(topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                               allow_auto_topic_creation=True)),
        (ProduceRequest, dict(transactional_id=None, acks=-1, timeout_ms=2000, topic_data=[P.TopicProduceData(
            name=topic, partition_data=[P.TopicProduceData.PartitionProduceData(index=0, records=batch)])])),
        (FetchRequest, dict(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                            session_id=0, session_epoch=-1, topics=[F.FetchTopic(topic=topic, partitions=[
                                F.FetchTopic.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=65536,
                                                            current_leader_epoch=-1, log_start_offset=-1)])],
                            forgotten_topics_data=[], rack_id="")),
        (ListOffsetsRequest, dict(replica_id=-1, isolation_level=0, topics=[L.ListOffsetsTopic(name=topic, partitions=[
            L.ListOffsetsTopic.ListOffsetsPartition(partition_index=0, timestamp=-1, current_leader_epoch=-1)])])),
        (InitProducerIdRequest, dict(transactional_id=None, transaction_timeout_ms=60000, producer_id=-1,
                                     producer_epoch=-1)),
        (FindCoordinatorRequest, dict(key="fuzz-group", key_type=0, coordinator_keys=["fuzz-group"])),
        (JoinGroupRequest, dict(group_id="fuzz-group", session_timeout_ms=10, rebalance_timeout_ms=1,
                                member_id="", group_instance_id=None, protocol_type="consumer",
                                protocols=[J.JoinGroupRequestProtocol(name="range", metadata=b"\x00\x01")])),
        (HeartbeatRequest, dict(group_id="fuzz-group", generation_id=1, member_id="m", group_instance_id=None)),
        (OffsetCommitRequest, dict(group_id="fuzz-group", generation_id_or_member_epoch=-1, member_id="",
                                   group_instance_id=None, retention_time_ms=-1, topics=[C.OffsetCommitRequestTopic(
                                       name=topic, partitions=[C.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
                                           partition_index=0, committed_offset=0, committed_leader_epoch=-1,
                                           committed_metadata="")])])),
        (OffsetFetchRequest, dict(group_id="fuzz-group", topics=None, groups=[
            OffsetFetchRequest.OffsetFetchRequestGroup(group_id="fuzz-group", topics=None)], require_stable=False)),
        (DescribeGroupsRequest, dict(groups=["fuzz-group"], include_authorized_operations=False)),
        (ListGroupsRequest, dict(states_filter=[], types_filter=[])),
        (DeleteRecordsRequest, dict(timeout_ms=1000, topics=[DeleteRecordsRequest.DeleteRecordsTopic(
            name=topic, partitions=[DeleteRecordsRequest.DeleteRecordsTopic.DeleteRecordsPartition(
                partition_index=0, offset=0)])])),
        (CreateTopicsRequest, dict(topics=[CreateTopicsRequest.CreatableTopic(
            name=f"{topic}-made", num_partitions=1, replication_factor=1, assignments=[], configs=[])],
            timeout_ms=1000, validate_only=True)),
        (DescribeLogDirsRequest, dict(topics=[DescribeLogDirsRequest.DescribableLogDirTopic(topic=topic,
                                                                                             partitions=[0, 1])])),
        (DescribeProducersRequest, dict(topics=[DescribeProducersRequest.TopicRequest(name=topic,
                                                                                      partition_indexes=[0])])),
        (DescribeAclsRequest, dict(resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
                                   principal_filter=None, host_filter=None, operation=1, permission_type=1)),
        (ElectLeadersRequest, dict(election_type=0, timeout_ms=1000, topic_partitions=[
            ElectLeadersRequest.TopicPartitions(topic=topic, partitions=[0, 5])])),
        (AlterClientQuotasRequest, dict(validate_only=True, entries=[AlterClientQuotasRequest.EntryData(
            entity=[AlterClientQuotasRequest.EntryData.EntityData(entity_type="client-id", entity_name=None)],
            ops=[AlterClientQuotasRequest.EntryData.OpData(key="producer_byte_rate", value=1.0, remove=False)])])),
    ]


def _encode(rng: random.Random, cls, fields: dict, correlation_id: int) -> bytes:
    api = APIS[cls.API_KEY]
    low = api.served_from if api.served_from is not None else api.min_version
    version = rng.randint(low, api.max_version)
    request = cls[version](**fields)
    request.with_header(correlation_id=correlation_id, client_id="fuzz")
    return request.encode(header=True)


def test_random_and_mutated_frames_are_answered_or_closed_and_the_broker_serves_on(listener, unique_topic):
    host, port = listener.kafka.split(":")
    address = (host, int(port))
    rng = random.Random(SEED)
    corpus = _corpus(unique_topic)
    answered = closed = 0
    conn = FrameConnection(lambda: socket.create_connection(address, timeout=10))
    for i in range(FRAMES):
        cls, fields = rng.choice(corpus)
        correlation_id = i + 1
        frame = _encode(rng, cls, fields, correlation_id)
        size = None
        if rng.random() < 0.85:
            frame = mutate_frame(rng, frame)
            if rng.random() < 0.05:
                size = len(frame) + rng.randint(1, 1000)
        answer = conn.exchange(frame, size)
        if answer is None:
            closed += 1
            continue
        answered += 1
        peeked = struct.unpack_from(">h", frame, 0)[0] if len(frame) >= 2 else None
        if len(frame) >= 8 and peeked in APIS:
            assert struct.unpack_from(">i", answer)[0] == struct.unpack_from(">i", frame, 4)[0], \
                f"seed {SEED}, frame {i}: the answer's correlation id is not the request's"
    conn.close()
    print(f"[fuzz-kafka] {FRAMES} frames (seed {SEED}): {answered} answered, {closed} connections closed")
    assert answered > FRAMES // 10 and closed > FRAMES // 10, (answered, closed)
    log = listener.log_path.read_text(errors="replace")
    assert "a handler failed" not in log, log[-5000:]
    # A real client is served as before.
    producer = KafkaProducer(bootstrap_servers=listener.kafka, acks="all")
    producer.send(unique_topic, key=b"after", value=b"fuzz", partition=1).get(30)
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=listener.kafka, auto_offset_reset="earliest",
                             consumer_timeout_ms=3000, enable_auto_commit=False)
    consumer.assign([TopicPartition(unique_topic, 1)])
    assert [(m.key, m.value) for m in consumer] == [(b"after", b"fuzz")]
    consumer.close()
