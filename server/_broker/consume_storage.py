"""Reading /consume's missed partitions from Oxia and S3 (step 3 of
``consume.py``), and ``Fetch``, one partition's progress within a request.

Per request: every partition's ``meta/control`` in one Oxia read per shard,
then their sparse indexes in parallel (from the broker's ``IndexCache``,
scanning Oxia only past what it holds), planned within the request's byte budget, then one ``fetch_many`` per
blob (blobs in parallel), so slices of one shared WAL blob wanted by several
partitions cost one range GET.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

from .._errors import LlogError, ObjectNotFound, OffsetOutOfRange
from .._log.reader import LeaderlessLogReader, ResolvedBatch, stored
from .._protocol.stored_batches import StoredBatches
from .._protocol.keys import PartitionKeys, TopicPartition
from .._protocol.records import ControlRecord
from .._metrics import LlogMetrics
from .._protocol.http_json import ConsumePartition
from .index_cache import IndexCache
from .._protocol.record_spans import RecordSpan

__all__ = ["Fetch", "StorageReads", "MAX_BATCHES_PER_PARTITION", "controls_of"]

MAX_BATCHES_PER_PARTITION = 256
"""Index entries one partition resolves per round (bounds one request's work)."""


@dataclass
class Fetch:
    """One partition's progress within one request."""

    req: ConsumePartition
    tp: TopicPartition
    next_offset: int
    log_start: int = 1
    """The partition's log start as known to this request (the highest seen)."""
    spans: list[RecordSpan] = field(default_factory=list)
    """The records taken so far, in offset order from ``req.fetch_offset``."""
    nbytes: int = 0
    hw: int | None = None
    error: LlogError | None = None
    validated: bool = False
    """Oxia confirmed during this request that nothing is past ``next_offset - 1``."""
    deferred: bool = False
    """Oxia was ahead of the cache while this broker's own flush to the
    partition was in flight: wait for that flush to land in the cache."""
    stopped: bool = False
    control: ControlRecord | LlogError | None = None
    """The control record this request read for the log start and has not used since: the
    round's next look at Oxia (a claim's check, a storage read) takes it instead of reading."""

    @property
    def active(self) -> bool:
        return self.error is None and not self.stopped and self.nbytes < self.req.partition_max_bytes

    def fail(self, exc: LlogError) -> None:
        """A partition that already has records keeps them and stops (the
        error shows on the next request); otherwise it answers the error."""
        if self.spans:
            self.stopped = True
        else:
            self.error = exc

    def see_log_start(self, log_start: int) -> None:
        self.log_start = max(self.log_start, log_start)

    def below_log_start(self) -> OffsetOutOfRange:
        return OffsetOutOfRange(
            f"fetch_offset {self.next_offset} is below the log start offset {self.log_start} (retention deleted "
            "what was before it): reset to the log start", topic=self.tp.topic, partition=self.tp.partition,
            offset=self.next_offset, log_start_offset=self.log_start,
        )

    def take_control(self) -> ControlRecord | LlogError | None:
        control, self.control = self.control, None
        return control

    def see_hw(self, hw: int | None) -> None:
        if hw is not None and (self.hw is None or hw > self.hw):
            self.hw = hw

    def take(self, spans: list[RecordSpan], nbytes: int) -> None:
        if spans:
            self.spans += spans
            self.nbytes += nbytes
            self.next_offset = spans[-1].last + 1


MapFn = Callable[[Callable[[Any], Any], list], list]
"""Runs a function over arguments (in parallel), an LlogError in place of a result."""


class StorageReads:
    """Candidate records of consume fetches from Oxia and S3."""

    def __init__(self, reader: LeaderlessLogReader, metrics: LlogMetrics, map_fn: MapFn) -> None:
        self.reader = reader
        self.metrics = metrics
        self._map = map_fn
        self.index = IndexCache(reader, metrics)

    def read(self, parts: list[Fetch], left_total: int) -> dict[int, list[RecordSpan]]:
        """Candidate records of ``parts`` from Oxia and S3, keyed by ``id(fetch)``."""
        budgets = [
            0 if left_total <= 0 else max(1, min(left_total, f.req.partition_max_bytes - f.nbytes))
            for f in parts
        ]
        args = list(zip(parts, budgets, controls_of(self.reader, parts)))
        plans: list[Any] = [self._settled(*a) for a in args]
        # Only partitions with records to read go to the index, in parallel: an idle
        # partition at its end costs no task (a consumer at the tail names every one).
        wanted = [i for i, plan in enumerate(plans) if plan is None]
        for i, plan in zip(wanted, self._map(lambda a: self._plan(*a), [args[i] for i in wanted])):
            plans[i] = plan
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
        reread: dict[int, list[RecordSpan]] = {}
        decoded = self._fetch(items, owners, reread)
        by_batch = {id(b): d for (_, b), d in zip(items, decoded)}
        self.metrics.inc("consume_storage_reads_total", len(planned))
        return {
            id(f): reread[id(f)] if id(f) in reread else list(self._spans(f, batches, by_batch))
            for f, batches in planned
            if batches and f.active
        }

    @staticmethod
    def _settled(f: Fetch, budget: int, control: ControlRecord | LlogError) -> tuple[int, list] | LlogError | None:
        """The partition's plan when its control record decides it (an error, below the log
        start, nothing past the fetch offset, no budget); None when the index must be read."""
        if isinstance(control, LlogError):
            return control
        f.see_log_start(control.log_start_offset)
        if f.next_offset < f.log_start and not f.spans:
            return f.below_log_start()
        hw = control.high_watermark
        return (hw, []) if f.next_offset > hw or budget <= 0 else None

    def _plan(self, f: Fetch, budget: int, control: ControlRecord) -> tuple[int, list[ResolvedBatch]]:
        """The partition's high watermark and the batches worth fetching (``_settled`` said read)."""
        hw = control.high_watermark
        batches: list[ResolvedBatch] = []
        est = 0.0
        for b in self.index.batches(f.tp, f.next_offset, control):
            batches.append(b)
            est += _payload_estimate(b, f.next_offset)
            if est >= budget or len(batches) >= MAX_BATCHES_PER_PARTITION:
                break
        return hw, batches

    def _fetch(
        self, items: list[tuple[PartitionKeys, ResolvedBatch]], owners: list[Fetch],
        reread: dict[int, list[RecordSpan]],
    ) -> list[StoredBatches | None]:
        """Every batch's records: one ``fetch_many`` per blob (so slices of one
        shared blob wanted by several partitions cost one range GET), blobs in
        parallel. When a blob fails, its partitions are retried one by one so
        one bad partition does not fail the others; a partition whose WAL
        object is gone is read anew into ``reread`` (by ``id(fetch)``)."""
        fetch_many = self.reader.fetch_many
        out: list[StoredBatches | None] = [None] * len(items)
        by_blob: dict[str, list[int]] = {}
        for i, (_, batch) in enumerate(items):
            by_blob.setdefault(batch.entry.data_key, []).append(i)
        groups = list(by_blob.values())
        failed: list[int] = []
        for idxs, got in zip(
            groups, self._map(lambda g: fetch_many([items[i] for i in g], stored), groups)
        ):
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
                got = fetch_many([items[i] for i in idxs], stored)
            except ObjectNotFound:
                # The WAL object was vacuumed after a compaction: the reader's
                # own scan resolves the compacted entry that covers it, and
                # the cached entries that named the object go.
                self.index.forget(f.tp)
                end = max(items[i][1].end_offset for i, o in enumerate(owners) if o is f)
                spans = self._reread(f, end)
                if spans is not None:
                    reread[id(f)] = spans
                continue
            except LlogError as exc:
                f.fail(exc)
                continue
            for i, bounds in zip(idxs, got):
                out[i] = bounds
        return out

    def _reread(self, f: Fetch, end: int) -> list[RecordSpan] | None:
        """``f``'s records from ``f.next_offset`` through ``end``, read
        through ``iter_runs`` (a scan of the index as it is now)."""
        try:
            return [
                RecordSpan.covering(run.records, run.base_offset, run.first, run.last)
                for run in self.reader.iter_runs(f.tp.topic, f.tp.partition, f.next_offset, end, decode=stored)
            ]
        except LlogError as exc:
            f.fail(exc)
            return None

    @staticmethod
    def _spans(
        f: Fetch, batches: list[ResolvedBatch], by_batch: dict[int, StoredBatches | None]
    ) -> Iterable[RecordSpan]:
        expected = f.next_offset
        for b in batches:
            got = by_batch.get(id(b))
            if not got or b.start_offset > expected:
                return
            yield RecordSpan.whole(b.start_offset, got).since(expected)
            expected = b.end_offset + 1


def controls_of(reader: LeaderlessLogReader, fetches: Sequence[Fetch]) -> list[ControlRecord | LlogError]:
    """Each partition's control record (or its LlogError): the one this request read and has
    not used yet (``Fetch.control``), the others read now together (``reader.controls``)."""
    out = [f.take_control() for f in fetches]
    missing = [i for i, c in enumerate(out) if c is None]
    for i, got in zip(missing, reader.controls([fetches[i].tp for i in missing]) if missing else ()):
        out[i] = got
    return out  # type: ignore[return-value]


def _payload_estimate(batch: ResolvedBatch, from_offset: int) -> float:
    """Bytes of ``batch`` from ``from_offset`` on, from the index entry alone
    (a share of its byte length); unknown (whole-object entries) counts as
    unbounded so planning stops there."""
    entry = batch.entry
    if entry.byte_length is None:
        return float("inf")
    count = batch.end_offset - batch.start_offset + 1
    wanted = batch.end_offset - max(from_offset, batch.start_offset) + 1
    return entry.byte_length * wanted / count
