"""Deleting records (SPEC 7.13) over the in-memory fakes: the log start moves to any
offset up to the counter (inside an entry, above the cursor, inside the pending
append), never back, never under a fence; readers, retention and vacuum keep to it."""

from __future__ import annotations

import pytest

from server._catalogue.topic_config import TopicConfig
from server._compaction.retention import apply_retention
from server._errors import ConcurrencyConflict, OffsetOutOfRange, PartitionFenced, PartitionNotInitialized, \
    VersionConflict
from server._log.log_start import delete_records
from server._log.stored import StoredSizes, entry_bytes
from tests._stored_reference import read_stored
from server._protocol.kafka_batch import Record
from server._protocol.keys import LogLayout
from server._protocol.records import ControlRecord, EntryType, IndexEntry
from server._storage.metastore import InMemoryMetadataStore
from server.leaderless_log_compactor import CompactionOutcome, LeaderlessLogCompactor
from server.leaderless_log_reader import LeaderlessLogReader
from server.leaderless_log_vacuum import Vacuum
from server.leaderless_log_writer import LeaderlessLogWriter, SharedAppendGroup
from tests._step_clock import StepClock, stepped_runtime
from tests.unit.test_retention import KEYS, control, make, stores  # noqa: F401 - the fixture

VALUES = [f"{i}.{k}".encode() for i in range(4) for k in range(3)]


def build(stores, compact: int = 0) -> None:  # noqa: F811
    """Four appends of three records (offsets 1-12); the first ``compact`` compacted one each."""
    with make(stores, LeaderlessLogWriter) as w:
        w.initialize_partition("orders", 0)
        for i in range(4):
            w.append_shared([SharedAppendGroup("orders", 0, [Record(v) for v in VALUES[3 * i:3 * i + 3]])])
    with make(stores, LeaderlessLogCompactor, max_offsets_per_run=3) as c:
        for _ in range(compact):
            assert c.compact_once("orders", 0).outcome is CompactionOutcome.COMPACTED


def read_all(stores, start: int) -> list[tuple[int, bytes]]:  # noqa: F811
    with make(stores, LeaderlessLogReader) as r:
        return [(x.offset, x.payload) for x in r.iter_from("orders", 0, start)]


def test_the_start_moves_inside_an_entry_and_readers_refuse_below_it(stores):  # noqa: F811
    build(stores)
    result = delete_records(stores[0], KEYS, 5)  # inside the second append (4-6), a WAL entry above the cursor
    assert (result.previous_log_start, result.log_start_offset, result.high_watermark, result.moved) == (1, 5, 12, True)
    assert control(stores).log_start_offset == 5 and control(stores).log_start_at_ms is not None
    with make(stores, LeaderlessLogReader) as r:
        with pytest.raises(OffsetOutOfRange) as info:
            r.read_offset("orders", 0, 4)
        assert (info.value.log_start_offset, info.value.high_watermark) == (5, 12)
        assert r.read_offset("orders", 0, 5).payload == VALUES[4]
        assert r.log_start_offset("orders", 0) == 5
        first = next(iter(r.scan_batches("orders", 0, 5, 12)))
        assert first.start_offset <= 5 <= first.end_offset  # a batch holding the start: callers skip below it
    assert read_all(stores, 5) == list(zip(range(5, 13), VALUES[4:]))


def test_the_start_never_goes_back_and_stops_at_the_counter(stores):  # noqa: F811
    build(stores)
    assert delete_records(stores[0], KEYS, 8).log_start_offset == 8
    again = delete_records(stores[0], KEYS, 3)
    assert (again.log_start_offset, again.moved) == (8, False)
    with pytest.raises(OffsetOutOfRange) as info:
        delete_records(stores[0], KEYS, 14)  # the counter is 13: one past the last record
    assert (info.value.log_start_offset, info.value.high_watermark) == (8, 12)
    everything = delete_records(stores[0], KEYS, None)  # Kafka's -1: up to the high watermark
    assert everything.log_start_offset == 13 and read_all(stores, 13) == []
    with make(stores, LeaderlessLogWriter) as w:  # the log goes on from there
        w.append_shared([SharedAppendGroup("orders", 0, [Record(b"after")])])
    assert read_all(stores, 13) == [(13, b"after")]


