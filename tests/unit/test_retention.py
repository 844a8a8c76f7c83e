"""Retention and the log start offset (SPEC 7.10) over the in-memory fakes: which
compacted ranges each rule lets go, what readers see below and at the start, and
vacuum deleting below the start only after its grace period."""

from __future__ import annotations

import time

import pytest

from server._catalogue.topic_config import TopicConfig
from server._compaction.retention import RetentionOutcome, apply_retention
from server._config import OxiaConfig, S3Config
from server._errors import OffsetOutOfRange
from server._protocol.kafka_batch import Record
from server._protocol.keys import LogLayout
from server._protocol.records import ControlRecord, EntryType, IndexEntry
from server._storage.metastore import InMemoryMetadataStore
from server._storage.objectstore import InMemoryObjectStore
from server.leaderless_log_compactor import CompactionOutcome, LeaderlessLogCompactor
from server.leaderless_log_reader import LeaderlessLogReader
from server.leaderless_log_vacuum import Vacuum
from server.leaderless_log_writer import LeaderlessLogWriter, SharedAppendGroup
from testing.invariants import assert_log, object_uris

OXIA = OxiaConfig("fake:1", root_prefix="llog")
S3 = S3Config("llog")
KEYS = LogLayout("llog").partition("orders", 0)
DAY = 24 * 3600 * 1000
NOW = int(time.time() * 1000)


@pytest.fixture
def stores():
    return InMemoryMetadataStore(), InMemoryObjectStore()


def make(stores, cls, **kw):
    meta, objs = stores
    return cls(OXIA, S3, metadata_store=meta, object_store=objs, **kw)


def build(stores, ages_days: list[int], per: int = 3, compact: int | None = None) -> None:
    """One append of ``per`` records per age (records stamped that many days ago),
    then compacted one append per compacted entry for the first ``compact`` appends."""
    with make(stores, LeaderlessLogWriter) as w:
        w.initialize_partition("orders", 0)
        for i, age in enumerate(ages_days):
            w.append_shared([SharedAppendGroup("orders", 0, [
                Record(f"{i}.{k}".encode(), timestamp_ms=NOW - age * DAY) for k in range(per)])])
    with make(stores, LeaderlessLogCompactor, max_offsets_per_run=per) as c:
        for _ in range(len(ages_days) if compact is None else compact):
            assert c.compact_once("orders", 0).outcome is CompactionOutcome.COMPACTED


def control(stores) -> ControlRecord:
    meta, _ = stores
    return ControlRecord.decode(meta.get(KEYS.control, KEYS.partition_key).value)


def values(stores, start: int) -> list[bytes]:
    with make(stores, LeaderlessLogReader) as r:
        return [x.payload for x in r.iter_from("orders", 0, start)]


def test_retention_ms_lets_go_of_old_compacted_ranges_only(stores):
    build(stores, [9, 8, 1, 0])
    result = apply_retention(stores[0], KEYS, TopicConfig(retention_ms=7 * DAY))
    assert (result.outcome, result.previous_log_start, result.log_start_offset) == (RetentionOutcome.ADVANCED, 1, 7)
    assert result.dropped_bytes > 0 and result.retained_bytes > 0
    assert (control(stores).log_start_offset, control(stores).sequence_counter) == (7, 13)
    with make(stores, LeaderlessLogReader) as r:
        for offset in (1, 6):
            with pytest.raises(OffsetOutOfRange) as info:
                r.read_offset("orders", 0, offset)
            assert (info.value.log_start_offset, info.value.high_watermark) == (7, 12)
        with pytest.raises(OffsetOutOfRange):
            list(r.iter_from("orders", 0, 1))
        assert r.log_start_offset("orders", 0) == 7
        assert r.read_offset("orders", 0, 7).payload == b"2.0"
    assert values(stores, 7) == [f"{i}.{k}".encode() for i in (2, 3) for k in range(3)]
    # A second pass has nothing more to do; -1 keeps everything.
    assert apply_retention(stores[0], KEYS, TopicConfig(retention_ms=7 * DAY)).outcome is RetentionOutcome.KEPT
    assert apply_retention(stores[0], KEYS, TopicConfig(retention_ms=-1)).outcome is RetentionOutcome.KEPT


def test_uncompacted_data_is_never_let_go(stores):
    build(stores, [30, 30, 30], compact=1)  # appends 2 and 3 stay WAL entries
    result = apply_retention(stores[0], KEYS, TopicConfig(retention_ms=1))
    assert result.log_start_offset == 4  # only the compacted range 1..3
    assert values(stores, 4) == [f"{i}.{k}".encode() for i in (1, 2) for k in range(3)]


