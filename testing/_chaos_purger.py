"""The chaos run's record deleter: Kafka's DeleteRecords while the faults run (SPEC 7.13).

With ``testing.chaos --delete-records`` a thread moves the log start of a
random partition every 0.5-1.5 s: to an offset drawn from the lower third
of what the partition holds (so it usually lands inside an entry, and often
above the compaction cursor or inside the pending append), now and then to
the high watermark. With ``--kafka`` it asks a broker through Kafka's
DeleteRecords (kafka-python's admin client, answered by whichever broker
Metadata names); without, it calls the library over its own Oxia client.
Errors while processes die are counted, not findings.

Nothing else changes in the check: every reader is checked from the final log
start of each partition (acknowledged records below it are let go), so an
acknowledged record at or above it that a read misses, or a record a read
returns twice, is still a violation; so is a log start that went back.
"""

from __future__ import annotations

import logging
import random
import threading
from collections import Counter
from typing import Any

from testing.history import Violation

__all__ = ["RecordPurger", "PURGER_KINDS"]

PURGER_KINDS = {"log_start_went_back": "a partition's log start was seen lower than before"}


class RecordPurger(threading.Thread):
    """DeleteRecords on random partitions until ``stop`` (module docstring)."""

    def __init__(self, cluster: Any, stop: threading.Event, *, seed: int,
                 interval_s: tuple[float, float] = (0.5, 1.5)) -> None:
        super().__init__(name="chaos-purger", daemon=True)
        self._cluster = cluster
        self._halt = stop
        self._rng = random.Random(f"{seed}:purger")
        self._interval_s = interval_s
        self.calls = 0
        self.moved = 0
        self.errors: Counter[str] = Counter()
        self.went_back: list[str] = []
        """Log starts seen lower than one seen before on the same partition (a violation)."""
        self._seen: dict[int, int] = {}

    def run(self) -> None:
        from server._config import OxiaConfig
        from server._storage.metastore import OxiaMetadataStore
        from server.leaderless_log_reader import LeaderlessLogReader

        logging.getLogger("kafka").setLevel(logging.CRITICAL)  # brokers die under it
        admin = None
        self._meta = None if self._cluster.kafka else OxiaMetadataStore(OxiaConfig.from_env(self._cluster.env))
        with LeaderlessLogReader.from_env(self._cluster.env) as reader:
            while not self._halt.wait(self._rng.uniform(*self._interval_s)):
                p = self._rng.randrange(self._cluster.partitions)
                try:
                    control = reader.control(self._cluster.topic, p)
                    start, hw = control.log_start_offset, control.high_watermark
                    self._saw(p, start)
                    if hw < start:
                        continue
                    before = hw + 1 if self._rng.random() < 0.1 else start + self._rng.randint(0, (hw - start) // 3)
                    if self._cluster.kafka:
                        admin = admin or self._admin()
                        self._through_kafka(admin, p, before)
                    else:
                        self._through_library(p, before)
                    self.calls += 1
                    after = reader.log_start_offset(self._cluster.topic, p)
                    self._saw(p, after)
                    self.moved += after > start
                except Exception as exc:  # noqa: BLE001 - Oxia or a broker is down: the next call goes on
                    self.errors[type(exc).__name__] += 1
                    if admin is not None:
                        admin.close()
                        admin = None
        if admin is not None:
            admin.close()
        if self._meta is not None:
            self._meta.close()

    def _saw(self, p: int, start: int) -> None:
        if start < self._seen.get(p, 1):
            self.went_back.append(f"partition {p}: log start {start} after {self._seen[p]}")
        self._seen[p] = max(start, self._seen.get(p, 1))

    def _admin(self) -> Any:
        from kafka import KafkaAdminClient

        return KafkaAdminClient(bootstrap_servers=self._cluster.kafka_bootstrap.split(","),
                                request_timeout_ms=5_000, reconnect_backoff_max_ms=500,
                                **self._cluster.kafka_python_conf)

    def _through_kafka(self, admin: Any, p: int, before: int) -> None:
        from kafka import TopicPartition

        admin.delete_records({TopicPartition(self._cluster.topic, p): before - 1}, timeout_ms=5_000)  # Kafka's

    def _through_library(self, p: int, before: int) -> None:
        from server._log.log_start import delete_records
        from server._protocol.keys import LogLayout, TopicPartition

        keys = LogLayout(self._cluster.root_prefix).keys(TopicPartition(self._cluster.topic, p))
        delete_records(self._meta, keys, before)

    def check(self) -> list[Violation]:
        return [Violation("log_start_went_back", self._cluster.topic, -1, None, None, what)
                for what in self.went_back]

    def stats(self) -> dict[str, Any]:
        return {"calls": self.calls, "moved": self.moved, "errors": dict(self.errors)}
