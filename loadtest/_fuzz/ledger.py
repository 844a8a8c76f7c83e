"""Every produce the fuzzer sent, its outcome, and the check of the log against them.

Outcomes: ``acked`` (a 200, or the ``ok`` batches of a 409: stored at the
offsets the answer gave), ``refused`` (any other answer, or a request the
server never read whole: nothing of it may be stored), ``unknown`` (sent
whole, but the answer never came: a reset client, a 504: stored once or not
at all). At the end every partition any request named is read back from
offset 1: each record must be an acknowledged one at its acknowledged offset,
or carry the marker of a request whose outcome is unknown; every acknowledged
record must be there.
"""

from __future__ import annotations

import base64
import json
import re
import threading
from collections import Counter
from typing import Callable

from .oracle import Batch, Refused, decode_produce
from .requests import ProduceSent
from .wire import Answer

__all__ = ["Ledger", "value_bytes"]

Records = list[tuple[int, bytes]]
"""``(offset, payload)`` of one partition, in offset order."""


class Ledger:
    """Thread-safe: workers record outcomes as answers arrive."""

    def __init__(self, marker: re.Pattern[bytes], *, max_records: int, max_request_bytes: int,
                 topics: dict[str, int]) -> None:
        """``topics``: the partition count of each topic the run created. Any other name a
        mutation makes is auto-created by its first produce with the broker's default count,
        at least 1: only its partition 0 is sure to exist."""
        self.marker = marker
        self.max_records = max_records
        self.max_request_bytes = max_request_bytes
        self.topics = dict(topics)
        self._lock = threading.Lock()
        self.outcome: dict[int, str] = {}
        self.status: dict[int, int | None] = {}
        self.acked: dict[tuple[str, int, int], tuple[int, bytes]] = {}
        self.touched: set[tuple[str, int]] = set()
        self.counts: Counter[str] = Counter()

    # -- recording -------------------------------------------------------------------
    def sent(self, produce: ProduceSent, answer: Answer | None, *, processed: bool) -> list[str]:
        """Record one produce: ``answer`` (None: none came) and whether the
        server can have processed it (False: it closed the connection before
        reading it, or the body never arrived whole). Returns problems."""
        batches, why = self._decode(produce)
        problems: list[str] = []
        with self._lock:
            self.touched.update(produce.tps)
            self.touched.update((t, p) for t, p, _ in batches or ())
            self.status[produce.req_id] = answer.status if answer else None
        if answer is None:
            self._set(produce.req_id, "unknown" if processed and produce.complete else "refused")
        elif answer.status == 200:
            problems += self._acked(produce, answer, batches, why, every=True)
        elif answer.status == 409:
            problems += self._acked(produce, answer, batches, why, every=False)
        elif answer.status == 504:
            self._set(produce.req_id, "unknown")
        else:
            self._set(produce.req_id, "refused")
            if answer.status == 400 and batches is not None and produce.complete and self._within_limits(produce, batches):
                problems.append(f"a body the contract accepts was refused: 400 {answer.body[:200]!r}")
        return problems

    def _decode(self, produce: ProduceSent) -> tuple[list[Batch] | None, str]:
        try:
            return decode_produce(produce.body, produce.content_type)[0], ""
        except Refused as exc:
            return None, str(exc)

    def _within_limits(self, produce: ProduceSent, batches: list[Batch]) -> bool:
        return (sum(len(pl) for _, _, pl in batches) <= self.max_records
                and len(produce.body) <= self.max_request_bytes
                and all(p < self.topics.get(t, 1) for t, p, _ in batches))

    def _set(self, req_id: int, outcome: str) -> None:
        with self._lock:
            self.outcome[req_id] = outcome
            self.counts[outcome] += 1

    def _acked(self, produce: ProduceSent, answer: Answer, batches: list[Batch] | None, why: str, *, every: bool) -> list[str]:
        if batches is None:
            self._set(produce.req_id, "unknown")
            return [f"answered {answer.status} to a body the contract refuses ({why})"]
        try:
            results = json.loads(answer.body)["results"]
        except (ValueError, KeyError, TypeError):
            self._set(produce.req_id, "unknown")
            return [f"a {answer.status} produce answer without results: {answer.body[:200]!r}"]
        if len(results) != len(batches):
            self._set(produce.req_id, "unknown")
            return [f"{len(results)} results for {len(batches)} batches"]
        problems = []
        for (topic, partition, payloads), res in zip(batches, results):
            if not res.get("ok"):
                if every:
                    problems.append(f"a 200 with a failed batch: {res}")
                continue
            problems += self._ack_batch(produce.req_id, topic, partition, payloads, res)
        self._set(produce.req_id, "acked" if every else "partial")
        return problems

    def _ack_batch(self, req_id: int, topic: str, partition: int, payloads: list[bytes], res: dict) -> list[str]:
        start, end = res.get("start_offset"), res.get("end_offset")
        if (res.get("topic"), res.get("partition")) != (topic, partition) or not isinstance(start, int) \
                or end != start + len(payloads) - 1 or res.get("count") != len(payloads):
            return [f"a result that does not match its batch {topic}:{partition} x{len(payloads)}: {res}"]
        problems = []
        with self._lock:
            for k, payload in enumerate(payloads):
                key = (topic, partition, start + k)
                if key in self.acked:
                    problems.append(f"offset {key} acknowledged twice (requests {self.acked[key][0]} and {req_id})")
                self.acked[key] = (req_id, payload)
        return problems

    # -- checking --------------------------------------------------------------------
    def verify(self, read: Callable[[str, int], Records]) -> list[str]:
        """Read every touched partition back (``read``) and check it against the outcomes."""
        problems: list[str] = []
        seen: set[tuple[str, int, int]] = set()
        for topic, partition in sorted(self.touched):
            records = read(topic, partition)
            problems += self._check_partition(topic, partition, records, seen)
        for key in sorted(set(self.acked) - seen):
            problems.append(f"acknowledged record {key} of request {self.acked[key][0]} is missing")
        return problems

    def _check_partition(self, topic: str, partition: int, records: Records, seen: set) -> list[str]:
        problems = []
        offsets = [off for off, _ in records]
        if offsets != list(range(1, len(offsets) + 1)):
            problems.append(f"{topic}:{partition} offsets are not 1..{len(offsets)}: {offsets[:20]}")
        for off, payload in records:
            key = (topic, partition, off)
            if key in self.acked:
                seen.add(key)
                if self.acked[key][1] != payload:
                    problems.append(f"{key} holds {payload[:60]!r}, not what request {self.acked[key][0]} was acknowledged for")
                continue
            problems += self._unacknowledged(key, payload)
        return problems

    def _unacknowledged(self, key: tuple[str, int, int], payload: bytes) -> list[str]:
        found = self.marker.search(payload)
        if found is None:
            return [f"{key} holds a record no request sent: {payload[:60]!r}"]
        req_id = int(found.group(1))
        outcome = self.outcome.get(req_id)
        if outcome == "unknown":
            self.counts["unknown_stored_records"] += 1
            return []
        return [f"{key} holds a record of request {req_id}, outcome {outcome} (status {self.status.get(req_id)}): "
                f"{payload[:60]!r}"]

    def summary(self) -> dict[str, int]:
        return {**self.counts, "acknowledged_records": len(self.acked), "partitions_read": len(self.touched)}


def value_bytes(value: object) -> bytes:
    """A consumed JSON record value as bytes."""
    if isinstance(value, str):
        return value.encode("utf-8")
    return base64.b64decode(value["base64"])  # type: ignore[index]
