"""``BrokerConsumeService``: the broker's /consume, tail cache first, long-poll.

One request names partitions, each with a fetch offset; the answer holds,
per partition, the records from that offset on (within ``max_bytes`` and
``partition_max_bytes``), the high watermark and the next fetch offset.

A round over the partitions that may have something new:

1. **Tail cache** (``tail_cache.py``). HIT: the records come from memory or
   the shared directory; neither Oxia nor S3 is touched. TAIL: the cache
   knows nothing past its high watermark. MISS: go to 3.
2. **Validate tail claims, once per request.** The cache only knows what
   this broker (or its write process) produced; another broker may have
   written the partition. So before a partition is answered "empty" on the
   cache's word, its claim is checked once against Oxia ``meta/control``
   during the request (the request's claims together: one Oxia read per
   shard, ``reader.controls``): if the control record's high watermark is at or past
   the fetch offset, the partition is read through step 3 now (unless this
   broker's own produce to it awaits its flush: Oxia is then most likely
   ahead by that flush, and the request waits for its publish instead, reading
   step 3 only if the flush fails or time runs out); otherwise the claim is
   confirmed and the request may wait locally. The check is not
   repeated while the request waits: records that another broker writes
   during the wait are found by the next request (at most ``max_wait_ms``
   later). A partition that already returns records needs no check.
3. **Storage** (``consume_storage.py``): the missed partitions'
   ``meta/control`` records in one Oxia read per shard, their sparse
   indexes (resolved entries from ``index_cache.py``, an Oxia scan only past
   them) in parallel, then one ``fetch_many`` per
   blob (blobs in parallel), so slices of one shared WAL blob wanted by
   several partitions are fetched with one range GET per request.

Records travel as ``RecordSpan``s (``record_spans.py``): runs of whole
stored RecordBatch v2 batches, budgeted without a Python object per record.

The byte budget is then handed out in request order over what the cache and
storage found, so the answer does not depend on which partitions were cached.

If the answer does not yet hold ``min_bytes`` (and no partition failed),
the request waits until ``max_wait_ms`` for a wake-up: a publish into the
tail cache of one of its partitions (in-process), or a change of the
partition's shared ``state`` file seen by the cache's poller (file mode).
Waiting never polls Oxia or S3. A woken partition runs through the round
again (a storage partition re-reads Oxia then: an event-driven read, not a
poll). With no wake-up source (a read process without a shared cache
directory) a request at the tail answers at ``max_wait_ms``.

Limits (stored batch bytes, as Kafka's fetch): whole batches are added
while the partition's bytes stay within ``partition_max_bytes`` and the
response's within ``max_bytes``; a partition's first batch may exceed
``partition_max_bytes`` if it fits in what is left of ``max_bytes``, and may
exceed both when the response holds nothing yet, so one oversized batch
never blocks a consumer.

Offsets: below the log start is a per-partition OFFSET_OUT_OF_RANGE that
carries the log start (``meta/control.log_start_offset``, 1 until
retention moves it), so a consumer can reset to it; an uninitialized
partition is UNKNOWN_TOPIC_OR_PARTITION; an offset past the high watermark
waits and then answers no records with the same ``next_fetch_offset``. The
service remembers each partition's log start from the control records it
reads (a refresh, a claim's check) and reads it again when it is older than
``log_start_refresh_ms`` (before the tail cache is asked), so a fetch below a
log start that moved more than that long ago is refused even when the cache
still holds the records; vacuum deletes them only a grace period later (SPEC
7.10). A control record one request read is used once more by the same
request's round (``Fetch.control``) rather than read twice.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Sequence, TypeVar

from .._errors import LlogError
from .._log.reader import LeaderlessLogReader
from .._protocol.keys import TopicPartition
from .._protocol.records import ControlRecord
from .._metrics import LlogMetrics
from .._protocol.http_json import (
    LOG_START_OFFSET,
    ConsumedPartition,
    ConsumeRequest,
)
from .consume_storage import Fetch, StorageReads, controls_of
from .._protocol.record_spans import RecordSpan, take_records
from .tail_cache import HIT, TAIL, NullTailCache, TailCache, TailSignals

__all__ = ["BrokerConsumeService", "ConsumeResult"]

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class ConsumeResult:
    """The answer to one request: partitions in request order."""

    partitions: tuple[ConsumedPartition, ...]
    waited_ms: int
    record_count: int
    payload_bytes: int


class BrokerConsumeService:
    """Serves /consume over a reader and a tail cache. Thread-safe: each
    request runs (and long-polls) on its own HTTP handler thread."""

    def __init__(
        self,
        reader: LeaderlessLogReader,
        cache: TailCache | None = None,
        signals: TailSignals | None = None,
        *,
        metrics: LlogMetrics | None = None,
        storage_threads: int = 8,
        local_writes_pending: Callable[[TopicPartition], bool] | None = None,
        check: Callable[[TopicPartition], None] | None = None,
        log_start_refresh_ms: int = 1_000,
    ) -> None:
        """``check(tp)`` raises when a partition may not be read (an unknown topic):
        that error is the partition's answer."""
        self.reader = reader
        self._check = check
        self._local_pending = local_writes_pending or (lambda tp: False)
        self.signals = signals or TailSignals()
        self.cache: TailCache = cache or NullTailCache(self.signals)
        self.metrics = metrics or reader.metrics
        self._pool = ThreadPoolExecutor(storage_threads, thread_name_prefix="llog-consume")
        self._closed = threading.Event()
        self._log_start: dict[TopicPartition, tuple[int, float]] = {}
        """The highest log start seen per partition (it only moves up), and when it was read."""
        self._log_start_refresh_s = log_start_refresh_ms / 1000
        self._storage = StorageReads(reader, self.metrics, self._map)

    def close(self) -> None:
        """Wake every waiting request (each answers with what it has) and stop."""
        if self._closed.is_set():
            return
        self._closed.set()
        self.signals.close()
        self._pool.shutdown(wait=True)

    def __enter__(self) -> BrokerConsumeService:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- one request -----------------------------------------------------------------
    def consume(self, request: ConsumeRequest) -> ConsumeResult:
        started = time.monotonic()
        deadline = started + request.max_wait_ms / 1000.0
        fetches = self._fetches(request)
        live = [f for f in fetches if f.error is None]
        waiter = None
        if live and request.max_wait_ms > 0 and not self._closed.is_set():
            # Registered before the first look, so no publish after it is missed.
            waiter = self.signals.register(
                [f.tp for f in live], {f.tp: self.cache.watch_token(f.tp) for f in live}
            )
        waited_s = 0.0
        try:
            todo = live
            out_of_time = False
            while True:
                self._round(todo, fetches, request)
                if self._ready(fetches, request) or self._closed.is_set():
                    break
                remaining = deadline - time.monotonic()
                if waiter is None or remaining <= 0:
                    out_of_time = True
                    break
                t0 = time.monotonic()
                woke = waiter.wait(remaining)
                waited_s += time.monotonic() - t0
                if not woke:
                    out_of_time = True
                    break
                self.metrics.inc("consume_wakeups_total")
                notified = waiter.take_notified()
                todo = [f for f in fetches if f.active and f.tp in notified]
            stuck = [f for f in fetches if f.deferred and f.active and not f.spans]
            if out_of_time and stuck:
                # Out of time while waiting for our own flush to reach the
                # cache: read what Oxia has rather than answer "empty".
                self._read_into(stuck, fetches, request)
        finally:
            if waiter is not None:
                self.signals.unregister(waiter)
        if waited_s:
            self.metrics.observe("consume_long_poll_wait_seconds", waited_s)
        return self._result(fetches, started, waited_s)

    def _fetches(self, request: ConsumeRequest) -> list[Fetch]:
        """One fetch per requested partition; an unknown topic or an offset below
        the log start is its answer already (UNKNOWN_TOPIC_OR_PARTITION, OFFSET_OUT_OF_RANGE)."""
        fetches = [Fetch(p, TopicPartition(p.topic, p.partition), p.fetch_offset) for p in request.partitions]
        for f in fetches:
            if self._check is not None:
                try:
                    self._check(f.tp)
                except LlogError as exc:
                    f.error = exc
        self._refresh_log_starts([f for f in fetches if f.error is None])
        for f in fetches:
            f.log_start = self._log_start.get(f.tp, (LOG_START_OFFSET, 0.0))[0]
            if f.error is None and f.req.fetch_offset < f.log_start:
                f.error = f.below_log_start()
        return fetches

    def _refresh_log_starts(self, fetches: Sequence[Fetch]) -> None:
        """Read the control record of the partitions whose log start is older than the refresh time."""
        now = time.monotonic()
        stale = [f for f in fetches if now - self._log_start.get(f.tp, (0, -1e18))[1] >= self._log_start_refresh_s]
        for f, got in zip(stale, self._controls(stale)):
            if isinstance(got, LlogError):
                continue  # the storage read meets it again, and answers it
            f.control = got  # the round's check of a tail claim, or its storage read, uses it
            self._see_log_start(f.tp, got.log_start_offset, now)

    def saw_log_start(self, tp: TopicPartition, log_start: int) -> None:
        """A log start this broker just wrote (DeleteRecords): fetches below it are refused from now on."""
        self._see_log_start(tp, log_start, time.monotonic())

    def _see_log_start(self, tp: TopicPartition, log_start: int, at: float) -> None:
        known = self._log_start.get(tp)
        self._log_start[tp] = (max(log_start, known[0]) if known else log_start, at)

    def _result(self, fetches: Sequence[Fetch], started: float, waited_s: float) -> ConsumeResult:
        for f in fetches:
            known = self._log_start.get(f.tp)
            if known is not None and f.log_start > known[0]:
                self._log_start[f.tp] = (f.log_start, known[1])
        parts = tuple(
            ConsumedPartition(
                topic=f.tp.topic,
                partition=f.tp.partition,
                fetch_offset=f.req.fetch_offset,
                next_fetch_offset=f.next_offset,
                high_watermark=f.hw,
                spans=tuple(f.spans),
                payload_bytes=f.nbytes,
                error=f.error,
                log_start_offset=f.log_start,
            )
            for f in fetches
        )
        count = sum(s.count for f in fetches for s in f.spans)
        nbytes = sum(f.nbytes for f in fetches)
        self.metrics.inc("consume_records_total", count)
        self.metrics.inc("consume_payload_bytes_total", nbytes)
        for f in fetches:
            if f.error is not None:
                self.metrics.inc("consume_partition_errors_total", error=type(f.error).__name__)
        self.metrics.observe("consume_request_seconds", time.monotonic() - started)
        return ConsumeResult(parts, int(waited_s * 1000), count, nbytes)

    @staticmethod
    def _ready(fetches: Sequence[Fetch], request: ConsumeRequest) -> bool:
        total = sum(f.nbytes for f in fetches)
        return (
            total >= request.min_bytes
            or total >= request.max_bytes
            or any(f.error is not None for f in fetches)
            or not any(f.active for f in fetches)
        )

    @staticmethod
    def _budget(f: Fetch, total: int, request: ConsumeRequest) -> tuple[int, int | None]:
        """``(limit, first_limit)`` for :func:`take_records` (see the module doc)."""
        left_total = request.max_bytes - total
        limit = max(0, min(left_total, f.req.partition_max_bytes - f.nbytes))
        if f.spans:
            return limit, limit
        if total == 0:
            return limit, None
        return limit, max(0, left_total)

    def _round(self, todo: Sequence[Fetch], fetches: Sequence[Fetch], request: ConsumeRequest) -> None:
        """Gather candidate records for ``todo`` (cache, then storage), then
        hand out the byte budget in request order, so the answer does not
        depend on which partitions the cache could serve."""
        total = sum(f.nbytes for f in fetches)
        candidates: dict[int, list[RecordSpan]] = {}
        claims: list[Fetch] = []
        storage: list[Fetch] = []
        looked: Counter[str] = Counter()  # one metric update per kind, not per partition
        for f in todo:
            if not f.active:
                continue
            # Up to the partition's own limit (plus one oversized first record);
            # the response-wide limit is applied below.
            look = self.cache.lookup(f.tp, f.next_offset, f.req.partition_max_bytes - f.nbytes, None)
            looked[look.kind] += 1
            if look.kind == HIT:
                candidates[id(f)] = look.spans
                f.see_hw(look.high_watermark)
            elif look.kind == TAIL:
                f.see_hw(look.high_watermark)
                if f.spans:
                    continue
                if f.deferred:
                    if not self._local_pending(f.tp):
                        # Our flush resolved without bringing the cache up to
                        # Oxia (it failed, or others wrote): read (event-driven).
                        f.deferred = False
                        storage.append(f)
                elif not f.validated:
                    claims.append(f)
            else:
                storage.append(f)
        for kind, n in looked.items():
            self.metrics.inc("tail_cache_lookups_total", n, result=kind)
        if claims:
            for f in self._validate(claims):
                # Oxia is ahead: our own flush may have reached the cache while
                # we asked (a cheap second look before reading S3).
                look = self.cache.lookup(f.tp, f.next_offset, f.req.partition_max_bytes - f.nbytes, None)
                if look.kind == HIT:
                    candidates[id(f)] = look.spans
                    f.see_hw(look.high_watermark)
                else:
                    storage.append(f)
        if storage:
            candidates.update(self._storage.read(storage, request.max_bytes - total))
        self._assign(todo, candidates, total, request)

    def _read_into(self, parts: list[Fetch], fetches: Sequence[Fetch], request: ConsumeRequest) -> None:
        total = sum(f.nbytes for f in fetches)
        self._assign(parts, self._storage.read(parts, request.max_bytes - total), total, request)

    def _assign(
        self, todo: Sequence[Fetch], candidates: dict[int, list[RecordSpan]], total: int,
        request: ConsumeRequest,
    ) -> None:
        """Hand out the byte budget to the candidates in request order."""
        for f in todo:
            got = candidates.get(id(f))
            if got and f.active:
                limit, first_limit = self._budget(f, total, request)
                spans, nbytes = take_records(got, limit, first_limit)
                f.take(spans, nbytes)
                total += nbytes

    def _validate(self, claims: list[Fetch]) -> list[Fetch]:
        """Check the cache's "nothing past the tail" claims against Oxia; return
        the partitions that do have more (written through another broker)."""
        more: list[Fetch] = []
        now = time.monotonic()
        for f, outcome in zip(claims, self._controls(claims)):
            if isinstance(outcome, LlogError):
                f.fail(outcome)
                continue
            self._see_log_start(f.tp, outcome.log_start_offset, now)  # as fresh as a refresh
            f.validated = True
            f.see_hw(outcome.high_watermark)
            f.see_log_start(outcome.log_start_offset)
            if outcome.high_watermark < f.next_offset:
                self.metrics.inc("tail_cache_validations_total", result="confirmed")
            elif self._local_pending(f.tp):
                # Most likely our own flush, committed in Oxia and about to be
                # published here: wait for it rather than read it from S3.
                # Its publish (or failure) wakes this request.
                self.metrics.inc("tail_cache_validations_total", result="deferred")
                f.deferred = True
            else:
                self.metrics.inc("tail_cache_validations_total", result="behind")
                more.append(f)
        return more

    def _controls(self, fetches: Sequence[Fetch]) -> list[ControlRecord | LlogError]:
        """Each partition's control record (or its LlogError), read together (or this request's own)."""
        return controls_of(self.reader, fetches)

    def _map(self, fn: Callable[[Any], T], args: list) -> list[T | LlogError]:
        """``fn`` over ``args`` (in parallel when more than one); an LlogError
        is returned in place of its result."""

        def call(a: object) -> T | LlogError:
            try:
                return fn(a)  # type: ignore[arg-type]
            except LlogError as exc:
                return exc
            except Exception as exc:  # a bug must fail one partition, not the request
                log.exception("consume: unexpected error")
                return LlogError(f"internal error: {exc!r}")

        if len(args) <= 1 or self._closed.is_set():
            return [call(a) for a in args]
        return list(self._pool.map(call, args))
