"""Kafka's own Java client and tools (4.1, from Maven Central: ``devstack/_jars.py``) against
llog's Kafka listener on real Oxia + MinIO: TopicCommand, the console producer and consumer,
ProducerPerformance and ConsumerPerformance, ConsumerGroupCommand. Each runs as
``java -cp ... <tool class>``, as Kafka's scripts run them."""

from __future__ import annotations

import json
import signal
import subprocess
import threading

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from devstack import java, kafka_tools_classpath

from tests._waiting import wait_until

from .conftest import BrokerProcess

TOOLS = "org.apache.kafka.tools."


@pytest.fixture
def broker(broker_factory) -> BrokerProcess:
    return broker_factory(env={"LLOG_KAFKA_PORT": "0", "LLOG_KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
                               "LLOG_BROKER_MAX_WAIT_MS": "500"})


def _tool(cls: str, *args: str, stdin: str | None = None, timeout: float = 120) -> str:
    done = subprocess.run([java(), "-cp", kafka_tools_classpath(), TOOLS + cls, *args], input=stdin,
                          capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == 0, f"{cls} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def test_topic_command_creates_describes_and_lists(broker, unique_topic):
    bs = ["--bootstrap-server", broker.kafka]
    assert f"Created topic {unique_topic}" in _tool("TopicCommand", *bs, "--create", "--topic", unique_topic,
                                                    "--partitions", "3", "--config", "retention.ms=3600000",
                                                    "--config", "min.insync.replicas=2")
    described = _tool("TopicCommand", *bs, "--describe", "--topic", unique_topic)
    assert "PartitionCount: 3" in described and described.count(f"Topic: {unique_topic}\tPartition:") == 3
    assert unique_topic in _tool("TopicCommand", *bs, "--list").split()
    _tool("TopicCommand", *bs, "--alter", "--topic", unique_topic, "--partitions", "5")
    assert "PartitionCount: 5" in _tool("TopicCommand", *bs, "--describe", "--topic", unique_topic)
    topic = broker.client.request("GET", f"/topics/{unique_topic}").json["topic"]
    assert (topic["partitions"], topic["config"]["retention.ms"]) == (5, "3600000")
    assert topic["config"]["min.insync.replicas"] == "2"  # kept as given, applied by nothing


def test_console_producer_to_console_consumer_group_command_and_delete_records(broker, unique_topic, tmp_path):
    bs = ["--bootstrap-server", broker.kafka]
    _tool("TopicCommand", *bs, "--create", "--topic", unique_topic, "--partitions", "2")
    lines = [f"key-{i}:value-{i}" for i in range(30)]
    _tool("ConsoleProducer", *bs, "--topic", unique_topic, "--property", "parse.key=true",
          "--property", "key.separator=:", stdin="\n".join(lines) + "\n")
    group = f"{unique_topic}-console"
    out = _tool("consumer.ConsoleConsumer", *bs, "--topic", unique_topic, "--from-beginning", "--max-messages",
                "30", "--group", group, "--property", "print.key=true", "--property", "key.separator=:")
    assert sorted(out.split()) == sorted(lines)
    described = _tool("consumer.group.ConsumerGroupCommand", *bs, "--describe", "--group", group)
    rows = [line.split() for line in described.splitlines() if line.startswith(group)]
    # GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG ...: everything consumed and committed
    assert sorted((r[1], r[2]) for r in rows) == [(unique_topic, "0"), (unique_topic, "1")]
    assert sum(int(r[3]) for r in rows) == 30 and all(r[3] == r[4] and r[5] == "0" for r in rows)
    assert group in _tool("consumer.group.ConsumerGroupCommand", *bs, "--list").split()
    # The group has no members now: its offsets are reset, and then deleted.
    ends = {r[2]: int(r[4]) for r in rows}
    assert _reset(bs, group, unique_topic, "--to-earliest") == {"0": 0, "1": 0}
    assert _reset(bs, group, unique_topic, "--shift-by", "5") == {p: min(5, end) for p, end in ends.items()}
    assert _reset(bs, group, unique_topic, "--to-datetime", "2000-01-01T00:00:00.000") == {"0": 0, "1": 0}
    assert _reset(bs, group, unique_topic, "--to-latest") == ends
    stored = broker.client.request("GET", f"/groups/{group}/offsets").json["offsets"]
    assert {str(o["partition"]): o["offset"] - 1 for o in stored} == ends  # llog's offsets are Kafka's + 1
    out = _tool("consumer.group.ConsumerGroupCommand", *bs, "--delete-offsets", "--group", group,
                "--topic", f"{unique_topic}:0")
    assert [line.split() for line in out.splitlines() if line.startswith(unique_topic)] == [
        [unique_topic, "0", "Successful"]], out
    left = broker.client.request("GET", f"/groups/{group}/offsets").json["offsets"]
    assert [o["partition"] for o in left] == [1]
    out = _tool("consumer.group.ConsumerGroupCommand", *bs, "--delete", "--group", group)
    assert "successful" in out, out
    assert group not in _tool("consumer.group.ConsumerGroupCommand", *bs, "--list").split()
    assert broker.client.request("GET", f"/groups/{group}/offsets").status == 404

    # kafka-delete-records: partition 0's records below Kafka offset 5 go; /consume below is refused with the start.
    plan = tmp_path / "delete.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": unique_topic, "partition": 0, "offset": 5}]}))
    out = _tool("DeleteRecordsCommand", *bs, "--offset-json-file", str(plan))
    assert f"partition: {unique_topic}-0\tlow_watermark: 5" in out, out
    answer = broker.client.request("POST", "/consume", {"topic_partitions": [
        {"topic": unique_topic, "partition": 0, "fetch_offset": 5}]}).json["results"][0]
    assert (answer["error_code"], answer["log_start_offset"]) == ("OFFSET_OUT_OF_RANGE", 6), answer


