"""Vacuum decisions over the in-memory fakes (SPEC 7.9).

Objects are aged by the vacuum's clock: the fake object store stamps objects
with small logical times, so a vacuum whose ``now_ms`` is far ahead sees every
object as old, and ``age()`` makes one young again.
"""

from __future__ import annotations

import pytest

from server._config import OxiaConfig, S3Config
from server._errors import AppendFailed, ObjectStoreError
from server._protocol.codec import encode_batch, encode_shared_blob
from server._protocol.records import IndexEntry
from server._storage.metastore import InMemoryMetadataStore
from server._storage.objectstore import InMemoryObjectStore, ObjectInfo
from server.leaderless_log_compactor import CompactionOutcome, LeaderlessLogCompactor
from server.leaderless_log_metrics import LlogMetrics
from server.leaderless_log_reader import LeaderlessLogReader
from server.leaderless_log_vacuum import (
    KEEP_CHECK_FAILED,
    KEEP_COMPACTING,
    KEEP_FOREIGN,
    KEEP_INDEXED,
    KEEP_PENDING,
    KEEP_UNREADABLE,
    KEEP_YOUNG,
    Vacuum,
    format_report,
)
from server.leaderless_log_writer import LeaderlessLogWriter, SharedAppendGroup

OXIA = OxiaConfig("fake:1", root_prefix="llog")
S3 = S3Config("llog")
NOW = 10_000_000
GRACE = 60_000


class Crash(Exception):
    pass


class Objects(InMemoryObjectStore):
    """The fake, with a listing sorted by key (``ObjectInfo`` is not orderable,
    so the fake's own ``sorted(ObjectInfo...)`` raises on two objects)."""

    def list(self, bucket, prefix):
        with self._lock:
            self._bucket(bucket)
            rows = [ObjectInfo(k, len(v), t) for (b, k), (v, t) in self.objects.items()
                    if b == bucket and k.startswith(prefix)]
        return iter(sorted(rows, key=lambda i: i.key))


@pytest.fixture
def stores():
    return InMemoryMetadataStore(), Objects()


def make(stores, cls, **kw):
    meta, objs = stores
    return cls(OXIA, S3, metadata_store=meta, object_store=objs, **kw)


def vacuum(stores, grace_ms=GRACE, **kw) -> Vacuum:
    kw.setdefault("allow_unsafe_grace", True)  # the fakes run no writer: any grace is safe here
    return make(stores, Vacuum, grace_ms=grace_ms, now_ms=lambda: NOW, **kw)


def age(stores, key: str, age_ms: int) -> None:
    _, objs = stores
    data, _ = objs.objects[("llog", key)]
    objs.objects[("llog", key)] = (data, NOW - age_ms)


def keys(stores, part: str = "") -> set[str]:
    _, objs = stores
    return {k for (_, k) in objs.objects if part in k}


def shared_keys(stores) -> set[str]:
    return keys(stores, "/wal-shared/")


def write(stores, groups) -> list:
    with make(stores, LeaderlessLogWriter) as w:
        for topic, partition, _ in groups:
            w.initialize_partition(topic, partition)
        return w.append_shared([SharedAppendGroup(t, p, list(pl)) for t, p, pl in groups])


def compact(stores, topic="orders", partition=0, **kw):
    with make(stores, LeaderlessLogCompactor, **kw) as c:
        return c.compact_once(topic, partition)


def read_all(stores, topic="orders", partition=0):
    with make(stores, LeaderlessLogReader) as r:
        return [x.payload for x in r.iter_from(topic, partition, 1)]


def two_partition_blob(stores) -> str:
    """One shared blob holding orders:0 (a, b) and orders:1 (c); returns its key."""
    write(stores, [("orders", 0, [b"a", b"b"]), ("orders", 1, [b"c"])])
    (blob,) = shared_keys(stores)
    return blob


# -- objects of failed appends, aborted compactions and shared blobs ----------------------


def test_blob_deleted_once_every_partition_in_it_is_compacted(stores):
    blob = two_partition_blob(stores)
    assert compact(stores, "orders", 0).outcome == CompactionOutcome.COMPACTED
    assert compact(stores, "orders", 1).outcome == CompactionOutcome.COMPACTED
    with vacuum(stores) as v:
        report = v.run_once()
    assert report.deleted_keys == (blob,)
    assert report.deleted[0].kind == "wal-shared"
    assert report.bytes_reclaimed == report.deleted[0].size > 0
    assert report.kept == {KEEP_INDEXED: 2}  # the two compacted objects
    assert blob not in keys(stores)
    assert read_all(stores, "orders", 0) == [b"a", b"b"]
    assert read_all(stores, "orders", 1) == [b"c"]


def test_blob_with_one_uncompacted_slice_survives(stores):
    blob = two_partition_blob(stores)
    compact(stores, "orders", 0)
    with vacuum(stores) as v:
        report = v.run_once()
    assert report.deleted == ()
    assert report.kept == {KEEP_INDEXED: 2}  # the blob (orders:1) and orders:0's compacted object
    assert blob in keys(stores)
    assert read_all(stores, "orders", 1) == [b"c"]


