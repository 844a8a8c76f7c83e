"""``BatchingProducer``: coalesce appends from many threads into shared flushes.

Callers ``submit`` groups (or call the blocking ``append_shared``); one named
flusher thread collects them until ``max_bytes`` of payload is buffered or
``max_delay_ms`` has passed since the first buffered record, then makes ONE
``append_shared`` call with one aggregated group per topic-partition (in
submission order) and fans the result back out: each caller's group gets
its own contiguous slice of the partition's offsets.

Back-pressure: every accepted payload byte counts against
``max_buffer_bytes`` until its flush has committed. A submit that would
exceed the cap waits for room up to ``max_block_ms``, in arrival order (a
large submission is not overtaken by later small ones), then fails with
BackPressureRejected and nothing of it is buffered. ``close()`` wakes the
waiters with ProducerClosed, flushes what was accepted, then stops.

Pipelining: a flush is two steps, the shared blob's PUT
(``writer.stage_shared``) and the partitions' commits
(``writer.commit_staged``). The flusher thread takes a batch and starts its
PUT on a small pool; one committer thread commits the staged flushes in the
order they were taken, so a partition's offsets follow submission order
across flushes. Up to ``max_inflight_flushes`` flushes are between the start
of their PUT and the end of their commits: with 2, the PUT of flush n+1
overlaps the commits of flush n, and a slow PUT no longer idles the commits.

The producer also keeps the process-local set of partitions it has
initialized, so a partition is initialized once per process, lazily, on its
first write.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import OrderedDict, deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Mapping, Sequence

from .._config import BatchConfig
from .._errors import BackPressureRejected, InvalidRequest, LlogError, OutcomeUnknown, ProducerClosed
from .._protocol.stored_batches import StoredBatches
from .._protocol.keys import TopicPartition
from .._protocol.structs import AppendResult, BatchOutcome, SharedAppendGroup, validate_groups
from .._metrics import LlogMetrics
from .._runtime import REAL_RUNTIME, Runtime
from .writer import LeaderlessLogWriter, StagedBlob

__all__ = ["BatchingProducer"]

log = logging.getLogger(__name__)


@dataclass
class _Submission:
    groups: list[SharedAppendGroup]
    nbytes: int
    future: Future
    enqueued_at: float
    results: list[AppendResult | None] = field(default_factory=list)
    request_id: str | None = None
    """The caller's id for this submit, logged with the flush it joins."""


@dataclass
class _Flush:
    """One flush on its way from the flusher to the committer."""

    batch: list[_Submission]
    started: float
    slots: OrderedDict[TopicPartition, list[tuple[_Submission, int, int, int]]]
    """Per partition, each submitted group's place in the merged group:
    (submission, group index, first record, first batch)."""
    payloads: dict[TopicPartition, StoredBatches]
    tps: list[TopicPartition]
    init_errors: dict[TopicPartition, LlogError]
    staged: Future | None
    """Resolves to the StagedBlob (None: nothing to write)."""


