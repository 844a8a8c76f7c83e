"""The chaos run's Kafka workload: librdkafka idempotent producers through the brokers' Kafka listeners.

With ``testing.chaos --kafka`` every broker also runs its Kafka listener (on a
port it keeps across restarts) and the producers are confluent-kafka
(librdkafka) producers with ``enable.idempotence`` and ``acks=all``, given
every listener as bootstrap servers: they find partition leaders through
Metadata, pipeline requests, retry on their own through broker kills and
pauses, and re-initialize their producer id when they must. Each message is
one batch of the history:

- delivered: acknowledged at Kafka's offset + 1 (llog's offset); delivered
  without an offset (a retry answered DUPLICATE_SEQUENCE_NUMBER: its first
  copy is older than the producer's last 5 batches): unknown, as the HTTP
  producers count a duplicate too old to have offsets;
- an error in its delivery report (a timeout, a fatal error): unknown, as
  librdkafka cannot say whether a timed-out message was written;
- still queued when the run ends and flushing gives up: unknown.

Messages are marked idempotent: the checker allows each at most one copy in
the log, so a duplicate written by a retry through another broker is a
violation.

``message.timeout.ms`` is 120 s (the Java client's ``delivery.timeout.ms``),
above any outage of a run: a message that times out makes librdkafka bump
its producer's epoch and send every message not yet acknowledged again
under new sequence numbers, those whose first attempt was stored included
(confluentinc/librdkafka#4953). Those copies are the client's, against
Kafka as against llog (with 30 s, ``--all --seed 17`` found 379, each a
later epoch's copy of a stored message); the run checks the broker.
"""

from __future__ import annotations

import threading
from typing import Any

from testing._chaos_workload import IdempotentProducer, Producer
from testing.history import OK, UNKNOWN, ProducedBatch

__all__ = ["KafkaClientProducer", "idempotence_stats"]

CONF = {
    "enable.idempotence": True, "acks": "all", "linger.ms": 5, "message.timeout.ms": 120_000,
    "retry.backoff.ms": 100, "reconnect.backoff.max.ms": 500, "socket.connection.setup.timeout.ms": 3_000,
    "topic.metadata.refresh.interval.ms": 2_000,
}


class KafkaClientProducer(Producer):
    """Produces unique messages through librdkafka until ``stop`` is set (module docstring)."""

    PREFIX = "k"
    """Every batch id of these producers starts with it (``k{index}-{seq}``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.name = f"chaos-kafka-producer-{self.index}"
        self._lock = threading.Lock()
        self.fatal = 0

    def run(self) -> None:
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": self._cluster.kafka_bootstrap, **CONF, **self._cluster.librdkafka_conf})
        try:
            while not self._halt.is_set():
                for _ in range(self._rng.randint(1, 20)):
                    self._send(producer)
                producer.poll(0)
                self._halt.wait(0.02)  # a steady rate, not synchronization
                if self._needs_new_producer(producer):
                    producer.flush(10)
                    producer = Producer({"bootstrap.servers": self._cluster.kafka_bootstrap, **CONF, **self._cluster.librdkafka_conf})
            producer.flush(10)
        finally:
            producer.purge()  # what is left is reported through the callbacks, as unknown
            producer.flush(5)
            del producer  # librdkafka's threads end with the handle, not with the cluster

    def _needs_new_producer(self, producer: Any) -> bool:
        with self._lock:
            fatal, self.fatal = self.fatal, 0
        return bool(fatal)

    def _send(self, producer: Any) -> None:
        self._seq += 1
        partition = self._rng.randrange(self._cluster.partitions)
        batch_id = f"{self.PREFIX}{self.index}-{self._seq}"
        value = batch_id.encode()
        sent_s = self._history.now_s()

        def delivered(err: Any, msg: Any) -> None:
            answered_s = self._history.now_s()
            offset = msg.offset()
            if err is None and offset is not None and offset >= 0:
                batch = ProducedBatch(batch_id, self._cluster.topic, partition, (value,), OK, offset + 1,
                                      "delivered", sent_s, answered_s, idempotent=True)
            elif err is None:  # DUPLICATE_SEQUENCE_NUMBER: stored before, too long ago to have its offset
                batch = ProducedBatch(batch_id, self._cluster.topic, partition, (value,), UNKNOWN, None,
                                      "librdkafka delivered a duplicate without an offset", sent_s, answered_s,
                                      idempotent=True)
            else:
                if err.fatal():
                    with self._lock:
                        self.fatal += 1
                batch = ProducedBatch(batch_id, self._cluster.topic, partition, (value,), UNKNOWN, None,
                                      f"librdkafka {err.name()}", sent_s, answered_s, idempotent=True)
            self._history.add(200 if err is None else None, [batch])

        while True:
            try:
                producer.produce(self._cluster.topic, value=value, partition=partition, on_delivery=delivered)
                return
            except BufferError:  # the local queue is full: let it drain
                producer.poll(0.1)


def idempotence_stats(history: Any, producers: list) -> dict[str, int]:
    """What the idempotent producers did: librdkafka's messages (``kafka_*``) and the HTTP
    idempotent producers' batches, each kind counted when it ran."""
    out: dict[str, int] = {}
    kafka = [p for p in producers if isinstance(p, KafkaClientProducer)]
    http = [p for p in producers if isinstance(p, IdempotentProducer)]
    if kafka:
        mine = [b for b in history.batches if b.batch_id.startswith(KafkaClientProducer.PREFIX)]
        out.update(kafka_messages=len(mine), kafka_delivered=sum(1 for b in mine if b.outcome == OK),
                   kafka_fatal_errors=sum(p.fatal for p in kafka))
    if http:
        batches = [b for b in history.batches if b.idempotent and not b.batch_id.startswith(KafkaClientProducer.PREFIX)]
        out.update(batches=len({b.retry_of or b.batch_id for b in batches}), attempts=len(batches),
                   retried=len({b.retry_of for b in batches if b.retry_of}),
                   duplicates_answered=sum(p.duplicates for p in http), refused=sum(p.refused for p in http),
                   still_undecided=sum(len(p._undecided) for p in http))
    return out
