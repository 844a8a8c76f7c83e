"""Store wrappers that turn every call into a scheduling point with faults.

The protocol code gets :class:`SimMetadataStore` / :class:`SimObjectStore`;
each call first parks at :meth:`Scheduler.point` (so the scheduler decides
when it happens), then applies the fault drawn for it, then delegates to the
in-memory store underneath. The checker reads the inner stores directly,
which never yields.

:class:`ClockedObjectStore` is the in-memory object store with one change:
an object's ``last_modified_ms`` is the simulated wall clock, not a call
counter, so the vacuum's grace period and the blob age rule see real ages.
"""

from __future__ import annotations

import bisect
from typing import Iterable, Iterator, Sequence

from server._errors import MetadataStoreError, ObjectStoreError
from server._protocol.keys import oxia_sort_key
from server._storage.metastore import InMemoryMetadataStore, Record
from server._storage.objectstore import InMemoryObjectStore, ObjectInfo

from ._clock import SimClock
from ._scheduler import Scheduler, SimCrash

__all__ = ["ClockedObjectStore", "IndexedMetadataStore", "SimMetadataStore", "SimObjectStore"]


class IndexedMetadataStore(InMemoryMetadataStore):
    """``InMemoryMetadataStore`` with the same semantics but an ordered index.

    The fake sorts every key on each ``ceiling`` and ``range_scan``; the
    readers and the checker call them after nearly every step, which made
    them most of a run's time. This keeps the keys sorted by
    :func:`~server._protocol.keys.oxia_sort_key` (rebuilt when the key set
    changes) and answers both with a bisection. ``test_simulator`` checks
    that both stores answer alike.
    """

    def __init__(self) -> None:
        super().__init__()
        self._index: list[tuple[tuple[tuple[int, str], ...], str]] = []
        self._index_generation = -1
        self._generation = 0

    def _keys_sorted(self) -> list[tuple[tuple[tuple[int, str], ...], str]]:
        if self._index_generation != self._generation:  # the key set changed since the last build
            self._index = sorted((oxia_sort_key(k), k) for k in self._data)
            self._index_generation = self._generation
        return self._index


    def put(self, key: str, value: bytes, partition_key: str, expected_version: int | None = None,
            ephemeral: bool = False) -> int:
        new = key not in self._data
        version = super().put(key, value, partition_key, expected_version, ephemeral)
        if new:
            self._generation += 1
        return version

    def delete(self, key: str, partition_key: str, expected_version: int | None = None) -> bool:
        deleted = super().delete(key, partition_key, expected_version)
        if deleted:
            self._generation += 1
        return deleted

    def delete_range(self, min_key: str, max_key: str, partition_key: str) -> None:
        super().delete_range(min_key, max_key, partition_key)
        self._generation += 1

    def ceiling(self, key: str, partition_key: str) -> Record | None:
        with self._lock:
            self._enter("ceiling", key)
            index = self._keys_sorted()
            i = bisect.bisect_left(index, (oxia_sort_key(key),))
            if i == len(index):
                return None
            k = index[i][1]
            value, version = self._data[k]
            return Record(k, value, version)

    def range_scan(self, min_key: str, max_key: str, partition_key: str | None) -> Iterator[Record]:
        with self._lock:
            self._enter("range_scan", min_key)
            index = self._keys_sorted()
            lo = bisect.bisect_left(index, (oxia_sort_key(min_key),))
            hi = bisect.bisect_left(index, (oxia_sort_key(max_key),))
            rows = [Record(k, *self._data[k]) for _, k in index[lo:hi]]
        return iter(rows)


class ClockedObjectStore(InMemoryObjectStore):
    """``InMemoryObjectStore`` whose LastModified is the simulated clock."""

    def __init__(self, clock: SimClock, buckets: Iterable[str] = ("llog",)) -> None:
        super().__init__(buckets)
        self._sim_clock = clock

    def put(self, bucket: str, key: str, data: bytes) -> None:
        with self._lock:
            self.calls["put"] = self.calls.get("put", 0) + 1
            self._bucket(bucket)
            self.objects[(bucket, key)] = (bytes(data), self._sim_clock.now_ms())


