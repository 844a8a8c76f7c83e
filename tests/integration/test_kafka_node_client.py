"""KafkaJS, Node.js's most used Kafka client (its own protocol code, older encodings:
Produce v7, Fetch v11, the group APIs before their flexible versions), against llog's
Kafka listener on real Oxia + MinIO: an idempotent acks=all producer (uncompressed and
gzip), a consumer group reading from the beginning, a second member resuming from the
commits, the admin client's end offsets and committed offsets, and the same records
through ``/consume``.

The program is ``tests/integration/node/kafkajs`` (KafkaJS from the npm registry,
installed into the cache by ``devstack install``)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from devstack import kafkajs_program, node

RECORDS = 100
PARTITIONS = 4


@pytest.fixture
def listener(session_broker):
    return session_broker(LLOG_KAFKA_PORT="0", LLOG_BROKER_MAX_WAIT_MS="100",
                          LLOG_KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS="0")


def test_kafkajs_produces_consumes_in_a_group_and_resumes(listener, unique_topic):
    assert listener.client.request("POST", "/topics", {"name": unique_topic, "partitions": PARTITIONS}).status == 201
    done = subprocess.run([node(), str(kafkajs_program()), listener.kafka, unique_topic, f"{unique_topic}-g",
                           str(RECORDS)], capture_output=True, text=True, timeout=300, check=False,
                          env={**os.environ, "KAFKAJS_NO_PARTITIONER_WARNING": "1"})
    assert done.returncode == 0, f"{done.stderr[-3000:]}\n{listener.log_tail(30)}"
    report = json.loads(done.stdout)
    produced, again = report["produced"], report["produced_two"]
    assert sorted(report["group"]) == sorted(produced)  # from the beginning, every record once
    assert sorted(report["resumed"]) == sorted(again)  # from the group's commits, nothing read twice
    assert report["end_offsets"] == report["committed"] == RECORDS + len(again)
    stored = [value for p in range(PARTITIONS) for _, value in listener.client.consume_all(unique_topic, p)]
    assert sorted(v.decode() for v in stored) == sorted(produced + again)  # in the log once each