def test_a_fenced_or_missing_log_is_refused(stores):  # noqa: F811
    build(stores)
    with make(stores, LeaderlessLogWriter) as w:
        w.fence_partition("orders", 0)
    with pytest.raises(PartitionFenced):
        delete_records(stores[0], KEYS, 5)
    assert control(stores).log_start_offset == 1
    with pytest.raises(PartitionNotInitialized):
        delete_records(stores[0], LogLayout("llog").partition("orders", 1), 1)


class _Racing(InMemoryMetadataStore):
    """A store whose conditional puts of one key conflict ``times`` times: another
    writer's commit lands between each read and write."""

    def __init__(self, times: int) -> None:
        super().__init__()
        self.times = times

    def put(self, key, value, partition_key=None, expected_version=None, **kw):
        if expected_version is not None and key == KEYS.control and self.times > 0:
            self.times -= 1
            raise VersionConflict("raced")
        return super().put(key, value, partition_key, expected_version=expected_version, **kw)


def test_a_conflict_reads_again_and_a_writer_keeps_the_new_start(stores):  # noqa: F811
    meta = _Racing(0)
    racing = (meta, stores[1])
    build(racing)
    meta.times = 3
    assert delete_records(meta, KEYS, 7).log_start_offset == 7 and meta.times == 0
    with make(racing, LeaderlessLogWriter) as w:  # its cached control is stale: its CAS reads again
        w.append_shared([SharedAppendGroup("orders", 0, [Record(b"more")])])
    assert control(racing).log_start_offset == 7 and control(racing).sequence_counter == 14
    meta.times = 10 ** 6  # a conflict every time: it gives up when the back-off is spent
    clock = StepClock(0)
    with pytest.raises(ConcurrencyConflict):
        delete_records(meta, KEYS, 9, runtime=stepped_runtime(clock))
    assert clock.now > 1_000 and control(racing).log_start_offset == 7


def test_retention_and_vacuum_keep_the_entry_holding_the_start(stores):  # noqa: F811
    build(stores, compact=3)  # COMPACTED 1-3, 4-6, 7-9; WAL 10-12
    delete_records(stores[0], KEYS, 5)
    with make(stores, Vacuum, grace_ms=0, allow_unsafe_grace=True) as v:
        report = v.run_once()
    assert len(report.expired_entries) == 1  # 1-3 only: 4-6 holds the start
    assert read_all(stores, 5) == list(zip(range(5, 13), VALUES[4:]))
    # Retention walks on from the entry holding the start.
    result = apply_retention(stores[0], KEYS, TopicConfig(retention_ms=0))
    assert (result.previous_log_start, result.log_start_offset) == (5, 10)


def test_the_stored_size_counts_each_range_once_and_the_entry_holding_the_start_whole(stores):  # noqa: F811
    """What DescribeLogDirs reports and retention weighs (``_log.stored``): each entry's stored bytes
    from the entry holding the log start on."""
    build(stores, compact=2)  # COMPACTED 1-3, 4-6; WAL 7-9, 10-12
    meta = stores[0]
    entries: dict[int, tuple[EntryType, int]] = {}
    for row in meta.range_scan(KEYS.index(1), KEYS.index_end, KEYS.partition_key):
        entry = IndexEntry.decode(row.value)
        entries[KEYS.index_offset(row.key)] = (entry.type, entry_bytes(entry))
    assert [t for t, _ in entries.values()] == [EntryType.COMPACTED] * 2 + [EntryType.WAL] * 2
    c3, c6, w9, w12 = (entries[end][1] for end in (3, 6, 9, 12))
    assert min(c3, c6, w9, w12) > 0
    stored = read_stored(meta, KEYS)
    assert (stored.cursor, stored.total_bytes) == (7, c3 + c6 + w9 + w12)
    assert [(first, end) for first, end, _ in stored.compacted] == [(1, 3), (4, 6)]
    delete_records(meta, KEYS, 5)  # inside 4-6: that entry counts whole
    assert read_stored(meta, KEYS).total_bytes == c6 + w9 + w12
    delete_records(meta, KEYS, 11)
    assert read_stored(meta, KEYS).total_bytes == w12
    assert read_stored(meta, LogLayout("llog").partition("orders", 1)) is None  # never initialized


