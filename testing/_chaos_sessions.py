"""The chaos run's fetch-session reader: kafka-python following every partition through the Kafka listeners.

With ``testing.chaos --kafka --sessions`` one kafka-python consumer assigned to every
partition reads from the start while the faults run. kafka-python keeps a
fetch session per broker (KIP-227): after its first fetch it names only the
partitions whose offset moved, and the broker answers only those with
records or news, so a partition the broker wrongly leaves out of an answer
is one this reader stops reading. Sessions die with a killed broker; the
reader is then answered FETCH_SESSION_ID_NOT_FOUND and opens another. After
the faults it reads on until each partition's end. Checked:

- ``sessions_skipped``: a record in the log (from the partition's final log
  start to its high watermark) the reader was never given;
- ``sessions_behind``: after the faults and the drain (``recover_s``) the
  reader has not reached a partition's end;

and what it read joins the history check as an incomplete read.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Mapping

from testing.history import ReadPass, Violation, behind, follower_gaps

__all__ = ["SessionReader", "SESSION_KINDS"]

SESSION_KINDS = {
    "sessions_skipped": "a record in the log that the fetch-session reader was never given",
    "sessions_behind": "the fetch-session reader did not read a partition to its end after the faults",
}


class SessionReader(threading.Thread):
    """One kafka-python consumer of every partition, polled from this thread (module docstring)."""

    def __init__(self, cluster: Any, stop: threading.Event) -> None:
        super().__init__(name="chaos-sessions", daemon=True)
        self._cluster = cluster
        self._halt = stop
        self.records: dict[tuple[str, int], dict[int, bytes]] = {
            (cluster.topic, p): {} for p in range(cluster.partitions)}
        self.errors = 0
        self._consumer: Any = None

    def run(self) -> None:
        from kafka import KafkaConsumer, TopicPartition

        # Its own warnings and errors (a slow poll, a refused connection while brokers die) are the
        # faults' doing, not findings; what it reads is checked.
        logging.getLogger("kafka").setLevel(logging.CRITICAL)
        self._consumer = KafkaConsumer(
            bootstrap_servers=self._cluster.kafka_bootstrap.split(","), auto_offset_reset="earliest",
            enable_auto_commit=False, fetch_max_wait_ms=100, reconnect_backoff_max_ms=500,
            metadata_max_age_ms=2_000, request_timeout_ms=10_000, **self._cluster.kafka_python_conf)
        self._consumer.assign([TopicPartition(self._cluster.topic, p) for p in range(self._cluster.partitions)])
        while not self._halt.is_set():
            self._poll()

    def _poll(self) -> None:
        try:
            batches = self._consumer.poll(timeout_ms=100)
        except Exception:  # noqa: BLE001 - brokers die under it: counted, and the next poll goes on
            self.errors += 1
            return
        for tp, records in batches.items():
            for r in records:
                self.records[(tp.topic, tp.partition)][r.offset + 1] = r.value  # llog's offsets

    def drain(self, hws: Mapping[int, int], timeout_s: float) -> None:
        """Read on (after the faults) until every partition is read to ``hws`` or ``timeout_s`` passes."""
        deadline = time.monotonic() + timeout_s
        while self._consumer is not None and time.monotonic() < deadline and behind(
                self.records, self._cluster.topic, hws, self.positions()):
            self._poll()

    def positions(self) -> dict[int, int]:
        """Partition -> the consumer's position (Kafka's next offset, llog's last offset before
        it), for the partitions that have one."""
        if self._consumer is None:
            return {}
        out = {}
        for tp in self._consumer.assignment():
            at = self._consumer.position(tp, timeout_ms=0)
            if at is not None:
                out[tp.partition] = at
        return out

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    def read_pass(self) -> ReadPass:
        return ReadPass("kafka-sessions", self.records, complete=False)

    def check(self, hws: Mapping[int, int], log_starts: Mapping[int, int]) -> list[Violation]:
        return follower_gaps("sessions", "the fetch-session reader", self.records, self._cluster.topic, hws,
                             log_starts, self.positions())

    def stats(self) -> dict[str, int]:
        return {"records": sum(len(r) for r in self.records.values()), "poll_errors": self.errors}