def _reset(bs: list[str], group: str, topic: str, *how: str) -> dict[str, int]:
    """``kafka-consumer-groups --reset-offsets ... --execute``: the new offset of each partition."""
    out = _tool("consumer.group.ConsumerGroupCommand", *bs, "--reset-offsets", "--group", group, "--topic", topic,
                *how, "--execute")
    # GROUP TOPIC PARTITION NEW-OFFSET
    return {r[2]: int(r[3]) for r in (line.split() for line in out.splitlines()) if r[:2] == [group, topic]}


def test_producer_and_consumer_performance_move_every_record(broker, unique_topic):
    bs = ["--bootstrap-server", broker.kafka]
    _tool("TopicCommand", *bs, "--create", "--topic", unique_topic, "--partitions", "4")
    produced = _tool("ProducerPerformance", "--topic", unique_topic, "--num-records", "5000", "--record-size", "512",
                     "--throughput", "-1", "--producer-props", f"bootstrap.servers={broker.kafka}", "acks=all",
                     "linger.ms=10")
    assert "5000 records sent" in produced.splitlines()[-1]
    consumed = _tool("ConsumerPerformance", *bs, "--topic", unique_topic, "--messages", "5000", "--timeout", "60000")
    header, row = consumed.strip().splitlines()[-2:]
    fields = dict(zip([h.strip() for h in header.split(",")], [v.strip() for v in row.split(",")]))
    assert int(fields["data.consumed.in.nMsg"]) == 5000
    counts = [len(broker.client.consume_all(unique_topic, p)) for p in range(4)]
    assert sum(counts) == 5000


