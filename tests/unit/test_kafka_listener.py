"""The Kafka listener over the in-memory stores: kafka-python and librdkafka as clients,
raw frames for what a client would never send.

The same broker parts as ``test_broker.py``'s ``Cluster`` (a real listener on a
free port, the in-memory Oxia and S3); the tests on the real services and
Kafka's Java tools are ``tests/integration/test_kafka_*.py``.
"""

from __future__ import annotations

import os
import socket
import struct
import threading
import time

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest, MetadataResponse
from kafka.protocol.consumer import (FetchRequest, ListOffsetsRequest, ListOffsetsResponse, OffsetCommitRequest,
                                     OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse)
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from server._broker.kafka_front import KafkaFront
from server._catalogue.topic_config import TopicDefaults
from server._kafka.codec import APIS
from server._protocol.kafka_batch import build_batch
from server._protocol.kafka_records import Record
from server._protocol.keys import TopicPartition as LogPartition
from server._protocol.structs import SharedAppendGroup
from tests.unit.test_broker import Cluster, consume_body, counter, doc


@pytest.fixture
def kafka_cluster():
    with Cluster() as cluster:
        broker = cluster.broker(topics=TopicDefaults(partitions=4), kafka_port=0, max_wait_ms_cap=500,
                                kafka_group_initial_rebalance_delay_ms=0)
        front = KafkaFront(broker, cluster.meta)
        try:
            yield cluster, broker, f"127.0.0.1:{front.port}"
        finally:
            front.close()


@pytest.fixture
def kafka(kafka_cluster):
    return kafka_cluster[1:]


def _admin(bootstrap: str) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)


def test_kafka_python_produces_idempotently_and_reads_back_with_assign(kafka):
    broker, bootstrap = kafka
    _admin(bootstrap).create_topics([NewTopic("orders", 2, 1)])
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True,
                             compression_type="gzip")
    sent = [producer.send("orders", key=b"k%d" % i, value=b"v%d" % i, partition=i % 2,
                          headers=[("h", b"%d" % i)]) for i in range(40)]
    producer.flush()
    meta = [f.get(10) for f in sent]
    assert sorted(m.offset for m in meta if m.partition == 0) == list(range(20))
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=2000,
                             enable_auto_commit=False)
    consumer.assign([TopicPartition("orders", 0), TopicPartition("orders", 1)])
    got = sorted((m.partition, m.offset, m.key, m.value, m.headers) for m in consumer)
    consumer.close()
    assert len(got) == 40
    assert got[0] == (0, 0, b"k0", b"v0", [("h", b"0")])
    # The same records through /consume: Kafka's offset 0 is llog's offset 1.
    answer = doc(broker.consume(consume_body("orders", 0, 1)))
    assert answer["results"][0]["records"][0]["offset"] == 1
    assert answer["record_count"] == 20
    # Each record counted once on each side, whichever protocol carried it.
    assert counter(broker, "produce_records_total") == 40
    assert counter(broker, "consume_records_total") == 40 + 20


def test_librdkafka_produces_every_compression_and_a_group_consumes_and_commits(kafka):
    _, bootstrap = kafka
    for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
        errors: list = []
        p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                      "compression.type": codec, "linger.ms": 2})
        for i in range(25):
            p.produce("events", key=b"%s-%d" % (codec.encode(), i), value=b"x" * 100,
                      on_delivery=lambda e, m: errors.append(e) if e else None)
        assert p.flush(20) == 0
        assert errors == []
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "g", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "session.timeout.ms": 6000})
    c.subscribe(["events"])
    keys = set()
    deadline = time.monotonic() + 30
    while len(keys) < 125 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            keys.add(m.key())
    c.commit(asynchronous=False)
    committed = c.committed([CkTopicPartition("events", p) for p in range(4)], timeout=10)
    c.close()
    assert len(keys) == 125
    assert sum(tp.offset for tp in committed if tp.offset >= 0) == 125


