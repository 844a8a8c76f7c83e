"""The broker's hot-tail cache: recently produced records, per partition.

The cache is never a source of truth. It is filled only from the broker's
own committed flush results (the offsets of an ``AppendResult`` and the
payloads the broker submitted), so every record in it is exactly what Oxia
and S3 hold at that offset. What it can be is *incomplete*: another broker
may have written the partition, an entry may have been evicted, a slice may
have arrived out of order. So the rules are:

- Per partition the cache holds ONE contiguous run of offsets
  ``[base, high_watermark]`` (possibly empty: ``base = high_watermark + 1``).
  A slice that does not extend the run (a gap: offsets written elsewhere)
  drops the run and starts a new one at the slice.
- ``lookup(offset)`` answers HIT (records from ``offset`` on, within byte
  limits), TAIL (``offset == high_watermark + 1``: nothing newer is known
  *here*) or MISS (anything else: the caller reads Oxia/S3).
- A TAIL answer is a claim about this cache only. The consume service
  re-validates it against Oxia ``meta/control`` once per request before it
  answers "empty" (see ``consume.py``).

Two stores behind one interface:

- :class:`MemoryTailCache`: one broker process runs both roles.
- :class:`~server._broker.tail_cache_file.FileTailCache`: a write process and read
  processes share ``LLOG_TAIL_CACHE_DIR`` (layout and atomic publishing are
  described in ``tail_cache_file.py``).

Wake-ups (:class:`TailSignals`, one per cache: ``cache.signals``):
publishing into a partition notifies the consume requests waiting on it. (A
read process cannot be notified by a write process's publish; the
file-backed cache polls its shared files for that, never Oxia or S3.)

Byte cap ``max_bytes`` (LLOG_TAIL_CACHE_MAX_BYTES): payload bytes held in
memory, or segment file bytes written by this process; the oldest segments
go first. 0 disables the cache (publishes then only wake waiters).
"""

from __future__ import annotations

import bisect
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Iterable, NamedTuple, Protocol, Sequence

from .._protocol.keys import TopicPartition
from .._metrics import LlogMetrics
from .._protocol.record_spans import RecordSpan, spans_of, take_records
from .._protocol.stored_batches import StoredBatches

__all__ = [
    "HIT",
    "TAIL",
    "MISS",
    "CacheLookup",
    "TailCache",
    "TailSignals",
    "TailWaiter",
    "NullTailCache",
    "MemoryTailCache",
    "CacheRun",
    "place_slice",
    "place_batches",
    "answer_without_records",
]

HIT, TAIL, MISS = "hit", "tail", "miss"


class CacheLookup(NamedTuple):
    """The answer of :meth:`TailCache.lookup`."""

    kind: str
    """HIT, TAIL or MISS."""
    high_watermark: int | None = None
    """The cache's high watermark for the partition (HIT and TAIL)."""
    spans: list[RecordSpan] = []
    """The records from the asked offset on (HIT; may be empty when limits allow nothing)."""

    @property
    def records(self) -> list[tuple[int, bytes | None]]:
        """``(offset, value)`` per record of ``spans``."""
        return [(offset, r.value) for span in self.spans for offset, r in span.items()]


def answer_without_records(base: int, hw: int, offset: int) -> CacheLookup | None:
    """The hit/tail/miss rule every cache applies to a partition holding the
    contiguous run ``[base, hw]``: TAIL when ``offset`` is just past it (the
    consumer is caught up, as far as this cache knows), MISS when it lies
    outside it, None when the run holds ``offset`` and records follow."""
    if offset == hw + 1:
        return CacheLookup(TAIL, hw)
    if offset < base or offset > hw:
        return CacheLookup(MISS, hw)
    return None


# -- wake-ups ----------------------------------------------------------------------


class TailWaiter:
    """One waiting consume request: the partitions it waits on, an Event,
    and which of them were notified since the last :meth:`take_notified`."""

    def __init__(self, tps: Iterable[TopicPartition], tokens: dict[TopicPartition, object] | None) -> None:
        self.tps = frozenset(tps)
        self.tokens: dict[TopicPartition, object] = dict(tokens or {})
        """File mode: the last seen stat of each partition's state file."""
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._notified: set[TopicPartition] = set()

    def notify(self, tp: TopicPartition) -> None:
        with self._lock:
            self._notified.add(tp)
        self._event.set()

    def take_notified(self) -> set[TopicPartition]:
        """The partitions notified so far; clears them and the event."""
        with self._lock:
            got, self._notified = self._notified, set()
            self._event.clear()
        return got

    def wait(self, timeout_s: float) -> bool:
        return self._event.wait(max(0.0, timeout_s))


