"""compact_once over the in-memory fakes: the crash matrix, races, limits.

A crash is an exception raised from the compactor's step hook right after a
durable step; a *different* compactor then resumes. The same matrix runs with
real processes against real Oxia + S3 in tests/integration/test_compactor.py.
"""

from __future__ import annotations

import pytest

from server._config import OxiaConfig, S3Config
from server._errors import InvalidRequest
from server._protocol.keys import LogLayout
from server._protocol.records import CompactionCursor, CompactionState, ControlRecord, EntryType, IndexEntry
from server._storage.metastore import InMemoryMetadataStore
from server._storage.objectstore import InMemoryObjectStore
from server.leaderless_log_compactor import CompactionOutcome, LeaderlessLogCompactor
from server.leaderless_log_reader import LeaderlessLogReader
from server.leaderless_log_writer import LeaderlessLogWriter, SharedAppendGroup
from testing.invariants import assert_log, object_uris
from tests._step_clock import StepClock, stepped_runtime

OXIA = OxiaConfig("fake:1", root_prefix="llog")
S3 = S3Config("llog")
STEPS = ["blob_written", "record_created", "end_key_rewritten", "lower_keys_deleted", "cursor_advanced", "record_deleted"]


class Crash(Exception):
    pass


@pytest.fixture
def stores():
    return InMemoryMetadataStore(), InMemoryObjectStore()


def make(stores, cls, **kw):
    meta, objs = stores
    return cls(OXIA, S3, metadata_store=meta, object_store=objs, **kw)


def fill(stores, topic="orders", partition=0, batches=5, per=3):
    with make(stores, LeaderlessLogWriter) as w:
        w.initialize_partition(topic, partition)
        for b in range(batches):
            w.append_shared([SharedAppendGroup(topic, partition, [f"{b}.{i}".encode() for i in range(per)])])
    return [f"{b}.{i}".encode() for b in range(batches) for i in range(per)]


def index(meta, topic="orders", partition=0):
    prefix = f"llog/{topic}/partitions/{partition}/index/"
    out = []
    for rec in meta.range_scan(prefix, prefix + "~", f"{topic}:{partition}"):
        end = int(rec.key[len(prefix):])
        e = IndexEntry.decode(rec.value)
        out.append((end - e.msg_count + 1, end, e.type))
    return out


def check_invariants(meta, objects=None, topic="orders", partition=0):
    """SPEC 8 on a settled log (``testing/invariants.py``): the index tiles
    [1, hw] exactly once, COMPACTED entries below the cursor, no compaction
    in flight; with ``objects``, every reference names an existing object.
    Returns the cursor."""
    uris = None if objects is None else object_uris(objects, S3.bucket)
    return assert_log(meta, LogLayout("llog").partition(topic, partition), uris, settled=True).cursor


def read_all(stores, topic="orders", partition=0):
    with make(stores, LeaderlessLogReader) as r:
        return [x.payload for x in r.iter_from(topic, partition, 1)]


def test_compacts_contiguous_wal_run_into_one_object(stores):
    want = fill(stores)
    with make(stores, LeaderlessLogCompactor) as c:
        res = c.compact_once("orders", 0)
    assert res.outcome is CompactionOutcome.COMPACTED
    assert (res.start_offset, res.end_offset, res.msg_count, res.source_entries) == (1, 15, 15, 5)
    assert res.cursor == 16 and res.lag_offsets == 0
    assert index(stores[0]) == [(1, 15, "COMPACTED")]
    assert check_invariants(*stores) == 16
    assert read_all(stores) == want
    with make(stores, LeaderlessLogReader) as r:
        assert [r.read_offset("orders", 0, o).payload for o in (1, 8, 15)] == [want[0], want[7], want[14]]
    with make(stores, LeaderlessLogCompactor) as c:
        assert c.compact_once("orders", 0).outcome is CompactionOutcome.NOTHING_TO_DO


def test_one_get_per_source_blob_and_one_put(stores):
    fill(stores, batches=4)
    meta, objs = stores
    before = dict(objs.calls)
    with make(stores, LeaderlessLogCompactor) as c:
        c.compact_once("orders", 0)
    spent = {k: v - before.get(k, 0) for k, v in objs.calls.items() if v - before.get(k, 0)}
    assert spent == {"range_get": 4, "put": 1}


