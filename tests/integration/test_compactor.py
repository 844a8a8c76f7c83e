"""compact_once against the real Oxia and S3: the crash matrix with real
process deaths, reads in every intermediate state, compaction while writers
append."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from server._protocol.keys import LogLayout
from server._protocol.records import EntryType, IndexEntry
from server.leaderless_log_compactor import CompactionOutcome, LeaderlessLogCompactor
from server.leaderless_log_reader import LeaderlessLogReader
from server.leaderless_log_writer import BatchingProducer, LeaderlessLogWriter, SharedAppendGroup
from testing.invariants import assert_log
from tests._waiting import wait_until

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
STEPS = ["blob_written", "record_created", "end_key_rewritten", "lower_keys_deleted", "cursor_advanced"]


def fill(env, topic, partitions=(0,), batches=4, per=5):
    want = {p: [] for p in partitions}
    with LeaderlessLogWriter.from_env(env) as w:
        for p in partitions:
            w.initialize_partition(topic, p)
        for b in range(batches):
            groups = []
            for p in partitions:
                recs = [f"{topic}/{p}/{b}/{i}".encode() for i in range(per)]
                want[p].extend(recs)
                groups.append(SharedAppendGroup(topic, p, recs))
            w.append_shared(groups)
    return want


def index(reader, topic, partition):
    keys = reader.layout.partition(topic, partition)
    out = []
    for rec in reader._meta.range_scan(keys.index_prefix, keys.index_end, keys.partition_key):
        end = keys.index_offset(rec.key)
        e = IndexEntry.decode(rec.value)
        out.append((end - e.msg_count + 1, end, e.type))
    return out


def settled_invariants(reader, topic, partition):
    """SPEC 8 on the log's raw metadata (``testing/invariants.py``), quiet; its cursor."""
    view = assert_log(reader._meta, reader.layout.partition(topic, partition), settled=True)
    return view.cursor


def all_records(reader, topic, partition):
    return [r.payload for r in reader.iter_from(topic, partition, 1)]