class TailSignals:
    """Registry of waiting consume requests by partition."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._by_tp: dict[TopicPartition, set[TailWaiter]] = {}
        self._all: set[TailWaiter] = set()
        self._closed = False

    def register(
        self, tps: Iterable[TopicPartition], tokens: dict[TopicPartition, object] | None = None
    ) -> TailWaiter:
        waiter = TailWaiter(tps, tokens)
        with self._lock:
            for tp in waiter.tps:
                self._by_tp.setdefault(tp, set()).add(waiter)
            self._all.add(waiter)
            closed = self._closed
            self._lock.notify_all()
        if closed:
            waiter.notify(next(iter(waiter.tps)))
        return waiter

    def unregister(self, waiter: TailWaiter) -> None:
        with self._lock:
            self._all.discard(waiter)
            for tp in waiter.tps:
                bucket = self._by_tp.get(tp)
                if bucket is not None:
                    bucket.discard(waiter)
                    if not bucket:
                        del self._by_tp[tp]

    def notify(self, tp: TopicPartition) -> None:
        with self._lock:
            waiters = list(self._by_tp.get(tp, ()))
        for w in waiters:
            w.notify(tp)

    def waiters(self) -> list[TailWaiter]:
        with self._lock:
            return list(self._all)

    def wait_for_waiters(self, timeout_s: float) -> None:
        with self._lock:
            if not self._all and not self._closed:
                self._lock.wait(timeout_s)

    def kick(self) -> None:
        """Wake threads in :meth:`wait_for_waiters` (a poller that is stopping)."""
        with self._lock:
            self._lock.notify_all()

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Wake every waiter (shutdown); later registrations return at once."""
        with self._lock:
            self._closed = True
            waiters = list(self._all)
            self._lock.notify_all()
        for w in waiters:
            for tp in w.tps:
                w.notify(tp)


# -- the interface -------------------------------------------------------------------


class TailCache(Protocol):
    mode: str
    signals: TailSignals
    """The wake-up registry this cache notifies on publish (and, file mode, on
    what its poller sees); consume requests wait on it. The cache owns it, so
    the waiting and the notifying side cannot be two different registries."""

    def publish(self, tp: TopicPartition, start_offset: int, payloads: StoredBatches) -> None:
        """Committed records ``start_offset ..`` of ``tp`` (from a flush result)."""
        ...

    def lookup(self, tp: TopicPartition, offset: int, limit: int, first_limit: int | None) -> CacheLookup: ...

    def watch_token(self, tp: TopicPartition) -> object:
        """A value that changes when ``tp``'s entry changes (file mode), else None."""
        ...

    def flush(self, timeout_s: float = 10.0) -> None:
        """Wait until what was published is visible to lookups."""
        ...

    def close(self) -> None: ...


class NullTailCache:
    """The cache switched off (or not useful for this role): every lookup is
    a MISS; publishes still wake local waiters."""

    mode = "off"

    def __init__(self, signals: TailSignals | None = None) -> None:
        self.signals = signals or TailSignals()

    def publish(self, tp: TopicPartition, start_offset: int, payloads: StoredBatches) -> None:
        self.signals.notify(tp)

    def lookup(self, tp: TopicPartition, offset: int, limit: int, first_limit: int | None) -> CacheLookup:
        return CacheLookup(MISS)

    def watch_token(self, tp: TopicPartition) -> object:
        return None

    def flush(self, timeout_s: float = 10.0) -> None:
        pass

    def close(self) -> None:
        pass


# -- run bookkeeping shared by both stores -----------------------------------------


@dataclass(eq=False)
class _Segment:
    start: int
    end: int
    nbytes: int
    spans: Sequence[RecordSpan] = ()
    dropped: bool = False


@dataclass
class CacheRun:
    """One contiguous run ``[base, hw]`` of a partition's offsets."""

    base: int
    hw: int
    segments: list[_Segment] = field(default_factory=list)

    def starts(self) -> list[int]:
        return [s.start for s in self.segments]


def place_slice(run: CacheRun | None, start: int, end: int) -> tuple[str, int, int]:
    """Where a new slice ``[start, end]`` goes in ``run``.

    Returns ``(action, start, end)`` with the part of the slice to keep:
    ``append``, ``prepend`` (a late, adjacent older slice), ``reset`` (a gap:
    drop the run, start over at the slice) or ``ignore`` (nothing new).
    """
    if run is None:
        return "reset", start, end
    if start == run.hw + 1:
        return "append", start, end
    if start > run.hw + 1:
        return "reset", start, end
    if end <= run.hw:
        if end == run.base - 1:
            return "prepend", start, end
        return "ignore", start, end
    return "append", run.hw + 1, end  # overlaps the end: keep what is new


def place_batches(run: CacheRun | None, start: int, batches: StoredBatches) -> tuple[str, int, int]:
    """:func:`place_slice` for ``batches`` (record 0 at ``start``), kept as whole
    batches: a slice that overlaps the run's end inside one of its batches
    restarts the run at that batch (``reset``). A batch cannot be split, and
    kept whole after the run's own records it would repeat offsets, which the
    binary consume answer cannot carry (its batches' offsets follow each other)."""
    action, keep_start, keep_end = place_slice(run, start, start + len(batches) - 1)
    if action == "append" and keep_start > start:
        batch_start = start + batches.record_starts[batches.batch_of(keep_start - start)]
        if batch_start < keep_start:
            return "reset", batch_start, keep_end
    return action, keep_start, keep_end