def test_retention_bytes_keeps_at_least_that_much(stores):
    build(stores, [0, 0, 0, 0])
    meta, _ = stores
    sizes = [IndexEntry.decode(r.value).size_bytes for r in meta.range_scan(KEYS.index(1), KEYS.index_end,
                                                                               KEYS.partition_key)]
    assert len(sizes) == 4 and all(sizes)
    # Room for the newest two ranges and a byte less than the third: two ranges go.
    keep = sizes[2] + sizes[3] + 1
    result = apply_retention(meta, KEYS, TopicConfig(retention_ms=-1, retention_bytes=keep))
    assert result.log_start_offset == 4 and result.retained_bytes == sum(sizes[1:])
    result = apply_retention(meta, KEYS, TopicConfig(retention_ms=-1, retention_bytes=sizes[2] + sizes[3]))
    assert result.log_start_offset == 7 and result.retained_bytes == sizes[2] + sizes[3]


def test_writers_keep_the_log_start_and_a_reader_sees_retention_move_past_it(stores):
    build(stores, [9, 9, 0])
    with make(stores, LeaderlessLogReader, read_ahead=1) as r:
        scan = r.iter_from("orders", 0, 1)
        assert next(scan).payload == b"0.0"
        apply_retention(stores[0], KEYS, TopicConfig(retention_ms=7 * DAY))
        with make(stores, Vacuum, grace_ms=0, allow_unsafe_grace=True) as v:
            report = v.run_once()
        assert len(report.expired_entries) == 2 and len(report.deleted) >= 2
        # The scan's next batch is gone, and the log start moved past it: out of range.
        with pytest.raises(OffsetOutOfRange) as info:
            list(scan)
        assert info.value.log_start_offset == 7
    with make(stores, LeaderlessLogWriter) as w:
        w.append_shared([SharedAppendGroup("orders", 0, [b"after"])])
    assert (control(stores).log_start_offset, control(stores).sequence_counter) == (7, 11)
    assert values(stores, 7)[-1] == b"after"


def test_vacuum_deletes_below_the_log_start_only_after_its_grace(stores):
    build(stores, [9, 0])
    meta, objs = stores
    apply_retention(meta, KEYS, TopicConfig(retention_ms=7 * DAY))
    with make(stores, Vacuum, grace_ms=3_600_000) as v:  # moved just now: within the grace
        assert v.run_once().expired_entries == ()
    assert values(stores, 4) == [b"1.0", b"1.1", b"1.2"]
    with make(stores, Vacuum, grace_ms=0, allow_unsafe_grace=True) as v:
        report = v.run_once()
    assert report.expired_entries == (KEYS.index(3),)
    entries = [(KEYS.index_offset(r.key), IndexEntry.decode(r.value).type)
               for r in meta.range_scan(KEYS.index_prefix, KEYS.index_end, KEYS.partition_key)]
    assert entries == [(6, EntryType.COMPACTED)]
    assert values(stores, 4) == [b"1.0", b"1.1", b"1.2"]
    state = assert_log(meta, KEYS, object_uris(objs, "llog"), settled=True)
    assert state.cursor == 7


# -- deleting a topic, and creating its name again (SPEC 7.11) ------------------------------------


