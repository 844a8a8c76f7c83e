"""Flushing when every producing connection is stalled (``server/_kafka/stalls.py``): the
counting rule, and librdkafka, whose requests carry one partition each, served while the
batch delay is two minutes."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Producer

from server._broker.kafka_front import KafkaFront
from server._catalogue.topic_config import TopicDefaults
from server._config import BatchConfig
from server._kafka.stalls import ProduceStalls
from tests.unit.test_broker import Cluster


def test_a_flush_is_asked_for_only_when_every_producing_connection_has_five_waiting():
    flushes = []
    stalls = ProduceStalls(lambda: flushes.append(1))
    for _ in range(4):
        stalls.begun("a")
    stalls.begun("b")
    assert not flushes
    stalls.begun("a")  # a is stalled, b is not: b's bytes may still come
    assert not flushes
    for _ in range(4):
        stalls.begun("b")
    assert len(flushes) == 1 and stalls.flushes == 1
    stalls.begun("b")  # past five: already asked
    assert len(flushes) == 1
    for _ in range(6):
        stalls.answered("b")
    stalls.answered("a")  # a has 4 waiting, b none
    stalls.begun("a")
    assert len(flushes) == 2  # a alone, stalled again
    for _ in range(9):
        stalls.answered("a")  # more answers than requests leave no trace
    stalls.begun("a")
    assert len(flushes) == 2


@pytest.mark.parametrize("slow_count", [False, True])
def test_librdkafka_one_partition_per_request_is_answered_without_waiting_out_the_batch_delay(
        slow_count, monkeypatch):
    if slow_count:
        # A thread descheduled while it lowers the count: the answer must not be out before
        # it, or the client's next five requests find six waiting and are never flushed.
        answered = ProduceStalls.answered

        def late(self, conn):
            time.sleep(0.05)
            answered(self, conn)

        monkeypatch.setattr(ProduceStalls, "answered", late)
    with Cluster() as cluster:
        broker = cluster.broker(topics=TopicDefaults(partitions=10), kafka_port=0,
                                batch=BatchConfig(max_delay_ms=120_000))
        front = KafkaFront(broker, cluster.meta)
        delivered = []
        producer = Producer({"bootstrap.servers": f"127.0.0.1:{front.port}", "enable.idempotence": True,
                             "acks": "all", "linger.ms": 0})
        try:
            # Ten partitions, one record each: two rounds of five requests, each round
            # stalls the connection (librdkafka keeps five in flight) and is flushed then.
            for p in range(10):
                producer.produce("stalls", value=f"v{p}".encode(), partition=p,
                                 on_delivery=lambda err, msg: delivered.append((err, msg.partition())))
            assert producer.flush(30) == 0  # the batch delay alone would hold them 120 s
            assert sorted(p for _, p in delivered) == list(range(10))
            assert all(err is None for err, _ in delivered)
            assert front.listener._stalls.flushes >= 2
        finally:
            front.close()