def test_max_offsets_limits_a_run_and_the_next_run_continues(stores):
    want = fill(stores, batches=5, per=3)
    with make(stores, LeaderlessLogCompactor) as c:
        first = c.compact_once("orders", 0, max_offsets=7)  # two whole batches (6); a third would exceed 7
        second = c.compact_once("orders", 0, max_offsets=7)
        third = c.compact_once("orders", 0, max_offsets=7)
    assert (first.start_offset, first.end_offset) == (1, 6)
    assert (second.start_offset, second.end_offset) == (7, 12)
    assert (third.start_offset, third.end_offset) == (13, 15)
    assert index(stores[0]) == [(1, 6, "COMPACTED"), (7, 12, "COMPACTED"), (13, 15, "COMPACTED")]
    assert read_all(stores) == want
    check_invariants(*stores)


def test_first_entry_is_taken_even_if_larger_than_max_offsets(stores):
    fill(stores, batches=2, per=10)
    with make(stores, LeaderlessLogCompactor) as c:
        res = c.compact_once("orders", 0, max_offsets=3)
    assert (res.start_offset, res.end_offset) == (1, 10)


def test_uninitialized_and_empty_partitions(stores):
    from server._errors import PartitionNotInitialized

    with make(stores, LeaderlessLogCompactor) as c:
        with pytest.raises(PartitionNotInitialized):
            c.compact_once("orders", 0)
        with make(stores, LeaderlessLogWriter) as w:
            w.initialize_partition("orders", 0)
        assert c.compact_once("orders", 0).outcome is CompactionOutcome.NOTHING_TO_DO


def test_recovers_a_crashed_writers_pending_append_first(stores):
    meta, _ = stores
    want = fill(stores, batches=2)
    with make(stores, LeaderlessLogWriter) as w:
        meta.fail_next("put", key_contains="/index/")
        # committed and acknowledged; the index create failed, so its pending stays
        assert w.append_shared([SharedAppendGroup("orders", 0, [b"p1", b"p2"])])
    with make(stores, LeaderlessLogCompactor) as c:
        res = c.compact_once("orders", 0)
    assert res.recovered_pending
    assert (res.start_offset, res.end_offset) == (1, 8)
    assert read_all(stores) == want + [b"p1", b"p2"]
    check_invariants(meta, stores[1])


def test_selection_stops_at_a_pending_append_that_cannot_be_cleared(stores, monkeypatch):
    """If the control record keeps a pending append (a writer is mid-commit),
    compaction stops below it (the limit)."""
    meta, _ = stores
    fill(stores, batches=3)
    c = make(stores, LeaderlessLogCompactor)
    monkeypatch.setattr(c, "_recover_pending", lambda keys: (6, 9, False))
    res = c.compact_once("orders", 0)
    assert (res.start_offset, res.end_offset) == (1, 6)
    c.close()


@pytest.mark.parametrize("step", STEPS)
def test_crash_matrix_resumed_by_another_compactor(stores, step):
    meta, _ = stores
    want = fill(stores, batches=4)
    seen_during: list[list[bytes]] = []

    def crash(name: str) -> None:
        seen_during.append(read_all(stores))  # reads in this intermediate state
        if name == step:
            raise Crash(name)

    with make(stores, LeaderlessLogCompactor, step_hook=crash) as first:
        with pytest.raises(Crash):
            first.compact_once("orders", 0)
    assert read_all(stores) == want
    with make(stores, LeaderlessLogCompactor) as second:
        res = second.compact_once("orders", 0)
        again = second.compact_once("orders", 0)
    if step == "record_deleted":
        assert res.outcome is CompactionOutcome.NOTHING_TO_DO  # the first run had finished
    elif step == "blob_written":
        assert res.outcome is CompactionOutcome.COMPACTED  # no record: a fresh run (the orphan waits for vacuum)
    else:
        assert res.outcome is CompactionOutcome.RESUMED
    assert again.outcome is CompactionOutcome.NOTHING_TO_DO
    assert all(s == want for s in seen_during)
    assert read_all(stores) == want
    assert index(meta) == [(1, 12, "COMPACTED")]
    assert check_invariants(meta, stores[1]) == 13


