"""testing/invariants.py: each SPEC 8 rule finds the state that breaks it, a
correct log passes, and both ways of reading a store give the same view."""

from __future__ import annotations

import pytest

from server._config import OxiaConfig, S3Config
from server._protocol.codec import BATCH_ENCODING
from server._protocol.keys import LogLayout
from server._protocol.records import (
    CompactionRecord,
    CompactionState,
    ControlRecord,
    EntryType,
    LogState,
    PendingAppend,
)
from server._storage.metastore import InMemoryMetadataStore
from server._storage.objectstore import InMemoryObjectStore
from server.leaderless_log_compactor import LeaderlessLogCompactor
from server.leaderless_log_writer import LeaderlessLogWriter, SharedAppendGroup
from testing.invariants import (
    Entry,
    LogView,
    Snapshotter,
    assert_log,
    check_index,
    check_log,
    check_settled,
    describe,
    object_uris,
    read_log,
)

TP = ("t", 0)


def wal(start: int, end: int, key: str = "") -> Entry:
    return Entry(start, end, False, key or f"s3://b/wal-{start}")


def compacted(start: int, end: int, key: str = "") -> Entry:
    return Entry(start, end, True, key or f"s3://b/c-{start}")


def pending(start: int, end: int, append_id: str = "a", key: str = "") -> PendingAppend:
    return PendingAppend(append_id, start, end, end - start + 1, EntryType.WAL, key or f"s3://b/wal-{start}",
                         BATCH_ENCODING, 0, 1, 0)


def view(counter: int, *entries: Entry, cursor: int = 1, p: PendingAppend | None = None,
         record: CompactionRecord | None = None, state: LogState = LogState.OPEN) -> LogView:
    return LogView(ControlRecord(state, counter, p), cursor, record, sorted(entries, key=lambda e: e.end))


def record(state: CompactionState, start: int, end: int, key: str) -> CompactionRecord:
    return CompactionRecord("c", state, start, end, end - start + 1, key, BATCH_ENCODING, 0)


def rules(v: LogView, prev: LogView | None = None, objects: set[str] | None = None) -> list[str]:
    """The SPEC rule of each finding, e.g. ``8.1.4`` or ``8.2 O1-O3``."""
    found = check_log(TP, v, prev, objects)
    return [line.rsplit("[", 1)[1].rstrip("]") if line.endswith("]") else line for line in found]


def test_a_correct_log_in_every_allowed_state_passes() -> None:
    quiet = view(10, compacted(1, 3), wal(4, 6), wal(7, 9), cursor=4, p=pending(7, 9))
    assert check_log(TP, quiet) == [] and check_settled(TP, quiet) == []
    unmaterialized = view(10, wal(1, 6), p=pending(7, 9))
    assert check_log(TP, unmaterialized) == []
    o1 = view(10, wal(1, 3), wal(4, 6), compacted(1, 9, "k"),
              record=record(CompactionState.WRITING_COMPACTED_INDEX, 1, 9, "k"))
    o2 = view(10, wal(4, 6), compacted(1, 9, "k"), record=record(CompactionState.DELETING_OLD, 1, 9, "k"))
    o3 = view(10, compacted(1, 9, "k"), wal(4, 6), cursor=10)  # a late materialization below the cursor
    for v in (o1, o2, o3):
        assert check_log(TP, v) == [], describe(TP, v)
    assert check_log(TP, o3, objects={"s3://b/c-1", "k"}) == []  # a redundant entry may name a deleted object


def test_rules_over_time() -> None:
    before = view(10, wal(1, 9))
    assert rules(view(8, wal(1, 7)), before) == ["8.1.2"]
    fenced = view(10, wal(1, 9), state=LogState.FENCED)
    assert rules(view(11, wal(1, 10), state=LogState.FENCED), fenced) == ["8.1.3"]
    assert rules(view(10, compacted(1, 2), wal(3, 9), cursor=3), view(10, compacted(1, 3), wal(4, 9), cursor=4)) == [
        "8.1.7"]


def test_pending_rules() -> None:
    assert rules(view(10, wal(1, 6), p=pending(7, 8))) == ["8.1.8", "8.1.4"]
    assert "FENCED with a pending" in rules(view(10, wal(1, 6), p=pending(7, 9), state=LogState.FENCED))[0]
    assert rules(view(10, wal(1, 6), wal(7, 8), p=pending(7, 9))) == ["8.1.8"]  # part of pending, not its key
    materialized = view(10, wal(1, 6), wal(7, 9), p=pending(7, 9))
    assert rules(view(10, wal(1, 6), p=pending(7, 9)), materialized) == ["8.1.8"]  # its end key went away
    assert rules(view(10, wal(1, 6), p=pending(7, 9, "other")), materialized) == []  # another pending: fine