# -- raw frames ------------------------------------------------------------------------------------


def _connect(bootstrap: str) -> socket.socket:
    host, port = bootstrap.split(":")
    s = socket.create_connection((host, int(port)), timeout=5)
    return s


def _request(s: socket.socket, payload: bytes) -> bytes:
    s.sendall(struct.pack(">i", len(payload)) + payload)
    return _response(s)


def _response(s: socket.socket) -> bytes:
    head = _recv(s, 4)
    return _recv(s, struct.unpack(">i", head)[0])


def _recv(s: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            raise ConnectionError("closed")
        out += chunk
    return out


def _closed(s: socket.socket) -> bool:
    try:
        return s.recv(1) == b""
    except ConnectionError:
        return True


def _encoded(request, version: int, correlation_id: int) -> bytes:
    request.with_header(correlation_id=correlation_id, client_id="raw")
    return request.encode(header=True)


def test_an_unknown_api_version_of_api_versions_is_answered_in_v0_with_every_range(kafka):
    _, bootstrap = kafka
    s = _connect(bootstrap)
    # ApiVersions v99: the header (key 18, version 99, correlation 7, client id "x") then anything.
    answer = _request(s, struct.pack(">hhih", 18, 99, 7, 1) + b"x" + b"\x00\x01")
    correlation, code, count = struct.unpack_from(">ihi", answer)
    assert (correlation, code, count) == (7, 35, len(APIS))
    # The connection stays usable.
    ok = _request(s, _encoded(ApiVersionsRequest[0](), 0, 8))
    assert struct.unpack_from(">ih", ok) == (8, 0)
    s.close()


@pytest.mark.parametrize("frame, why", [
    (struct.pack(">hhih", 0, 2, 1, -1) + b"\x00" * 10, "Produce v2 is advertised but not served"),
    (struct.pack(">hhih", 57, 0, 1, -1), "an API key not served"),
    (struct.pack(">hhih", 3, 40, 1, -1), "a version past the range"),
    (struct.pack(">hhih", 3, 1, 1, -1) + b"\x7f\xff\xff\xff", "a body that does not decode"),
    (b"\x00\x03", "a frame shorter than a header"),
])
def test_a_frame_that_is_not_a_request_closes_the_connection_and_the_listener_serves_on(kafka, frame, why):
    _, bootstrap = kafka
    s = _connect(bootstrap)
    s.sendall(struct.pack(">i", len(frame)) + frame)
    assert _closed(s), why
    s2 = _connect(bootstrap)
    assert struct.unpack_from(">ih", _request(s2, _encoded(ApiVersionsRequest[0](), 0, 3))) == (3, 0)
    s2.close()


def test_an_oversized_frame_is_refused_before_it_is_read(kafka):
    broker, bootstrap = kafka
    s = _connect(bootstrap)
    s.sendall(struct.pack(">i", broker.config.max_request_bytes + 1))
    assert _closed(s)


def test_responses_come_in_request_order_on_a_pipelined_connection(kafka):
    _, bootstrap = kafka
    s = _connect(bootstrap)
    # A long-polling fetch first, then quick requests behind it: answers stay in order.
    F = FetchRequest[4]
    fetch = F(replica_id=-1, max_wait_ms=300, min_bytes=1, max_bytes=1 << 20, isolation_level=0, topics=[
        F.FetchTopic(topic="orders", partitions=[F.FetchTopic.FetchPartition(partition=0, fetch_offset=0,
                                                                              partition_max_bytes=1 << 20)])])
    frames = [_encoded(fetch, 4, 1)] + [_encoded(ApiVersionsRequest[0](), 0, i) for i in range(2, 7)]
    s.sendall(b"".join(struct.pack(">i", len(f)) + f for f in frames))
    assert [struct.unpack_from(">i", _response(s))[0] for _ in frames] == [1, 2, 3, 4, 5, 6]
    s.close()


def test_a_corrupt_batch_and_an_unknown_partition_get_their_error_codes(kafka):
    _, bootstrap = kafka
    batch = bytearray(build_batch([Record(b"v")], now_ms=0))
    good = bytes(batch)
    batch[-1] ^= 0xFF  # the CRC no longer matches
    P = ProduceRequest[7]
    req = P(transactional_id=None, acks=-1, timeout_ms=5000, topic_data=[P.TopicProduceData(name="orders", partition_data=[
        P.TopicProduceData.PartitionProduceData(index=0, records=bytes(batch)),
        P.TopicProduceData.PartitionProduceData(index=9, records=good),
        P.TopicProduceData.PartitionProduceData(index=1, records=good)])])
    s = _connect(bootstrap)
    raw = _request(s, _encoded(req, 7, 11))
    resp = ProduceResponse.decode(raw[4:], version=7)
    codes = {p.index: p.error_code for t in resp.responses for p in t.partition_responses}
    assert codes == {0: 2, 9: 3, 1: 0}  # CORRUPT_MESSAGE, UNKNOWN_TOPIC_OR_PARTITION, stored
    s.close()


def test_a_log_append_time_topic_answers_the_time_it_stamped_and_a_create_time_topic_minus_one(kafka):
    _, bootstrap = kafka
    admin = _admin(bootstrap)
    admin.create_topics([NewTopic("stamped", 1, 1, topic_configs={"message.timestamp.type": "LogAppendTime"}),
                         NewTopic("created", 1, 1)])
    admin.close()
    P = ProduceRequest[7]
    batch = build_batch([Record(b"v")], now_ms=1_000)
    req = P(transactional_id=None, acks=-1, timeout_ms=5000, topic_data=[
        P.TopicProduceData(name=name, partition_data=[P.TopicProduceData.PartitionProduceData(index=0, records=batch)])
        for name in ("stamped", "created")])
    s = _connect(bootstrap)
    before = int(time.time() * 1000)
    resp = ProduceResponse.decode(_request(s, _encoded(req, 7, 12))[4:], version=7)
    s.close()
    times = {t.name: p.log_append_time_ms for t in resp.responses for p in t.partition_responses}
    assert times["created"] == -1
    assert before <= times["stamped"] <= int(time.time() * 1000)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=5000)
    consumer.assign([TopicPartition("stamped", 0), TopicPartition("created", 0)])
    got = {m.topic: (m.timestamp, m.timestamp_type) for m in consumer}
    consumer.close()
    assert got == {"stamped": (times["stamped"], 1), "created": (1_000, 0)}


