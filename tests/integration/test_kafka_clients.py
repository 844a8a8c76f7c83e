"""Kafka's own clients against llog's Kafka listener, on real Oxia + MinIO and two broker
processes: kafka-python and librdkafka (confluent-kafka) produce idempotently with
acks=all and every compression, consume with ``assign`` and as a group of three that
rebalances when one leaves, commit and resume; what they write reads back through
``/consume``, and what ``/produce`` writes reads back through them."""

from __future__ import annotations

import threading
import time
from typing import Iterator

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka import TopicPartition as CkPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import CommitFailedError, RebalanceInProgressError

from tests._waiting import wait_until

from tests.conftest import TEST_TOPICS_ENV, new_root_prefix

from .conftest import BrokerProcess, value_bytes

PARTITIONS = 4
KAFKA_ENV = {"LLOG_KAFKA_PORT": "0", "LLOG_KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS": "500",
             "LLOG_BROKER_MAX_WAIT_MS": "500"}


@pytest.fixture(scope="module")
def brokers(stack, openapi, tmp_path_factory) -> Iterator[list[BrokerProcess]]:
    """Two listeners on one root prefix for the module: each test has its own topic and
    groups (``unique_topic``), so none sees another's."""
    env = {**stack.env(root_prefix=new_root_prefix()), **TEST_TOPICS_ENV, "LLOG_BATCH_MAX_DELAY_MS": "20", **KAFKA_ENV}
    logs = tmp_path_factory.mktemp("kafka-clients")
    pair: list[BrokerProcess] = []
    try:
        for i in (1, 2):
            pair.append(BrokerProcess(env, ["--role", "both", "--broker-id", f"kafka-{i}"], logs / f"kafka-{i}.log",
                                      openapi))
        yield pair
    finally:
        for b in pair:
            b.stop()


def _create(bootstrap: str, topic: str, partitions: int = PARTITIONS) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)


def _bootstrap(brokers: list[BrokerProcess]) -> str:
    return ",".join(b.kafka for b in brokers)


def _ck_produce(bootstrap: str, topic: str, records: list[tuple[bytes, bytes]], **conf) -> None:
    errors: list = []
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 5,
                  **conf})
    for key, value in records:
        p.produce(topic, key=key, value=value, on_delivery=lambda e, m: errors.append(e) if e else None)
    assert p.flush(60) == 0
    assert errors == []


def _assign_all(bootstrap: str, topic: str, expected: int) -> list[tuple[int, int, bytes, bytes]]:
    c = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False,
                      consumer_timeout_ms=3000)
    c.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
    got = []
    deadline = time.monotonic() + 60
    while len(got) < expected and time.monotonic() < deadline:
        got += [(m.partition, m.offset, m.key, m.value) for m in c]
    c.close()
    return sorted(got)


def test_every_compression_of_both_clients_is_stored_once_and_reads_back_everywhere(brokers, unique_topic):
    bootstrap = _bootstrap(brokers)
    _create(bootstrap, unique_topic)
    sent = []
    for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
        batch = [(b"%s-%03d" % (codec.encode(), i), b"value %d " % i * 10) for i in range(60)]
        _ck_produce(bootstrap, unique_topic, batch, **{"compression.type": codec})
        sent += batch
    for codec in ("gzip", "snappy", "lz4", "zstd", None):
        p = KafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, compression_type=codec)
        py_batch = [(b"kafka-python-%s-%03d" % (str(codec).encode(), i), b"v%d" % i * 20) for i in range(40)]
        for key, value in py_batch:
            p.send(unique_topic, key=key, value=value)
        p.flush(60)
        p.close()
        sent += py_batch
    got = _assign_all(bootstrap, unique_topic, len(sent))
    assert sorted((k, v) for _, _, k, v in got) == sorted(sent)
    for partition in range(PARTITIONS):  # Kafka's offsets: 0, 1, 2 ... in every partition
        offsets = [o for p, o, _, _ in got if p == partition]
        assert offsets == list(range(len(offsets)))
    # The same records through HTTP, at llog's offsets (Kafka's + 1), key for key.
    http = {}
    for partition in range(PARTITIONS):
        offset = 1
        while True:
            reply = brokers[1].client.consume([{"topic": unique_topic, "partition": partition,
                                                "fetch_offset": offset}], max_wait_ms=0)
            (res,) = reply.json["results"]
            for r in res["records"]:
                http[(partition, r["offset"] - 1)] = (value_bytes(r["key"]), value_bytes(r["value"]))
            offset = res["next_fetch_offset"]
            if offset > res["high_watermark"]:
                break
    assert http == {(p, o): (k, v) for p, o, k, v in got}