def test_fresh_orphan_younger_than_grace_survives_and_old_one_goes(stores):
    _, objs = stores
    blob, _ = encode_shared_blob([("orders", 0, 1, encode_batch([b"x"]))], 1)
    objs.put("llog", "llog/wal-shared/fresh", blob)
    objs.put("llog", "llog/wal-shared/old", blob)
    age(stores, "llog/wal-shared/fresh", GRACE - 1)
    age(stores, "llog/wal-shared/old", GRACE)
    with vacuum(stores) as v:
        report = v.run_once()
    assert report.deleted_keys == ("llog/wal-shared/old",)
    assert report.kept == {KEEP_YOUNG: 1}
    assert keys(stores) == {"llog/wal-shared/fresh"}


# -- references and crash states --------------------------------------------------------


def test_compacted_orphan_from_a_crash_at_k4_is_deleted_after_grace(stores):
    write(stores, [("orders", 0, [b"a", b"b"])])

    def crash(step):
        if step == "blob_written":
            raise Crash(step)

    with pytest.raises(Crash):
        compact(stores, step_hook=crash)
    (orphan,) = keys(stores, "/data/compacted/")
    age(stores, orphan, 10)
    with vacuum(stores) as v:
        assert v.run_once().kept == {KEEP_INDEXED: 1, KEEP_YOUNG: 1}
    age(stores, orphan, GRACE + 1)
    with vacuum(stores) as v:
        report = v.run_once()
    assert report.deleted_keys == (orphan,)
    assert report.deleted[0].kind == "compacted"
    assert read_all(stores) == [b"a", b"b"]


def test_compaction_record_keeps_its_object_until_resumed(stores):
    write(stores, [("orders", 0, [b"a"])])
    write(stores, [("orders", 0, [b"b"])])

    def crash(step):
        if step == "record_created":
            raise Crash(step)

    with pytest.raises(Crash):
        compact(stores, step_hook=crash)
    (compacted,) = keys(stores, "/data/compacted/")
    with vacuum(stores) as v:
        report = v.run_once()
    assert report.deleted == ()
    assert report.kept == {KEEP_INDEXED: 2, KEEP_COMPACTING: 1}
    assert compact(stores).outcome == CompactionOutcome.RESUMED
    with vacuum(stores) as v:
        report = v.run_once()
    assert len(report.deleted) == 2 and all(d.kind == "wal-shared" for d in report.deleted)
    assert keys(stores) == {compacted}
    assert read_all(stores) == [b"a", b"b"]


def test_pending_append_keeps_its_blob(stores):
    meta, _ = stores
    with make(stores, LeaderlessLogWriter) as w:
        w.initialize_partition("orders", 0)
        meta.fail_next("put", key_contains="/index/")  # crash between reservation and index (C3/C4)
        # committed and acknowledged; the index create failed, so its pending stays
        assert w.append_shared([SharedAppendGroup("orders", 0, [b"a"])])
    with vacuum(stores) as v:
        report = v.run_once()
    assert report.kept == {KEEP_PENDING: 1}
    assert report.deleted == ()
    assert read_all(stores) == [b"a"]


def test_blob_of_a_failed_group_is_kept_while_another_log_uses_it(stores):
    """A group for an uninitialized log fails; the blob lives on for the other log."""
    with make(stores, LeaderlessLogWriter) as w:
        w.initialize_partition("orders", 0)
        with pytest.raises(AppendFailed):
            w.append_shared([SharedAppendGroup("orders", 0, [b"a"]), SharedAppendGroup("ghost", 0, [b"z"])])
    with vacuum(stores) as v:
        assert v.run_once().kept == {KEEP_INDEXED: 1}
    compact(stores)
    with vacuum(stores) as v:
        report = v.run_once()
    assert len(report.deleted) == 1 and report.deleted[0].kind == "wal-shared"


# -- redundant entries ---------------------------------------------------------------------


def plant_redundant_entry(stores) -> tuple[str, str]:
    """Compact orders:0 = [a][b], then re-create the WAL entry of [a] below the
    cursor, as a late materialization does (SPEC 7.2, 8.2 O3)."""
    meta, _ = stores
    write(stores, [("orders", 0, [b"a"])])
    first_index = meta.get("llog/orders/partitions/0/index/00000000000000000001", "orders:0")
    write(stores, [("orders", 0, [b"b"])])
    compact(stores)
    meta.put(first_index.key, first_index.value, "orders:0", expected_version=-1)
    blob = IndexEntry.decode(first_index.value).data_key.split("/", 3)[3]
    return first_index.key, blob


def test_redundant_wal_entry_below_cursor_is_deleted_and_frees_its_blob(stores):
    meta, _ = stores
    entry_key, blob = plant_redundant_entry(stores)
    with vacuum(stores) as v:
        report = v.run_once()
    assert report.redundant_entries == (entry_key,)
    assert meta.get(entry_key, "orders:0") is None
    assert blob in report.deleted_keys and len(report.deleted) == 2
    assert read_all(stores) == [b"a", b"b"]


