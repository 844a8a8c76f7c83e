"""The deterministic simulator (testing/sim): many seeds pass, a broken
protocol is caught, and a seed replays exactly.

The seed sweep is the protocol test; the other tests keep the simulator
honest: if a deliberate bug stopped being caught, or a seed stopped
replaying identically, the sweep's silence would mean nothing.
"""

from __future__ import annotations

import logging
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

import server._log.recovery as recovery_module
import server.leaderless_log_reader as reader_module
from server._storage.metastore import InMemoryMetadataStore
from testing.sim import SimConfig, SimFailure, _run, run_seed
from testing.sim._stores import IndexedMetadataStore
from testing.sim._sweep import sweep

SEEDS = int(os.environ.get("LLOG_SIM_SEEDS", "600"))
"""Seeds the suite sweeps (LLOG_SIM_SEEDS for more; `testing.simulate --seeds 10000` for a deep run)."""


@pytest.fixture(autouse=True)
def quiet_library():
    """Injected faults make the library log warnings by the thousand."""
    logger = logging.getLogger("server")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    yield
    logger.setLevel(level)


def first_failure(seeds: range) -> SimFailure | None:
    for seed in seeds:
        try:
            run_seed(seed)
        except SimFailure as failure:
            return failure
    return None


@pytest.mark.timeout(900)  # ~55 s on an idle 2-core machine; the default 300 s is too tight under load
def test_seed_sweep_passes():
    """The suite's sweep, on every core."""
    started = time.perf_counter()
    result = sweep(range(SEEDS))
    elapsed = time.perf_counter() - started
    print(f"{result.seeds} seeds, {result.steps} steps in {elapsed:.1f} s ({result.seeds / elapsed:.1f} seeds/s)")
    assert result.seeds == SEEDS
    assert not result.failures, (
        f"{len(result.failures)} of {SEEDS} seeds failed: {[s for s, _ in result.failures[:20]]}\n\n"
        f"{result.failures[0][1]}"
    )


def test_same_seed_replays_identically():
    a, b = run_seed(7), run_seed(7)
    assert (a.steps, a.order_hash, a.faults, a.acked, a.failed, a.unknown) == (
        b.steps, b.order_hash, b.faults, b.acked, b.failed, b.unknown)
    assert run_seed(8).order_hash != a.order_hash


