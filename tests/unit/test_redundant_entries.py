"""Redundant WAL entries inside compacted ranges (SPEC 8.2, O3) over the fakes.

A writer that stalls between its reservation and its own index create can
find, when it resumes, that its pending append was materialized by another
writer, compacted, and the key deleted: its create-if-absent then succeeds
and leaves a WAL entry inside a COMPACTED range. The writer deletes such an
entry itself once it learns its pending was replaced (its next append, or
close); one left behind (a crash before that) must never make any read path
fail.
"""

from __future__ import annotations

import threading

import pytest

from server._protocol.http_json import ConsumePartition, ConsumeRequest
from server._broker.consume import BrokerConsumeService
from server._broker.tail_cache import NullTailCache, TailSignals
from server.leaderless_log_reader import stored
from server._protocol.keys import LogLayout
from server._storage.metastore import EXPECT_ABSENT, InMemoryMetadataStore
from server._storage.objectstore import InMemoryObjectStore
from server.leaderless_log_compactor import CompactionOutcome, LeaderlessLogCompactor
from server.leaderless_log_reader import LeaderlessLogReader
from server.leaderless_log_vacuum import Vacuum
from server.leaderless_log_writer import LeaderlessLogWriter, SharedAppendGroup

from .test_compactor_fakes import check_invariants, index, make

KEYS = LogLayout("llog").partition("orders", 0)


class PausingStore(InMemoryMetadataStore):
    """Blocks the first index put made by the thread named ``thread_name``
    until released: the writer "stalls" between its reservation (C3) and its
    own index create (C4)."""

    def __init__(self, thread_name: str) -> None:
        super().__init__()
        self.thread_name = thread_name
        self.reached = threading.Event()
        self.release = threading.Event()
        self._armed = True

    def put(self, key, value, partition_key, expected_version=None, ephemeral=False):
        if self._armed and "/index/" in key and threading.current_thread().name == self.thread_name:
            self._armed = False
            self.reached.set()
            assert self.release.wait(10), "the test never released the paused writer"
        return super().put(key, value, partition_key, expected_version, ephemeral)