class _JavaConsumer:
    """A ConsoleConsumer in the background, its printed lines gathered as they come."""

    def __init__(self, bootstrap: str, topic: str, group: str, instance: str) -> None:
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            [java(), "-cp", kafka_tools_classpath(), TOOLS + "consumer.ConsoleConsumer", "--bootstrap-server",
             bootstrap, "--topic", topic, "--group", group, "--consumer-property", f"group.instance.id={instance}",
             "--consumer-property", "session.timeout.ms=30000", "--from-beginning"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self._reader = threading.Thread(target=lambda: self.lines.extend(iter(self.proc.stdout.readline, "")),
                                        daemon=True)
        self._reader.start()

    def stop(self) -> None:
        """SIGTERM: the tool closes its consumer, which, being static, sends no LeaveGroup."""
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(60)
        self._reader.join(10)


def test_a_java_static_leader_restarts_and_skips_the_assignor(broker, unique_topic):
    """KIP-814 with Kafka's Java client (JoinGroup v9): the static leader (a console consumer,
    first to join) restarts; it is told it leads with ``skip_assignment``, gets its partitions
    back at SyncGroup and reads them, and the other member (librdkafka) sees no rebalance."""
    bs = ["--bootstrap-server", broker.kafka]
    _tool("TopicCommand", *bs, "--create", "--topic", unique_topic, "--partitions", "4")
    group = f"{unique_topic}-static"
    admin = AdminClient({"bootstrap.servers": broker.kafka})

    def members() -> list[str]:
        described = admin.describe_consumer_groups([group])[group].result(30)
        return sorted(m.group_instance_id for m in described.members) if described.state.name == "STABLE" else []

    a = _JavaConsumer(broker.kafka, unique_topic, group, "a")
    try:
        wait_until(lambda: members() == ["a"], 60, lambda: "".join(a.lines), interval_s=0.2)
        events: list[str] = []
        b = Consumer({"bootstrap.servers": broker.kafka, "group.id": group, "group.instance.id": "b",
                      "auto.offset.reset": "earliest", "session.timeout.ms": 30000,
                      "partition.assignment.strategy": "range"})
        b.subscribe([unique_topic], on_assign=lambda _, ps: events.append(f"assign {len(ps)}"),
                    on_revoke=lambda _, ps: events.append(f"revoke {len(ps)}"))
        wait_until(lambda: b.poll(0.1) is None and len(b.assignment()) == 2, 60, lambda: str(events), interval_s=0.2)
        b_owned = {p.partition for p in b.assignment()}
        a.stop()
        seen = len(events)
        a = _JavaConsumer(broker.kafka, unique_topic, group, "a")  # the leader's restart
        producer = Producer({"bootstrap.servers": broker.kafka})
        for i in range(40):
            producer.produce(unique_topic, f"v{i}".encode(), partition=i % 4)
        assert producer.flush(30) == 0
        theirs = {f"v{i}" for i in range(40) if i % 4 not in b_owned}
        got_b: set[str] = set()

        def everything_read() -> bool:
            msg = b.poll(0.1)
            if msg is not None and msg.error() is None:
                got_b.add(msg.value().decode())
            return theirs <= {line.strip() for line in a.lines} and len(got_b) == 20

        wait_until(everything_read, 60, lambda: f"a: {a.lines[-20:]}\nb: {sorted(got_b)}\n{broker.log_tail(30)}",
                   interval_s=0.2)
        assert events[seen:] == [], events  # b saw no rebalance
        assert members() == ["a", "b"]
        assert "static member a rejoined as" in broker.log_path.read_text()
        assert "as its leader, skipping the assignor" in broker.log_path.read_text(), broker.log_tail(30)
        b.close()
    finally:
        a.stop()


def test_the_java_consumer_reads_through_incremental_fetch_sessions(broker, unique_topic):
    """Kafka's Java consumer opens a fetch session (KIP-227) and, once idle, fetches naming no
    partition; records written then reach it through those incremental fetches."""
    bs = ["--bootstrap-server", broker.kafka]
    _tool("TopicCommand", *bs, "--create", "--topic", unique_topic, "--partitions", "4")
    producer = Producer({"bootstrap.servers": broker.kafka})
    consumer = _JavaConsumer(broker.kafka, unique_topic, f"{unique_topic}-sessions", "s")
    try:
        for round_ in range(2):
            before = broker.client.counter("kafka_fetches_total", session="incremental")
            # The consumer is idle between rounds: its next fetches are incremental ones.
            wait_until(lambda: broker.client.counter("kafka_fetches_total", session="incremental") >= before + 2,
                       60, lambda: f"{broker.client.metrics()['counters'].get('kafka_fetches_total')}\n"
                                   f"{''.join(consumer.lines[-20:])}", interval_s=0.2)
            for i in range(20):
                producer.produce(unique_topic, f"r{round_}-{i}".encode(), partition=i % 4)
            assert producer.flush(30) == 0
            want = {f"r{r}-{i}" for r in range(round_ + 1) for i in range(20)}
            wait_until(lambda: want <= {line.strip() for line in consumer.lines}, 60,
                       lambda: "".join(consumer.lines[-20:]), interval_s=0.2)
    finally:
        consumer.stop()
    assert broker.client.counter("kafka_fetches_total", session="opened") >= 1
    assert broker.client.counter("kafka_fetches_total", session="sessionless") == 0  # librdkafka's only
    assert broker.client.counter("kafka_fetches_total", session="not_found") == 0


def test_log_dirs_describe_producers_and_acl_commands(broker, unique_topic):
    """LogDirsCommand: each partition once, sized as the broker stores it (its records and their
    batch framing); TransactionsCommand describe-producers: the console producer (idempotent
    by default) with its last sequence; AclCommand --list: SecurityDisabledException, at once."""
    bs = ["--bootstrap-server", broker.kafka]
    _tool("TopicCommand", *bs, "--create", "--topic", unique_topic, "--partitions", "2")
    lines = [f"key-{i}:value-{i:04d}-" + "x" * 200 for i in range(50)]  # murmur2 of the keys: both partitions
    _tool("ConsoleProducer", *bs, "--topic", unique_topic, "--property", "parse.key=true",
          "--property", "key.separator=:", stdin="\n".join(lines) + "\n")
    out = _tool("LogDirsCommand", *bs, "--describe", "--topic-list", unique_topic)
    described = json.loads(next(line for line in out.splitlines() if line.startswith("{")))
    (only,) = described["brokers"]  # one broker: it leads both partitions
    (log_dir,) = only["logDirs"]
    assert log_dir["logDir"].startswith("s3://") and log_dir["error"] is None
    sizes = {p["partition"]: p["size"] for p in log_dir["partitions"]}
    assert set(sizes) == {f"{unique_topic}-0", f"{unique_topic}-1"}
    payload = sum(len(line) - 1 for line in lines)  # each key and value
    assert payload < sum(sizes.values()) < payload + 100 * len(lines), sizes  # records plus their framing
    out = _tool("TransactionsCommand", *bs, "describe-producers", "--topic", unique_topic, "--partition", "0")
    header, *rows = [line.split() for line in out.strip().splitlines()]
    assert header[:4] == ["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence"], out
    (row,) = rows
    assert int(row[0]) >= 0 and int(row[3]) >= 0 and row[2] == "-1", out
    done = subprocess.run([java(), "-cp", kafka_tools_classpath(), TOOLS + "AclCommand", *bs, "--list"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert "SecurityDisabledException: No Authorizer is configured" in done.stdout, done.stdout + done.stderr


def test_leader_election_reassignment_and_quota_commands(broker, unique_topic):
    """LeaderElectionCommand: the partition has its leader already; ReassignPartitionsCommand
    --list: none in progress; ConfigCommand on client quotas: none set, and a quota refused
    with the reason (llog enforces none). Each answers at once, none hangs on a closed
    connection."""
    bs = ["--bootstrap-server", broker.kafka]
    _tool("TopicCommand", *bs, "--create", "--topic", unique_topic, "--partitions", "2")
    out = _tool("LeaderElectionCommand", *bs, "--election-type", "PREFERRED", "--topic", unique_topic,
                "--partition", "1")
    assert f"Valid replica already elected for partitions {unique_topic}-1" in out, out
    assert "No partition reassignments found" in _tool("reassign.ReassignPartitionsCommand", *bs, "--list")

    def config(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([java(), "-cp", kafka_tools_classpath(), "kafka.admin.ConfigCommand", *bs, *args],
                              capture_output=True, text=True, timeout=120, check=False)

    described = config("--describe", "--entity-type", "clients")
    assert described.returncode == 0 and "Quota" not in described.stdout, described.stdout + described.stderr
    altered = config("--alter", "--entity-type", "clients", "--entity-name", "app",
                     "--add-config", "producer_byte_rate=1024")
    assert altered.returncode != 0 and "llog enforces no client quotas" in altered.stdout + altered.stderr, \
        altered.stdout + altered.stderr