def test_sizing_many_logs_reads_what_one_at_a_time_reads_and_scans_only_logs_that_changed(stores):  # noqa: F811
    build(stores, compact=1)  # COMPACTED 1-3; WAL 4-6, 7-9, 10-12
    meta = stores[0]
    layout = LogLayout("llog")
    with make(stores, LeaderlessLogWriter) as w:
        w.initialize_partition("orders", 2)
        w.append_shared([SharedAppendGroup("orders", 2, [Record(b"x" * 50)])])
    delete_records(meta, KEYS, 8)
    keys = [KEYS, layout.partition("orders", 1), layout.partition("orders", 2)]

    def totals():
        return [0 if s is None else s.total_bytes for s in (read_stored(meta, k) for k in keys)]

    def sized(sizes):
        before = dict(meta.calls)
        got = sizes.sizes(keys)
        return got, {op: n - before.get(op, 0) for op, n in meta.calls.items() if op in ("get_many", "range_scan")
                     and n != before.get(op, 0)}

    sizes = StoredSizes(meta)
    alone = totals()
    assert alone[1] == 0 and alone[0] > alone[2] > 0
    assert sized(sizes) == (alone, {"get_many": 1, "range_scan": 2})  # no scan for the log that is not there
    assert sized(sizes) == (alone, {"get_many": 1})  # nothing changed: nothing scanned
    with make(stores, LeaderlessLogWriter) as w:  # an append writes the control record
        w.append_shared([SharedAppendGroup("orders", 2, [Record(b"y" * 70)])])
    assert sized(sizes) == (totals(), {"get_many": 1, "range_scan": 1}) and totals()[2] > alone[2]
    delete_records(meta, KEYS, 10)  # so does DeleteRecords
    assert sized(sizes) == (totals(), {"get_many": 1, "range_scan": 1}) and totals()[0] < alone[0]
    with make(stores, LeaderlessLogCompactor, max_offsets_per_run=3) as c:  # a compaction moves the cursor
        assert c.compact_once("orders", 0).outcome is CompactionOutcome.COMPACTED
    assert sized(sizes) == (totals(), {"get_many": 1, "range_scan": 1})
    with make(stores, Vacuum, grace_ms=0, allow_unsafe_grace=True) as v:  # vacuum writes neither
        assert v.run_once().expired_entries  # the entries wholly below the start and the cursor go
    assert sized(sizes) == (totals(), {"get_many": 1})  # and the size kept is still the size
    assert sizes.sizes([]) == []

    few = StoredSizes(meta)
    few.KEPT = 1
    few.sizes(keys)  # the third log's size pushes out the first's (the second has none)
    assert sized(few)[1] == {"get_many": 1, "range_scan": 2}


@pytest.mark.parametrize("seed", range(12))
def test_sizes_kept_between_calls_equal_a_fresh_read_through_appends_compaction_deletes_and_vacuum(
        stores, seed):  # noqa: F811
    """Random appends, compactions, DeleteRecords and vacuum passes on three logs; after each step
    ``StoredSizes`` (reading from where each log can have changed) answers what a fresh read does."""
    import random

    rng = random.Random(seed)
    meta = stores[0]
    keys = [LogLayout("llog").partition("orders", p) for p in range(3)]
    scans: list[str] = []
    scan = meta.range_scan
    meta.range_scan = lambda lo, hi, pk: (scans.append(lo), scan(lo, hi, pk))[1]  # type: ignore[method-assign]
    sizes = StoredSizes(meta)
    with make(stores, LeaderlessLogWriter) as w, \
            make(stores, LeaderlessLogCompactor, max_offsets_per_run=rng.choice((2, 3, 5))) as c, \
            make(stores, Vacuum, grace_ms=0, allow_unsafe_grace=True) as v:
        for p in range(3):
            w.initialize_partition("orders", p)
        assert sizes.sizes(keys) == [0, 0, 0]
        for step in range(60):
            p = rng.randrange(3)
            op = rng.choice(("append", "append", "append", "compact", "delete", "vacuum", "none"))
            before = ControlRecord.decode(meta.get(keys[p].control, keys[p].partition_key).value)
            if op == "append":
                w.append_shared([SharedAppendGroup("orders", p, [Record(b"v" * rng.randrange(1, 300))
                                                                 for _ in range(rng.randrange(1, 4))])])
            elif op == "compact":
                c.compact_once("orders", p)
            elif op == "delete":
                ctl = ControlRecord.decode(meta.get(keys[p].control, keys[p].partition_key).value)
                delete_records(meta, keys[p], rng.randrange(ctl.log_start_offset, ctl.sequence_counter + 1))
            elif op == "vacuum":
                v.run_once()
            fresh = [read_stored(meta, k).total_bytes for k in keys]
            scans.clear()
            assert sizes.sizes(keys) == fresh, f"seed {seed} step {step} after {op} of partition {p}"
            if op in ("vacuum", "none"):
                assert scans == [], f"seed {seed} step {step}: {op} changed no log, yet {scans}"
            elif op == "append":  # only the changed log, past what was read of it before
                low = max(before.log_start_offset, before.high_watermark + 1)
                assert scans == [keys[p].index(low)], (seed, step, scans)
            else:  # one log changed: only its index is read
                assert all(k.startswith(keys[p].index_prefix) for k in scans) and len(scans) <= 1, scans