def test_list_offsets_and_leader_epochs_answer_every_partition_from_one_read(kafka_cluster):
    """ListOffsets v7: the earliest and latest of every partition asked come from their control
    records read together; a time goes through the index; unknown partitions get their error
    in place. OffsetForLeaderEpoch v4 answers the high watermark the same way."""
    cluster, _, bootstrap = kafka_cluster
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    for i in range(6):  # partition 0: 4 records at 1000, 2000, ...; partition 1: 2; 2 and 3 empty
        producer.send("timed", value=b"v", partition=0 if i < 4 else 1, timestamp_ms=1000 * (i + 1))
    producer.flush()
    producer.close()
    L = ListOffsetsRequest[7]
    LP = L.ListOffsetsTopic.ListOffsetsPartition
    asked = [(0, -2), (0, -1), (1, -1), (2, -1), (3, -2), (0, 2500), (0, 9999), (0, -3), (9, -1)]
    req = L(replica_id=-1, isolation_level=0, topics=[
        L.ListOffsetsTopic(name="timed", partitions=[LP(partition_index=p, current_leader_epoch=-1, timestamp=ts)
                                                     for p, ts in asked]),
        L.ListOffsetsTopic(name="no-such-topic", partitions=[LP(partition_index=0, current_leader_epoch=-1,
                                                                timestamp=-1)])])
    s = _connect(bootstrap)
    before = cluster.meta.calls.get("get_many", 0)
    resp = ListOffsetsResponse.decode(_request(s, _encoded(req, 7, 1))[5:], version=7)
    got = [(p.error_code, p.offset, p.timestamp) for t in resp.topics for p in t.partitions]
    assert got == [(0, 0, -1), (0, 4, -1), (0, 2, -1), (0, 0, -1), (0, 0, -1), (0, 2, 3000), (0, -1, -1),
                   (0, 3, 4000), (3, -1, -1), (3, -1, -1)]
    assert cluster.meta.calls.get("get_many", 0) - before == 1  # the five ends: one read
    E = OffsetForLeaderEpochRequest[4]
    req = E(replica_id=-2, topics=[E.OffsetForLeaderTopic(topic="timed", partitions=[
        E.OffsetForLeaderTopic.OffsetForLeaderPartition(partition=p, current_leader_epoch=0, leader_epoch=0)
        for p in (0, 1, 7)])])
    resp = OffsetForLeaderEpochResponse.decode(_request(s, _encoded(req, 4, 2))[5:], version=4)
    s.close()
    assert [(p.error_code, p.leader_epoch, p.end_offset) for t in resp.topics for p in t.partitions] == [
        (0, 0, 4), (0, 0, 2), (3, -1, -1)]