def test_race_loser_finds_the_range_taken_and_stops(stores):
    meta, _ = stores
    want = fill(stores, batches=3)
    other = make(stores, LeaderlessLogCompactor)
    outcomes = []

    def interleave(name: str) -> None:
        if name == "blob_written":  # while we built ours, the other compactor did the whole range
            outcomes.append(other.compact_once("orders", 0).outcome)

    with make(stores, LeaderlessLogCompactor, step_hook=interleave) as loser:
        res = loser.compact_once("orders", 0)
    other.close()
    assert outcomes == [CompactionOutcome.COMPACTED]
    assert res.outcome is CompactionOutcome.CONFLICT
    assert index(meta) == [(1, 9, "COMPACTED")]
    assert read_all(stores) == want
    check_invariants(meta, stores[1])


def test_race_other_compactor_resumes_our_record_midway(stores):
    meta, _ = stores
    want = fill(stores, batches=3)
    other = make(stores, LeaderlessLogCompactor)
    outcomes = []

    def interleave(name: str) -> None:
        if name == "record_created":  # the other one sees our record and finishes it
            outcomes.append(other.compact_once("orders", 0).outcome)

    with make(stores, LeaderlessLogCompactor, step_hook=interleave) as first:
        res = first.compact_once("orders", 0)
    other.close()
    assert outcomes == [CompactionOutcome.RESUMED]
    assert res.outcome in (CompactionOutcome.CONFLICT, CompactionOutcome.ABANDONED)
    assert index(meta) == [(1, 9, "COMPACTED")]
    assert read_all(stores) == want
    check_invariants(meta, stores[1])


def test_stale_record_beyond_a_finished_range_is_dropped(stores):
    """A record whose range start no longer equals the cursor is stale: resuming
    it must not create a second, overlapping COMPACTED entry."""
    meta, _ = stores
    fill(stores, batches=3)

    def crash(name: str) -> None:
        if name == "record_created":
            raise Crash(name)

    with make(stores, LeaderlessLogCompactor, step_hook=crash) as first:
        with pytest.raises(Crash):
            first.compact_once("orders", 0)
    # Someone moves the cursor past the record's start (as a racing compactor would).
    meta.put("llog/orders/partitions/0/meta/compaction-cursor", CompactionCursor(4).encode(), "orders:0")
    with make(stores, LeaderlessLogCompactor) as second:
        res = second.compact_once("orders", 0)
    assert res.outcome is CompactionOutcome.ABANDONED
    assert meta.get("llog/orders/partitions/0/meta/compaction", "orders:0") is None
    assert [k for k in index(meta) if k[2] == "COMPACTED"] == []


def test_deleting_old_refuses_when_end_key_is_not_its_entry(stores):
    from server._errors import InconsistentReadState
    from server._protocol.records import CompactionRecord

    meta, _ = stores
    fill(stores, batches=2)
    rec = CompactionRecord("x", CompactionState.DELETING_OLD, 1, 6, 6, "s3://llog/nowhere", "bytes-batch-v1", 1, 4)
    meta.put("llog/orders/partitions/0/meta/compaction", rec.encode(), "orders:0")
    with make(stores, LeaderlessLogCompactor) as c:
        with pytest.raises(InconsistentReadState):
            c.compact_once("orders", 0)
    assert len(index(meta)) == 2  # nothing deleted


def test_compaction_interleaved_with_appends(stores):
    meta, _ = stores
    want: list[bytes] = []
    with make(stores, LeaderlessLogWriter) as w, make(stores, LeaderlessLogCompactor) as c:
        w.initialize_partition("orders", 0)
        for round_ in range(6):
            for b in range(3):
                batch = [f"{round_}.{b}.{i}".encode() for i in range(2)]
                w.append_shared([SharedAppendGroup("orders", 0, batch)])
                want.extend(batch)
            c.compact_once("orders", 0, max_offsets=4)
            assert read_all(stores) == want
    check_invariants(meta, stores[1])


