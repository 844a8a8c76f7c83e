"""The file-backed tail cache: one directory shared by write and read broker processes.

Layout (topic names are validated by ``TopicPartition`` before they become a
path segment, so ``/`` or ``..`` can never escape the directory)::

    {dir}/v2/{ns}/{topic}/{partition}/state         "llog-tail-cache 1", "base hw",
                                                     then one "start end bytes" line per segment
    {dir}/v2/{ns}/{topic}/{partition}/{start:020d}-{end:020d}.seg   records start..end: the i64
                                                     offset of its first batch's first record
                                                     (<= start), then whole RecordBatch v2 batches
    {dir}/v2/{ns}/{topic}/{partition}/.lock         flock serializing writer processes

``ns`` is a hash of the Oxia address, namespace and root prefix, so logs
never share entries. Every file is written to a temporary name and published
with ``os.replace``: a reader sees the old file or the new one, never a torn
one; segment bytes are CRC-checked as well (each batch's CRC-32C). A segment
holds whole batches (a slice is kept from one of its batch boundaries: see
``place_batches``); a reader skips any records before the name's start. A
segment's name fixes its offsets and offsets are written once, so a segment
is correct even when the state that listed it is stale. A missing, corrupt or
evicted file is a MISS. A write process starts by moving its namespace away,
so nothing survives a restart of the writer.

The run rules are those of ``tail_cache.py`` (one contiguous run per
partition; see ``place_slice`` and ``place_batches``). Writes happen on one
named publisher thread, in publish order, so the flusher that publishes is
never slowed by disk I/O.

A read process cannot be notified by a write process's publish, so while
consume requests wait, one poller thread stats the waited partitions'
``state`` files every ``poll_ms`` (a stat per partition, never Oxia or S3)
and notifies the waiters of any partition whose file changed.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import queue
import shutil
import struct
import threading
import uuid
from collections import deque
from pathlib import Path
from typing import Iterable, NamedTuple

from .._errors import CorruptBatch
from .._protocol.stored_batches import StoredBatches
from .._protocol.keys import TopicPartition
from .._metrics import LlogMetrics
from .._config import OxiaConfig
from .config import BrokerConfig
from .tail_cache import (
    HIT,
    MISS,
    CacheLookup,
    CacheRun,
    MemoryTailCache,
    NullTailCache,
    TailCache,
    TailSignals,
    answer_without_records,
    place_batches,
)
from .._protocol.record_spans import RecordSpan, take_records

__all__ = ["FileTailCache", "namespace_key", "make_tail_cache"]

log = logging.getLogger(__name__)

_STATE_MAGIC = "llog-tail-cache 1"
_I64 = struct.Struct(">q")


def namespace_key(oxia_address: str, oxia_namespace: str, root_prefix: str) -> str:
    """The directory name that keeps one log's entries apart from another's."""
    text = f"{oxia_address}\n{oxia_namespace}\n{root_prefix}"
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:24]


class _State(NamedTuple):
    base: int
    hw: int
    segments: list[tuple[int, int, int]]  # (start, end, file bytes)


def _segment_name(start: int, end: int) -> str:
    return f"{start:020d}-{end:020d}.seg"


def _parse_state(text: str) -> _State | None:
    lines = text.split("\n")
    try:
        if lines[0] != _STATE_MAGIC:
            return None
        base, hw = (int(x) for x in lines[1].split())
        segs = [tuple(int(x) for x in line.split()) for line in lines[2:] if line]
    except (IndexError, ValueError):
        return None
    if any(len(s) != 3 for s in segs):
        return None
    return _State(base, hw, segs)  # type: ignore[arg-type]


def _format_state(state: _State) -> str:
    lines = [_STATE_MAGIC, f"{state.base} {state.hw}"]
    lines += [f"{s} {e} {n}" for s, e, n in state.segments]
    return "\n".join(lines) + "\n"


def _write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to a temporary file in the same directory and rename it
    over ``path``: readers see the old file or the new one, never a torn one.
    No fsync: the cache is no source of truth; after a crash a short file
    fails the reader's length/CRC check and is a miss."""
    tmp = path.with_name(f".tmp-{uuid.uuid4().hex}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise


class FileTailCache:
    """Tail cache in a directory shared by write and read broker processes."""

    mode = "file"

    def __init__(
        self,
        directory: str | os.PathLike[str],
        namespace: str,
        max_bytes: int,
        signals: TailSignals | None = None,
        metrics: LlogMetrics | None = None,
        *,
        writer: bool,
        poll_ms: int = 10,
    ) -> None:
        self.max_bytes = max_bytes
        self._dir = Path(directory) / "v2" / namespace
        self.signals = signals or TailSignals()
        self._metrics = metrics or LlogMetrics()
        self._poll_s = poll_ms / 1000.0
        self._closed = threading.Event()
        self._fifo: deque[tuple[TopicPartition, int, int]] = deque()
        self._owned: dict[tuple[TopicPartition, int, int], int] = {}
        self._bytes = 0
        self._queue: queue.Queue[tuple[TopicPartition, int, tuple[bytes, ...]] | threading.Event | None] = (
            queue.Queue()
        )
        self._publisher: threading.Thread | None = None
        if writer:
            self._reset_namespace()
            self._publisher = threading.Thread(target=self._publish_loop, name="llog-tail-cache-publisher", daemon=True)
            self._publisher.start()
        self._poller = threading.Thread(target=self._poll_loop, name="llog-tail-cache-poller", daemon=True)
        self._poller.start()

    @property
    def bytes_held(self) -> int:
        return self._bytes

    def _pdir(self, tp: TopicPartition) -> Path:
        # tp.topic was validated by TopicPartition: [A-Za-z0-9._-], not "." or "..".
        return self._dir / tp.topic / str(tp.partition)

    def _reset_namespace(self) -> None:
        """Move what an earlier writer left out of the readers' sight, delete it later."""
        if self._dir.exists():
            trash = self._dir.with_name(f".trash-{self._dir.name}-{uuid.uuid4().hex[:8]}")
            try:
                os.replace(self._dir, trash)
            except OSError as exc:
                log.warning("tail cache: cannot clear %s: %s", self._dir, exc)
            else:
                threading.Thread(
                    target=shutil.rmtree, args=(trash, True), name="llog-tail-cache-clear", daemon=True
                ).start()
        self._dir.mkdir(parents=True, exist_ok=True)

    # -- writer side ---------------------------------------------------------------
    def publish(self, tp: TopicPartition, start_offset: int, payloads: StoredBatches) -> None:
        if self._publisher is None or not payloads:
            self.signals.notify(tp)
            return
        self._queue.put((tp, start_offset, payloads))

    def flush(self, timeout_s: float = 10.0) -> None:
        """Wait until everything published so far is on disk."""
        if self._publisher is None or self._closed.is_set():
            return
        done = threading.Event()
        self._queue.put(done)
        done.wait(timeout_s)

    def _publish_loop(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            if isinstance(item, threading.Event):  # a flush() marker
                item.set()
                continue
            tp, start, payloads = item
            try:
                self._publish_now(tp, start, payloads)
            except Exception:  # never stop publishing because one write failed
                log.warning("tail cache: publishing %s@%d failed", tp, start, exc_info=True)
                self._metrics.inc("tail_cache_errors_total", op="publish")
            self.signals.notify(tp)

    def _locked(self, pdir: Path):  # -> ContextManager
        pdir.mkdir(parents=True, exist_ok=True)
        return _FileLock(pdir / ".lock")

    def _publish_now(self, tp: TopicPartition, start: int, payloads: StoredBatches) -> None:
        pdir = self._pdir(tp)
        with self._locked(pdir):
            state = self._read_state(pdir)
            run = None if state is None else CacheRun(state.base, state.hw)
            action, keep_start, keep_end = place_batches(run, start, payloads)
            if action == "ignore":
                return
            segs = [] if state is None or action == "reset" else list(state.segments)
            dropped = [] if state is None or action != "reset" else list(state.segments)
            base = keep_start if action == "reset" or state is None else state.base
            hw = keep_end if state is None or action == "reset" else max(state.hw, keep_end)
            lo = payloads.batch_of(keep_start - start)
            first = start + payloads.record_starts[lo]
            data = _I64.pack(first) + bytes(memoryview(payloads.data)[payloads.byte_starts[lo]:])
            if len(data) > self.max_bytes:
                if action != "prepend":  # too big: only move the high watermark
                    dropped += segs
                    segs, base, hw = [], keep_end + 1, keep_end
                    _write_atomic(pdir / "state", _format_state(_State(base, hw, segs)).encode())
                    self._unlink(pdir, tp, dropped)
                return
            _write_atomic(pdir / _segment_name(keep_start, keep_end), data)
            entry = (keep_start, keep_end, len(data))
            if action == "prepend":
                segs.insert(0, entry)
                base = keep_start
            else:
                segs.append(entry)
            _write_atomic(pdir / "state", _format_state(_State(base, hw, segs)).encode())
            self._unlink(pdir, tp, dropped)
        self._owned[(tp, keep_start, keep_end)] = len(data)
        self._fifo.append((tp, keep_start, keep_end))
        self._bytes += len(data)
        self._metrics.inc("tail_cache_published_records_total", len(payloads))
        self._evict()
        self._forget_dropped()
        self._metrics.set_gauge("tail_cache_bytes", self._bytes)

    def _unlink(self, pdir: Path, tp: TopicPartition, segments: Iterable[tuple[int, int, int]]) -> None:
        for s, e, _ in segments:
            try:
                (pdir / _segment_name(s, e)).unlink()
            except FileNotFoundError:
                pass
            size = self._owned.pop((tp, s, e), None)
            if size is not None:
                self._bytes -= size

    def _forget_dropped(self) -> None:
        """Rebuild the eviction queue from the segments still owned once the
        others are half of it (a run dropped at a gap leaves its entries queued,
        and eviction passes them only over the cap: see ``MemoryTailCache``)."""
        if len(self._fifo) > 2 * len(self._owned) + 64:
            self._fifo = deque(dict.fromkeys(key for key in self._fifo if key in self._owned))

    def _evict(self) -> None:
        while self._bytes > self.max_bytes and self._fifo:
            tp, s, e = self._fifo.popleft()
            if (tp, s, e) not in self._owned:
                continue
            pdir = self._pdir(tp)
            with self._locked(pdir):
                state = self._read_state(pdir)
                if state is not None and any(seg[:2] == (s, e) for seg in state.segments):
                    idx = next(i for i, seg in enumerate(state.segments) if seg[:2] == (s, e))
                    gone, kept = state.segments[: idx + 1], state.segments[idx + 1:]
                    base = kept[0][0] if kept else state.hw + 1
                    _write_atomic(pdir / "state", _format_state(_State(base, state.hw, kept)).encode())
                else:
                    gone = [(s, e, 0)]
                self._unlink(pdir, tp, gone)
            self._metrics.inc("tail_cache_evictions_total")

    # -- reader side ---------------------------------------------------------------
    def _read_state(self, pdir: Path) -> _State | None:
        try:
            text = (pdir / "state").read_text("utf-8")
        except (FileNotFoundError, NotADirectoryError):
            return None
        except (OSError, UnicodeDecodeError):
            self._metrics.inc("tail_cache_errors_total", op="read_state")
            return None
        state = _parse_state(text)
        if state is None:
            self._metrics.inc("tail_cache_errors_total", op="parse_state")
        return state

    def lookup(self, tp: TopicPartition, offset: int, limit: int, first_limit: int | None) -> CacheLookup:
        pdir = self._pdir(tp)
        state = self._read_state(pdir)
        if state is None:
            return CacheLookup(MISS)
        answer = answer_without_records(state.base, state.hw, offset)
        if answer is not None:
            return answer
        failed: list[bool] = []

        def spans() -> Iterable[RecordSpan]:
            expected = state.base
            for s, e, _ in state.segments:
                if s != expected:
                    failed.append(True)  # not contiguous: never trust past a hole
                    return
                expected = e + 1
                if e < offset:
                    continue
                try:
                    data = (pdir / _segment_name(s, e)).read_bytes()
                    if len(data) < _I64.size:
                        raise CorruptBatch("segment shorter than its offset")
                    (first,) = _I64.unpack_from(data)
                    if first > s:
                        raise CorruptBatch("segment starts after its name")
                    batches = StoredBatches.check(memoryview(data)[_I64.size:], expected_count=e - first + 1)
                except (OSError, CorruptBatch):
                    # Evicted or damaged meanwhile: what was read is still exact.
                    self._metrics.inc("tail_cache_errors_total", op="read_segment")
                    failed.append(True)
                    return
                yield RecordSpan.whole(first, batches).since(max(s, offset))
            if expected <= state.hw:
                failed.append(True)

        taken, _ = take_records(spans(), limit, first_limit)
        if not taken and failed:
            return CacheLookup(MISS, state.hw)
        return CacheLookup(HIT, state.hw, taken)

    def watch_token(self, tp: TopicPartition) -> object:
        try:
            st = os.stat(self._pdir(tp) / "state")
        except OSError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def _poll_loop(self) -> None:
        """While consume requests wait, stat their partitions' state files and
        notify on change (a read process has no other way to hear of a publish
        by a write process). Idle when nobody waits."""
        while not self._closed.is_set():
            waiters = self.signals.waiters()
            if not waiters:
                self.signals.wait_for_waiters(0.5)
                continue
            seen: dict[TopicPartition, object] = {}
            for w in waiters:
                for tp in w.tps:
                    if tp not in seen:
                        seen[tp] = self.watch_token(tp)
                    if w.tokens.get(tp) != seen[tp]:
                        w.tokens[tp] = seen[tp]
                        w.notify(tp)
            self._closed.wait(self._poll_s)

    def close(self) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        self.signals.kick()
        if self._publisher is not None:
            self._queue.put(None)
            self._publisher.join(10)
        self._poller.join(2)


class _FileLock:
    """``flock`` on a lock file: serializes writer processes on one partition."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._fd = -1

    def __enter__(self) -> _FileLock:
        self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        finally:
            os.close(self._fd)


def make_tail_cache(config: BrokerConfig, oxia: OxiaConfig, metrics: LlogMetrics) -> TailCache:
    """The tail cache ``config`` asks for: off, file-backed in a shared
    directory (namespaced by the Oxia service, namespace and root prefix), or
    in memory when this process both fills and reads it."""
    if not config.tail_cache_enabled:
        return NullTailCache()
    if config.tail_cache_dir:
        return FileTailCache(
            config.tail_cache_dir,
            namespace_key(oxia.service_address, oxia.namespace, oxia.root_prefix),
            config.tail_cache_max_bytes,
            metrics=metrics,
            writer=config.serves_produce,
            poll_ms=config.tail_cache_poll_ms,
        )
    if config.role == "both":
        return MemoryTailCache(config.tail_cache_max_bytes, metrics=metrics)
    return NullTailCache()  # nothing in this process would read or fill it