# -- in memory ---------------------------------------------------------------------


class MemoryTailCache:
    """In-process tail cache for a broker running both roles."""

    mode = "memory"

    def __init__(
        self, max_bytes: int, signals: TailSignals | None = None, metrics: LlogMetrics | None = None
    ) -> None:
        self.max_bytes = max_bytes
        self.signals = signals or TailSignals()
        self._metrics = metrics or LlogMetrics()
        self._lock = threading.Lock()
        self._runs: dict[TopicPartition, CacheRun] = {}
        self._fifo: deque[tuple[TopicPartition, _Segment]] = deque()
        self._live = 0
        """Segments held; each is in ``_fifo`` once, beside the dropped ones not yet passed."""
        self._bytes = 0

    @property
    def bytes_held(self) -> int:
        return self._bytes

    def publish(self, tp: TopicPartition, start_offset: int, payloads: StoredBatches) -> None:
        # Held as the stored batches themselves: lookups and answers never
        # handle single records.
        if len(payloads):
            with self._lock:
                self._insert(tp, start_offset, payloads)
                self._evict()
                self._forget_dropped()
                self._metrics.set_gauge("tail_cache_bytes", self._bytes)
            self._metrics.inc("tail_cache_published_records_total", len(payloads))
        self.signals.notify(tp)

    def _insert(self, tp: TopicPartition, start: int, payloads: StoredBatches) -> None:
        run = self._runs.get(tp)
        action, keep_start, keep_end = place_batches(run, start, payloads)
        if action == "ignore":
            return
        kept = [s.since(keep_start) for s in spans_of(start, payloads) if s.last >= keep_start]
        seg = _Segment(keep_start, keep_end, sum(s.payload_bytes for s in kept), kept)
        if action == "reset" or run is None:
            if run is not None:
                self._drop(run, len(run.segments))
            run = self._runs[tp] = CacheRun(base=keep_start, hw=keep_start - 1)
            action = "append"
        if seg.nbytes > self.max_bytes:
            # Too big to hold; still record the new high watermark so the
            # tail claim stays true (an empty run just past it).
            if action == "append":
                self._drop(run, len(run.segments))
                run.base, run.hw = keep_end + 1, keep_end
            return
        if action == "append":
            run.segments.append(seg)
            run.hw = keep_end
        else:  # prepend
            run.segments.insert(0, seg)
            run.base = keep_start
        self._fifo.append((tp, seg))
        self._live += 1
        self._bytes += seg.nbytes

    def _drop(self, run: CacheRun, count: int) -> None:
        """Drop the first ``count`` segments of ``run``."""
        for seg in run.segments[:count]:
            seg.dropped = True
            self._bytes -= seg.nbytes
            self._live -= 1
        del run.segments[:count]
        run.base = run.segments[0].start if run.segments else run.hw + 1

    def _forget_dropped(self) -> None:
        """Rebuild the eviction queue without the dropped segments once they are
        half of it. A run dropped at a gap (another broker wrote the offsets
        between) leaves its segments queued, and eviction only passes them when
        the cache is over its cap, which a partition that keeps being reset never
        is: queued, they would keep every record this broker ever produced."""
        if len(self._fifo) > 2 * self._live + 64:
            self._fifo = deque(item for item in self._fifo if not item[1].dropped)

    def _evict(self) -> None:
        while self._bytes > self.max_bytes and self._fifo:
            tp, seg = self._fifo.popleft()
            if seg.dropped:
                continue
            run = self._runs[tp]
            idx = next(i for i, s in enumerate(run.segments) if s is seg)
            self._drop(run, idx + 1)
            self._metrics.inc("tail_cache_evictions_total")

    def lookup(self, tp: TopicPartition, offset: int, limit: int, first_limit: int | None) -> CacheLookup:
        with self._lock:
            run = self._runs.get(tp)
            if run is None:
                return CacheLookup(MISS)
            answer = answer_without_records(run.base, run.hw, offset)
            if answer is not None:
                return answer
            i = bisect.bisect_right(run.starts(), offset) - 1
            segments = run.segments[i:]
            hw = run.hw

        spans = (s.since(offset) for seg in segments for s in seg.spans if s.last >= offset)
        return CacheLookup(HIT, hw, take_records(spans, limit, first_limit)[0])

    def watch_token(self, tp: TopicPartition) -> object:
        return None

    def flush(self, timeout_s: float = 10.0) -> None:
        pass  # publish() is synchronous

    def close(self) -> None:
        with self._lock:
            self._runs.clear()
            self._fifo.clear()
            self._live = 0
            self._bytes = 0