def test_compacted_range_stops_at_existing_compacted_entry_and_gap(stores):
    meta, _ = stores
    fill(stores, batches=2)
    with make(stores, LeaderlessLogCompactor) as c:
        c.compact_once("orders", 0)
        with make(stores, LeaderlessLogWriter) as w:
            w.append_shared([SharedAppendGroup("orders", 0, [b"x"])])
        res = c.compact_once("orders", 0)
    assert (res.start_offset, res.end_offset) == (7, 7)
    assert index(meta) == [(1, 6, "COMPACTED"), (7, 7, "COMPACTED")]


def test_late_materialization_by_a_recoverer_is_undone(stores):
    """A recoverer that re-creates a pending's key after compaction passed it
    deletes the key again (SPEC 7.2)."""
    from server._protocol.keys import LogLayout
    from server.leaderless_log_writer import materialize_pending

    meta, _ = stores
    fill(stores, batches=3)
    with make(stores, LeaderlessLogWriter) as w:
        meta.fail_next("put", key_contains="/index/")
        # committed and acknowledged; the index create failed, so its pending stays
        assert w.append_shared([SharedAppendGroup("orders", 0, [b"late"])])
    keys = LogLayout("llog").partition("orders", 0)
    stale_pending = ControlRecord.decode(meta.get(keys.control, keys.partition_key).value).pending
    with make(stores, LeaderlessLogCompactor) as c:
        c.compact_once("orders", 0)  # recovers the pending and compacts through it
    assert materialize_pending(meta, keys, stale_pending) is False
    assert index(meta) == [(1, 10, "COMPACTED")]


def test_a_compactor_overtaken_while_it_fetched_stops_with_a_conflict(stores):
    """Found by the simulator (seed 1791): compactor A selects a range and
    stalls; B compacts the range and vacuum deletes the WAL objects nobody
    references any more; A's fetch then finds them gone. That is another
    compactor's success, not a missing object."""
    from server.leaderless_log_vacuum import Vacuum

    want = fill(stores, batches=3)
    a, b = make(stores, LeaderlessLogCompactor), make(stores, LeaderlessLogCompactor)
    real_fetch = a._reader.fetch_many

    def fetch_after_b_and_vacuum(items, decode):
        assert b.compact_once("orders", 0).outcome is CompactionOutcome.COMPACTED
        with make(stores, Vacuum, grace_ms=0, allow_unsafe_grace=True) as v:
            assert v.run_once().deleted
        return real_fetch(items, decode)

    a._reader.fetch_many = fetch_after_b_and_vacuum
    assert a.compact_once("orders", 0).outcome is CompactionOutcome.CONFLICT
    a.close()
    b.close()
    assert read_all(stores) == want
    check_invariants(*stores)


def test_lag_is_what_a_run_left_and_backlog_what_it_found():
    from server._compaction.compactor import CompactionResult

    caught_up = CompactionResult("t", 0, CompactionOutcome.COMPACTED, start_offset=40, end_offset=100,
                                 high_watermark=100, cursor=101)
    assert (caught_up.lag_offsets, caught_up.backlog_offsets) == (0, 61)
    partial = CompactionResult("t", 0, CompactionOutcome.COMPACTED, start_offset=40, end_offset=70,
                               high_watermark=100, cursor=71)
    assert (partial.lag_offsets, partial.backlog_offsets) == (30, 61)
    idle = CompactionResult("t", 0, CompactionOutcome.NOTHING_TO_DO, high_watermark=100, cursor=101)
    assert (idle.lag_offsets, idle.backlog_offsets) == (0, 0)


