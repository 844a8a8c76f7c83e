"""The shared-blob cache of the compactor service (blob_cache.py)."""

from __future__ import annotations

import threading
import time

import pytest

from server._errors import MetadataStoreError
from server._storage.objectstore import InMemoryObjectStore
from server.leaderless_log_metrics import LlogMetrics


# -- the shared-blob cache -------------------------------------------------------------------------------


class CountingObjects(InMemoryObjectStore):
    def __init__(self):
        super().__init__()
        self.gets: list[tuple[str, tuple | None]] = []
        self.fail_whole = False
        self.gate: threading.Event | None = None

    def get(self, bucket, key, byte_range=None):
        self.gets.append((key, byte_range))
        if byte_range is None and self.gate is not None:
            self.gate.wait(5)
        if byte_range is None and self.fail_whole:
            raise MetadataStoreError("S3 hiccup")
        return super().get(bucket, key, byte_range)


def cache(objs, max_bytes=1000):
    from server._compaction.blob_cache import SharedBlobCache

    return SharedBlobCache(objs, "llog/wal-shared/", max_bytes, LlogMetrics())


def put_blob(objs, name, size=100):
    data = bytes(range(256)) * (size // 256 + 1)
    objs.put("llog", f"llog/wal-shared/{name}", data[:size])
    return data[:size]


def test_blob_cache_second_reader_fetches_the_blob_whole_then_memory_serves():
    objs = CountingObjects()
    data = put_blob(objs, "b1")
    c = cache(objs)
    key = "llog/wal-shared/b1"
    assert c.get("llog", key, (0, 10)) == data[0:10]          # first log: ranged
    assert c.get("llog", key, (10, 20)) == data[10:30]        # second log: whole GET
    assert c.get("llog", key, (30, 50)) == data[30:80]        # from memory
    assert c.get("llog", key, (90, 50)) == data[90:100]       # past the end: short, as from S3
    assert objs.gets == [(key, (0, 10)), (key, None)]
    assert c.cached_bytes == 100
    m = c._metrics
    assert (m.counter("compactor_blob_cache_requests_total", result="ranged"),
            m.counter("compactor_blob_cache_requests_total", result="fill"),
            m.counter("compactor_blob_cache_requests_total", result="hit")) == (1, 1, 2)


def test_blob_cache_passes_other_keys_and_whole_gets_through():
    objs = CountingObjects()
    objs.put("llog", "llog/orders/partitions/0/data/compacted/x", b"abc")
    put_blob(objs, "b1")
    c = cache(objs)
    for _ in range(3):
        c.get("llog", "llog/orders/partitions/0/data/compacted/x", (0, 2))
        c.get("llog", "llog/wal-shared/b1")
    assert len(objs.gets) == 6 and c.cached_bytes == 0
    c.put("llog", "llog/wal-shared/new", b"x")
    assert objs.objects[("llog", "llog/wal-shared/new")][0] == b"x"


def test_blob_cache_never_fetches_an_evicted_blob_whole_again():
    objs = CountingObjects()
    for name in ("a", "b", "c"):
        put_blob(objs, name, 400)
    c = cache(objs, max_bytes=800)
    for name in ("a", "b", "c"):           # c's fill evicts a
        c.get("llog", f"llog/wal-shared/{name}", (0, 1))
        c.get("llog", f"llog/wal-shared/{name}", (1, 1))
    assert c.cached_bytes == 800
    objs.gets.clear()
    for _ in range(3):
        c.get("llog", "llog/wal-shared/a", (5, 5))
    assert objs.gets == [("llog/wal-shared/a", (5, 5))] * 3
    assert c._metrics.counter("compactor_blob_cache_evictions_total") == 1


def test_blob_cache_too_big_blob_is_not_kept():
    objs = CountingObjects()
    put_blob(objs, "big", 2000)
    c = cache(objs, max_bytes=1000)
    for i in range(4):
        c.get("llog", "llog/wal-shared/big", (i, 1))
    assert [r for _, r in objs.gets] == [(0, 1), None, (2, 1), (3, 1)]
    assert c.cached_bytes == 0


def test_blob_cache_failed_fill_falls_back_to_ranges():
    objs = CountingObjects()
    data = put_blob(objs, "b")
    objs.fail_whole = True
    c = cache(objs)
    key = "llog/wal-shared/b"
    c.get("llog", key, (0, 1))
    with pytest.raises(MetadataStoreError):
        c.get("llog", key, (1, 1))
    assert c.get("llog", key, (2, 3)) == data[2:5]
    assert [r for _, r in objs.gets] == [(0, 1), None, (2, 3)]


def test_blob_cache_concurrent_readers_share_one_fill():
    objs = CountingObjects()
    data = put_blob(objs, "b", 300)
    c = cache(objs)
    key = "llog/wal-shared/b"
    c.get("llog", key, (0, 1))
    objs.gate = threading.Event()
    results = {}

    def read(i):
        results[i] = c.get("llog", key, (i, 7))

    threads = [threading.Thread(target=read, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    time.sleep(0.1)
    objs.gate.set()
    for t in threads:
        t.join(5)
    assert results == {i: data[i:i + 7] for i in range(8)}
    assert [r for _, r in objs.gets].count(None) == 1 and len(objs.gets) == 2


def test_blob_cache_forgets_old_blobs_so_a_long_run_stays_flat():
    """The soak's finding: the first-GET state of every blob ever read was kept
    (up to 100,000 entries), ~10 MB an hour of compactor memory for two hours.
    Tracking is bounded well below that; a forgotten blob costs one extra GET."""
    from server._compaction.blob_cache import DEFAULT_MAX_TRACKED

    objs = CountingObjects()
    c = cache(objs)
    assert DEFAULT_MAX_TRACKED <= 20_000
    for i in range(DEFAULT_MAX_TRACKED + 5_000):
        objs.put("llog", f"llog/wal-shared/{i}", b"xy")
        assert c.get("llog", f"llog/wal-shared/{i}", (0, 1)) == b"x"
    assert len(c._seen) == DEFAULT_MAX_TRACKED