def test_metadata_while_the_catalogue_cannot_be_read_is_retriable_and_keeps_the_connection(kafka_cluster):
    cluster, _, bootstrap = kafka_cluster
    M = MetadataRequest[12]
    req = M(topics=[M.MetadataRequestTopic(topic_id=None, name="unreadable")], allow_auto_topic_creation=True,
            include_topic_authorized_operations=False)
    s = _connect(bootstrap)
    cluster.meta.fail_next("get", key_contains="unreadable")
    first = MetadataResponse.decode(_request(s, _encoded(req, 12, 1))[5:], version=12)  # header v1: id, tags
    assert [(t.name, t.error_code) for t in first.topics] == [("unreadable", 5)]  # LEADER_NOT_AVAILABLE
    second = MetadataResponse.decode(_request(s, _encoded(req, 12, 2))[5:], version=12)  # the same connection
    assert [(t.name, t.error_code, len(t.partitions)) for t in second.topics] == [("unreadable", 0, 4)]
    s.close()


def test_closed_connections_release_their_descriptors(kafka):
    _, bootstrap = kafka
    fds = lambda: len(os.listdir("/proc/self/fd"))  # noqa: E731
    before = fds()
    for i in range(40):
        s = _connect(bootstrap)
        assert struct.unpack_from(">i", _request(s, _encoded(ApiVersionsRequest[0](), 0, i)))[0] == i
        s.close()
    deadline = time.monotonic() + 10
    while fds() > before + 2 and time.monotonic() < deadline:  # the listener's threads see the ends
        time.sleep(0.05)
    assert fds() <= before + 2


def test_pipelined_produce_requests_of_one_connection_are_stored_in_the_order_sent(kafka):
    broker, bootstrap = kafka
    # The first request's check waits (at most 0.5 s) for a later request's check to start:
    # were requests checked and submitted on the pool, the later one would overtake it.
    prepare, later_started, calls = broker.appends.prepare, threading.Event(), []

    def slow_first(groups):
        calls.append(groups)
        if len(calls) == 1:
            later_started.wait(0.5)
        else:
            later_started.set()
        return prepare(groups)

    broker.appends.prepare = slow_first
    P = ProduceRequest[7]
    frames = []
    for i in range(20):
        batch = build_batch([Record(b"%03d" % i)], now_ms=0)
        req = P(transactional_id=None, acks=-1, timeout_ms=5000, topic_data=[P.TopicProduceData(
            name="ordered", partition_data=[P.TopicProduceData.PartitionProduceData(index=0, records=batch)])])
        frames.append(_encoded(req, 7, i))
    s = _connect(bootstrap)
    s.sendall(b"".join(struct.pack(">i", len(f)) + f for f in frames))  # all in flight at once
    offsets = [ProduceResponse.decode(_response(s)[4:], version=7).responses[0].partition_responses[0].base_offset
               for _ in frames]
    s.close()
    assert offsets == list(range(20))
    answer = doc(broker.consume(consume_body("ordered", 0, 1, max_bytes=1 << 20)))
    assert [r["value"] for r in answer["results"][0]["records"]] == ["%03d" % i for i in range(20)]