def test_records_produced_over_http_are_read_by_kafka_clients(brokers, unique_topic):
    bootstrap = _bootstrap(brokers)
    _create(bootstrap, unique_topic)
    reply = brokers[0].client.produce([{"topic": unique_topic, "partition": 2, "records": [
        {"key": "k1", "value": "first", "headers": [{"key": "h", "value": "1"}]}, {"value": "second"}]}])
    assert reply.status == 200, reply.body
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{unique_topic}-assign", "enable.auto.commit": False})
    c.assign([CkPartition(unique_topic, 2, 0)])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < 2 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got.append((m.offset(), m.key(), m.value(), m.headers()))
    c.close()
    assert got == [(0, b"k1", b"first", [("h", b"1")]), (1, None, b"second", None)]


def _group_member(bootstrap: str, group: str, topic: str) -> Consumer:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
                  "partition.assignment.strategy": "range"})
    c.subscribe([topic])
    return c


def _poll_until(members: list[Consumer], seen: dict, want: int, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while len(seen) < want and time.monotonic() < deadline:
        for c in members:
            got = [m for m in c.consume(num_messages=500, timeout=0.2) if m.error() is None]
            for m in got:
                seen[(m.partition(), m.offset())] = m.value()
            if got:  # what this member consumed, committed before it polls again
                try:
                    c.commit(asynchronous=False)
                except KafkaException:  # a rebalance began: the next poll rejoins, as an application does
                    continue


class _PyMember(threading.Thread):
    """A kafka-python group member on its own thread, as an application runs one."""

    def __init__(self, bootstrap: str, group: str, topic: str, seen: dict, lock: threading.Lock) -> None:
        super().__init__(daemon=True)
        self.consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                                      auto_offset_reset="earliest", enable_auto_commit=False,
                                      session_timeout_ms=6000, heartbeat_interval_ms=500, consumer_timeout_ms=200)
        self.seen, self.lock, self.halt = seen, lock, threading.Event()
        self.owned = 0

    def run(self) -> None:
        while not self.halt.is_set():
            for m in self.consumer:
                with self.lock:
                    self.seen[(m.partition, m.offset)] = m.value
            try:
                self.consumer.commit()
            except (CommitFailedError, RebalanceInProgressError):  # a rebalance began (broker or client
                continue  # saw it first): the next poll rejoins, as an application does
            self.owned = len(self.consumer.assignment())
        self.consumer.close()


def test_kafka_python_consumers_share_a_group_rebalance_and_resume(brokers, unique_topic):
    bootstrap = _bootstrap(brokers)
    _create(bootstrap, unique_topic)
    group = f"{unique_topic}-py"
    _ck_produce(bootstrap, unique_topic, [(b"%d" % i, b"py-%d" % i) for i in range(120)])
    seen: dict = {}
    lock = threading.Lock()
    members = [_PyMember(bootstrap, group, unique_topic, seen, lock) for _ in range(3)]
    for m in members:
        m.start()
    wait_until(lambda: len(seen) == 120, 60, lambda: f"{len(seen)} of 120 records read", interval_s=0.1)
    wait_until(lambda: sum(m.owned for m in members) == PARTITIONS and max(m.owned for m in members) < 4, 60,
               lambda: f"owned {[m.owned for m in members]}", interval_s=0.1)
    leaving = members.pop()
    leaving.halt.set()
    leaving.join(30)
    _ck_produce(bootstrap, unique_topic, [(b"%d" % i, b"py2-%d" % i) for i in range(120)])
    wait_until(lambda: len(seen) == 240, 60, lambda: f"{len(seen)} of 240 records read", interval_s=0.1)

    def committed() -> int:  # Kafka's committed offsets (llog's - 1), summed over the partitions
        reply = brokers[1].client.request("GET", f"/groups/{group}/offsets")
        return sum(o["offset"] - 1 for o in reply.json["offsets"]) if reply.status == 200 else 0

    # commits refused mid-rebalance are made again
    wait_until(lambda: committed() == 240, 60, lambda: f"{committed()} of 240 offsets committed", interval_s=0.1)
    for m in members:
        m.halt.set()
    for m in members:
        m.join(30)
    late = KafkaConsumer(unique_topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                         enable_auto_commit=False, consumer_timeout_ms=3000)
    rest = [m.value for m in late]  # everything was committed: nothing is read again
    late.close()
    assert rest == []