def test_redundant_entries_can_be_kept(stores):
    meta, _ = stores
    entry_key, blob = plant_redundant_entry(stores)
    with vacuum(stores, delete_redundant_entries=False) as v:
        report = v.run_once()
    assert report.redundant_entries == ()
    assert meta.get(entry_key, "orders:0") is not None
    assert blob not in report.deleted_keys and len(report.deleted) == 1


def test_dry_run_changes_nothing_and_reports_what_a_real_run_does(stores):
    meta, objs = stores
    entry_key, _ = plant_redundant_entry(stores)
    objs.put("llog", "llog/orders/partitions/0/data/compacted/orphan", encode_batch([b"x"]))
    before = dict(objs.objects)
    with vacuum(stores) as v:
        dry = v.run_once(dry_run=True)
    assert dry.dry_run
    assert objs.objects == before
    assert meta.get(entry_key, "orders:0") is not None
    assert len(dry.deleted) == 3 and dry.redundant_entries == (entry_key,)
    with vacuum(stores) as v:
        real = v.run_once()
    assert real.deleted == dry.deleted
    assert real.bytes_reclaimed == dry.bytes_reclaimed
    assert real.redundant_entries == dry.redundant_entries
    assert real.kept == dry.kept
    assert "would delete" in format_report(dry) and "would delete" not in format_report(real)


# -- what vacuum never touches, and failures ----------------------------------------------------


def test_foreign_and_nested_root_objects_are_kept(stores):
    _, objs = stores
    blob, _ = encode_shared_blob([("orders", 0, 1, encode_batch([b"x"]))], 1)
    foreign = [
        "llog/sub/wal-shared/x",                           # a nested root "llog/sub"
        "llog/sub/orders/partitions/0/data/compacted/x",   # ... and its compacted object
        "llog/orders/partitions/00/data/compacted/x",      # non-canonical partition
        "llog/orders/partitions/0/data/other/x",
        "llog/notes.txt",
        "llogx/wal-shared/x",                              # another root sharing the text prefix
    ]
    for key in foreign:
        objs.put("llog", key, blob)
    with vacuum(stores) as v:
        report = v.run_once()
    assert report.deleted == ()
    assert report.kept == {KEEP_FOREIGN: 5}  # llogx/ is not even listed
    assert report.scanned == 5


def test_unreadable_header_is_kept_and_reported(stores):
    _, objs = stores
    objs.put("llog", "llog/wal-shared/short", b"LLS")
    objs.put("llog", "llog/wal-shared/garbage", b"NOPE" + b"\x00" * 20)
    objs.put("llog", "llog/wal-shared/badjson", b"LLS1\x00\x00\x00\x02{]")
    with vacuum(stores) as v:
        report = v.run_once()
    assert report.kept == {KEEP_UNREADABLE: 3}
    assert len(report.errors) == 3 and report.deleted == ()


def test_failed_reference_check_keeps_the_logs_objects(stores):
    meta, _ = stores
    two_partition_blob(stores)
    compact(stores, "orders", 0)
    compact(stores, "orders", 1)
    meta.fail_next("range_scan", key_contains="/orders/partitions/1/")
    with vacuum(stores) as v:
        report = v.run_once()
    assert report.deleted == ()
    assert report.kept[KEEP_CHECK_FAILED] == 2  # the shared blob and orders:1's compacted object
    assert any("orders:1" in e for e in report.errors)


def test_failed_delete_is_reported_not_counted(stores):
    _, objs = stores
    objs.put("llog", "llog/orders/partitions/0/data/compacted/orphan", encode_batch([b"x"]))

    def broken(bucket, keys):
        raise ObjectStoreError("S3 is down")

    objs.delete_many = broken
    with vacuum(stores) as v:
        report = v.run_once()
    assert report.deleted == () and report.bytes_reclaimed == 0
    assert report.errors and "S3 is down" in report.errors[0]


def test_headers_are_read_with_two_ranged_gets_and_cached(stores):
    _, objs = stores
    two_partition_blob(stores)
    objs.calls.clear()
    with vacuum(stores) as v:
        v.run_once()
        assert objs.calls == {"range_get": 2}
        v.run_once()
        assert objs.calls == {"range_get": 2}


def test_metrics(stores):
    two_partition_blob(stores)
    compact(stores, "orders", 0)
    compact(stores, "orders", 1)
    metrics = LlogMetrics()
    with vacuum(stores, metrics=metrics) as v:
        report = v.run_once(dry_run=True)
        assert metrics.counter("vacuum_bytes_reclaimed_total") == 0
        v.run_once()
    assert metrics.counter("vacuum_runs_total", outcome="ok") == 2
    assert metrics.counter("vacuum_objects_deleted_total", kind="wal-shared") == 1
    assert metrics.counter("vacuum_bytes_reclaimed_total") == report.bytes_reclaimed
    assert metrics.counter("vacuum_objects_scanned_total") == 6
    assert "llog_vacuum_bytes_reclaimed_total" in metrics.prometheus_text().decode()


def test_negative_grace_is_rejected(stores):
    from server._errors import ConfigError

    with pytest.raises(ConfigError):
        vacuum(stores, grace_ms=-1)