def test_pipelined_offset_commits_of_one_connection_land_in_the_order_sent(kafka):
    broker, bootstrap = kafka
    broker.appends.submit(broker.appends.prepare([SharedAppendGroup("commits", 0, [b"x"] * 30)])).result(10)
    commit, others_done, calls = broker.group_offsets.commit, threading.Event(), []

    def slow_first(*args, **kwargs):
        calls.append(args)
        if len(calls) == 1:
            others_done.wait(0.5)  # set only if every later commit overtook this one
            return commit(*args, **kwargs)
        done = commit(*args, **kwargs)
        if len(calls) == 10:
            others_done.set()
        return done

    broker.group_offsets.commit = slow_first
    C = OffsetCommitRequest[7]
    frames = [_encoded(C(group_id="g", generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
                         topics=[C.OffsetCommitRequestTopic(name="commits", partitions=[
                             C.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
                                 partition_index=0, committed_offset=i, committed_leader_epoch=-1,
                                 committed_metadata="")])]), 7, i) for i in range(1, 11)]
    s = _connect(bootstrap)
    s.sendall(b"".join(struct.pack(">i", len(f)) + f for f in frames))
    for _ in frames:
        _response(s)
    s.close()
    assert broker.group_offsets.fetch("g")[LogPartition("commits", 0)].offset == 10 + 1  # llog's: Kafka's + 1


def test_closing_does_not_wait_out_a_rebalance_a_join_is_waiting_for():
    from kafka.protocol.consumer import JoinGroupRequest

    J = JoinGroupRequest[1]

    def join(member: str) -> bytes:
        return _encoded(J(group_id="g", session_timeout_ms=30_000, rebalance_timeout_ms=60_000, member_id=member,
                          protocol_type="consumer",
                          protocols=[J.JoinGroupRequestProtocol(name="range", metadata=b"")]), 1, 1)

    with Cluster() as cluster:
        broker = cluster.broker(kafka_port=0, kafka_group_initial_rebalance_delay_ms=0)
        front = KafkaFront(broker, cluster.meta)
        bootstrap = f"127.0.0.1:{front.port}"
        first = _connect(bootstrap)
        _request(first, join(""))  # a member that will never rejoin
        second = _connect(bootstrap)
        second.sendall(struct.pack(">i", len(join(""))) + join(""))  # waits for the first to rejoin
        assert _wait_until(lambda: front.service.coordinator.describe("g")[0] == "PreparingRebalance")
        started = time.monotonic()
        front.close()
        assert time.monotonic() - started < 10  # not the 60 s rebalance timeout
        first.close()
        second.close()


def _wait_until(condition, timeout_s: float = 10) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)  # polling a state the listener's threads change
    return condition()