def test_a_group_of_three_rebalances_when_one_leaves_and_resumes_from_its_commits(brokers, unique_topic):
    bootstrap = _bootstrap(brokers)
    _create(bootstrap, unique_topic)
    group = f"{unique_topic}-group"
    _ck_produce(bootstrap, unique_topic, [(b"%d" % i, b"first-%d" % i) for i in range(200)])
    members = [_group_member(bootstrap, group, unique_topic) for _ in range(3)]
    seen: dict = {}
    _poll_until(members, seen, 200)
    assert len(seen) == 200

    def shared_out() -> bool:
        owned = [len(c.assignment()) for c in members]
        return sum(owned) == PARTITIONS and max(owned) < PARTITIONS

    deadline = time.monotonic() + 30
    while not shared_out() and time.monotonic() < deadline:  # the first member may have had it all a moment
        for c in members:
            c.poll(0.1)
    assert shared_out(), [len(c.assignment()) for c in members]
    members.pop().close()  # one leaves: the other two take its partitions
    _ck_produce(bootstrap, unique_topic, [(b"%d" % i, b"second-%d" % i) for i in range(200)])
    _poll_until(members, seen, 400)
    assert len(seen) == 400
    assert sum(len(c.assignment()) for c in members) == PARTITIONS

    def committed() -> int:  # Kafka's committed offsets (llog's - 1), summed over the partitions
        reply = brokers[0].client.request("GET", f"/groups/{group}/offsets")
        return sum(o["offset"] - 1 for o in reply.json["offsets"]) if reply.status == 200 else 0

    deadline = time.monotonic() + 30
    while committed() < 400 and time.monotonic() < deadline:  # a commit refused mid-rebalance is made again
        for c in members:
            c.poll(0.1)
            try:
                c.commit(asynchronous=False)
            except KafkaException:
                pass
    assert committed() == 400
    for c in members:
        c.close()
    # A new member resumes after the commits: it reads only what is written next.
    _ck_produce(bootstrap, unique_topic, [(b"x", b"third")])
    late = _group_member(bootstrap, group, unique_topic)
    fresh: dict = {}
    _poll_until([late], fresh, 1)
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:  # and nothing else turns up
        m = late.poll(0.2)
        if m is not None and m.error() is None:
            fresh[(m.partition(), m.offset())] = m.value()
    late.close()
    assert list(fresh.values()) == [b"third"]
    assert committed() == 401


