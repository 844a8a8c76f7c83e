"""What one Spark task uses to produce: :class:`TaskProducer` buffers records per
partition and sends bounded multi-partition requests on up to ``max_in_flight``
concurrent keep-alive connections (see :mod:`server.client`)."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Sequence

import numpy as np
import pyarrow as pa

from .._protocol.kafka_batch import HEADER_SIZE
from .._protocol.keys import validate_topic
from .._protocol.producer_state import SEQUENCE_MODULUS
from .._protocol.stored_batches import MAX_BATCH_RECORDS
from ._producer_id import ProducerIdentity
from ._broker_selection import BrokerUrl
from ._produce_batches import Batch, ProducerConfig, ProduceStats, batch_overhead, request_overhead
from ._produce_client import ProduceClient
from ._record_chunks import RecordChunk, RecordColumns, encode_by_partition

__all__ = ["TaskProducer"]

log = logging.getLogger(__name__)


# -- the task producer ---------------------------------------------------------------------


class _Buffer:
    __slots__ = ("chunks", "nbytes", "records", "segments", "next_seq", "sendable")

    def __init__(self) -> None:
        self.chunks: deque[RecordChunk] = deque()
        self.nbytes = 0
        self.records = 0
        self.segments: deque[_Segment] = deque()
        """Idempotent: the records cut into batches, sealed ones first (the last may be open)."""
        self.next_seq = 0
        """Idempotent: the sequence of the next record added (records of this task to this partition so far)."""
        self.sendable = 0
        """Idempotent: bytes of the sealed segments (what may go before the final flush)."""


class _Segment:
    """One idempotent batch in the making: records from ``base_seq`` on."""

    __slots__ = ("base_seq", "chunks", "nbytes", "records", "sealed")

    def __init__(self, base_seq: int) -> None:
        self.base_seq = base_seq
        self.chunks: list[RecordChunk] = []
        self.nbytes = 0
        self.records = 0
        self.sealed = False


class TaskProducer:
    """Buffers one task's records per partition and sends bounded requests.

    ``add(values, partitions, keys=..., headers=..., timestamps=...)``
    appends records: ``values`` an Arrow string or binary column (or a list
    of str / bytes; a null is a tombstone), ``partitions`` one partition per
    value, and optionally a key, headers and a timestamp (ms) per record.
    The records are encoded for the body at once, a column at a time
    (:mod:`server.client._record_chunks`).

    When requests go: each broker's partitions fall into ``max_in_flight``
    lanes (partition mod ``max_in_flight``), and a lane whose partitions are
    all idle sends once it holds a quarter of ``max_request_bytes`` (or
    ``max_request_records``), taking up to the full bounds. So requests for
    disjoint partitions fly side by side (a task never has two requests for
    one partition in flight, which keeps its records of a partition in
    order), and a lane that waited on a broker's flush sends a bigger
    request next: the bytes in flight follow the rate times the round trip
    (Little's law) without a tuning knob. ``flush()`` sends the rest, asking
    the broker to flush it now (``"flush": true``) rather than after its batch
    delay, as a Kafka producer's ``flush()`` skips its linger; if requests
    sent earlier without that hint are still waiting at a broker, it sends
    that broker one flush-only request; then it waits. A failure in any
    request is raised from the next
    ``add``/``flush``. Buffered memory stays below about
    ``(max_in_flight + 1) * max_request_bytes``.
    """

    def __init__(
        self,
        topic: str,
        config: ProducerConfig,
        *,
        on_progress: Callable[[ProduceStats], None] | None = None,
        progress_interval_s: float = 1.0,
        producer: ProducerIdentity | None = None,
    ) -> None:
        self.topic = validate_topic(topic)
        self.config = config
        self.producer = producer
        """Idempotent (SPEC 7.12) when set: see :meth:`_segment`."""
        overhead = batch_overhead(self.topic, 0, config.body) + 16  # a partition number's digits, the fields
        self._segment_bytes = max(1, min(config.max_batch_bytes - HEADER_SIZE,
                                         config.max_request_bytes - request_overhead(config.body) - overhead))
        self._segment_records = min(config.max_request_records, MAX_BATCH_RECORDS)
        self.client = ProduceClient(config)
        self.stats = ProduceStats()
        self._stats_lock = threading.Lock()
        self._cond = threading.Condition()
        self._buffers: dict[int, _Buffer] = {}
        self._buffered_bytes = 0
        self._buffered_records = 0
        self._sendable_bytes = 0
        self._inflight_partitions: set[int] = set()
        self._inflight = 0
        self._unhinted: dict[BrokerUrl, int] = {}  # requests in flight without the flush hint, per broker
        self._error: BaseException | None = None
        self._pool = ThreadPoolExecutor(config.max_in_flight, thread_name_prefix="llog-produce")
        self._overhead: dict[int, int] = {}  # partition -> batch overhead in the body
        self._min_request_bytes = max(1, config.max_request_bytes // 4)
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
            o = self._overhead[partition] = batch_overhead(self.topic, partition, self.config.body)
        return o

    def add(
        self,
        values: pa.Array | Sequence[str | bytes | None],
        partitions: Sequence[int] | np.ndarray,
        *,
        keys: pa.Array | Sequence[str | bytes | None] | None = None,
        headers: Sequence[Sequence[tuple[str, bytes | None]] | None] | None = None,
        timestamps: Sequence[int] | np.ndarray | None = None,
    ) -> None:
        """Buffer the records for ``partitions`` (ValueError for a partition
        below 0 or columns of different lengths: nothing is dropped) and send
        what is due. A timestamp of -1 means "when sent"."""
        if not isinstance(values, pa.Array):
            values = pa.array(values, type=_list_type(values))
        if keys is not None and not isinstance(keys, pa.Array):
            keys = pa.array(keys, type=_list_type(keys))
        parts = np.asarray(partitions, dtype=np.int64)
        if len(parts) and int(parts.min()) < 0:
            raise ValueError(f"partition {int(parts.min())} is below 0")
        stamps = None if timestamps is None else np.asarray(timestamps, dtype=np.int64)
        chunks = encode_by_partition(RecordColumns(values, keys, headers, stamps), parts, self.config.body)
        with self._cond:
            self._raise_error()
            for p, chunk in chunks.items():
                buf = self._buffers.get(p)
                if buf is None:
                    buf = self._buffers[p] = _Buffer()
                if self.producer is None:
                    buf.chunks.append(chunk)
                else:
                    self._segment(buf, chunk)
                buf.nbytes += chunk.nbytes
                buf.records += chunk.count
                self._buffered_bytes += chunk.nbytes
                self._buffered_records += chunk.count
            self._pump(final=False)
        self._maybe_progress()

    def flush(self) -> ProduceStats:
        """Send everything buffered, wait for every request; return the stats."""
        flush_requested = False
        with self._cond:
            while True:
                self._raise_error()
                self._pump(final=True)
                if self._inflight == 0 and self._buffered_records == 0:
                    break
                if not flush_requested and self._buffered_records == 0:
                    # Everything is sent; requests that went without the hint
                    # would otherwise wait out their broker's batch delay.
                    flush_requested = True
                    waiting = [b for b, n in self._unhinted.items() if n]
                    if waiting:
                        self._cond.release()
                        try:
                            for broker in waiting:
                                self.client.request_flush(broker, self.stats, self._stats_lock)
                        finally:
                            self._cond.acquire()
                        continue
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

    def _segment(self, buf: _Buffer, chunk: RecordChunk | None) -> None:
        """Cut a partition's records into idempotent batches where only the records
        decide: a batch ends when the next record would take it past
        ``max_batch_bytes`` (one larger record goes alone) or the request's
        record bound, and the last one at the task's end. A retried task attempt
        fed the same records cuts the same batches, with the same sequences, so
        the log recognizes those an earlier attempt stored (SPEC 7.12)."""
        while chunk is not None:
            seg = buf.segments[-1] if buf.segments and not buf.segments[-1].sealed else None
            if seg is None:
                seg = _Segment(buf.next_seq)
                buf.segments.append(seg)
            k = chunk.fitting(self._segment_bytes - seg.nbytes, self._segment_records - seg.records)
            if k == 0:
                if seg.records:
                    self._seal(buf, seg)
                    continue
                k = 1  # a record larger than a batch goes alone
            head, chunk = chunk.split(k)
            seg.chunks.append(head)
            seg.nbytes += head.nbytes
            seg.records += head.count
            buf.next_seq += head.count
            if chunk is not None or seg.records >= self._segment_records:
                self._seal(buf, seg)

    def _seal(self, buf: _Buffer, seg: _Segment) -> None:
        seg.sealed = True
        buf.sendable += seg.nbytes
        self._sendable_bytes += seg.nbytes

    def _pump(self, final: bool) -> None:
        """Dispatch requests while slots are free (called with the lock held).
        Without ``final`` only lanes holding enough go, unless the buffer is
        over its memory bound; then the call waits for completions."""
        cfg = self.config
        limit = cfg.max_request_bytes * (cfg.max_in_flight + 1)
        if final and self.producer is not None:
            for buf in self._buffers.values():  # the task's end: each partition's last batch is complete
                if buf.segments and not buf.segments[-1].sealed:
                    self._seal(buf, buf.segments[-1])
        while True:
            self._raise_error()
            over = self._held_bytes() > limit
            sent = False
            while self._inflight < cfg.max_in_flight:
                taken = self._take_request(allow_partial=final or over)
                if taken is None:
                    break
                broker, batches = taken
                self._inflight += 1
                self._inflight_partitions.update(b.partition for b in batches)
                if not final:
                    self._unhinted[broker] = self._unhinted.get(broker, 0) + 1
                self._pool.submit(self._run, batches, final, broker)
                sent = True
                over = self._held_bytes() > limit
            if final or not over:
                return
            if not sent:
                self._cond.wait(0.5)

    def _held_bytes(self) -> int:
        """Bytes the memory bound counts: all buffered ones, or (idempotent) the sealed
        batches: the open ones cannot go before they are complete."""
        return self._buffered_bytes if self.producer is None else self._sendable_bytes

    def _take_request(self, allow_partial: bool) -> tuple[BrokerUrl, list[Batch]] | None:
        """The next request and its broker: the fullest idle lane's records, within the bounds."""
        cfg = self.config
        idempotent = self.producer is not None
        lanes: dict[tuple[BrokerUrl, int], list[int]] = {}
        for p, buf in self._buffers.items():
            if (buf.sendable if idempotent else buf.records) and p not in self._inflight_partitions:
                broker = self.client.preferred_broker(self.topic, p)
                lanes.setdefault((broker, p % cfg.max_in_flight), []).append(p)
        if not lanes:
            return None

        def volume(ps: list[int]) -> tuple[int, int]:
            if idempotent:
                return (sum(self._buffers[p].sendable for p in ps), 0)
            return (sum(self._buffers[p].nbytes for p in ps), sum(self._buffers[p].records for p in ps))

        (broker, _), parts = max(lanes.items(), key=lambda lane: volume(lane[1]))
        nbytes, nrecords = volume(parts)
        if not allow_partial and nbytes < self._min_request_bytes and nrecords < cfg.max_request_records:
            return None
        room = cfg.max_request_bytes - request_overhead(cfg.body)
        records_left = cfg.max_request_records
        batches: list[Batch] = []
        for p in sorted(parts, key=lambda q: -self._buffers[q].nbytes):
            if records_left <= 0 or room <= self._batch_overhead(p):
                break
            room -= self._batch_overhead(p)
            if idempotent:
                segs, drained = self._take_segments(self._buffers[p], p, room, records_left, alone_ok=not batches)
                for seg in segs:
                    batches.append(Batch(self.topic, p, seg.chunks, producer=(
                        self.producer.producer_id, self.producer.producer_epoch,  # type: ignore[union-attr]
                        seg.base_seq % SEQUENCE_MODULUS)))
                    room -= seg.nbytes + self._batch_overhead(p)
                    records_left -= seg.records
                if not drained:
                    break
                continue
            taken, drained = self._take_records(self._buffers[p], room, records_left, alone_ok=not batches)
            if taken:
                batch = Batch(self.topic, p, taken)
                batches.append(batch)
                used = sum(c.nbytes for c in taken)
                room -= used
                records_left -= batch.count
            if not drained:
                break
        return (broker, batches) if batches else None

    def _take_records(
        self, buf: _Buffer, room: int, records_left: int, alone_ok: bool
    ) -> tuple[list[RecordChunk], bool]:
        """Leading records of ``buf`` within ``room`` bytes and ``records_left``
        records (one record larger than the room goes alone when ``alone_ok``);
        returns them and whether ``buf`` is now empty."""
        taken: list[RecordChunk] = []
        while buf.chunks and records_left > 0:
            chunk = buf.chunks[0]
            k = chunk.fitting(room, records_left)
            if k == 0:
                if taken or not alone_ok:
                    break
                k = 1  # a record larger than the bound goes alone
            head, rest = chunk.split(k)
            if rest is None:
                buf.chunks.popleft()
            else:
                buf.chunks[0] = rest
            taken.append(head)
            buf.nbytes -= head.nbytes
            buf.records -= head.count
            self._buffered_bytes -= head.nbytes
            self._buffered_records -= head.count
            room -= head.nbytes
            records_left -= head.count
            if rest is not None:
                break
        return taken, not buf.chunks

    def _take_segments(self, buf: _Buffer, partition: int, room: int, records_left: int,
                       alone_ok: bool) -> tuple[list[_Segment], bool]:
        """Leading sealed segments of ``buf`` within ``room`` bytes (each with its
        item's overhead) and ``records_left`` records (one larger goes alone when
        ``alone_ok``); returns them and whether no sealed segment is left."""
        taken: list[_Segment] = []
        while buf.segments and buf.segments[0].sealed:
            seg = buf.segments[0]
            if seg.nbytes > room or seg.records > records_left:
                if taken or not alone_ok:
                    break
            buf.segments.popleft()
            taken.append(seg)
            buf.nbytes -= seg.nbytes
            buf.records -= seg.records
            buf.sendable -= seg.nbytes
            self._sendable_bytes -= seg.nbytes
            self._buffered_bytes -= seg.nbytes
            self._buffered_records -= seg.records
            room -= seg.nbytes + self._batch_overhead(partition)
            records_left -= seg.records
        return taken, not (buf.segments and buf.segments[0].sealed)

    def _run(self, batches: list[Batch], flush: bool, broker: BrokerUrl) -> None:
        acks: list = []
        try:
            acks = self.client.send(batches, self.stats, self._stats_lock, flush=flush)
        except BaseException as exc:  # noqa: BLE001 - handed to the task thread
            with self._cond:
                if self._error is None:
                    self._error = exc
        with self._cond:
            with self._stats_lock:
                for a in acks:
                    self.stats.add_ack(a)
            self._inflight -= 1
            self._inflight_partitions.difference_update(b.partition for b in batches)
            if not flush:
                self._unhinted[broker] -= 1
            self._cond.notify_all()


def _list_type(values: Sequence[str | bytes | None]) -> pa.DataType:
    """Arrow type of a Python list of records: binary if any is bytes, else string."""
    return pa.binary() if any(isinstance(v, (bytes, bytearray, memoryview)) for v in values) else pa.string()