def test_offset_fetch_is_answered_by_every_broker_not_only_the_coordinator() -> None:
    """Committed offsets are in Oxia: a broker that does not coordinate the group answers
    OffsetFetch with them, where NOT_COORDINATOR would leave librdkafka's partitions
    unstarted until the next rebalance (confluentinc/librdkafka#5586)."""
    from kafka.protocol.consumer import OffsetFetchRequest, OffsetFetchResponse

    with Cluster() as cluster:
        brokers = [cluster.broker(topics=TopicDefaults(partitions=2), kafka_port=0, broker_id=f"b{i}")
                   for i in range(2)]
        fronts = [KafkaFront(b, cluster.meta) for b in brokers]
        try:
            assert _wait_until(lambda: all(len(f.service.nodes.live()) == 2 for f in fronts))
            appends = brokers[0].appends
            appends.submit(appends.prepare([SharedAppendGroup("events", p, [b"x"] * 10) for p in (0, 1)])).result(10)
            group = next(g for g in (f"g{i}" for i in range(100))
                         if not fronts[1].service.coordinator.owns(g))  # coordinated by the other broker
            assert fronts[0].service.coordinator.owns(group)
            brokers[0].group_offsets.commit(group, [(LogPartition("events", 1), 8, "meta")])
            for i, front in enumerate(fronts):
                s = _connect(f"127.0.0.1:{front.port}")
                request = OffsetFetchRequest[1](group_id=group, topics=[
                    OffsetFetchRequest[1].OffsetFetchRequestTopic(name="events", partition_indexes=[0, 1])])
                answer = OffsetFetchResponse[1].decode(_request(s, _encoded(request, 1, 5))[4:])
                s.close()
                parts = {p.partition_index: (p.committed_offset, p.metadata, p.error_code)
                         for p in answer.topics[0].partitions}
                assert parts == {0: (-1, "", 0), 1: (7, "meta", 0)}, f"broker {i}: {answer}"
        finally:
            for f in fronts:
                f.close()


def test_delete_groups_and_offset_delete_answer_bad_names_and_unknown_groups_with_their_codes(kafka_cluster):
    """DeleteGroups: an invalid group id is INVALID_GROUP_ID (24), a group nothing is known of
    GROUP_ID_NOT_FOUND (69), a group with offsets only is deleted. OffsetDelete: an invalid
    group id is a top-level 24, an unknown group 69, a bad topic name or a negative partition
    UNKNOWN_TOPIC_OR_PARTITION (3) beside the partitions it deletes. The connection serves on."""
    from kafka.protocol.admin import DeleteGroupsRequest, DeleteGroupsResponse
    from kafka.protocol.consumer import OffsetDeleteRequest, OffsetDeleteResponse

    _, broker, bootstrap = kafka_cluster
    appends = broker.appends
    appends.submit(appends.prepare([SharedAppendGroup("events", p, [b"x"] * 3) for p in (0, 1)])).result(10)
    for group in ("kept", "gone"):
        broker.group_offsets.commit(group, [(LogPartition("events", 0), 2, ""), (LogPartition("events", 1), 3, "")])
    s = _connect(bootstrap)
    T = OffsetDeleteRequest[0].OffsetDeleteRequestTopic

    def offset_delete(group: str, topics: list[tuple[str, list[int]]], correlation: int):
        request = OffsetDeleteRequest[0](group_id=group, topics=[
            T(name=n, partitions=[T.OffsetDeleteRequestPartition(partition_index=p) for p in ps]) for n, ps in topics])
        return OffsetDeleteResponse[0].decode(_request(s, _encoded(request, 0, correlation))[4:])

    assert offset_delete("", [("events", [0])], 1).error_code == 24
    assert offset_delete("never-seen", [("events", [0])], 2).error_code == 69
    answer = offset_delete("kept", [("events", [0, -1]), ("a/b", [0])], 3)
    assert answer.error_code == 0
    assert {(t.name, p.partition_index): p.error_code for t in answer.topics for p in t.partitions} == {
        ("events", 0): 0, ("events", -1): 3, ("a/b", 0): 3}
    assert set(broker.group_offsets.fetch("kept")) == {LogPartition("events", 1)}

    request = DeleteGroupsRequest[1](groups_names=["", "bad\x01name", "never-seen", "gone"])
    answer = DeleteGroupsResponse[1].decode(_request(s, _encoded(request, 1, 4))[4:])
    assert [(r.group_id, r.error_code) for r in answer.results] == [
        ("", 24), ("bad\x01name", 24), ("never-seen", 69), ("gone", 0)]
    assert broker.group_offsets.fetch("gone") == {}
    version = ApiVersionsRequest[0]()
    assert struct.unpack_from(">ih", _request(s, _encoded(version, 0, 5)))[1] == 0
    s.close()