def test_replay_is_identical_across_processes():
    """String hashing is randomized per process; nothing in a run may depend
    on it (set iteration order and the like)."""
    repo = Path(__file__).resolve().parents[2]
    expected = run_seed(11).order_hash
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed, "PYTHONPATH": str(repo)}
        out = subprocess.run([sys.executable, "-m", "testing.simulate", "--seed", "11"], cwd=repo, env=env,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stdout + out.stderr
        assert f"order hash {expected}" in out.stdout, out.stdout


def skip_own_index_entry(monkeypatch):
    """A writer that acknowledges without creating its index entry (skips
    SPEC 7.3 C4) and then clears its pending append: its records vanish."""
    monkeypatch.setattr(recovery_module, "create_index_entry", lambda store, keys, pending: None)


def reintroduce_late_materialization_bug(monkeypatch):
    """The protocol as it was before redundant entries (SPEC 8.2 O3) were
    handled: a stalled writer's late index create stays, and a point read
    trusts the CEILING answer alone."""
    monkeypatch.setattr(recovery_module, "drop_if_redundant", lambda *args, **kwargs: False)
    monkeypatch.setattr(reader_module.LeaderlessLogReader, "_cover_past_redundant", lambda self, keys, offset: None)


def test_the_late_materialization_bug_is_found(monkeypatch):
    """The bug a black-box fault test found on real processes: the simulator
    finds it too (seeds 1255 and 1384 of 1000..1399 with today's schedules,
    which retention, topic deletion, idempotent producer and DeleteRecords
    actors joined). If a change to the simulator or the protocol moves it,
    search again with ``reintroduce_late_materialization_bug`` applied."""
    reintroduce_late_materialization_bug(monkeypatch)
    failure = first_failure(range(1252, 1257))
    assert failure is not None, "the simulator no longer finds the late-materialization bug"
    assert "InconsistentReadState" in failure.reason, failure.reason
    assert "W]" in failure.reason and "C]" in failure.reason  # the index shows the stray WAL entry


def test_writer_skipping_c4_is_caught_with_a_trace(monkeypatch):
    skip_own_index_entry(monkeypatch)
    failure = first_failure(range(20))
    assert failure is not None, "a writer that never writes its index entry went unnoticed"
    assert "covered by nothing" in failure.reason or "raised" in failure.reason, failure.reason
    text = str(failure)
    assert f"--seed {failure.seed}" in text and "meta.put" in text
    assert 0 < len(failure.trace) <= 40
    # ... and the failing seed replays to the very same failure.
    with pytest.raises(SimFailure) as again:
        run_seed(failure.seed)
    assert again.value.trace == failure.trace and again.value.reason == failure.reason


def test_vacuum_without_grace_period_is_caught(monkeypatch):
    """Vacuum with no grace period deletes a blob between its PUT and the
    reservation that references it (SPEC 7.0): the simulator must notice."""
    monkeypatch.setattr(_run, "GRACE_MS", 0)
    failure = first_failure(range(300))
    assert failure is not None, "a vacuum that deletes young objects went unnoticed"
    assert "deleted object" in failure.reason or "ObjectNotFound" in failure.reason, failure.reason


def test_an_unconditional_delete_records_is_caught(monkeypatch):
    """DeleteRecords writing the control record without its version condition
    undoes a writer's reservation that landed in between: acknowledged records
    vanish, and the simulator must say so."""
    real = _run.delete_records

    class Unconditional:
        def __init__(self, meta):
            self._meta = meta

        def __getattr__(self, name):
            return getattr(self._meta, name)

        def put(self, key, value, partition_key=None, expected_version=None, **kw):
            return self._meta.put(key, value, partition_key, **kw)

    monkeypatch.setattr(_run, "delete_records", lambda meta, keys, before, **kw: real(Unconditional(meta), keys,
                                                                                     before, **kw))
    failure = first_failure(range(40))
    assert failure is not None, "a DeleteRecords that overwrites a reservation went unnoticed"
    assert "DeleteRecords" in failure.shape


def test_a_cut_short_run_is_checked_too():
    result = run_seed(3, SimConfig(stop_after=25))
    assert result.steps == 25


def test_indexed_store_answers_like_the_plain_fake():
    """The bisection index gives the same CEILING and range answers as the
    fake it speeds up (both in Oxia's order, ``test_keys`` checks that), also
    after deletes change the key set."""
    rng = random.Random(5)
    alphabet = ["a", "b", "~", "0", "9", "", "index", "meta", "A", "_"]
    keys = ["/".join(rng.choice(alphabet) for _ in range(rng.randint(1, 4))) for _ in range(300)]
    plain, indexed = InMemoryMetadataStore(), IndexedMetadataStore()
    for store in (plain, indexed):
        for k in keys:
            store.put(k, k.encode(), "p")

    def answers(store, queries):
        out = []
        for lo, hi in queries:
            rec = store.ceiling(lo, "p")
            out.append((rec and rec.key, [r.key for r in store.range_scan(lo, hi, None)]))
        return out

    queries = [tuple(sorted(rng.sample(keys, 2))) for _ in range(100)]
    assert answers(indexed, queries) == answers(plain, queries)
    for store in (plain, indexed):
        store.delete(keys[0], "p")
        store.delete_range(queries[0][0], queries[0][1], "p")
    assert answers(indexed, queries) == answers(plain, queries)


def test_vacuum_keeps_a_materialized_pending_s_key_seed_2011():
    """Seed 2011 (past the sweep): vacuum deleted the index key of a materialized pending as
    redundant while the pending was still in the control record (8.1, invariant 8)."""
    result = run_seed(2011)
    assert result.order_hash  # ran to its end: every step's invariants held


def test_a_reservation_whose_reply_was_lost_caches_what_oxia_holds_seed_2805():
    """Seed 2805 (past the sweep): a writer's reserve CAS landed but its reply was lost;
    retention then moved the log start (keeping the pending), and the writer, having
    found its pending still there, cached its own copy of the record under the newer
    version, so its next reservation wrote the log start back to 1 (8.1, invariant 10)."""
    result = run_seed(2805)
    assert result.order_hash  # ran to its end: every step's invariants held


def test_a_retention_that_lets_uncompacted_records_go_is_caught(monkeypatch):
    """Retention walking past the compaction cursor, WAL entries and all, moves the log start
    over records no compacted range holds (SPEC 7.10): the simulator must say so."""
    import server._compaction.retention as retention_module
    from server._protocol.records import IndexEntry

    def every_entry(meta, keys, start, cursor):
        for row in meta.range_scan(keys.index(start), keys.index_end, keys.partition_key):
            end = keys.index_offset(row.key)
            if end is not None and end >= start:
                entry = IndexEntry.decode(row.value)
                yield entry.start_offset(end), end, entry

    monkeypatch.setattr(retention_module, "compacted_from", every_entry)
    failure = first_failure(range(200))
    assert failure is not None, "a retention that drops uncompacted records went unnoticed"
    assert "past the compaction cursor" in failure.reason, failure.reason