def _reference_start(meta, keys, config: TopicConfig, now_ms: int) -> int:
    """Where SPEC 7.10 puts the log start, decided from one whole read of the index (``read_stored``)."""
    stored = read_stored(meta, keys)
    new_start, dropped = stored.control.log_start_offset, 0
    for first, end, entry in stored.compacted:
        size = entry_bytes(entry)
        newest = entry.max_timestamp_ms if entry.max_timestamp_ms is not None else entry.created_at_ms
        old = config.retention_ms >= 0 and newest < now_ms - config.retention_ms
        big = config.retention_bytes >= 0 and stored.total_bytes - dropped - size >= config.retention_bytes
        if first > new_start or not config.retains or not (old or big):
            break
        new_start, dropped = end + 1, dropped + size
    return new_start


@pytest.mark.parametrize("seed", range(12))
def test_retention_with_sizes_kept_between_passes_moves_the_start_where_a_whole_read_does(
        stores, seed):  # noqa: F811
    """Random appends, compactions, DeleteRecords, vacuum and retention passes under drawn configs
    on three logs: each pass (``StoredSizes`` kept between passes, the walk stopping at the first
    entry kept) lands the start where a decision from the whole index does."""
    import random
    import time

    rng = random.Random(seed)
    meta = stores[0]
    keys = [LogLayout("llog").partition("orders", p) for p in range(3)]
    sizes = StoredSizes(meta)
    clock = StepClock(int(time.time() * 1000) + 3_600_000)  # every record older than the pass by an hour
    passes = moved = 0
    with make(stores, LeaderlessLogWriter) as w, \
            make(stores, LeaderlessLogCompactor, max_offsets_per_run=rng.choice((2, 3, 5))) as c, \
            make(stores, Vacuum, grace_ms=0, allow_unsafe_grace=True) as v:
        for p in range(3):
            w.initialize_partition("orders", p)
        for step in range(80):
            p = rng.randrange(3)
            op = rng.choice(("append", "append", "append", "compact", "compact", "delete", "vacuum", "retain",
                             "retain"))
            if op == "append":
                w.append_shared([SharedAppendGroup("orders", p, [Record(b"v" * rng.randrange(1, 300))
                                                                 for _ in range(rng.randrange(1, 4))])])
            elif op == "compact":
                c.compact_once("orders", p)
            elif op == "delete" and rng.random() < 0.3:
                ctl = ControlRecord.decode(meta.get(keys[p].control, keys[p].partition_key).value)
                delete_records(meta, keys[p], rng.randrange(ctl.log_start_offset, ctl.sequence_counter + 1))
            elif op == "vacuum":
                v.run_once()
            elif op == "retain":
                config = TopicConfig(retention_ms=rng.choice((-1, -1, 0, 10**12)),
                                     retention_bytes=rng.choice((-1, 0, rng.randrange(0, 1500))))
                expected = _reference_start(meta, keys[p], config, clock.now)
                result = apply_retention(meta, keys[p], config, sizes=sizes, runtime=stepped_runtime(clock))
                assert result.log_start_offset == expected, f"seed {seed} step {step}: {result} vs {expected}"
                passes += 1
                moved += result.log_start_offset > result.previous_log_start
    assert passes > 5 and moved > 0