def every_read_path(stores, want: list[bytes]) -> None:
    """Every committed offset, with its bytes, through each read path."""
    meta, objs = stores
    n = len(want)
    with make(stores, LeaderlessLogReader) as r:
        assert [r.read_offset("orders", 0, o).payload for o in range(1, n + 1)] == want
        assert [x.payload for x in r.read_range("orders", 0, 1, n)] == want
        for start in range(1, n + 1):
            assert [x.payload for x in r.iter_from("orders", 0, start)] == want[start - 1:]
        runs = list(r.iter_runs("orders", 0, 1, decode=stored))
        assert sum(run.count for run in runs) == n
        assert [run.first for run in runs][0] == 1 and runs[-1].last == n
        batches = list(r.scan_batches("orders", 0, 1, n))
        assert batches[0].start_offset == 1 and batches[-1].end_offset >= n
        service = BrokerConsumeService(r, NullTailCache(TailSignals()), TailSignals())
        for start in (1, n // 2, n):
            got, offset = [], start
            while offset <= n:  # a consumer follows next_fetch_offset
                request = ConsumeRequest((ConsumePartition("orders", 0, offset, 1 << 20),), 0, 1, 1 << 30)
                (part,) = service.consume(request).partitions
                assert part.error is None, part.error
                assert [o for o, _ in part.records] == list(range(offset, part.next_fetch_offset))
                got += [r.value for _, r in part.records]
                offset = part.next_fetch_offset
            assert got == want[start - 1:]


def _stall_writer_a_past_a_compaction():
    """The interleaving of SPEC 7.2's late materialization, by the writer
    whose own append it is: A reserves and stalls, B materializes A's pending
    and appends, a compaction covers both and deletes A's key, A resumes and
    re-creates it. Returns the stores, writer A and A's append results."""
    meta = PausingStore("writer-A")
    stores = (meta, InMemoryObjectStore())
    with make(stores, LeaderlessLogWriter) as w:
        w.initialize_partition("orders", 0)
        w.append_shared([SharedAppendGroup("orders", 0, [b"a", b"b"])])
    writer_a = make(stores, LeaderlessLogWriter)
    result: dict = {}
    thread = threading.Thread(
        target=lambda: result.update(r=writer_a.append_shared_results([SharedAppendGroup("orders", 0, [b"A1", b"A2"])])),
        name="writer-A",
    )
    thread.start()
    assert meta.reached.wait(10)
    with make(stores, LeaderlessLogWriter) as writer_b:
        writer_b.append_shared([SharedAppendGroup("orders", 0, [b"B1"])])
    with make(stores, LeaderlessLogCompactor) as c:
        assert c.compact_once("orders", 0).outcome is CompactionOutcome.COMPACTED
    assert index(meta) == [(1, 5, "COMPACTED")]
    meta.release.set()
    thread.join(10)
    (res,) = result["r"]
    assert res.ok and (res.start_offset, res.end_offset) == (3, 4)
    return stores, writer_a


def test_a_stalled_writer_leaves_no_entry_inside_a_compacted_range():
    """Writer A's late create is undone at the latest when A closes (its
    clear of the pending conflicts, SPEC 7.3 C5)."""
    stores, writer_a = _stall_writer_a_past_a_compaction()
    meta = stores[0]
    writer_a.close()
    assert index(meta) == [(1, 5, "COMPACTED")], "the stalled writer's late create must be undone"
    check_invariants(meta)
    every_read_path(stores, [b"a", b"b", b"A1", b"A2", b"B1"])


def test_a_stalled_writer_undoes_its_late_create_on_its_next_append():
    """Writer A is not closed: its next append to the log reads meta/control
    (its cached CAS conflicts), finds its pending replaced by another
    writer's, and runs the clean-up check then (SPEC 7.3 C2)."""
    stores, writer_a = _stall_writer_a_past_a_compaction()
    meta = stores[0]
    assert index(meta) == [(3, 4, "WAL"), (1, 5, "COMPACTED")]  # the late create, for now
    writer_a.append_shared([SharedAppendGroup("orders", 0, [b"A3"])])
    assert index(meta) == [(1, 5, "COMPACTED"), (6, 6, "WAL")]
    assert writer_a.metrics.counter("writer_redundant_entries_dropped_total") == 1
    writer_a.close()
    check_invariants(meta)
    every_read_path(stores, [b"a", b"b", b"A1", b"A2", b"B1", b"A3"])


def _leave_redundant_entry(stores) -> list[bytes]:
    """Appends, remembers one WAL entry, compacts, and puts that entry back
    (create-if-absent), exactly as a late materializer that crashed before
    its clean-up leaves it. Returns the log's records."""
    meta, _ = stores
    with make(stores, LeaderlessLogWriter) as w:
        w.initialize_partition("orders", 0)
        for b in range(6):
            w.append_shared([SharedAppendGroup("orders", 0, [f"{b}.{i}".encode() for i in range(3)])])
    stale = meta.get(KEYS.index(9), KEYS.partition_key)  # the batch 7..9
    with make(stores, LeaderlessLogCompactor, max_offsets_per_run=12) as c:
        assert c.compact_once("orders", 0).end_offset == 12
    meta.put(KEYS.index(9), stale.value, KEYS.partition_key, expected_version=EXPECT_ABSENT)
    assert index(meta) == [(7, 9, "WAL"), (1, 12, "COMPACTED"), (13, 15, "WAL"), (16, 18, "WAL")]
    return [f"{b}.{i}".encode() for b in range(6) for i in range(3)]


@pytest.fixture
def stores():
    return InMemoryMetadataStore(), InMemoryObjectStore()


def test_every_read_path_passes_over_a_redundant_entry(stores):
    want = _leave_redundant_entry(stores)
    every_read_path(stores, want)


def test_a_redundant_entry_whose_object_is_gone_still_reads(stores):
    meta, objs = stores
    want = _leave_redundant_entry(stores)
    from server._protocol.keys import parse_s3_uri
    from server._protocol.records import IndexEntry

    stray = IndexEntry.decode(meta.get(KEYS.index(9), KEYS.partition_key).value)
    objs.delete_many("llog", [parse_s3_uri(stray.data_key)[1]])  # vacuumed after the compaction
    every_read_path(stores, want)


def test_compaction_continues_past_a_redundant_entry_and_vacuum_removes_it(stores):
    meta, _ = stores
    want = _leave_redundant_entry(stores)
    with make(stores, LeaderlessLogWriter) as w:
        w.append_shared([SharedAppendGroup("orders", 0, [b"x"])])
    with make(stores, LeaderlessLogCompactor) as c:
        res = c.compact_once("orders", 0)
    assert (res.outcome, res.start_offset, res.end_offset) == (CompactionOutcome.COMPACTED, 13, 19)
    every_read_path(stores, want + [b"x"])
    with make(stores, Vacuum, grace_ms=0, allow_unsafe_grace=True) as v:
        v.run_once()
    assert index(meta) == [(1, 12, "COMPACTED"), (13, 19, "COMPACTED")]
    check_invariants(meta)