@pytest.mark.parametrize("step", STEPS)
def test_compactor_process_killed_at_each_step_is_resumed_by_another(llog_env, step):
    want = fill(llog_env, "crash", partitions=(0,))[0]
    code = """
        import os, sys
        from server.leaderless_log_compactor import LeaderlessLogCompactor
        step = sys.argv[1]
        def die(name):
            if name == step:
                os._exit(9)   # the compactor process dies right after this durable step
        with LeaderlessLogCompactor.from_env(step_hook=die) as c:
            c.compact_once("crash", 0)
        sys.exit(3)           # should not get here
    """
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), step],
        env={**os.environ, **llog_env, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 9, proc.stderr
    with LeaderlessLogReader.from_env(llog_env) as reader:
        assert all_records(reader, "crash", 0) == want  # readable in the state the crash left
        with LeaderlessLogCompactor.from_env(llog_env) as other:
            res = other.compact_once("crash", 0)
            assert other.compact_once("crash", 0).outcome is CompactionOutcome.NOTHING_TO_DO
        expected = CompactionOutcome.COMPACTED if step == "blob_written" else CompactionOutcome.RESUMED
        assert res.outcome is expected
        assert index(reader, "crash", 0) == [(1, 20, "COMPACTED")]
        assert all_records(reader, "crash", 0) == want
        assert [reader.read_offset("crash", 0, o).payload for o in (1, 20)] == [want[0], want[19]]
        assert settled_invariants(reader, "crash", 0) == 21


def test_reads_return_the_same_records_before_during_and_after(llog_env):
    want = fill(llog_env, "phases", partitions=(0, 1), batches=3, per=4)
    with LeaderlessLogReader.from_env(llog_env) as reader:
        snapshots = [("before", all_records(reader, "phases", 0), reader.read_offset("phases", 0, 6).payload)]

        def observe(name: str) -> None:
            snapshots.append((name, all_records(reader, "phases", 0), reader.read_offset("phases", 0, 6).payload))

        with LeaderlessLogCompactor.from_env(llog_env, step_hook=observe) as c:
            assert c.compact_once("phases", 0).outcome is CompactionOutcome.COMPACTED
        snapshots.append(("after", all_records(reader, "phases", 0), reader.read_offset("phases", 0, 6).payload))
        assert [name for name, _, _ in snapshots] == ["before", "blob_written", "record_created", "end_key_rewritten",
                                                      "lower_keys_deleted", "cursor_advanced", "record_deleted", "after"]
        for name, records, sixth in snapshots:
            assert records == want[0], name
            assert sixth == want[0][5], name
        # the other partition of the same shared blobs is untouched and readable
        assert all_records(reader, "phases", 1) == want[1]
        assert index(reader, "phases", 1) == [(1, 4, "WAL"), (5, 8, "WAL"), (9, 12, "WAL")]


def test_two_compactors_racing_never_compact_a_range_twice(llog_env):
    want = fill(llog_env, "race", partitions=(0,), batches=6, per=3)[0]
    outcomes: list[CompactionOutcome] = []
    barrier = threading.Barrier(2)

    def run() -> None:
        with LeaderlessLogCompactor.from_env(llog_env, step_hook=lambda name: None) as c:
            barrier.wait()
            for _ in range(3):
                outcomes.append(c.compact_once("race", 0, max_offsets=6).outcome)

    threads = [threading.Thread(target=run, name=f"compactor-{i}") for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # Losers stop without changing anything; finish whatever the race left.
    with LeaderlessLogCompactor.from_env(llog_env) as c:
        while c.compact_once("race", 0, max_offsets=6).outcome is not CompactionOutcome.NOTHING_TO_DO:
            pass
    with LeaderlessLogReader.from_env(llog_env) as reader:
        assert all_records(reader, "race", 0) == want
        compacted = [r for r in index(reader, "race", 0) if r[2] == "COMPACTED"]
        assert compacted == [(1, 6, "COMPACTED"), (7, 12, "COMPACTED"), (13, 18, "COMPACTED")]
        settled_invariants(reader, "race", 0)
    assert CompactionOutcome.COMPACTED in outcomes or CompactionOutcome.RESUMED in outcomes


def test_compaction_while_writers_keep_appending(llog_env):
    stop = threading.Event()
    errors: list[BaseException] = []
    produced: list[bytes] = []

    def produce() -> None:
        try:
            with LeaderlessLogWriter.from_env(llog_env) as w, BatchingProducer(w) as bp:
                i = 0
                while not stop.is_set():
                    batch = [f"live-{i}-{j}".encode() for j in range(10)]
                    (r,) = bp.append_shared([SharedAppendGroup("live", 0, batch)], timeout=30)
                    r.raise_for_error()
                    produced.extend(batch)
                    i += 1
        except BaseException as exc:
            errors.append(exc)

    with LeaderlessLogWriter.from_env(llog_env) as w:
        w.initialize_partition("live", 0)
    writer = threading.Thread(target=produce, name="producer")
    writer.start()
    outcomes: list[CompactionOutcome] = []
    try:
        with LeaderlessLogCompactor.from_env(llog_env) as c:
            while outcomes.count(CompactionOutcome.COMPACTED) < 3:
                assert len(outcomes) < 20, outcomes
                # Each run finds records appended since the last one, while
                # the writer keeps appending.
                seen = len(produced)
                wait_until(lambda: errors or len(produced) > seen, 30, "the writer to append more records")
                assert not errors, errors
                outcomes.append(c.compact_once("live", 0, max_offsets=50).outcome)
    finally:
        stop.set()
        writer.join(30)
    assert not errors, errors
    with LeaderlessLogCompactor.from_env(llog_env) as c:
        while c.compact_once("live", 0).outcome is not CompactionOutcome.NOTHING_TO_DO:
            pass
    with LeaderlessLogReader.from_env(llog_env) as reader:
        assert all_records(reader, "live", 0) == produced
        cursor = settled_invariants(reader, "live", 0)
        assert cursor == len(produced) + 1
        assert {kind for *_, kind in index(reader, "live", 0)} == {"COMPACTED"}


def test_reader_survives_a_vacuumed_wal_object_through_the_compacted_entry(llog_env):
    """After compaction, an old WAL entry a slow reader still resolves may
    point at a deleted object; the reader falls back to the COMPACTED entry."""
    want = fill(llog_env, "gone", partitions=(0,), batches=2, per=2)[0]
    with LeaderlessLogReader.from_env(llog_env) as reader:
        keys = LogLayout(llog_env["LLOG_ROOT_PREFIX"]).partition("gone", 0)
        old_wal = reader.scan_batches("gone", 0, 1, 2)
        first = next(old_wal)
        with LeaderlessLogCompactor.from_env(llog_env) as c:
            c.compact_once("gone", 0)
        # Recreate the situation: a redundant WAL entry whose object is gone.
        from server._protocol.codec import encode_batch  # noqa: F401  (the object simply no longer exists)
        missing = IndexEntry(EntryType.WAL, 2, f"s3://{llog_env['LLOG_S3_BUCKET']}/{keys.base}/data/wal/missing", "bytes-batch-v1", None, None, 1)
        reader._meta.put(keys.index(2), missing.encode(), keys.partition_key)
        assert first.entry.type == "WAL"
        assert reader.read_offset("gone", 0, 1).payload == want[0]
        assert all_records(reader, "gone", 0) == want