def test_coverage_and_cursor_rules() -> None:
    assert rules(view(7, wal(1, 3), wal(4, 7))) == ["8.1.5"]
    assert rules(view(10, wal(1, 3), wal(7, 9))) == ["8.1.4"]
    assert rules(view(10, wal(1, 9), cursor=11))[0] == "8.1.7"
    assert "cursor 11 outside [1, 10]" in check_log(TP, view(10, wal(1, 9), cursor=11))[0]
    assert rules(view(10, wal(1, 3), wal(4, 9), cursor=4)) == ["8.1.7"]  # [1, 3] below the cursor is WAL
    assert rules(view(10, compacted(1, 3), wal(4, 9), cursor=5)) == ["8.1.7", "8.1.7"]
    assert "without a compaction cursor" in check_log(TP, view(10, wal(1, 9), cursor=None))[0]
    assert check_log(TP, LogView(entries=[wal(1, 1)]))  # an index without meta/control


def test_overlap_rules() -> None:
    assert check_index("t:0", [compacted(1, 5), compacted(4, 9)]) != []
    assert check_index("t:0", [wal(1, 5), wal(4, 9)]) != []
    assert check_index("t:0", [compacted(1, 5), wal(4, 9)]) != []
    assert check_index("t:0", [compacted(1, 5), wal(2, 3), wal(6, 9)]) == []
    no_record = view(10, compacted(1, 9), wal(4, 6), cursor=1)
    assert "8.2 O1-O3" in rules(no_record)
    assert rules(view(10, wal(1, 3), compacted(4, 9), cursor=1)) == ["8.2"]  # COMPACTED above the cursor, no record


def test_compaction_record_rules() -> None:
    k = "s3://b/k"
    deleting = view(10, compacted(1, 9, k), cursor=10, record=record(CompactionState.DELETING_OLD, 1, 9, k))
    assert rules(deleting) == ["8.1.9"]
    updating = view(10, compacted(1, 9, k), cursor=10, record=record(CompactionState.UPDATING_CURSOR, 1, 9, k))
    assert rules(updating) == []
    stale = view(10, compacted(1, 3, k), wal(4, 9), cursor=4,
                 record=record(CompactionState.WRITING_COMPACTED_INDEX, 1, 3, k))
    assert "stale compaction" in check_log(TP, stale)[0]


def test_references_name_existing_objects() -> None:
    v = view(10, wal(1, 6), wal(7, 9), p=pending(7, 9))
    everything = {"s3://b/wal-1", "s3://b/wal-7"}
    assert check_log(TP, v, objects=everything) == []
    found = check_log(TP, v, objects={"s3://b/wal-1"})
    assert len(found) == 2 and all("deleted object" in line for line in found)  # the entry and the pending


def test_settled_log() -> None:
    k = "s3://b/k"
    assert check_settled(TP, view(10, compacted(1, 9, k), cursor=10,
                                  record=record(CompactionState.UPDATING_CURSOR, 1, 9, k)))
    assert check_settled(TP, view(10, wal(1, 6), p=pending(7, 9)))  # not materialized
    assert check_settled(TP, view(10, compacted(1, 6), wal(4, 6), wal(7, 9), cursor=7))  # a redundant entry
    assert check_settled(TP, LogView())


@pytest.fixture
def written():
    """A log with compacted, WAL and pending parts, written by the real code."""
    meta, objects = InMemoryMetadataStore(), InMemoryObjectStore()
    stores = {"metadata_store": meta, "object_store": objects}
    oxia, s3 = OxiaConfig("fake:1", root_prefix="a/b"), S3Config("llog")
    with LeaderlessLogWriter(oxia, s3, **stores) as w, LeaderlessLogCompactor(oxia, s3, **stores) as c:
        w.initialize_partition("t", 0)
        for b in range(4):
            w.append_shared([SharedAppendGroup("t", 0, [f"{b}.{i}".encode() for i in range(3)])])
            if b == 1:
                c.compact_once("t", 0)
        keys = LogLayout("a/b").partition("t", 0)
        yield meta, objects, keys


def test_both_readers_give_the_same_view_and_decode_once_per_version(written) -> None:
    meta, objects, keys = written
    snap = Snapshotter(meta, "a/b")
    views = snap.views()
    assert list(views) == [TP]
    assert views[TP] == read_log(meta, keys)
    assert [(e.start, e.end, e.compacted) for e in views[TP].entries] == [(1, 6, True), (7, 9, False), (10, 12, False)]
    assert views[TP].cursor == 7
    again = snap.views()[TP]
    assert again.control is views[TP].control  # not decoded again
    meta.put(keys.control, ControlRecord(LogState.FENCED, 13).encode(), keys.partition_key)
    assert snap.views()[TP].control.fenced  # a new version is decoded
    assert_log(meta, keys, object_uris(objects, "llog"))


def test_assert_log_shows_the_state(written) -> None:
    meta, objects, keys = written
    meta.delete(keys.index(9), keys.partition_key)
    with pytest.raises(AssertionError, match=r"offset 7 below the counter 13 is covered by nothing") as info:
        assert_log(meta, keys)
    assert "index [1-6 C] [10-12 W]" in str(info.value)