def test_delete_records_moves_the_log_start_for_every_client_and_answers_bad_offsets(kafka_cluster):
    """kafka-python's and librdkafka's admin clients delete records below an offset (Kafka's);
    consumers from the earliest then start there, ListOffsets says so, and a fetch below it
    is OFFSET_OUT_OF_RANGE (a consumer resets to the new start). Raw requests: -1 is the
    high watermark; past it or below -1 is OFFSET_OUT_OF_RANGE (1), an unknown topic or
    partition UNKNOWN_TOPIC_OR_PARTITION (3), each beside the partitions that succeed."""
    from confluent_kafka.admin import AdminClient
    from kafka.protocol.admin import DeleteRecordsRequest, DeleteRecordsResponse

    _, broker, bootstrap = kafka_cluster
    appends = broker.appends
    for p in (0, 1, 2):  # ten records each, in one batch: a start inside it
        appends.submit(appends.prepare([SharedAppendGroup("purged", p, [b"%d" % i for i in range(10)])])).result(10)
    got = _admin(bootstrap).delete_records({TopicPartition("purged", 0): 4})
    assert got[TopicPartition("purged", 0)]["low_watermark"] == 4
    rd_admin = AdminClient({"bootstrap.servers": bootstrap})  # kept: the futures resolve on its thread
    futures = rd_admin.delete_records([CkTopicPartition("purged", 1, 7)])
    assert futures[CkTopicPartition("purged", 1, 7)].result(10).low_watermark == 7
    assert broker.reader.log_start_offset("purged", 0) == 5  # llog's offsets start at 1

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=3000)
    consumer.assign([TopicPartition("purged", p) for p in (0, 1)])
    assert consumer.beginning_offsets([TopicPartition("purged", p) for p in (0, 1)]) == {
        TopicPartition("purged", 0): 4, TopicPartition("purged", 1): 7}
    consumer.seek(TopicPartition("purged", 1), 2)  # below the start: out of range, reset to the earliest
    seen = sorted((m.partition, m.offset, m.value) for m in consumer)
    consumer.close()
    assert seen == [(0, i, b"%d" % i) for i in range(4, 10)] + [(1, i, b"%d" % i) for i in range(7, 10)]

    R = DeleteRecordsRequest[2]
    T = R.DeleteRecordsTopic
    request = R(timeout_ms=5000, topics=[
        T(name="purged", partitions=[T.DeleteRecordsPartition(partition_index=p, offset=o)
                                     for p, o in ((2, -1), (0, 11), (0, -7), (1, 3), (9, 0), (-1, 0))]),
        T(name="no-such-topic", partitions=[T.DeleteRecordsPartition(partition_index=0, offset=0)])])
    s = _connect(bootstrap)
    answer = DeleteRecordsResponse[2].decode(_request(s, _encoded(request, 2, 1))[5:], version=2)
    s.close()
    assert [(t.name, p.partition_index, p.error_code, p.low_watermark) for t in answer.topics
            for p in t.partitions] == [("purged", 2, 0, 10), ("purged", 0, 1, -1), ("purged", 0, 1, -1),
                                       ("purged", 1, 0, 7), ("purged", 9, 3, -1), ("purged", -1, 3, -1),
                                       ("no-such-topic", 0, 3, -1)]