def test_compaction_covers_a_lingering_pending_and_clears_it_once_idle(stores):
    """Writers leave their materialized pending in meta/control (SPEC 7.3).
    The compactor covers it (as the run's end key, never as a lower key),
    writes nothing to meta/control while the log is active, and clears it on
    the first run after it was compacted if no append came since (SPEC 7.7
    K1), so it no longer pins its WAL object (7.9)."""
    from server._protocol.keys import LogLayout
    from server.leaderless_log_vacuum import Vacuum

    meta, objs = stores
    keys = LogLayout("llog").partition("orders", 0)
    w = make(stores, LeaderlessLogWriter)  # not closed: its last pending stays
    w.initialize_partition("orders", 0)
    for b in range(3):
        w.append_shared([SharedAppendGroup("orders", 0, [f"{b}.{i}".encode() for i in range(3)])])
    control_version = meta.get(keys.control, keys.partition_key).version
    assert ControlRecord.decode(meta.get(keys.control, keys.partition_key).value).pending.start_offset == 7
    with make(stores, LeaderlessLogCompactor) as c:
        res = c.compact_once("orders", 0)
        assert (res.outcome, res.start_offset, res.end_offset) == (CompactionOutcome.COMPACTED, 1, 9)
        assert res.lag_offsets == 0
        # the compaction did not touch meta/control: the writer's cached version still holds
        assert meta.get(keys.control, keys.partition_key).version == control_version
        assert ControlRecord.decode(meta.get(keys.control, keys.partition_key).value).pending is not None
        assert index(meta) == [(1, 9, "COMPACTED")]
        # idle since: the next run finds the pending's key COMPACTED and clears it
        res = c.compact_once("orders", 0)
        assert res.outcome is CompactionOutcome.NOTHING_TO_DO
    assert ControlRecord.decode(meta.get(keys.control, keys.partition_key).value).pending is None
    with make(stores, Vacuum, grace_ms=0, allow_unsafe_grace=True) as v:
        v.run_once()
    assert list(objs.list("llog", "llog/wal-shared/")) == []  # no pending pins the last WAL object
    # the writer's cached CAS now conflicts; it re-reads and goes on
    w.append_shared([SharedAppendGroup("orders", 0, [b"after"])])
    w.close()
    check_invariants(meta, stores[1])
    assert read_all(stores) == [f"{b}.{i}".encode() for b in range(3) for i in range(3)] + [b"after"]


def test_a_compactor_finding_an_unmaterialized_pending_creates_its_entry(stores):
    """A writer that crashed between C3 and C4: the compactor creates the
    entry (7.2 step 2) and may then cover it."""
    meta, _ = stores
    want = fill(stores, batches=2)
    with make(stores, LeaderlessLogWriter) as w:
        meta.fail_next("put", key_contains="/index/")
        w.append_shared([SharedAppendGroup("orders", 0, [b"lost-c4"])])
    assert index(meta) == [(1, 3, "WAL"), (4, 6, "WAL")]
    with make(stores, LeaderlessLogCompactor) as c:
        res = c.compact_once("orders", 0)
    assert res.recovered_pending and (res.start_offset, res.end_offset) == (1, 7)
    check_invariants(meta, stores[1])
    assert read_all(stores) == want + [b"lost-c4"]


def _deferring(stores, clock, **kw):
    return make(stores, LeaderlessLogCompactor, runtime=stepped_runtime(clock), **kw)


def test_a_small_young_tail_waits_and_is_compacted_once_old_enough(stores):
    want = fill(stores, batches=4, per=3)  # created_at_ms: the machine's clock, now
    oldest = min(IndexEntry.decode(r.value).created_at_ms
                 for r in stores[0].range_scan("llog/orders/partitions/0/index/", "llog/orders/partitions/0/index/~",
                                               "orders:0"))
    clock = StepClock(oldest + 1_000)
    with _deferring(stores, clock, min_bytes_per_run=1 << 20, max_delay_ms=30_000) as c:
        r = c.compact_once("orders", 0)
        assert r.outcome is CompactionOutcome.DEFERRED
        assert r.retry_after_ms == 29_000 and r.lag_offsets == 12
        assert all(t == EntryType.WAL for _, _, t in index(stores[0]))  # nothing changed
        clock.now = oldest + 30_000
        assert c.compact_once("orders", 0).outcome is CompactionOutcome.COMPACTED
    assert check_invariants(stores[0], stores[1]) == 13
    assert read_all(stores) == want


