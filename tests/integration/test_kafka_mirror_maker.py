"""Moving from Kafka to llog with MirrorMaker 2 (4.1, from Maven Central): a single-node
Kafka holds a topic and a consumer group's offsets; MirrorMaker 2 in dedicated mode
(``org.apache.kafka.connect.mirror.MirrorMaker``) copies the topic into llog under its own
name (``IdentityReplicationPolicy``) and translates the group's offsets, keeping its own
state in compacted topics on llog. Every record arrives in its partition, in order, and
the group resumes on llog exactly where it stopped on Kafka.
"""

from __future__ import annotations

import subprocess

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as CkPartition
from confluent_kafka.admin import AdminClient, NewTopic

from devstack import java, kafka_connect_classpath
from loadtest._kafka_server import KafkaServer
from tests._waiting import wait_until

from .conftest import BrokerProcess

pytestmark = [pytest.mark.integration]

PARTITIONS = 3
PER_PARTITION = 100
READ = PER_PARTITION
"""The group's committed offset on Kafka in each partition: everything read, as at a cut-over
(producers moved, the consumers drained Kafka). MirrorMaker translates an offset exactly once a
sync of the record before it was copied; an offset further back it leaves untranslated or
translates to an earlier one (never a later: nothing is skipped)."""


@pytest.fixture
def broker(broker_factory) -> BrokerProcess:
    return broker_factory(env={"LLOG_KAFKA_PORT": "0", "LLOG_KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS": "0"})


def _fill_source(bootstrap: str, topic: str) -> dict[int, list[bytes]]:
    """The topic on Kafka, ``PER_PARTITION`` records in each partition."""
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept: the future resolves on its thread
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    sent = {p: [f"p{p}-{i}".encode() for i in range(PER_PARTITION)] for p in range(PARTITIONS)}
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for p, values in sent.items():
        for v in values:
            producer.produce(topic, v, key=v, partition=p)
    assert producer.flush(30) == 0
    return sent


_COORDINATOR_MOVING = (KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                       KafkaError.COORDINATOR_NOT_AVAILABLE)


def _commit_on_kafka(bootstrap: str, topic: str, group: str) -> None:
    """The application's group on Kafka, ``READ`` records into each partition, committed while
    MirrorMaker runs (Kafka answers NOT_COORDINATOR while it loads its offsets topic: retried)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})

    def committed() -> bool:
        try:
            consumer.commit(offsets=[CkPartition(topic, p, READ) for p in range(PARTITIONS)], asynchronous=False)
            return True
        except KafkaException as exc:
            if exc.args[0].code() not in _COORDINATOR_MOVING:
                raise
            return False

    wait_until(committed, 60, "Kafka to take the group's commit", interval_s=0.5)
    consumer.close()


def test_mirror_maker_moves_a_kafka_topic_and_its_group_offsets_into_llog(broker, unique_topic, tmp_path):
    kafka = KafkaServer(tmp_path / "kafka")
    group = f"{unique_topic}-app"
    mm2 = None
    try:
        sent = _fill_source(kafka.kafka, unique_topic)
        (tmp_path / "mm2.properties").write_text("\n".join([
            "clusters=kafka,llog", f"kafka.bootstrap.servers={kafka.kafka}", f"llog.bootstrap.servers={broker.kafka}",
            "kafka->llog.enabled=true", f"kafka->llog.topics={unique_topic}", f"kafka->llog.groups={group}",
            "replication.policy.class=org.apache.kafka.connect.mirror.IdentityReplicationPolicy",
            "replication.factor=1", "checkpoints.topic.replication.factor=1", "heartbeats.topic.replication.factor=1",
            "offset-syncs.topic.replication.factor=1", "offset.storage.replication.factor=1",
            "status.storage.replication.factor=1", "config.storage.replication.factor=1",
            "sync.group.offsets.enabled=true", "sync.group.offsets.interval.seconds=1",
            "emit.checkpoints.interval.seconds=1", "refresh.topics.interval.seconds=2",
            "refresh.groups.interval.seconds=2", "offset.lag.max=0",
            "llog.offset.flush.interval.ms=1000",  # the worker's: its commits send the offset syncs held back
            "",
        ]))
        log = open(tmp_path / "mm2.log", "w")
        mm2 = subprocess.Popen([java(), "-cp", kafka_connect_classpath(), "org.apache.kafka.connect.mirror.MirrorMaker",
                                str(tmp_path / "mm2.properties"), "--clusters", "llog"],
                               stdout=log, stderr=subprocess.STDOUT)

        def mirrored() -> bool:
            assert mm2.poll() is None, (tmp_path / "mm2.log").read_text()[-3000:]
            if broker.client.request("GET", f"/topics/{unique_topic}").status != 200:
                return False
            return all(len(broker.client.consume_all(unique_topic, p)) >= PER_PARTITION for p in range(PARTITIONS))

        wait_until(mirrored, 180, lambda: f"every record in llog\n{(tmp_path / 'mm2.log').read_text()[-3000:]}",
                   interval_s=0.5)
        for p, values in sent.items():  # in its partition, in order, once
            assert [v for _, v in broker.client.consume_all(unique_topic, p)] == values
        _commit_on_kafka(kafka.kafka, unique_topic, group)

        def translated() -> dict[int, int]:
            reply = broker.client.request("GET", f"/groups/{group}/offsets")
            if reply.status != 200:
                return {}
            return {o["partition"]: o["offset"] - 1 for o in reply.json["offsets"]}  # Kafka's offsets

        def resumes_where_it_stopped() -> bool:
            seen = translated()
            assert all(offset <= READ for offset in seen.values()), seen  # never past what the group read
            return seen == {p: READ for p in range(PARTITIONS)}  # earlier ones are synced first, then moved up

        wait_until(resumes_where_it_stopped, 120,
                   lambda: f"the group's offsets in llog: {translated()}\n{(tmp_path / 'mm2.log').read_text()[-3000:]}",
                   interval_s=0.5)
    finally:
        if mm2 is not None:
            mm2.terminate()
            try:
                mm2.wait(30)
            except subprocess.TimeoutExpired:
                mm2.kill()
        kafka.stop()