def test_a_retention_pass_over_an_unchanged_log_reads_the_index_up_to_the_first_entry_it_keeps(
        stores):  # noqa: F811
    build(stores, compact=3)  # COMPACTED 1-3, 4-6, 7-9; WAL 10-12
    meta = stores[0]
    rows: list[str] = []  # index rows read, by a range scan or a CEILING get
    scan, ceiling = meta.range_scan, meta.ceiling

    def counted(lo, hi, pk):
        for row in scan(lo, hi, pk):
            rows.append(row.key)
            yield row

    def counted_ceiling(key, pk):
        rec = ceiling(key, pk)
        rows.append(rec.key)
        return rec

    meta.range_scan, meta.ceiling = counted, counted_ceiling  # type: ignore[method-assign]
    sizes = StoredSizes(meta)
    keep_all = TopicConfig(retention_ms=10**12)
    assert apply_retention(meta, KEYS, keep_all, sizes=sizes).outcome.value == "kept"
    assert len(rows) == 4 + 1  # sizing the log: its 4 entries; the walk: the first
    rows.clear()
    assert apply_retention(meta, KEYS, keep_all, sizes=sizes).outcome.value == "kept"
    assert rows == [KEYS.index(3)]  # nothing changed: the first entry only
    rows.clear()
    result = apply_retention(meta, KEYS, TopicConfig(retention_ms=10**12, retention_bytes=1), sizes=sizes)
    assert (result.previous_log_start, result.log_start_offset) == (1, 10)  # the WAL entry holds a byte
    assert rows == [KEYS.index(3), KEYS.index(6), KEYS.index(9)]  # no further than the cursor (10)
    big = entry_bytes(IndexEntry.decode(meta.get(KEYS.index(12), KEYS.partition_key).value))
    with make(stores, LeaderlessLogCompactor, max_offsets_per_run=3) as c:
        assert c.compact_once("orders", 0).outcome is CompactionOutcome.COMPACTED  # 10-12, cursor 13
    rows.clear()
    result = apply_retention(meta, KEYS, TopicConfig(retention_ms=10**12, retention_bytes=big + 1), sizes=sizes)
    assert result.outcome.value == "kept" and result.log_start_offset == 10
    assert rows == [KEYS.index(12), KEYS.index(12)]  # sizing from the old cursor on, then the walk's first


def test_the_walk_reads_the_index_in_windows_growing_from_the_first_entry(stores):  # noqa: F811
    """``compacted_from`` over a long index: a caller stopping after ``k`` entries has read about
    ``k`` rows; one reading to the end gets every COMPACTED entry below the cursor, in order, as a
    whole read does."""
    from server._log.stored import WINDOW, compacted_from
    from server._protocol.records import CompactionCursor

    meta = stores[0]
    n = 300
    for i in range(n):  # ranges of 2 offsets; a redundant WAL entry inside every tenth
        end = 2 * i + 2
        meta.put(KEYS.index(end), IndexEntry(EntryType.COMPACTED, 2, f"c{i}", "kafka-batch-v2", None, None, 1,
                                             size_bytes=10).encode(), KEYS.partition_key)
        if i % 10 == 0:
            meta.put(KEYS.index(end - 1), IndexEntry(EntryType.WAL, 1, "w", "kafka-batch-v2", 0, 5, 1).encode(),
                     KEYS.partition_key)
    meta.put(KEYS.compaction_cursor, CompactionCursor(2 * n + 1).encode(), KEYS.partition_key)
    meta.put(LogLayout("llog").partition("orders", 1).index(1), b"{}", "other")  # another log's, after ours
    rows: list[str] = []
    scan = meta.range_scan

    def counted(lo, hi, pk):
        for row in scan(lo, hi, pk):
            rows.append(row.key)
            yield row

    meta.range_scan = counted  # type: ignore[method-assign]
    assert [(first, end) for first, end, _ in compacted_from(meta, KEYS, 1, 2 * n + 1)] == [
        (2 * i + 1, 2 * i + 2) for i in range(n)]
    assert len(set(rows)) == len(rows)  # no row read twice
    for k in (1, 5, 20, 100):
        rows.clear()
        walk = compacted_from(meta, KEYS, 1, 2 * n + 1)
        got = [next(walk) for _ in range(k)]
        assert got[-1][1] == 2 * k
        assert len(rows) <= 4 * max(k, WINDOW) * 11 // 10, (k, len(rows))  # about k, whatever the index holds
    assert list(compacted_from(meta, KEYS, 2 * n - 3, 2 * n + 1)) and not list(compacted_from(meta, KEYS, 5, 5))
    assert [e for _, e, _ in compacted_from(meta, KEYS, 2 * n - 3, 2 * n - 1)] == [2 * n - 2]