def _after(fault: str | None, what: str, error: type[Exception]) -> None:
    """Faults that strike once the call has been applied."""
    if fault == "crash_after":
        raise SimCrash(f"crashed after {what}")
    if fault == "lost_reply":
        raise error(f"simulated lost reply: {what} was applied")


class SimMetadataStore:
    """A MetadataStore whose every call is a scheduling point."""

    def __init__(self, inner: InMemoryMetadataStore, sched: Scheduler, on_write=None) -> None:
        self.inner = inner
        self._sched = sched
        self._on_write = on_write or (lambda key: None)

    def _enter(self, op: str, key: str) -> str | None:
        fault = self._sched.point(op, key)
        if fault == "meta_error":
            raise MetadataStoreError(f"simulated metadata store failure: {op} {key}")
        return fault

    def get(self, key: str, partition_key: str) -> Record | None:
        self._enter("meta.get", key)
        return self.inner.get(key, partition_key)

    def get_many(self, items: Sequence[tuple[str, str]]) -> list[Record | None]:
        return [self.get(k, pk) for k, pk in items]  # as Oxia: one get after another, each a point

    def ceiling(self, key: str, partition_key: str) -> Record | None:
        self._enter("meta.ceiling", key)
        return self.inner.ceiling(key, partition_key)

    def put(self, key: str, value: bytes, partition_key: str, expected_version: int | None = None,
            ephemeral: bool = False) -> int:
        fault = self._enter("meta.put", key)
        try:
            return self.inner.put(key, value, partition_key, expected_version, ephemeral)
        finally:
            self._on_write(key)
            _after(fault, f"put {key}", MetadataStoreError)

    def delete(self, key: str, partition_key: str, expected_version: int | None = None) -> bool:
        fault = self._enter("meta.delete", key)
        try:
            return self.inner.delete(key, partition_key, expected_version)
        finally:
            self._on_write(key)
            _after(fault, f"delete {key}", MetadataStoreError)

    def delete_range(self, min_key: str, max_key: str, partition_key: str) -> None:
        fault = self._enter("meta.delete_range", min_key)
        try:
            self.inner.delete_range(min_key, max_key, partition_key)
        finally:
            self._on_write(min_key)
            _after(fault, f"delete_range [{min_key}, {max_key})", MetadataStoreError)

    def range_scan(self, min_key: str, max_key: str, partition_key: str | None) -> Iterator[Record]:
        self._enter("meta.range_scan", min_key)
        return self.inner.range_scan(min_key, max_key, partition_key)

    def list_keys(self, min_key: str, max_key: str, partition_key: str | None = None) -> list[str]:
        self._enter("meta.list_keys", min_key)
        return self.inner.list_keys(min_key, max_key, partition_key)

    def close(self) -> None:
        pass


class SimObjectStore:
    """An ObjectStore whose every call is a scheduling point."""

    def __init__(self, inner: InMemoryObjectStore, sched: Scheduler, on_write=None) -> None:
        self.inner = inner
        self._sched = sched
        self._on_write = on_write or (lambda key: None)

    def _enter(self, op: str, key: str) -> str | None:
        fault = self._sched.point(op, key)
        if fault == "obj_error":
            raise ObjectStoreError(f"simulated object store failure: {op} {key}")
        return fault

    def put(self, bucket: str, key: str, data: bytes) -> None:
        fault = self._enter("obj.put", key)
        self.inner.put(bucket, key, data)
        self._on_write(key)
        _after(fault, f"put s3://{bucket}/{key}", ObjectStoreError)

    def get(self, bucket: str, key: str, byte_range: tuple[int, int] | None = None) -> bytes:
        self._enter("obj.get", key)
        return self.inner.get(bucket, key, byte_range)

    def list(self, bucket: str, prefix: str) -> Iterator[ObjectInfo]:
        self._enter("obj.list", prefix)
        return self.inner.list(bucket, prefix)

    def delete_many(self, bucket: str, keys: Iterable[str]) -> None:
        keys = list(keys)
        fault = self._enter("obj.delete_many", keys[0] if keys else "")
        self.inner.delete_many(bucket, keys)
        self._on_write(keys[0] if keys else "")
        _after(fault, f"delete {len(keys)} objects", ObjectStoreError)

    def close(self) -> None:
        pass