class BatchingProducer:
    """Thread-safe, size/time batching front of a :class:`LeaderlessLogWriter`."""

    def __init__(
        self,
        writer: LeaderlessLogWriter,
        config: BatchConfig | None = None,
        *,
        metrics: LlogMetrics | None = None,
        auto_initialize: bool = True,
        owns_writer: bool = False,
        runtime: Runtime = REAL_RUNTIME,
    ) -> None:
        self.writer = writer
        self.runtime = runtime
        self.config = config or BatchConfig()
        self.metrics = metrics or writer.metrics
        self.auto_initialize = auto_initialize
        self._owns_writer = owns_writer
        self._cond = threading.Condition()
        self._queue: list[_Submission] = []
        self._queued_bytes = 0
        self._inflight_bytes = 0  # queued + being flushed
        self._first_at: float | None = None
        self._waiters: deque[object] = deque()  # submissions waiting for room, in arrival order
        self._flush_requested = False
        self._closing = False
        self._closed = False
        self._initialized: set[TopicPartition] = set()
        self._init_lock = threading.Lock()
        self.metrics.set_info(
            batch_max_bytes=self.config.max_bytes,
            batch_max_delay_ms=self.config.max_delay_ms,
            batch_max_buffer_bytes=self.config.max_buffer_bytes,
        )
        depth = self.config.max_inflight_flushes
        self._slots = threading.Semaphore(depth)
        self._commits: queue.Queue[_Flush | None] = queue.Queue()
        self._stager = ThreadPoolExecutor(max_workers=depth, thread_name_prefix="llog-batch-put")
        self._thread = threading.Thread(target=self._run, name="llog-batch-flusher", daemon=True)
        self._committer = threading.Thread(target=self._run_commits, name="llog-batch-committer", daemon=True)
        self._thread.start()
        self._committer.start()

    @classmethod
    def from_env(
        cls, env: Mapping[str, str] | None = None, *, metrics: LlogMetrics | None = None,
        runtime: Runtime = REAL_RUNTIME,
    ) -> BatchingProducer:
        """A producer over its own ``LeaderlessLogWriter.from_env()``."""
        writer = LeaderlessLogWriter.from_env(env, metrics=metrics, runtime=runtime)
        try:
            return cls(writer, BatchConfig.from_env(env), metrics=metrics, owns_writer=True, runtime=runtime)
        except Exception:
            writer.close()
            raise

    # -- public API ------------------------------------------------------------
    def submit(
        self, groups: Sequence[SharedAppendGroup], *, request_id: str | None = None, flush: bool = False
    ) -> Future:
        """Queue groups for the next flush; the Future resolves to one
        AppendResult per group, in order (failures carry ``error``). With
        ``flush`` the flush starts now instead of after ``max_delay_ms``: the
        caller has nothing more to add (it costs a PUT sooner, never a lost
        or reordered record)."""
        groups = validate_groups(groups, "submit")
        nbytes = sum(g.payload_bytes for g in groups)
        if nbytes > self.config.max_buffer_bytes:
            raise InvalidRequest(
                f"request holds {nbytes} payload bytes, more than the producer's buffer cap "
                f"of {self.config.max_buffer_bytes} (LLOG_BATCH_MAX_BUFFER_BYTES)"
            )
        sub = _Submission(groups, nbytes, Future(), self.runtime.clock.monotonic(), [None] * len(groups), request_id)
        with self._cond:
            if self._closing:
                raise ProducerClosed("the producer is closed")
            if self._waiters or self._inflight_bytes + nbytes > self.config.max_buffer_bytes:
                self._wait_for_room(nbytes)
            self._queue.append(sub)
            self._queued_bytes += nbytes
            self._inflight_bytes += nbytes
            if self._first_at is None:
                self._first_at = self.runtime.clock.monotonic()
            if flush:
                self._flush_requested = True
                self.metrics.inc("batcher_flush_requests_total")
            self.metrics.set_gauge("batcher_inflight_bytes", self._inflight_bytes)
            self.metrics.set_gauge("batcher_queued_submissions", len(self._queue))
            self._cond.notify_all()
        self.metrics.inc("batcher_submits_total")
        self.metrics.inc("batcher_records_total", sum(len(g.payloads) for g in groups))
        self.metrics.inc("batcher_payload_bytes_total", nbytes)
        return sub.future

    def _wait_for_room(self, nbytes: int) -> None:
        """Wait (lock held) until this submission is the oldest waiting and
        fits, for at most ``max_block_ms``; raise BackPressureRejected then,
        or ProducerClosed when the producer closes meanwhile."""
        ticket = object()
        self._waiters.append(ticket)
        if self.config.max_block_ms:
            self.metrics.inc("batcher_backpressure_waits_total")
        deadline = self.runtime.clock.monotonic() + self.config.max_block_ms / 1000.0
        try:
            while True:
                if self._closing:
                    raise ProducerClosed("the producer is closed")
                if self._waiters[0] is ticket and self._inflight_bytes + nbytes <= self.config.max_buffer_bytes:
                    return
                left = deadline - self.runtime.clock.monotonic()
                if left <= 0:
                    self.metrics.inc("batcher_backpressure_rejections_total")
                    raise BackPressureRejected(
                        f"producer buffer full: {self._inflight_bytes} of {self.config.max_buffer_bytes} "
                        f"bytes in flight, {nbytes} more refused after waiting {self.config.max_block_ms} ms "
                        "(LLOG_BATCH_MAX_BLOCK_MS); retry after a short wait"
                    )
                self._cond.wait(left)
        finally:
            self._waiters.remove(ticket)
            self._cond.notify_all()  # the next waiter may be the oldest now

    def append_shared(
        self, groups: Sequence[SharedAppendGroup], timeout: float | None = None
    ) -> list[AppendResult]:
        """Submit and wait. Per-group failures are in the results' ``error``."""
        return self.submit(groups).result(timeout)

    def request_flush(self) -> None:
        """Start a flush of what is queued now, without waiting for it (a
        client's flush-only request)."""
        with self._cond:
            if self._queue:
                self._flush_requested = True
                self._cond.notify_all()
        self.metrics.inc("batcher_flush_requests_total")

    def flush(self, timeout: float | None = None) -> None:
        """Flush everything submitted so far and wait for it to commit."""
        with self._cond:
            pending = [s.future for s in self._queue]
            self._flush_requested = True
            self._cond.notify_all()
        for f in pending:
            f.result(timeout)

    def ensure_initialized(self, topic: str, partition: int) -> None:
        """Initialize the partition once per process (idempotent in Oxia too)."""
        tp = TopicPartition(topic, partition)
        if tp in self._initialized:
            return
        self.writer.initialize_partition(topic, partition)
        with self._init_lock:
            self._initialized.add(tp)

    @property
    def inflight_bytes(self) -> int:
        with self._cond:
            return self._inflight_bytes

    def close(self, timeout: float | None = None) -> None:
        """Stop accepting, flush what was accepted, stop the flusher."""
        with self._cond:
            if self._closed:
                return
            self._closing = True
            self._cond.notify_all()
        self._thread.join(timeout)
        self._committer.join(timeout)
        self._stager.shutdown(wait=False)
        self._closed = True
        if self._owns_writer:
            self.writer.close()

    def __enter__(self) -> BatchingProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- flusher -----------------------------------------------------------------
    def _take_batch(self) -> list[_Submission] | None:
        """Wait for a flush trigger; return the submissions to flush (None: stop)."""
        delay_s = self.config.max_delay_ms / 1000.0
        with self._cond:
            while True:
                if self._queue:
                    due = self._first_at + delay_s  # type: ignore[operator]
                    now = self.runtime.clock.monotonic()
                    if (
                        self._queued_bytes >= self.config.max_bytes
                        or now >= due
                        or self._flush_requested
                        or self._closing
                    ):
                        break
                    self._cond.wait(due - now)
                elif self._closing:
                    return None
                else:
                    self._flush_requested = False
                    self._cond.wait()
            taken: list[_Submission] = []
            size = 0
            while self._queue and (not taken or size + self._queue[0].nbytes <= self.config.max_bytes):
                sub = self._queue.pop(0)
                taken.append(sub)
                size += sub.nbytes
            self._queued_bytes -= size
            self.metrics.set_gauge("batcher_queued_submissions", len(self._queue))
            if self._queue:
                # What is left was submitted during the last flush: it is due now.
                self._first_at = min(s.enqueued_at for s in self._queue)
            else:
                self._first_at = None
                self._flush_requested = False
            return taken

    def _run(self) -> None:
        """The flusher: take a batch, start its PUT, hand it to the committer in order."""
        while True:
            batch = self._take_batch()
            if batch is None:
                self._commits.put(None)
                return
            self._slots.acquire()  # at most max_inflight_flushes between PUT and commit
            try:
                flush = self._prepare(batch)
            except BaseException as exc:  # noqa: BLE001 - the committer answers every caller
                flush = _Flush(batch, self.runtime.clock.monotonic(), OrderedDict(), {}, [], {}, _failed_future(exc))
            self._commits.put(flush)

    def _run_commits(self) -> None:
        """The committer: commit staged flushes in the order they were taken."""
        while (flush := self._commits.get()) is not None:
            try:
                self._commit(flush)
            except BaseException as exc:  # never leave a caller waiting forever
                log.exception("flush failed unexpectedly")
                # An LlogError escaping the flush is the writer refusing the
                # whole call up front (definite); anything else may have
                # struck after commits, so the outcome is unknown.
                err = exc if isinstance(exc, LlogError) else OutcomeUnknown(f"internal flush error: {exc!r}")
                for sub in flush.batch:
                    if not sub.future.done():
                        sub.future.set_result([
                            AppendResult(g.topic, g.partition, len(g.payloads), error=err) for g in sub.groups
                        ])
            finally:
                self._slots.release()
                with self._cond:
                    self._inflight_bytes -= sum(s.nbytes for s in flush.batch)
                    self.metrics.set_gauge("batcher_inflight_bytes", self._inflight_bytes)
                    self._cond.notify_all()

    def _prepare(self, batch: list[_Submission]) -> _Flush:
        """Merge the batch into one group per partition, initialize new
        partitions, and start the shared blob's PUT."""
        started = self.runtime.clock.monotonic()
        for sub in batch:
            self.metrics.observe("batcher_queue_wait_seconds", started - sub.enqueued_at)
        # One aggregated group per partition, batches in submission order.
        # Groups sent encoded (StoredBatches) are joined as they are, without
        # touching each record; the others are stamped with this flush's time.
        now_ms = self.runtime.clock.now_ms()
        slots: OrderedDict[TopicPartition, list[tuple[_Submission, int, int, int]]] = OrderedDict()
        parts: dict[TopicPartition, list[StoredBatches]] = {}
        counts: dict[TopicPartition, int] = {}
        batch_counts: dict[TopicPartition, int] = {}
        for sub in batch:
            for i, g in enumerate(sub.groups):
                tp = g.tp
                encoded = g.encode(now_ms)
                slots.setdefault(tp, []).append((sub, i, counts.get(tp, 0), batch_counts.get(tp, 0)))
                parts.setdefault(tp, []).append(encoded)
                counts[tp] = counts.get(tp, 0) + len(g.payloads)
                batch_counts[tp] = batch_counts.get(tp, 0) + encoded.batch_count
        payloads = {tp: StoredBatches.join(seqs) for tp, seqs in parts.items()}

        init_errors: dict[TopicPartition, LlogError] = {}
        if self.auto_initialize:
            for tp in slots:
                try:
                    self.ensure_initialized(tp.topic, tp.partition)
                except LlogError as exc:
                    init_errors[tp] = exc
        tps = [tp for tp in slots if tp not in init_errors]
        merged = [SharedAppendGroup(tp.topic, tp.partition, payloads[tp]) for tp in tps]
        staged = self._stager.submit(self.writer.stage_shared, merged) if merged else None
        return _Flush(batch, started, slots, payloads, tps, init_errors, staged)

    def _commit(self, flush: _Flush) -> None:
        started, batch, slots, payloads = flush.started, flush.batch, flush.slots, flush.payloads
        staged: StagedBlob | None = flush.staged.result() if flush.staged is not None else None
        results = self.writer.commit_staged(staged) if staged is not None else []
        by_tp = dict(zip(flush.tps, results))
        for tp, err in flush.init_errors.items():
            by_tp[tp] = AppendResult(tp.topic, tp.partition, len(payloads[tp]), error=err)

        for tp, entries in slots.items():
            res = by_tp[tp]
            for n, (sub, i, first, first_batch) in enumerate(entries):
                count = len(sub.groups[i].payloads)
                if res.batches is not None:  # idempotent batches among them: each has its own outcome
                    end_batch = entries[n + 1][3] if n + 1 < len(entries) else len(res.batches)
                    sub.results[i] = _slot_result(res, count, res.batches[first_batch:end_batch])
                elif res.error is None:
                    start = res.start_offset + first  # type: ignore[operator]
                    sub.results[i] = replace(res, count=count, start_offset=start, end_offset=start + count - 1)
                else:
                    sub.results[i] = replace(res, count=count)
        for sub in batch:
            sub.future.set_result(list(sub.results))

        elapsed = self.runtime.clock.monotonic() - started
        if log.isEnabledFor(logging.DEBUG):
            ids = [sub.request_id for sub in batch if sub.request_id is not None]
            log.debug(
                "flush of %d submits, %d partitions, %d failed, queue wait max %.1f ms, flush %.1f ms; requests %s",
                len(batch), len(slots), sum(1 for r in by_tp.values() if r.error is not None),
                (started - min(sub.enqueued_at for sub in batch)) * 1000, elapsed * 1000, " ".join(ids) or "-",
            )
        self.metrics.inc("batcher_flushes_total")
        self.metrics.observe("batcher_flush_seconds", elapsed)
        self.metrics.inc("batcher_flush_partitions_total", len(slots))
        failed = sum(1 for r in by_tp.values() if r.error is not None)
        if failed:
            self.metrics.inc("batcher_failed_partition_batches_total", failed)


def _slot_result(res: AppendResult, count: int, outcomes: tuple[BatchOutcome, ...]) -> AppendResult:
    """A submitted group's result from its batches' outcomes. An idempotent group
    is one batch; a group of plain batches is never refused, so its batches were
    appended in one run (or failed together)."""
    error = next((o.error for o in outcomes if o.error is not None), None)
    if error is not None:
        return AppendResult(res.topic, res.partition, count, error=error, batches=outcomes)
    last = outcomes[-1]
    return AppendResult(res.topic, res.partition, count, outcomes[0].start_offset, last.end_offset, last.index_key,
                        last.wal_uri, duplicate=outcomes[0].duplicate, batches=outcomes)


def _failed_future(exc: BaseException) -> Future:
    future: Future = Future()
    future.set_exception(exc)
    return future
