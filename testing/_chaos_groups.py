"""The chaos run's consumer group: librdkafka consumers in one group through the Kafka listeners.

With ``testing.chaos --kafka --groups N`` N consumers subscribe to the topic in
one group (every other one static, with a ``group.instance.id``) and commit
what they read after every batch. The group's coordinator is one of the
brokers the nemesis kills, so the group moves from coordinator to coordinator
while the faults run, and now and then one consumer is closed and replaced
(a static one rejoins under its instance id). After the faults the group reads
on until it has reached each partition's end as the library read it. Checked:

- ``group_skipped``: a record in the log (from the partition's final log
  start to its high watermark) that no consumer of the group was given: a
  commit or a rebalance moved the group past it;
- ``group_fatal``: a consumer died of a fatal error (a static member fenced
  under the member id it holds is fatal to librdkafka);
- ``group_behind``: after the faults and the drain (``recover_s``) the group
  has not read a partition to its end. Retention moves the log starts while
  the run goes on, so by the check little may be left in the log for
  ``group_skipped`` to see; a group stuck on an empty assignment skips
  nothing there, but never reaches the end. Where a member is is its
  position (the offset after the last record it was given) or, for a
  partition it has been given nothing of since it got it (retention may have
  left nothing to give), where librdkafka fetches it from: its statistics'
  ``next_offset`` while the partition is fetched and nothing fetched waits
  to be consumed. A partition never started has neither;

and what the group read joins the history check as an incomplete read
(values never sent, wrong offsets, disagreement with the complete reads).
Redelivery (a record given twice across a rebalance) is what Kafka's group
protocol allows, and is not a violation.
"""

from __future__ import annotations

import json
import random
import threading
import time
from typing import Any, Mapping

from testing.history import ReadPass, Violation, behind, follower_gaps

__all__ = ["GroupConsumers", "GROUP_KINDS"]

GROUP_KINDS = {
    "group_skipped": "a record in the log that the consumer group was never given",
    "group_fatal": "a consumer of the group died of a fatal error",
    "group_behind": "the consumer group did not read a partition to its end after the faults",
}


class GroupConsumers(threading.Thread):
    """``count`` librdkafka group members, polled from this thread (module docstring)."""

    def __init__(self, cluster: Any, stop: threading.Event, count: int, seed: int) -> None:
        super().__init__(name="chaos-group", daemon=True)
        self._cluster = cluster
        self._halt = stop
        self._rng = random.Random(seed)
        self._count = count
        self.group = f"chaos-{seed}"
        self.records: dict[tuple[str, int], dict[int, bytes]] = {
            (cluster.topic, p): {} for p in range(cluster.partitions)}
        self.fatal: list[str] = []
        self.restarts = 0
        self.commits_refused = 0
        self._consumers: list[Any] = []
        self._fetching: dict[int, dict[int, int]] = {}
        """Member index -> partition -> where librdkafka fetches it from, while it is
        fetched with nothing waiting to be consumed (its latest statistics)."""

    def _new(self, index: int) -> Any:
        from confluent_kafka import Consumer

        def on_error(err: Any) -> None:
            if err.fatal():
                self.fatal.append(f"consumer {index}: {err}")

        self._fetching[index] = {}
        conf = {"bootstrap.servers": self._cluster.kafka_bootstrap, "group.id": self.group,
                "auto.offset.reset": "earliest", "enable.auto.commit": False, "session.timeout.ms": 10_000,
                "heartbeat.interval.ms": 500, "error_cb": on_error, "socket.connection.setup.timeout.ms": 3_000,
                "reconnect.backoff.max.ms": 500, "topic.metadata.refresh.interval.ms": 2_000,
                "statistics.interval.ms": 1_000, "stats_cb": lambda doc: self.on_stats(index, doc),
                **self._cluster.librdkafka_conf}
        if index % 2 == 0:
            conf["group.instance.id"] = f"{self.group}-{index}"
        c = Consumer(conf)
        c.subscribe([self._cluster.topic])
        return c

    def run(self) -> None:
        self._consumers = [self._new(i) for i in range(self._count)]
        next_restart = time.monotonic() + self._rng.uniform(3, 6)
        while not self._halt.is_set():
            self._poll_all()
            if time.monotonic() >= next_restart:
                i = self._rng.randrange(self._count)
                self._consumers[i].close()  # a static member sends no LeaveGroup: its session holds its place
                self._consumers[i] = self._new(i)
                self.restarts += 1
                next_restart = time.monotonic() + self._rng.uniform(3, 6)

    def _poll_all(self) -> None:
        from confluent_kafka import KafkaException

        for c in self._consumers:
            got = [m for m in c.consume(500, 0.05) if m.error() is None]
            for m in got:
                self.records[(m.topic(), m.partition())][m.offset() + 1] = m.value()  # llog's offsets
            if got:
                try:
                    c.commit(asynchronous=False)
                except KafkaException:  # a rebalance or a coordinator move: the next poll rejoins
                    self.commits_refused += 1

    def drain(self, hws: Mapping[int, int], timeout_s: float) -> None:
        """Read on (after the faults) until every partition is read to ``hws`` or ``timeout_s`` passes."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and behind(self.records, self._cluster.topic, hws, self.positions()):
            self._poll_all()

    def on_stats(self, index: int, doc: str) -> None:
        """librdkafka's statistics of member ``index``: the partitions it fetches with nothing
        fetched waiting to be consumed, and their next offset to fetch."""
        stats = json.loads(doc)
        parts = stats.get("topics", {}).get(self._cluster.topic, {}).get("partitions", {})
        self._fetching[index] = {
            int(p): s["next_offset"] for p, s in parts.items()
            if int(p) >= 0 and s.get("fetch_state") == "active" and s.get("fetchq_cnt", 1) == 0
            and s.get("next_offset", -1) >= 0}

    def positions(self) -> dict[int, int]:
        """Partition -> where the member that holds it is (Kafka's next offset, llog's last offset
        before it: module docstring); partitions no member holds, or none has started, are absent."""
        out: dict[int, int] = {}
        for i, c in enumerate(self._consumers):
            fetching = self._fetching.get(i, {})
            for tp in c.position(c.assignment()):
                at = tp.offset if tp.offset >= 0 else fetching.get(tp.partition, -1)
                if at >= 0:
                    out[tp.partition] = max(out.get(tp.partition, 0), at)
        return out

    def close(self) -> None:
        for c in self._consumers:
            c.close()
        self._consumers = []

    def read_pass(self) -> ReadPass:
        return ReadPass("consumer-group", self.records, complete=False)

    def check(self, hws: Mapping[int, int], log_starts: Mapping[int, int]) -> list[Violation]:
        topic = self._cluster.topic
        return [Violation("group_fatal", topic, -1, None, None, f) for f in self.fatal] + follower_gaps(
            "group", f"group {self.group!r}", self.records, topic, hws, log_starts, self.positions())

    def stats(self) -> dict[str, int]:
        return {"consumers": self._count, "records": sum(len(r) for r in self.records.values()),
                "restarts": self.restarts, "commits_refused": self.commits_refused, "fatal": len(self.fatal)}