def test_a_tail_of_min_bytes_or_cut_by_a_run_limit_is_compacted_at_once(stores):
    fill(stores, batches=4, per=3)
    oldest = min(IndexEntry.decode(r.value).created_at_ms
                 for r in stores[0].range_scan("llog/orders/partitions/0/index/", "llog/orders/partitions/0/index/~",
                                               "orders:0"))
    clock = StepClock(oldest)
    with _deferring(stores, clock, min_bytes_per_run=1, max_delay_ms=30_000) as c:  # 1 byte: always enough
        assert c.compact_once("orders", 0, max_offsets=3).outcome is CompactionOutcome.COMPACTED
    with _deferring(stores, clock, min_bytes_per_run=1 << 20, max_delay_ms=30_000) as c:
        # max_offsets cuts the selection: a full run never waits.
        assert c.compact_once("orders", 0, max_offsets=3).outcome is CompactionOutcome.COMPACTED
        assert c.compact_once("orders", 0).outcome is CompactionOutcome.DEFERRED  # the rest: small, young
    with _deferring(stores, clock, min_bytes_per_run=1 << 20, max_delay_ms=0) as c:  # 0: never waits
        assert c.compact_once("orders", 0).outcome is CompactionOutcome.COMPACTED
    assert check_invariants(stores[0], stores[1]) == 13


def test_deferral_settings_are_checked(stores):
    with pytest.raises(InvalidRequest):
        make(stores, LeaderlessLogCompactor, min_bytes_per_run=-1)


def _append_legacy(stores, values: list[bytes], created_at_ms: int) -> None:
    """One append as the reference system wrote it: a ``bytes-batch-v1`` body in
    a shared blob, committed through the writer's own C1-C5."""
    from server._log.staging import StagedBlob
    from server._protocol.codec import BATCH_ENCODING, encode_batch, encode_shared_blob
    from server._protocol.records import PendingAppend

    meta, objs = stores
    key = LogLayout("llog").shared_wal_object(f"legacy-{created_at_ms}")
    blob, (part,) = encode_shared_blob([("orders", 0, len(values), encode_batch(values))], created_at_ms)
    objs.put("llog", key, blob)
    template = PendingAppend(f"a-{created_at_ms}", 0, 0, len(values), EntryType.WAL, f"s3://llog/{key}",
                             BATCH_ENCODING, part.body_offset, part.body_length, created_at_ms)
    with make(stores, LeaderlessLogWriter) as w:
        w.initialize_partition("orders", 0)
        (res,) = w.commit_staged(StagedBlob((SharedAppendGroup("orders", 0, values),), (template,), None))
        assert res.ok, res.error


def test_a_range_of_legacy_and_new_entries_compacts_into_v2_batches_with_the_same_records(stores):
    """Entries of the reference system (``bytes-batch-v1``) and new ones
    (``kafka-batch-v2``, with keys and headers) compact into one object of
    v2 batches: values, keys, headers and timestamps read back as before (a
    legacy record reads as its entry's ``created_at_ms``)."""
    import time

    from server._protocol.kafka_batch import ENCODING, Record

    now = int(time.time() * 1000)  # a blob must be young to be referenced (SPEC 7.0)
    _append_legacy(stores, [b"old-1", b"old-2"], now - 3000)
    new = [Record(b"new-1", b"k", (("h", b"v"),), 1_700_000_000_000), Record(None, b"k", (), 1_700_000_000_001)]
    with make(stores, LeaderlessLogWriter) as w:
        w.append_shared([SharedAppendGroup("orders", 0, new)])
    _append_legacy(stores, [b"old-3"], now - 1000)

    def records():
        with make(stores, LeaderlessLogReader) as r:
            return [(x.offset, x.payload, x.key, x.headers, x.timestamp_ms) for x in r.iter_from("orders", 0, 1)]

    before = records()
    assert before == [
        (1, b"old-1", None, (), now - 3000), (2, b"old-2", None, (), now - 3000),
        (3, b"new-1", b"k", (("h", b"v"),), 1_700_000_000_000), (4, None, b"k", (), 1_700_000_000_001),
        (5, b"old-3", None, (), now - 1000),
    ]
    with make(stores, LeaderlessLogCompactor) as c:
        assert c.compact_once("orders", 0).outcome is CompactionOutcome.COMPACTED
    meta, _ = stores
    (compacted,) = [IndexEntry.decode(rec.value) for rec in meta.range_scan(
        "llog/orders/partitions/0/index/", "llog/orders/partitions/0/index/~", "orders:0")]
    assert (compacted.type, compacted.encoding, compacted.msg_count) == (EntryType.COMPACTED, ENCODING, 5)
    assert compacted.max_timestamp_ms == now - 1000
    assert records() == before
    check_invariants(*stores)
