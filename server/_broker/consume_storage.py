"""Reading /consume's missed partitions from Oxia and S3 (step 3 of
``consume.py``), and ``Fetch``, one partition's progress within a request.

Per request: every partition's ``meta/control`` and sparse index in parallel
(``scan_batches``), planned within the request's byte budget, then one
``fetch_many`` per blob (blobs in parallel), so slices of one shared WAL blob
wanted by several partitions cost one range GET.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from .._errors import LlogError, ObjectNotFound
from .._log.reader import LeaderlessLogReader, ResolvedBatch
from .._protocol.keys import PartitionKeys, TopicPartition
from .._metrics import LlogMetrics
from .codec import ConsumePartition

__all__ = ["Fetch", "StorageReads", "MAX_BATCHES_PER_PARTITION"]

_BATCH_HEADER_BYTES = 20
_RECORD_PREFIX_BYTES = 4
MAX_BATCHES_PER_PARTITION = 256
"""Index entries one partition resolves per round (bounds one request's work)."""


@dataclass
class Fetch:
    """One partition's progress within one request."""

    req: ConsumePartition
    tp: TopicPartition
    next_offset: int
    records: list[tuple[int, bytes]] = field(default_factory=list)
    nbytes: int = 0
    hw: int | None = None
    error: LlogError | None = None
    validated: bool = False
    """Oxia confirmed during this request that nothing is past ``next_offset - 1``."""
    deferred: bool = False
    """Oxia was ahead of the cache while this broker's own flush to the
    partition was in flight: wait for that flush to land in the cache."""
    stopped: bool = False

    @property
    def active(self) -> bool:
        return self.error is None and not self.stopped and self.nbytes < self.req.partition_max_bytes

    def fail(self, exc: LlogError) -> None:
        """A partition that already has records keeps them and stops (the
        error shows on the next request); otherwise it answers the error."""
        if self.records:
            self.stopped = True
        else:
            self.error = exc

    def see_hw(self, hw: int | None) -> None:
        if hw is not None and (self.hw is None or hw > self.hw):
            self.hw = hw

    def take(self, records: list[tuple[int, bytes]], nbytes: int) -> None:
        if records:
            self.records += records
            self.nbytes += nbytes
            self.next_offset = records[-1][0] + 1


MapFn = Callable[[Callable[[Any], Any], list], list]
"""Runs a function over arguments (in parallel), an LlogError in place of a result."""


class StorageReads:
    """Candidate records of consume fetches from Oxia and S3."""

    def __init__(self, reader: LeaderlessLogReader, metrics: LlogMetrics, map_fn: MapFn) -> None:
        self.reader = reader
        self.metrics = metrics
        self._map = map_fn

    def read(self, parts: list[Fetch], left_total: int) -> dict[int, list[tuple[int, bytes]]]:
        """Candidate records of ``parts`` from Oxia and S3, keyed by ``id(fetch)``."""
        budgets = [
            0 if left_total <= 0 else max(1, min(left_total, f.req.partition_max_bytes - f.nbytes))
            for f in parts
        ]
        plans = self._map(lambda fb: self._plan(*fb), list(zip(parts, budgets)))
        items: list[tuple[PartitionKeys, ResolvedBatch]] = []
        owners: list[Fetch] = []
        planned: list[tuple[Fetch, list[ResolvedBatch]]] = []
        for f, plan in zip(parts, plans):
            if isinstance(plan, LlogError):
                f.fail(plan)
                continue
            hw, batches = plan
            f.see_hw(hw)
            if f.next_offset > hw:
                f.validated = True
            # Share what is left of max_bytes out in request order, as the
            # answer will, so bytes that could not be returned are not fetched.
            kept, est = [], 0.0
            for b in batches:
                if kept and est >= left_total:
                    break
                kept.append(b)
                est += _payload_estimate(b, f.next_offset)
            batches = kept if left_total > 0 else []
            left_total -= int(min(est, left_total))
            keys = self.reader.layout.partition(f.tp.topic, f.tp.partition)
            items += [(keys, b) for b in batches]
            owners += [f] * len(batches)
            planned.append((f, batches))
        payloads = self._fetch(items, owners)
        by_batch = {id(b): p for (_, b), p in zip(items, payloads)}
        self.metrics.inc("consume_storage_reads_total", len(planned))
        return {
            id(f): list(self._records(f, batches, by_batch))
            for f, batches in planned
            if batches and f.active
        }

    def _plan(self, f: Fetch, budget: int) -> tuple[int, list[ResolvedBatch]]:
        """The partition's high watermark and the batches worth fetching."""
        control = self.reader.control(f.tp.topic, f.tp.partition)
        hw = control.high_watermark
        if f.next_offset > hw or budget <= 0:
            return hw, []
        batches: list[ResolvedBatch] = []
        est = 0.0
        for b in self.reader.scan_batches(f.tp.topic, f.tp.partition, f.next_offset, hw, control=control):
            batches.append(b)
            est += _payload_estimate(b, f.next_offset)
            if est >= budget or len(batches) >= MAX_BATCHES_PER_PARTITION:
                break
        return hw, batches

    def _fetch(
        self, items: list[tuple[PartitionKeys, ResolvedBatch]], owners: list[Fetch]
    ) -> list[list[bytes] | None]:
        """Every batch's payloads: one ``fetch_many`` per blob (so slices of one
        shared blob wanted by several partitions cost one range GET), blobs in
        parallel. When a blob fails, its partitions are retried one by one so
        one bad partition does not fail the others."""
        out: list[list[bytes] | None] = [None] * len(items)
        by_blob: dict[str, list[int]] = {}
        for i, (_, batch) in enumerate(items):
            by_blob.setdefault(batch.entry.data_key, []).append(i)
        groups = list(by_blob.values())
        failed: list[int] = []
        for idxs, got in zip(groups, self._map(lambda g: self.reader.fetch_many([items[i] for i in g]), groups)):
            if isinstance(got, LlogError):
                failed += idxs
                continue
            for i, payloads in zip(idxs, got):
                out[i] = payloads
        by_owner: dict[int, list[int]] = {}
        for i in failed:
            by_owner.setdefault(id(owners[i]), []).append(i)
        for idxs in by_owner.values():
            f = owners[idxs[0]]
            try:
                got = self.reader.fetch_many([items[i] for i in idxs])
            except ObjectNotFound:
                # The WAL object was vacuumed after a compaction: the reader's
                # own scan resolves the compacted entry that covers it.
                got = self._reread(f, [items[i][1] for i in idxs])
            except LlogError as exc:
                f.fail(exc)
                continue
            if got is None:
                continue
            for i, payloads in zip(idxs, got):
                out[i] = payloads
        return out

    def _reread(self, f: Fetch, batches: list[ResolvedBatch]) -> list[list[bytes]] | None:
        """Payload lists for ``batches`` read through ``iter_from``. Only the
        slots from ``f.next_offset`` on are read by ``_records``; the slots
        before it are placeholders."""
        try:
            end = batches[-1].end_offset
            got = {r.offset: r.payload for r in self.reader.iter_from(f.tp.topic, f.tp.partition, f.next_offset, end)}
        except LlogError as exc:
            f.fail(exc)
            return None
        out: list[list[bytes]] = []
        for b in batches:
            wanted = range(max(b.start_offset, f.next_offset), b.end_offset + 1)
            if not all(off in got for off in wanted):
                out.append([])  # _records stops at an empty batch
                continue
            out.append([got.get(off, b"") for off in range(b.start_offset, b.end_offset + 1)])
        return out

    @staticmethod
    def _records(
        f: Fetch, batches: list[ResolvedBatch], by_batch: dict[int, list[bytes] | None]
    ) -> Iterable[tuple[int, bytes]]:
        expected = f.next_offset
        for b in batches:
            payloads = by_batch.get(id(b))
            if not payloads or b.start_offset > expected:
                return
            for off in range(max(expected, b.start_offset), b.end_offset + 1):
                yield off, payloads[off - b.start_offset]
            expected = b.end_offset + 1


def _payload_estimate(batch: ResolvedBatch, from_offset: int) -> float:
    """Payload bytes of ``batch`` from ``from_offset`` on, from the index entry
    alone (its byte length minus the batch framing); unknown (whole-object
    entries) counts as unbounded so planning stops there."""
    entry = batch.entry
    if entry.byte_length is None:
        return float("inf")
    count = batch.end_offset - batch.start_offset + 1
    payload = entry.byte_length - _BATCH_HEADER_BYTES - _RECORD_PREFIX_BYTES * count
    wanted = batch.end_offset - max(from_offset, batch.start_offset) + 1
    return max(0, payload) * wanted / count