def test_a_static_member_restarts_into_its_partitions_without_a_rebalance(brokers, unique_topic):
    """librdkafka with ``group.instance.id`` (KIP-345): closing a static member sends no
    LeaveGroup, and a new consumer with its instance id gets its partitions back while the
    other member keeps its own, never revoked. The follower ``b`` restarts, then the leader
    ``a`` (it joined first): librdkafka's JoinGroup is older than v9, so it is answered the
    old leader id and syncs as a follower (KIP-814). A third member then rebalances the group
    under ``a``'s new member id, which must assign."""
    bootstrap = _bootstrap(brokers)
    # Both listeners must know each other before the group forms, or its coordinator moves
    # (and a's leadership with it) when their node lists converge.
    wait_until(lambda: all(len(AdminClient({"bootstrap.servers": b.kafka}).list_topics(timeout=10).brokers)
                           == len(brokers) for b in brokers), 60, "both listeners to list both brokers", interval_s=0.1)
    _create(bootstrap, unique_topic)
    group = f"{unique_topic}-static"
    events: list[tuple[str, str, int]] = []

    def member(instance: str) -> Consumer:
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.instance.id": instance,
                      "auto.offset.reset": "earliest", "enable.auto.commit": False, "session.timeout.ms": 30000,
                      "heartbeat.interval.ms": 500, "partition.assignment.strategy": "range"})
        c.subscribe([unique_topic], on_assign=lambda _, ps: events.append((instance, "assign", len(ps))),
                    on_revoke=lambda _, ps: events.append((instance, "revoke", len(ps))))
        return c

    def owned(members: list[Consumer]) -> list[int]:
        for c in members:
            c.poll(0.1)
        return [len(c.assignment()) for c in members]

    def logs() -> str:
        return "\n".join(b.log_tail(30) for b in brokers) + f"\nevents: {events}"

    a = member("a")
    wait_until(lambda: owned([a]) == [PARTITIONS], 60, logs, interval_s=0.1)
    b = member("b")
    wait_until(lambda: owned([a, b]) == [2, 2], 60, lambda: f"{owned([a, b])}\n{logs()}", interval_s=0.1)
    a_owned, b_owned = set(a.assignment()), set(b.assignment())
    b.close()
    seen = len(events)
    b = member("b")  # the restart: the same instance id, no member id
    wait_until(lambda: owned([a, b]) == [2, 2], 60, lambda: f"{owned([a, b])}\n{logs()}", interval_s=0.1)
    assert set(a.assignment()) == a_owned and set(b.assignment()) == b_owned
    assert [e for e in events[seen:] if e[0] == "a"] == [], logs()  # a saw no rebalance
    a.close()
    seen = len(events)
    a = member("a")  # the leader's restart
    wait_until(lambda: owned([a, b]) == [2, 2], 60, lambda: f"{owned([a, b])}\n{logs()}", interval_s=0.1)
    assert set(a.assignment()) == a_owned and set(b.assignment()) == b_owned
    assert [e for e in events[seen:] if e[0] == "b"] == [], logs()  # b saw no rebalance
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept: its futures end with it
    described = admin.describe_consumer_groups([group])[group].result(30)
    assert sorted(m.group_instance_id for m in described.members) == ["a", "b"]
    c = member("c")
    wait_until(lambda: sorted(owned([a, b, c])) == [1, 1, 2], 60, lambda: f"{owned([a, b, c])}\n{logs()}", interval_s=0.1)
    assert len({p for m in (a, b, c) for p in m.assignment()}) == PARTITIONS
    for m in (a, b, c):
        m.close()


def test_the_admin_client_alters_configs_adds_partitions_and_deletes_topics(brokers, unique_topic):
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions

    bootstrap = _bootstrap(brokers)
    _create(bootstrap, unique_topic, 2)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource("topic", unique_topic, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
        for k, v in (("retention.ms", "7200000"), ("cleanup.policy", "compact"), ("min.insync.replicas", "2"))])
    admin.incremental_alter_configs([resource])[resource].result(30)
    described = admin.describe_configs([ConfigResource("topic", unique_topic)])
    configs = next(iter(described.values())).result(30)
    assert {k: configs[k].value for k in ("retention.ms", "cleanup.policy", "min.insync.replicas")} == {
        "retention.ms": "7200000", "cleanup.policy": "compact", "min.insync.replicas": "2"}
    admin.create_partitions([NewPartitions(unique_topic, 4)])[unique_topic].result(30)
    assert len(admin.list_topics(unique_topic, timeout=30).topics[unique_topic].partitions) == 4
    with pytest.raises(Exception, match="TOPIC_ALREADY_EXISTS|already exists"):
        _create(bootstrap, unique_topic)
    admin.delete_topics([unique_topic])[unique_topic].result(30)
    gone = brokers[0].client.request("GET", f"/topics/{unique_topic}")
    assert (gone.status, gone.json["error_type"]) == (404, "UnknownTopic")


def test_librdkafka_deletes_a_group_only_once_its_members_are_gone(brokers, unique_topic):
    bootstrap = _bootstrap(brokers)
    _create(bootstrap, unique_topic)
    group = f"{unique_topic}-deleted"
    _ck_produce(bootstrap, unique_topic, [(b"k", b"v%d" % i) for i in range(20)])
    member = _group_member(bootstrap, group, unique_topic)
    seen: dict = {}
    _poll_until([member], seen, 20)
    assert len(seen) == 20
    admin = AdminClient({"bootstrap.servers": bootstrap})
    with pytest.raises(KafkaException, match="NON_EMPTY_GROUP"):
        admin.delete_consumer_groups([group])[group].result(30)
    assert brokers[1].client.request("GET", f"/groups/{group}/offsets").status == 200
    member.close()  # leaves the group
    admin.delete_consumer_groups([group])[group].result(30)
    assert brokers[1].client.request("GET", f"/groups/{group}/offsets").status == 404
    assert group not in {g.group_id for g in admin.list_consumer_groups().result(30).valid}
    with pytest.raises(KafkaException, match="GROUP_ID_NOT_FOUND"):
        admin.delete_consumer_groups([group])[group].result(30)