def test_a_deleted_topic_is_retired_emptied_and_forgotten_and_its_name_comes_back_empty(stores):
    from server._catalogue.catalogue import TopicCatalogue
    from server._compaction.topic_removal import remove_deleted_topics
    from server._groups.offsets import GroupOffsets
    from server._protocol.keys import TopicPartition
    from server._log.initialize import initialize_log
    from server._log.retire import revive_log
    from server._protocol.records import PendingAppend
    from server._log import recovery

    meta, objs = stores
    layout = LogLayout("llog")
    catalogue = TopicCatalogue(meta, layout, initialize=lambda tp: initialize_log(meta, layout.keys(tp)),
                               revive=lambda tp: revive_log(meta, layout.keys(tp)))
    catalogue.create("orders", 2)
    build(stores, [0, 0], compact=1)  # partition 0: one compacted range, one WAL entry
    with make(stores, LeaderlessLogWriter) as w:
        w.append_shared([SharedAppendGroup("orders", 1, [b"p1"])])
    # A writer that reserved offsets 4..6 and will create their index entry late (SPEC 7.2).
    wal = IndexEntry.decode(meta.get(KEYS.index(6), KEYS.partition_key).value)
    stale = PendingAppend("late", 4, 6, 3, wal.type, wal.data_key, wal.encoding, wal.byte_offset, wal.byte_length,
                          wal.created_at_ms)
    catalogue.delete("orders")

    def remove() -> list:
        return remove_deleted_topics(meta, layout, catalogue, grace_ms=0)

    groups = GroupOffsets(meta, layout)
    groups.commit("billing", [(TopicPartition("orders", 1), 2, "")])
    (first,) = remove()  # retired (fenced, start at the counter), not emptied yet
    assert (first.retired, first.forgotten) == (2, False)
    assert groups.fetch("billing") == {}  # the groups' offsets of a removed topic go with it
    assert (control(stores).log_state, control(stores).log_start_offset, control(stores).sequence_counter) == (
        "FENCED", 7, 7)
    with make(stores, Vacuum, grace_ms=0, allow_unsafe_grace=True) as v:
        v.run_once()  # only below the cursor: partition 0's WAL entry waits for compaction
    assert remove()[0].forgotten is False
    with make(stores, LeaderlessLogCompactor) as c:  # compaction goes on in a retired log
        for p in (0, 1):
            c.compact_once("orders", p)
    with make(stores, Vacuum, grace_ms=0, allow_unsafe_grace=True) as v:
        v.run_once()
        v.run_once()  # the objects the first pass left referenced by other entries
    assert objs.objects == {}
    (second,) = remove()
    assert second.forgotten and catalogue.get("orders", include_deleting=True) is None

    # The name again: its logs go on from 7 (and 2), showing nothing of the old topic.
    catalogue.create("orders", 2)
    assert (control(stores).log_state, control(stores).log_start_offset) == ("OPEN", 7)
    keys = KEYS
    recovery.create_index_entry(meta, keys, stale)  # the old topic's writer, late: below the start
    with make(stores, LeaderlessLogReader) as r:
        with pytest.raises(OffsetOutOfRange) as info:
            r.read_offset("orders", 0, stale.end_offset)
        assert info.value.log_start_offset == 7
        assert list(r.iter_from("orders", 0, 7)) == []
    with make(stores, LeaderlessLogWriter) as w:
        (res,) = w.append_shared([SharedAppendGroup("orders", 0, [b"new"])])
    assert res.start_offset == 7 and values(stores, 7) == [b"new"]
    for p in (0, 1):
        assert_log(meta, layout.partition("orders", p), object_uris(objs, "llog"))


def test_a_compact_topic_keeps_every_record_and_compact_delete_retains(stores):
    """llog has no key compaction: ``cleanup.policy=compact`` lets nothing go, whatever the limits."""
    build(stores, [9, 8, 1])
    compact = TopicConfig(retention_ms=0, retention_bytes=0, cleanup_policy="compact")
    result = apply_retention(stores[0], KEYS, compact)
    assert (result.outcome, result.log_start_offset) == (RetentionOutcome.KEPT, 1) and result.retained_bytes > 0
    both = TopicConfig(retention_ms=7 * DAY, cleanup_policy="compact,delete")
    assert apply_retention(stores[0], KEYS, both).log_start_offset == 7


def test_the_services_pass_leaves_out_only_the_log_whose_reads_fail(stores):
    import threading

    from server._catalogue.catalogue import TopicCatalogue
    from server._compaction.retention_runner import RetentionRunner
    from server._metrics import LlogMetrics
    from server._protocol.keys import TopicPartition
    from server._runtime import REAL_RUNTIME

    meta, _ = stores
    build(stores, [10, 10, 0])  # orders/0: three compacted ranges, two of them 10 days old
    with make(stores, LeaderlessLogWriter) as w:
        w.initialize_partition("orders", 1)
        w.append_shared([SharedAppendGroup("orders", 1, [Record(b"old", timestamp_ms=NOW - 10 * DAY)])])
    with make(stores, LeaderlessLogCompactor) as c:
        assert c.compact_once("orders", 1).outcome is CompactionOutcome.COMPACTED
    TopicCatalogue(meta, LogLayout("llog")).create("orders", 2, {"retention.ms": str(DAY)})
    metrics = LlogMetrics()
    tps = [TopicPartition("orders", 0), TopicPartition("orders", 1)]
    runner = RetentionRunner(meta, LogLayout("llog"), lambda: tps, 0, threading.Event(), REAL_RUNTIME.rng, metrics)
    # Sizing orders/1 fails, in the pass over both logs and again alone: only it waits for the next pass.
    meta.fail_next("range_scan", times=2, key_contains="orders/partitions/1/index")
    results = runner.run_once()
    assert [(r.partition, r.outcome, r.log_start_offset) for r in results] == [(0, RetentionOutcome.ADVANCED, 7)]
    assert metrics.counter("retention_errors_total") == 1
    results = runner.run_once()
    assert [(r.partition, r.outcome, r.log_start_offset) for r in results] == [
        (0, RetentionOutcome.KEPT, 7), (1, RetentionOutcome.ADVANCED, 2)]
    assert metrics.histogram("retention_pass_seconds").count == 2
