"""``IndexCache``: the sparse index entries a broker has resolved, per partition.

Why: a consume that misses the tail cache asks Oxia for the partition's index
from its fetch offset on. That range scan is one gRPC stream to the end of
the index, and the client deserializes every entry the server sends whether
or not the reader wants it; a consumer catching up took a few entries per
request and paid for the whole rest of the index each time (the Oxia client
was two thirds of the broker's CPU). Resolved once, the entries are kept
here and the next requests scan only past them.

What is kept, per partition: one chain of :class:`ResolvedBatch` from index
entries (never the control record's pending append), contiguous in offsets
(each batch starts one past the previous end), as the reader's
``scan_batches`` resolved it. Why a chain stays true: offsets are written
once, and every index entry ever written for an offset names a copy of the
same bytes, so a batch resolved once describes its records for good. What
can change is where the bytes are: after a compaction the vacuum deletes the
WAL objects its entries named. A read that then finds its object gone falls
back to a fresh scan (``consume_storage.py``) and calls :meth:`forget`, so
the cache never hides records: at worst it costs that one re-read.

Bounds: a scan keeps at most ``SCAN_BATCHES`` batches; the cache holds at
most ``max_batches`` in all, dropping the least recently used partitions'
chains first.
"""

from __future__ import annotations

import bisect
import threading
from collections import OrderedDict
from typing import Iterator

from .._errors import LlogError
from .._log.reader import LeaderlessLogReader, ResolvedBatch
from .._metrics import LlogMetrics
from .._protocol.keys import TopicPartition
from .._protocol.records import ControlRecord

__all__ = ["IndexCache", "SCAN_BATCHES", "MAX_CACHED_BATCHES"]

SCAN_BATCHES = 1024
"""Batches one scan resolves and keeps (bounds one request's index work)."""
MAX_CACHED_BATCHES = 65_536
"""Batches held over all partitions (each a few hundred bytes)."""


class _Chain:
    __slots__ = ("batches", "ends")

    def __init__(self, batches: list[ResolvedBatch]) -> None:
        self.batches = batches
        self.ends = [b.end_offset for b in batches]


class IndexCache:
    """Resolved index entries per partition, in front of the reader's index
    scans. Thread-safe."""

    def __init__(
        self, reader: LeaderlessLogReader, metrics: LlogMetrics, *, max_batches: int = MAX_CACHED_BATCHES
    ) -> None:
        self.reader = reader
        self.metrics = metrics
        self.max_batches = max_batches
        self._lock = threading.Lock()
        self._chains: OrderedDict[TopicPartition, _Chain] = OrderedDict()
        self._held = 0

    def batches(self, tp: TopicPartition, start: int, control: ControlRecord) -> Iterator[ResolvedBatch]:
        """The batches covering ``start`` up to ``control``'s high watermark,
        in order: the cached chain from ``start``, then a scan past it."""
        hw = control.high_watermark
        cached = self._cached(tp, start)
        self.metrics.inc("consume_index_cache_lookups_total", result="hit" if cached else "miss")
        yield from cached
        nxt = cached[-1].end_offset + 1 if cached else start
        if nxt > hw:
            return
        fresh: list[ResolvedBatch] = []
        try:
            for b in self.reader.scan_batches(tp.topic, tp.partition, nxt, hw, control=control):
                fresh.append(b)
                if len(fresh) >= SCAN_BATCHES:
                    break
        except LlogError:
            # What the scan resolved before the error is still exact; the
            # error shows when a request gets that far.
            if not fresh:
                raise
        self._keep(tp, [b for b in fresh if not b.from_pending])
        yield from fresh

    def forget(self, tp: TopicPartition) -> None:
        """Drop ``tp``'s chain (an object it names is gone: compacted and vacuumed)."""
        with self._lock:
            chain = self._chains.pop(tp, None)
            if chain is not None:
                self._held -= len(chain.batches)
            self.metrics.set_gauge("consume_index_cache_batches", self._held)

    def _cached(self, tp: TopicPartition, start: int) -> list[ResolvedBatch]:
        with self._lock:
            chain = self._chains.get(tp)
            if chain is None:
                return []
            self._chains.move_to_end(tp)
            i = bisect.bisect_left(chain.ends, start)
            if i == len(chain.batches) or chain.batches[i].start_offset > start:
                return []
            return chain.batches[i:]

    def _keep(self, tp: TopicPartition, fresh: list[ResolvedBatch]) -> None:
        """Add a scan's batches: appended when they continue the chain, else
        (a consumer elsewhere in the log) they replace it."""
        if not fresh:
            return
        with self._lock:
            chain = self._chains.pop(tp, None)
            if chain is not None:
                self._held -= len(chain.batches)
                if chain.ends[-1] + 1 == fresh[0].start_offset:
                    fresh = chain.batches + fresh
            if len(fresh) > self.max_batches:
                fresh = fresh[-self.max_batches:]
            self._chains[tp] = _Chain(fresh)
            self._held += len(fresh)
            while self._held > self.max_batches:
                _, old = self._chains.popitem(last=False)
                self._held -= len(old.batches)
            self.metrics.set_gauge("consume_index_cache_batches", self._held)
