"""Kafka Streams (4.1, from Maven Central) against llog's Kafka listener on real Oxia + MinIO.

A word count (``java/StreamsWordCount.java``, run with Java's source launcher)
reads sentences, groups by word through a repartition topic and counts into
a store backed by a changelog topic: Streams creates both internal topics
with its own configs (``segment.bytes``, ``cleanup.policy=compact``, ...),
joins a consumer group with its own assignor, produces idempotently, commits,
and purges the repartition topic with DeleteRecords after each commit.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic

from devstack import java, kafka_tools_classpath
from tests._waiting import wait_until

from .conftest import BrokerProcess

pytestmark = [pytest.mark.integration]

APP = Path(__file__).parent / "java" / "StreamsWordCount.java"
SENTENCES = ["the quick brown fox", "jumps over the lazy dog", "the dog sleeps", "a fox and a dog"] * 5


@pytest.fixture
def broker(broker_factory) -> BrokerProcess:
    return broker_factory(env={"LLOG_KAFKA_PORT": "0", "LLOG_KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
                               "LLOG_BROKER_MAX_WAIT_MS": "500"})


def test_a_kafka_streams_word_count_runs_and_purges_its_repartition_topic(broker, unique_topic, tmp_path):
    app, source, sink = f"{unique_topic}-app", f"{unique_topic}-lines", f"{unique_topic}-counts"
    admin = KafkaAdminClient(bootstrap_servers=broker.kafka, request_timeout_ms=10_000)
    admin.create_topics([NewTopic(source, 2, 1), NewTopic(sink, 2, 1)])
    producer = KafkaProducer(bootstrap_servers=broker.kafka)
    for i, line in enumerate(SENTENCES):
        producer.send(source, key=b"%d" % i, value=line.encode())
    producer.flush()
    producer.close()
    expected = Counter(w for line in SENTENCES for w in line.split())

    log = open(tmp_path / "streams.log", "w")
    proc = subprocess.Popen([java(), "-cp", kafka_tools_classpath(), str(APP), broker.kafka, app, source, sink,
                             str(tmp_path / "state")], stdout=log, stderr=subprocess.STDOUT)
    try:
        counts: dict[str, int] = {}
        consumer = KafkaConsumer(sink, bootstrap_servers=broker.kafka, auto_offset_reset="earliest",
                                 group_id=f"{unique_topic}-reader")
        deadline = time.monotonic() + 90
        while counts != expected and time.monotonic() < deadline and proc.poll() is None:
            for records in consumer.poll(timeout_ms=500).values():
                counts.update({r.key.decode(): int(r.value) for r in records})  # the latest count wins
        consumer.close()
        assert counts == expected, (counts, (tmp_path / "streams.log").read_text()[-3000:])

        # The internal topics, with Streams' configs: the changelog compacted (nothing let go), and the
        # repartition topic purged by DeleteRecords once its records were committed.
        topics = {t["name"]: t for t in broker.client.request("GET", "/topics").json["topics"]}
        changelog, repartition = f"{app}-counts-changelog", f"{app}-counts-repartition"
        assert topics[changelog]["config"]["cleanup.policy"] == "compact", topics[changelog]
        assert topics[repartition]["config"]["segment.bytes"] == "52428800", topics[repartition]
        parts = [TopicPartition(repartition, p) for p in range(topics[repartition]["partitions"])]
        reader = KafkaConsumer(bootstrap_servers=broker.kafka)
        assert wait_until(lambda: sum(reader.beginning_offsets(parts).values()) > 0, 30,
                          "Kafka Streams to purge its repartition topic", interval_s=0.25)
        reader.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(30)
        finally:
            if proc.poll() is None:
                proc.kill()
            log.close()
        admin.close()
    assert code in (0, 143), (tmp_path / "streams.log").read_text()[-3000:]  # closed by its shutdown hook
    assert "-> RUNNING" in (tmp_path / "streams.log").read_text()
