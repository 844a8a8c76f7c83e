"""Go's most used Kafka clients, franz-go (kgo, and kadm, its admin client), Sarama (at its
default protocol version, 2.1: older encodings) and segmentio/kafka-go (its own protocol
code; no idempotent producer), against llog's Kafka listener on real Oxia + MinIO: an
acks=all producer (idempotent where the client has one) with every compression, a reader of
every partition from the start, a consumer group that commits and a second member that
resumes from the commit; then kadm's lag, end offsets and log dirs, and the same records
through ``/consume``.

The program is ``tests/integration/go/kafkaclients`` (its modules from the Go module
proxy, built into the cache by ``devstack install``)."""

from __future__ import annotations

import json
import subprocess

import pytest

from devstack import kafka_go_clients

RECORDS = 100
PARTITIONS = 4


@pytest.fixture
def listener(session_broker):
    return session_broker(LLOG_KAFKA_PORT="0", LLOG_BROKER_MAX_WAIT_MS="100",
                          LLOG_KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS="0")


@pytest.mark.parametrize("client", ["franz", "sarama", "segmentio"])
def test_a_go_client_produces_reads_and_resumes_a_group(listener, unique_topic, client):
    assert listener.client.request("POST", "/topics", {"name": unique_topic, "partitions": PARTITIONS}).status == 201
    done = subprocess.run([str(kafka_go_clients()), client, listener.kafka, unique_topic, f"{unique_topic}-g",
                           str(RECORDS)], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, f"{done.stderr[-3000:]}\n{listener.log_tail(30)}"
    report = json.loads(done.stdout)
    produced, again = report["produced"], report["produced_two"]
    assert len(produced) == RECORDS and len(again) == 10
    assert sorted(report["assigned"]) == sorted(produced)  # every record once, from the start
    assert sorted(report["group"]) == sorted(produced)
    assert sorted(report["resumed"]) == sorted(again)  # from the group's commits, nothing read twice
    stored = [value for p in range(PARTITIONS) for _, value in listener.client.consume_all(unique_topic, p)]
    assert sorted(v.decode() for v in stored) == sorted(produced + again)  # in the log once each
    if client == "franz":
        admin = report["admin"]
        assert (admin["group_state"], admin["lag"], admin["end_offsets"]) == ("Empty", 0, RECORDS + 10)
        assert admin["log_dir_partitions"] == PARTITIONS  # one broker: it leads every partition
        assert admin["log_dir_bytes"] > sum(len(v) for v in produced + again)