def test_kafka_streams_internal_topic_configs_are_accepted_kept_and_described(kafka_cluster):
    """CreateTopics with the configs Kafka Streams gives a repartition and a changelog topic
    (and an ops script's min.insync.replicas): created, and DescribeConfigs answers them back;
    a config Kafka does not know is INVALID_CONFIG (40), naming it."""
    from kafka.admin import ConfigResource, ConfigResourceType
    from kafka.errors import InvalidConfigurationError

    cluster, broker, bootstrap = kafka_cluster
    admin = _admin(bootstrap)
    repartition = {"cleanup.policy": "delete", "segment.bytes": "52428800", "retention.ms": "-1",
                   "message.timestamp.type": "CreateTime", "min.insync.replicas": "2"}
    changelog = {"cleanup.policy": "compact", "message.timestamp.type": "CreateTime", "segment.bytes": "52428800"}
    admin.create_topics([NewTopic("app-repartition", 2, 1, topic_configs=repartition),
                         NewTopic("app-changelog", 2, 1, topic_configs=changelog)])
    described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, name)
                                        for name in ("app-repartition", "app-changelog")])
    got = {name: {k: (v["value"] if isinstance(v, dict) else v) for k, v in configs.items()}
           for by_name in described.values() for name, configs in by_name.items()}
    assert {k: got["app-repartition"][k] for k in repartition} == repartition
    assert {k: got["app-changelog"][k] for k in changelog} == changelog
    assert not broker.topics.describe("app-changelog").config.retains  # compact: nothing let go
    with pytest.raises(InvalidConfigurationError, match="segment.byte"):
        admin.create_topics([NewTopic("typo", 1, 1, topic_configs={"segment.byte": "1"})], raise_errors=True)
    admin.close()


def _api_versions_answered(s: socket.socket, correlation: int) -> bool:
    answer = _request(s, _encoded(ApiVersionsRequest[0](), 0, correlation))
    return struct.unpack_from(">ih", answer) == (correlation, 0)


def _gauge(broker, name: str) -> float:
    return broker.metrics.snapshot()["gauges"].get(name, {}).get("", 0)


def _closed_by_broker(s: socket.socket) -> bool:
    """The broker closed ``s``: a read ends (the test's socket timeout, 5 s, fails it otherwise)."""
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True


def test_an_idle_connection_is_closed_and_a_busy_one_kept() -> None:
    with Cluster() as cluster:
        broker = cluster.broker(kafka_port=0, kafka_connections_max_idle_ms=300)
        front = KafkaFront(broker, cluster.meta)
        try:
            bootstrap = f"127.0.0.1:{front.port}"
            idle, busy = _connect(bootstrap), _connect(bootstrap)
            assert _api_versions_answered(idle, 1)
            for i in range(10):  # 1 s of requests every 100 ms: never 300 ms without a byte
                assert _api_versions_answered(busy, 10 + i)
                time.sleep(0.1)  # the client's own pace, not a synchronisation
            assert _closed_by_broker(idle)
            assert _api_versions_answered(busy, 99)
            assert broker.metrics.snapshot()["counters"]["kafka_connections_closed_total"] == {"reason=idle": 1.0}
            busy.close()
        finally:
            front.close()


def test_a_connection_past_the_limit_is_closed_and_a_freed_slot_serves_again() -> None:
    with Cluster() as cluster:
        broker = cluster.broker(kafka_port=0, kafka_max_connections=2)
        front = KafkaFront(broker, cluster.meta)
        try:
            bootstrap = f"127.0.0.1:{front.port}"
            first, second = _connect(bootstrap), _connect(bootstrap)
            assert _api_versions_answered(first, 1) and _api_versions_answered(second, 2)
            third = _connect(bootstrap)
            assert _closed_by_broker(third)
            assert _gauge(broker, "kafka_connections") == 2
            first.close()
            assert _wait_until(lambda: _gauge(broker, "kafka_connections") == 1)
            fourth = _connect(bootstrap)
            assert _api_versions_answered(fourth, 3)
            assert counter(broker, "kafka_connections_closed_total") == 1
            for s in (second, third, fourth):
                s.close()
        finally:
            front.close()
