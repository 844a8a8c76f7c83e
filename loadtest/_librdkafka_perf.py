"""bench_kafka's second client: librdkafka (confluent-kafka) in this process.

Kafka's Java tools take 1.2-1.3 of this machine's 2 cores for their own work
(one callback per record), so against them neither llog nor Kafka shows its
ceiling. librdkafka builds batches and parses fetches in C threads; the
Python loop around it only hands over or counts messages. The settings are
the Java run's, in librdkafka's names (``batch.size``, ``linger.ms``,
``acks``, idempotence; ``message.max.bytes`` for ``max.request.size``,
``queue.buffering.max.kbytes`` for ``buffer.memory``).

produce: every record is given to the producer as fast as it takes them,
then flushed; MB/s over that whole time; latency per record from its
``produce`` call to its acknowledgement, as librdkafka measures it
(``Message.latency``). One callback serves every record: a closure per
record, up to a million of them queued, had Python's garbage collector
walk them all, a third of this process's CPU while producing to llog
(whose answers come later than Kafka's, so more are queued).

consume: the topic from the start with ``assign`` (no group), in batches of
10,000, until every record is in.
"""

from __future__ import annotations

import time
from statistics import quantiles
from typing import Any

__all__ = ["produce", "consume"]

PRODUCER = {"acks": "all", "enable.idempotence": True, "batch.size": 1 << 20, "linger.ms": 50,
            "message.max.bytes": 16 << 20, "queue.buffering.max.kbytes": 256 << 10,
            "queue.buffering.max.messages": 1_000_000, "compression.type": "none"}
CONSUMER = {"group.id": "bench-librdkafka", "enable.auto.commit": False, "fetch.max.bytes": 50 << 20,
            "max.partition.fetch.bytes": 1 << 20, "queued.max.messages.kbytes": 256 << 10}


def produce(bootstrap: str, topic: str, records: int, record_bytes: int,
            settings: dict[str, str] | None = None) -> dict[str, float]:
    """``settings``: librdkafka properties added to (or replacing) :data:`PRODUCER`."""
    from confluent_kafka import KafkaException, Producer

    producer = Producer({"bootstrap.servers": bootstrap, **PRODUCER, **(settings or {})})
    value = b"x" * record_bytes
    latencies: list[float] = []
    errors: list[Any] = []
    now = time.perf_counter

    def report(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)
        elif (latency := msg.latency()) is not None:
            latencies.append(latency)

    t0 = now()
    for _ in range(records):
        while True:
            try:
                producer.produce(topic, value, on_delivery=report)
                break
            except BufferError:  # the local queue is full: serve delivery reports while it drains
                producer.poll(0.05)
        producer.poll(0)
    if producer.flush(300) != 0:
        raise KafkaException(f"{topic}: records still undelivered after 300 s")
    seconds = now() - t0
    if errors:
        raise SystemExit(f"librdkafka: {len(errors)} records failed, first: {errors[0]}")
    cuts = quantiles(latencies, n=100)
    return {"mb_s": records * record_bytes / 1e6 / seconds, "p50_ms": cuts[49] * 1000, "p99_ms": cuts[98] * 1000}


def consume(bootstrap: str, topic: str, partitions: int, records: int,
            settings: dict[str, str] | None = None) -> dict[str, float]:
    """``settings``: librdkafka properties added to :data:`CONSUMER` (the listener's security)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, **CONSUMER, **(settings or {})})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    got, nbytes = 0, 0
    t0 = time.perf_counter()
    deadline = time.monotonic() + 300
    try:
        while got < records:
            if time.monotonic() > deadline:
                raise SystemExit(f"librdkafka: {got:,} of {records:,} records read in 300 s")
            for msg in consumer.consume(10_000, 1.0):
                if msg.error() is not None:
                    raise SystemExit(f"librdkafka: {msg.error()}")
                got += 1
                nbytes += len(msg.value())
        seconds = time.perf_counter() - t0
    finally:
        consumer.close()
    return {"mb_s": nbytes / 1e6 / seconds, "records": float(got)}
