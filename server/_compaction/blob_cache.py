"""A read-through cache of shared WAL blobs for the compactor service's compactors.

Every flush puts one slice per log into one shared blob, so in steady state
all logs compact slices of the same few recent blobs within a second or two
of each other. Fetched slice by slice that is one ranged GET per log per blob
(7-8 GETs per compacted MB with 64 logs and 8 MiB flushes), and on a small
machine the client's per-request CPU, not bandwidth, limits compaction.

:class:`SharedBlobCache` wraps the object store the service hands to its
compactors. For keys under ``{root}/wal-shared/``:

- the first ranged GET of a blob is passed through unchanged;
- the second (by any log) fetches the whole blob once, keeps it in an LRU
  bounded by ``max_bytes``, and answers from memory; concurrent requests for
  a blob being fetched wait for that one GET;
- a blob evicted from the LRU (or too big for it, or whose fetch failed) is
  never fetched whole again: its later slices are plain ranged GETs.

So a blob costs at most one extra GET and its size in extra bytes, even when
the cache is too small for the access pattern (a large backlog), and in the
steady state about two GETs instead of one per log. Objects are immutable
(SPEC 5), so a cached copy is always exactly what S3 would return; a slice
past the end of the object comes back short, as from S3. Everything else
(puts, whole-object gets, other keys) goes straight to the wrapped store.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Iterable, Iterator

from .._storage.objectstore import ObjectInfo, ObjectStore
from .._metrics import LlogMetrics

__all__ = ["SharedBlobCache"]

DEFAULT_MAX_TRACKED = 20_000
"""Blobs whose first-GET state is remembered: ~25 minutes of flushes at 14 a second, far more than
the seconds between a blob's first and last slice, and ~5 MB (100,000 grew a compactor by ~10 MB an
hour for 2 hours of a soak)."""

_RANGED = "ranged"  # seen once, fetched by range
_SPENT = "spent"    # fetched whole once already; never again


class SharedBlobCache:
    """ObjectStore wrapper; see the module docstring. Thread-safe."""

    def __init__(
        self,
        inner: ObjectStore,
        shared_prefix: str,
        max_bytes: int,
        metrics: LlogMetrics | None = None,
        *,
        max_tracked: int = DEFAULT_MAX_TRACKED,
    ) -> None:
        self._inner = inner
        self._prefix = shared_prefix
        self.max_bytes = max_bytes
        self._metrics = metrics or LlogMetrics()
        self._max_tracked = max_tracked
        self._lock = threading.Lock()
        self._blobs: OrderedDict[tuple[str, str], bytes] = OrderedDict()
        self._bytes = 0
        self._seen: OrderedDict[tuple[str, str], str] = OrderedDict()
        self._fetching: dict[tuple[str, str], threading.Event] = {}

    @property
    def cached_bytes(self) -> int:
        return self._bytes

    # -- ObjectStore ---------------------------------------------------------------------
    def put(self, bucket: str, key: str, data: bytes) -> None:
        self._inner.put(bucket, key, data)

    def list(self, bucket: str, prefix: str) -> Iterator[ObjectInfo]:
        return self._inner.list(bucket, prefix)

    def delete_many(self, bucket: str, keys: Iterable[str]) -> None:
        self._inner.delete_many(bucket, keys)

    def close(self) -> None:
        with self._lock:
            self._blobs.clear()
            self._bytes = 0

    def get(self, bucket: str, key: str, byte_range: tuple[int, int] | None = None) -> bytes:
        if byte_range is None or self.max_bytes <= 0 or not key.startswith(self._prefix):
            return self._inner.get(bucket, key, byte_range)
        k = (bucket, key)
        start, length = byte_range
        while True:
            with self._lock:
                blob = self._blobs.get(k)
                if blob is not None:
                    self._blobs.move_to_end(k)
                    self._count("hit")
                    return blob[start:start + length]
                waiting = self._fetching.get(k)
                if waiting is None:
                    if self._seen.get(k) == _RANGED:
                        done = threading.Event()
                        self._fetching[k] = done
                        self._seen[k] = _SPENT
                        break  # we fetch it whole, below
                    if k not in self._seen:
                        self._track(k, _RANGED)
                    self._count("ranged")
            if waiting is None:
                return self._inner.get(bucket, key, byte_range)
            waiting.wait()  # someone is fetching it whole: take it from the cache (or fall back)
        try:
            blob = self._inner.get(bucket, key)
        except BaseException:
            with self._lock:
                del self._fetching[k]
            done.set()
            raise
        with self._lock:
            del self._fetching[k]
            self._count("fill")
            self._metrics.inc("compactor_blob_cache_fill_bytes_total", len(blob))
            if len(blob) <= self.max_bytes:
                self._blobs[k] = blob
                self._bytes += len(blob)
                self._evict()
            self._metrics.set_gauge("compactor_blob_cache_bytes", self._bytes)
        done.set()
        return blob[start:start + length]

    # -- internals (under the lock) -----------------------------------------------------
    def _evict(self) -> None:
        while self._bytes > self.max_bytes and self._blobs:
            _, old = self._blobs.popitem(last=False)
            self._bytes -= len(old)
            self._metrics.inc("compactor_blob_cache_evictions_total")

    def _track(self, k: tuple[str, str], state: str) -> None:
        self._seen[k] = state
        while len(self._seen) > self._max_tracked:
            old, _ = self._seen.popitem(last=False)
            if old in self._blobs:  # keep what is cached trackable
                self._seen[old] = _SPENT
                break

    def _count(self, result: str) -> None:
        self._metrics.inc("compactor_blob_cache_requests_total", result=result)
