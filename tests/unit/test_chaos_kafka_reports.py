"""The chaos run's librdkafka producers turn each delivery report into a batch of the
history: acknowledged at Kafka's offset + 1, or unknown when the report has no offset
(a retry answered DUPLICATE_SEQUENCE_NUMBER) or an error. A report the callback could not
take would stop the producer's thread and leave its later messages unrecorded, so the
checker would find them in the log as "never sent" (seen once in the suite's chaos run)."""

from __future__ import annotations

import threading
from types import SimpleNamespace

from testing._chaos_kafka import KafkaClientProducer
from testing._chaos_workload import History
from testing.history import OK, UNKNOWN


class _Reported:
    def __init__(self, offset: int | None) -> None:
        self._offset = offset

    def offset(self) -> int | None:
        return self._offset


class _Error:
    def fatal(self) -> bool:
        return False

    def name(self) -> str:
        return "_MSG_TIMED_OUT"


class _Capturing:
    """confluent-kafka's ``Producer.produce`` as far as ``_send`` uses it."""

    def __init__(self) -> None:
        self.reports: list = []

    def produce(self, topic: str, *, value: bytes, partition: int, on_delivery) -> None:
        self.reports.append(on_delivery)


def test_each_delivery_report_becomes_a_batch_of_the_history():
    history = History()
    producer = KafkaClientProducer(1, SimpleNamespace(topic="chaos", partitions=4), history, threading.Event(), 7)
    client = _Capturing()
    for _ in range(3):
        producer._send(client)
    client.reports[0](None, _Reported(41))
    client.reports[1](None, _Reported(None))  # confluent-kafka's offset of a report without one
    client.reports[2](_Error(), _Reported(None))
    assert [(b.batch_id, b.outcome, b.start_offset) for b in history.batches] == [
        ("k1-1", OK, 42), ("k1-2", UNKNOWN, None), ("k1-3", UNKNOWN, None)]
    assert "duplicate without an offset" in history.batches[1].detail
