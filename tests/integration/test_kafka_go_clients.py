"""Go's most used Kafka clients, franz-go (kgo, and kadm, its admin client), Sarama (at its
default protocol version, 2.1: older encodings) and segmentio/kafka-go (its own protocol
code; no idempotent producer), against llog's Kafka listener on real Oxia + MinIO: an
acks=all producer (idempotent where the client has one) with every compression, a reader of
every partition from the start, a consumer group that commits and a second member that
resumes from the commit; then kadm's lag, end offsets and log dirs, and the same records
through ``/consume``. The three clients run at once, each on its own topic and group.

The program is ``tests/integration/go/kafkaclients`` (its modules from the Go module
proxy, built into the cache by ``devstack install``)."""

from __future__ import annotations

import json
import subprocess

import pytest

from devstack import kafka_go_clients

RECORDS = 100
PARTITIONS = 4
CLIENTS = ("franz", "sarama", "segmentio")


@pytest.fixture
def listener(session_broker):
    return session_broker(LLOG_KAFKA_PORT="0", LLOG_BROKER_MAX_WAIT_MS="100",
                          LLOG_KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS="0")


def test_go_clients_produce_read_and_resume_a_group(listener, unique_topic):
    program = str(kafka_go_clients())
    runs = {}
    for client in CLIENTS:
        topic = f"{unique_topic}-{client}"
        assert listener.client.request("POST", "/topics", {"name": topic, "partitions": PARTITIONS}).status == 201
        runs[client] = (topic, subprocess.Popen([program, client, listener.kafka, topic, f"{topic}-g", str(RECORDS)],
                                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    for client, (topic, proc) in runs.items():
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, f"{client}: {err[-3000:]}\n{listener.log_tail(30)}"
        _check(client, topic, json.loads(out), listener)


def _check(client: str, topic: str, report: dict, listener) -> None:
    produced, again = report["produced"], report["produced_two"]
    assert len(produced) == RECORDS and len(again) == 10, client
    assert sorted(report["assigned"]) == sorted(produced), client  # every record once, from the start
    assert sorted(report["group"]) == sorted(produced), client
    assert sorted(report["resumed"]) == sorted(again), client  # from the group's commits, nothing read twice
    stored = [value for p in range(PARTITIONS) for _, value in listener.client.consume_all(topic, p)]
    assert sorted(v.decode() for v in stored) == sorted(produced + again), client  # in the log once each
    if client == "franz":
        admin = report["admin"]
        assert (admin["group_state"], admin["lag"], admin["end_offsets"]) == ("Empty", 0, RECORDS + 10)
        assert admin["log_dir_partitions"] == PARTITIONS  # one broker: it leads every partition
        assert admin["log_dir_bytes"] > sum(len(v) for v in produced + again)
