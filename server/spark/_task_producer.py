"""What one Spark task uses to produce: :class:`TaskProducer` buffers records per
partition and sends bounded multi-partition requests on up to ``max_in_flight``
concurrent keep-alive connections (see :mod:`server.spark._http_client`)."""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Sequence

from .._protocol.keys import validate_topic
from ._broker_selection import BrokerUrl
from ._produce_batches import _REQUEST_HEAD, _REQUEST_TAIL, Batch, ProducerConfig, ProduceStats, batch_overhead
from ._produce_client import ProduceClient

__all__ = ["TaskProducer"]

log = logging.getLogger(__name__)


# -- the task producer ---------------------------------------------------------------------


class _Buffer:
    __slots__ = ("fragments", "payload_bytes", "encoded_bytes")

    def __init__(self) -> None:
        self.fragments: list[str] = []
        self.payload_bytes: list[int] = []
        self.encoded_bytes = 0


class TaskProducer:
    """Buffers one task's records per partition and sends bounded requests.

    ``add(partitions, fragments, sizes)`` appends records (fragments from
    :func:`encode_text_records` / :func:`encode_binary_records`); a request
    is sent once a broker's eligible partitions hold ``max_request_bytes`` or
    ``max_request_records``. ``flush()`` sends the rest and waits; a failure
    in any request is raised from the next ``add``/``flush``. Buffered memory
    stays below about ``(max_in_flight + 1) * max_request_bytes``.
    """

    def __init__(
        self,
        topic: str,
        config: ProducerConfig,
        *,
        on_progress: Callable[[ProduceStats], None] | None = None,
        progress_interval_s: float = 1.0,
    ) -> None:
        self.topic = validate_topic(topic)
        self.config = config
        self.client = ProduceClient(config)
        self.stats = ProduceStats()
        self._stats_lock = threading.Lock()
        self._cond = threading.Condition()
        self._buffers: dict[int, _Buffer] = {}
        self._buffered_bytes = 0
        self._buffered_records = 0
        self._inflight_partitions: set[int] = set()
        self._inflight = 0
        self._error: BaseException | None = None
        self._pool = ThreadPoolExecutor(config.max_in_flight, thread_name_prefix="llog-produce")
        self._overhead = {}  # partition -> batch JSON overhead
        self._on_progress = on_progress
        self._progress_interval_s = progress_interval_s
        self._last_progress = time.monotonic()
        self._closed = False

    def __enter__(self) -> TaskProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _batch_overhead(self, partition: int) -> int:
        o = self._overhead.get(partition)
        if o is None:
            o = self._overhead[partition] = batch_overhead(self.topic, partition)
        return o

    def add(self, partitions: Sequence[int], fragments: Sequence[str], sizes: Sequence[int]) -> None:
        with self._cond:
            self._raise_error()
            for p, frag, size in zip(partitions, fragments, sizes):
                buf = self._buffers.get(p)
                if buf is None:
                    buf = self._buffers[p] = _Buffer()
                buf.fragments.append(frag)
                buf.payload_bytes.append(size)
                buf.encoded_bytes += len(frag) + 1
                self._buffered_bytes += len(frag) + 1
            self._buffered_records += len(fragments)
            self._pump(final=False)
        self._maybe_progress()

    def flush(self) -> ProduceStats:
        """Send everything buffered, wait for every request; return the stats."""
        with self._cond:
            while True:
                self._raise_error()
                self._pump(final=True)
                if self._inflight == 0 and self._buffered_records == 0:
                    break
                self._cond.wait(0.5)
        self._maybe_progress(force=True)
        return self.stats

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.client.stop()
        self._pool.shutdown(wait=True, cancel_futures=True)
        self.client.close()

    def _raise_error(self) -> None:
        if self._error is not None:
            raise self._error

    def _maybe_progress(self, force: bool = False) -> None:
        if self._on_progress is None:
            return
        now = time.monotonic()
        if force or now - self._last_progress >= self._progress_interval_s:
            self._last_progress = now
            try:
                self._on_progress(self.stats)
            except Exception:  # progress is best effort
                log.debug("progress callback failed", exc_info=True)

    def _pump(self, final: bool) -> None:
        """Dispatch requests while slots are free (called with the lock held).
        Without ``final`` only full requests go, unless the buffer is over its
        memory bound; then the call waits for completions."""
        cfg = self.config
        limit = cfg.max_request_bytes * (cfg.max_in_flight + 1)
        while True:
            self._raise_error()
            over = self._buffered_bytes > limit
            sent = False
            while self._inflight < cfg.max_in_flight:
                req = self._take_request(allow_partial=final or over)
                if req is None:
                    break
                broker, batches = req
                self._inflight += 1
                self._inflight_partitions.update(b.partition for b in batches)
                self._pool.submit(self._run, batches)
                sent = True
                over = self._buffered_bytes > limit
            if final or not over:
                return
            if not sent:
                self._cond.wait(0.5)

    def _take_request(self, allow_partial: bool) -> tuple[BrokerUrl, list[Batch]] | None:
        cfg = self.config
        groups: dict[BrokerUrl, list[int]] = {}
        for p, buf in self._buffers.items():
            if buf.fragments and p not in self._inflight_partitions:
                groups.setdefault(self.client.preferred_broker(self.topic, p), []).append(p)
        if not groups:
            return None

        def volume(ps: list[int]) -> tuple[int, int]:
            return (sum(self._buffers[p].encoded_bytes for p in ps), sum(len(self._buffers[p].fragments) for p in ps))

        broker, parts = max(groups.items(), key=lambda kv: volume(kv[1]))
        nbytes, nrecords = volume(parts)
        room = cfg.max_request_bytes - len(_REQUEST_HEAD) - len(_REQUEST_TAIL)
        if not allow_partial and nbytes < room and nrecords < cfg.max_request_records:
            return None
        batches: list[Batch] = []
        records_left = cfg.max_request_records
        for p in sorted(parts, key=lambda q: -self._buffers[q].encoded_bytes):
            if records_left <= 0 or room <= self._batch_overhead(p):
                break
            buf = self._buffers[p]
            room -= self._batch_overhead(p)
            take, used = 0, 0
            for frag in buf.fragments:
                if take >= records_left or (used + len(frag) + 1 > room and (take or batches)):
                    break
                used += len(frag) + 1
                take += 1
            if take == 0:
                break
            frags, sizes = buf.fragments[:take], buf.payload_bytes[:take]
            del buf.fragments[:take], buf.payload_bytes[:take]
            buf.encoded_bytes -= used
            self._buffered_bytes -= used
            self._buffered_records -= take
            records_left -= take
            room -= used
            batches.append(Batch(self.topic, p, frags, sum(sizes)))
        return (broker, batches) if batches else None

    def _run(self, batches: list[Batch]) -> None:
        try:
            acks = self.client.send(batches, self.stats, self._stats_lock)
        except BaseException as exc:  # noqa: BLE001 - handed to the task thread
            with self._cond:
                if self._error is None:
                    self._error = exc
                self._inflight -= 1
                self._inflight_partitions.difference_update(b.partition for b in batches)
                self._cond.notify_all()
            return
        with self._cond:
            with self._stats_lock:
                for a in acks:
                    self.stats.add_ack(a)
            self._inflight -= 1
            self._inflight_partitions.difference_update(b.partition for b in batches)
            self._cond.notify_all()
