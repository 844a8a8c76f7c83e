"""The compactor service's claims, scheduling, discovery, shutdown and HTTP over the fakes.

The real processes, Oxia sessions and SIGKILL/SIGTERM are exercised in
tests/integration/test_compactor_service.py.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from dataclasses import replace

import pytest
from prometheus_client.parser import text_string_to_metric_families

from server._compaction.config import CompactorServiceConfig, VacuumConfig, parse_targets
from server._config import OxiaConfig, S3Config
from server._errors import ConfigError, MetadataStoreError
from server._protocol.keys import TopicPartition
from server._protocol.records import CompactionCursor, CompactorClaim
from server._storage.metastore import EXPECT_ABSENT, InMemoryMetadataStore
from server._storage.objectstore import InMemoryObjectStore
from server.leaderless_log_compactor import CompactionOutcome, CompactionResult
from server.leaderless_log_compactor_server import CompactorService, config_from_args, parse_args
from server.leaderless_log_metrics import LlogMetrics
from server.leaderless_log_reader import LeaderlessLogReader
from server.leaderless_log_writer import LeaderlessLogWriter, SharedAppendGroup

OXIA = OxiaConfig("fake:1", root_prefix="llog")
S3 = S3Config("llog")
A = TopicPartition("orders", 0)
B = TopicPartition("orders", 1)


def claim_key(tp: TopicPartition) -> str:
    return f"llog/{tp.topic}/partitions/{tp.partition}/meta/compactor-claim"


def result(tp: TopicPartition, outcome: CompactionOutcome, lag: int = 0) -> CompactionResult:
    return CompactionResult(tp.topic, tp.partition, outcome, high_watermark=lag, cursor=1)


class FakeCompactor:
    """Answers ``compact_once`` from a per-log script; records concurrency."""

    def __init__(self, behaviour=None, delay_s: float = 0.0) -> None:
        self.behaviour = behaviour or (lambda tp: result(tp, CompactionOutcome.NOTHING_TO_DO))
        self.delay_s = delay_s
        self.calls: Counter[TopicPartition] = Counter()
        self.running: Counter[TopicPartition] = Counter()
        self.max_running: Counter[TopicPartition] = Counter()
        self.lock = threading.Lock()
        self.closed = 0

    def compact_once(self, topic, partition, max_offsets=None):
        tp = TopicPartition(topic, partition)
        with self.lock:
            self.calls[tp] += 1
            self.running[tp] += 1
            self.max_running[tp] = max(self.max_running[tp], self.running[tp])
        try:
            if self.delay_s:
                time.sleep(self.delay_s)
            return self.behaviour(tp)
        finally:
            with self.lock:
                self.running[tp] -= 1

    def close(self):
        self.closed += 1


def config(**kw) -> CompactorServiceConfig:
    base = CompactorServiceConfig(
        compactor_id="me", port=0, targets=(A, B), workers=2, discovery_interval_ms=0,
        idle_sleep_ms=0, error_sleep_ms=0, idle_jitter_ms=0, error_jitter_ms=0,
        shutdown_timeout_ms=5_000, vacuum=VacuumConfig(interval_ms=0),
    )
    return replace(base, **kw)


@pytest.fixture
def meta():
    return InMemoryMetadataStore()


@pytest.fixture
def objs():
    return InMemoryObjectStore()


def service(meta, objs, compactor=None, serve_http=False, **kw) -> CompactorService:
    fake = compactor or FakeCompactor()
    factory = kw.pop("compactor_factory", lambda: fake)
    metrics = kw.pop("metrics", None) or LlogMetrics()
    return CompactorService(
        config(**kw), OXIA, S3, metrics=metrics, metadata_store=meta, object_store=objs,
        compactor_factory=factory, serve_http=serve_http,
    )


def wait_for(cond, timeout=5.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


# -- claims --------------------------------------------------------------------------------


def test_claim_is_taken_for_the_run_and_released(meta, objs):
    seen = []

    def behaviour(tp):
        rec = meta.get(claim_key(tp), str(tp))
        seen.append(CompactorClaim.decode(rec.value))
        return result(tp, CompactionOutcome.COMPACTED)

    with service(meta, objs, FakeCompactor(behaviour)) as svc:
        res = svc.attempt(A)
    assert res.outcome == "compacted"
    assert seen[0].compactor_id == "me" and seen[0].claimed_at_ms > 0
    assert meta.get(claim_key(A), str(A)) is None
    assert svc.metrics.counter("compactor_claims_total", result="won") == 1
    assert svc.metrics.counter("compactor_claim_releases_total", outcome="released") == 1


def test_log_claimed_by_another_compactor_is_skipped_as_busy(meta, objs):
    other = CompactorClaim("other", 1).encode()
    meta.put(claim_key(A), other, str(A), expected_version=EXPECT_ABSENT, ephemeral=True)
    fake = FakeCompactor()
    with service(meta, objs, fake) as svc:
        assert svc.attempt(A).outcome == "busy"
        assert svc.attempt(B).outcome == "nothing_to_do"
    assert fake.calls == Counter({B: 1})
    assert meta.get(claim_key(A), str(A)).value == other  # untouched
    assert svc.metrics.counter("compactor_claims_total", result="lost") == 1
    assert svc.metrics.counter("compactor_tasks_total", outcome="busy") == 1


def test_release_never_deletes_another_compactors_claim(meta, objs):
    """Our session expired mid-run and someone else claimed the log: leave theirs."""

    def behaviour(tp):
        meta.delete(claim_key(tp), str(tp))
        meta.put(claim_key(tp), CompactorClaim("other", 2).encode(), str(tp), expected_version=EXPECT_ABSENT)
        return result(tp, CompactionOutcome.COMPACTED)

    with service(meta, objs, FakeCompactor(behaviour)) as svc:
        assert svc.attempt(A).outcome == "compacted"
    assert CompactorClaim.decode(meta.get(claim_key(A), str(A)).value).compactor_id == "other"
    assert svc.metrics.counter("compactor_claim_releases_total", outcome="not_ours") == 1


class LostReplyStore(InMemoryMetadataStore):
    """Applies the next claim put, then reports a transport error (unknown outcome)."""

    def __init__(self):
        super().__init__()
        self.lose_next_claim = True

    def put(self, key, value, partition_key, expected_version=None, ephemeral=False):
        version = super().put(key, value, partition_key, expected_version, ephemeral)
        if self.lose_next_claim and key.endswith("/compactor-claim"):
            self.lose_next_claim = False
            raise MetadataStoreError("deadline exceeded")
        return version


def test_claim_with_unknown_outcome_is_ours_if_it_names_us(objs):
    meta = LostReplyStore()
    with service(meta, objs) as svc:
        assert svc.attempt(A).outcome == "nothing_to_do"
    assert meta.get(claim_key(A), str(A)) is None  # resolved as ours, then released


def test_claim_that_failed_outright_is_an_error(meta, objs):
    meta.fail_next("put", key_contains="compactor-claim")
    fake = FakeCompactor()
    with service(meta, objs, fake) as svc:
        res = svc.attempt(A)
    assert res.outcome == "error" and "claim failed" in res.error
    assert fake.calls == Counter()


def test_compaction_errors_are_contained_and_the_claim_released(meta, objs):
    def behaviour(tp):
        raise MetadataStoreError("Oxia is down")

    with service(meta, objs, FakeCompactor(behaviour)) as svc:
        res = svc.attempt(A)
    assert res.outcome == "error" and "Oxia is down" in res.error
    assert meta.get(claim_key(A), str(A)) is None
    assert svc.metrics.counter("compactor_task_errors_total", error="MetadataStoreError") == 1


# -- our own claims never block us -------------------------------------------------------------------


class OutageStore(InMemoryMetadataStore):
    """Every call fails while ``down`` is set, as when Oxia is killed; the data
    (and our ephemeral claims: the session outlives a short outage) stay."""

    def __init__(self):
        super().__init__()
        self.down = False

    def _enter(self, op, key=""):
        if self.down:
            self.calls[op] = self.calls.get(op, 0) + 1
            raise MetadataStoreError(f"Oxia is down ({op} of {key!r})")
        return super()._enter(op, key)


def test_after_an_oxia_outage_our_leftover_claim_does_not_make_the_log_busy(objs):
    """The release fails during the outage; afterwards the log is compacted again, not busy forever."""
    meta = OutageStore()
    runs = []

    def behaviour(tp):
        runs.append(tp)
        if len(runs) == 1:
            meta.down = True  # Oxia dies mid-run: the run fails and so does the release
            raise MetadataStoreError("Oxia is down")
        return result(tp, CompactionOutcome.COMPACTED)

    with service(meta, objs, FakeCompactor(behaviour)) as svc:
        first = svc.attempt(A)
        assert first.outcome == "error"
        assert svc.metrics.counter("compactor_claim_releases_total", outcome="error") == 1
        meta.down = False  # Oxia is back; our session, and the claim, survived
        assert CompactorClaim.decode(meta.get(claim_key(A), str(A)).value).compactor_id == "me"
        assert [svc.attempt(A).outcome for _ in range(3)] == ["compacted"] * 3
    assert runs == [A] * 4
    assert meta.get(claim_key(A), str(A)) is None
    assert svc.unreleased_claims() == {}
    assert svc.metrics.counter("compactor_claim_release_retries_total", outcome="released") == 1
    assert svc.metrics.counter("compactor_tasks_total", outcome="busy") == 0
    assert svc.metrics.snapshot()["gauges"]["compactor_unreleased_claims"] == {"": 0}


def test_a_release_retry_that_fails_again_stays_remembered(objs):
    meta = OutageStore()
    fake = FakeCompactor(lambda tp: result(tp, CompactionOutcome.COMPACTED))
    with service(meta, objs, fake) as svc:
        meta.fail_next("delete", key_contains="compactor-claim")
        assert svc.attempt(A).outcome == "compacted"
        version = svc.unreleased_claims()[A]
        assert svc.metrics.snapshot()["gauges"]["compactor_unreleased_claims"] == {"": 1}
        meta.down = True
        res = svc.attempt(A)
        assert res.outcome == "error" and "claim failed" in res.error
        assert svc.unreleased_claims() == {A: version}
        meta.down = False
        assert svc.attempt(A).outcome == "compacted"
    assert fake.calls == Counter({A: 2})
    assert svc.unreleased_claims() == {} and meta.get(claim_key(A), str(A)) is None
    assert svc.metrics.counter("compactor_claim_release_retries_total", outcome="error") == 1
    assert svc.metrics.counter("compactor_claim_release_retries_total", outcome="released") == 1


def test_a_remembered_release_leaves_a_claim_someone_else_took_alone(meta, objs):
    """Our session expired after the failed release and another compactor claimed the log."""
    with service(meta, objs) as svc:
        meta.fail_next("delete", key_contains="compactor-claim")
        svc.attempt(A)
        version = svc.unreleased_claims()[A]
        meta.delete(claim_key(A), str(A), expected_version=version)  # the session expired
        meta.put(claim_key(A), CompactorClaim("other", 5).encode(), str(A), expected_version=EXPECT_ABSENT)
        assert svc.attempt(A).outcome == "busy"
    assert CompactorClaim.decode(meta.get(claim_key(A), str(A)).value).compactor_id == "other"
    assert svc.unreleased_claims() == {}
    assert svc.metrics.counter("compactor_claim_release_retries_total", outcome="not_ours") == 1


def test_a_claim_naming_us_that_this_process_does_not_remember_is_taken_back(meta, objs):
    """E.g. a create whose reply was lost and whose read-back failed too, or
    an earlier process with the same compactor_id: never busy on ourselves."""
    meta.put(claim_key(A), CompactorClaim("me", 1).encode(), str(A), expected_version=EXPECT_ABSENT, ephemeral=True)
    seen = []

    def behaviour(tp):
        seen.append(CompactorClaim.decode(meta.get(claim_key(tp), str(tp)).value))
        return result(tp, CompactionOutcome.COMPACTED)

    with service(meta, objs, FakeCompactor(behaviour)) as svc:
        assert svc.attempt(A).outcome == "compacted"
    assert seen[0].compactor_id == "me" and seen[0].claimed_at_ms > 1  # a fresh claim of this run
    assert meta.get(claim_key(A), str(A)) is None
    assert svc.metrics.counter("compactor_leftover_claims_total", outcome="deleted") == 1
    assert svc.metrics.counter("compactor_claims_total", result="won") == 1


class SnatchingStore(InMemoryMetadataStore):
    """Another compactor replaces the claim between our read and our delete."""

    def delete(self, key, partition_key, expected_version=None):
        if key.endswith("/compactor-claim") and expected_version is not None:
            super().delete(key, partition_key)
            super().put(key, CompactorClaim("other", 9).encode(), partition_key, expected_version=EXPECT_ABSENT)
        return super().delete(key, partition_key, expected_version)


def test_our_leftover_is_deleted_only_at_the_version_read(objs):
    meta = SnatchingStore()
    meta.put(claim_key(A), CompactorClaim("me", 1).encode(), str(A), expected_version=EXPECT_ABSENT, ephemeral=True)
    fake = FakeCompactor()
    with service(meta, objs, fake) as svc:
        assert svc.attempt(A).outcome == "busy"
    assert fake.calls == Counter()
    assert CompactorClaim.decode(meta.get(claim_key(A), str(A)).value).compactor_id == "other"
    assert svc.metrics.counter("compactor_leftover_claims_total", outcome="changed") == 1


def test_an_unreadable_claim_is_never_taken_for_ours(meta, objs):
    meta.put(claim_key(A), b"not json", str(A), expected_version=EXPECT_ABSENT, ephemeral=True)
    with service(meta, objs) as svc:
        assert svc.attempt(A).outcome == "busy"
    assert meta.get(claim_key(A), str(A)).value == b"not json"


# -- with the real compactor over the fakes ---------------------------------------------------------


def fill(meta, objs, tps, batches=3):
    with LeaderlessLogWriter(OXIA, S3, metadata_store=meta, object_store=objs) as w:
        for tp in tps:
            w.initialize_partition(tp.topic, tp.partition)
        for b in range(batches):
            w.append_shared([SharedAppendGroup(tp.topic, tp.partition, [f"{tp}-{b}".encode()]) for tp in tps])


def cursor(meta, tp) -> int:
    rec = meta.get(f"llog/{tp.topic}/partitions/{tp.partition}/meta/compaction-cursor", str(tp))
    return CompactionCursor.decode(rec.value).offset


def real_service(meta, objs, **kw) -> CompactorService:
    return CompactorService(
        config(**kw), OXIA, S3, metadata_store=meta, object_store=objs, serve_http=False,
    )


def test_run_pass_compacts_every_target_and_discovered_log(meta, objs):
    other = TopicPartition("payments", 3)
    fill(meta, objs, [A, B, other])
    with real_service(meta, objs, discovery_interval_ms=60_000) as svc:
        results = svc.run_pass()
    assert sorted((str(r.tp), r.outcome) for r in results) == [
        ("orders:0", "compacted"), ("orders:1", "compacted"), ("payments:3", "compacted"),
    ]
    assert all(r.result.lag_offsets == 0 for r in results)
    assert [cursor(meta, tp) for tp in (A, B, other)] == [4, 4, 4]
    assert svc.metrics.counter("compactor_compacted_offsets_total") == 9
    with LeaderlessLogReader(OXIA, S3, metadata_store=meta, object_store=objs) as r:
        assert [x.payload for x in r.iter_from("payments", 3, 1)] == [b"payments:3-0", b"payments:3-1", b"payments:3-2"]


def test_max_offsets_per_run_is_passed_and_partial_runs_reschedule_at_once(meta, objs):
    fill(meta, objs, [A], batches=5)
    with real_service(meta, objs, targets=(A,), max_offsets_per_run=2, idle_sleep_ms=60_000) as svc:
        res = svc.attempt(A)
        assert (res.result.start_offset, res.result.end_offset, res.result.lag_offsets) == (1, 2, 3)
        assert svc._scheduler.delay_s(res.outcome, res.result.lag_offsets) == 0.0
        svc.start()
        wait_for(lambda: cursor(meta, A) == 6, what="the rest compacted without idle sleeps")
    assert svc.metrics.snapshot()["gauges"]["compactor_lag_offsets"] == {"partition=0,topic=orders": 0}


def test_uninitialized_seed_target_is_not_an_error(meta, objs):
    with real_service(meta, objs) as svc:
        assert svc.attempt(A).outcome == "not_initialized"
    assert meta.get(claim_key(A), str(A)) is None


# -- discovery -------------------------------------------------------------------------------------


def test_discovery_keeps_only_canonical_control_keys_of_this_root(meta, objs):
    for key in [
        "llog/orders/partitions/0/meta/control",
        "llog/orders/partitions/7/meta/control",
        "llog/pay.ments_2-x/partitions/12/meta/control",
        "llog/orders/partitions/07/meta/control",       # not canonical
        "llog/orders/partitions/-1/meta/control",
        "llog/orders/partitions/1/meta/compaction-cursor",
        "llog/orders/partitions/1/index/00000000000000000001",
        "llog/orders/partition/2/meta/control",
        "llog/sub/orders/partitions/0/meta/control",     # a nested root
        "other/orders/partitions/3/meta/control",        # another root
    ]:
        meta.put(key, b"{}", "x")
    with service(meta, objs, targets=(A,)) as svc:
        assert svc.discover() == 2
        assert svc.discover() == 0
        assert svc.known_partitions() == [A, TopicPartition("orders", 7), TopicPartition("pay.ments_2-x", 12)]
    assert svc.metrics.counter("compactor_discovery_passes_total", outcome="ok") == 2
    assert svc.metrics.counter("compactor_partitions_discovered_total") == 2


def test_discovery_lists_all_shards_within_the_root_only(objs):
    class Spy(InMemoryMetadataStore):
        calls_seen = []

        def list_keys(self, min_key, max_key, partition_key=None):
            self.calls_seen.append((min_key, max_key, partition_key))
            return super().list_keys(min_key, max_key, partition_key)

    meta = Spy()
    with service(meta, objs) as svc:
        svc.discover()
    assert meta.calls_seen == [("llog/", "llog/~/", None)]


def test_failed_discovery_keeps_scheduling_known_logs(meta, objs):
    meta.fail_next("range_scan", times=1000)  # list_keys goes through range_scan in the fake
    fake = FakeCompactor()
    with service(meta, objs, fake, discovery_interval_ms=10) as svc:
        svc.start()
        wait_for(lambda: fake.calls[A] >= 2 and fake.calls[B] >= 2)
    assert svc.metrics.counter("compactor_discovery_passes_total", outcome="error") >= 1


# -- scheduling -------------------------------------------------------------------------------------


def test_never_two_tasks_for_one_log_even_with_spare_workers(meta, objs):
    fake = FakeCompactor(lambda tp: result(tp, CompactionOutcome.COMPACTED, lag=5), delay_s=0.005)
    with service(meta, objs, fake, workers=4) as svc:
        svc.start()
        wait_for(lambda: fake.calls[A] >= 20 and fake.calls[B] >= 20)
    assert fake.max_running == Counter({A: 1, B: 1})


def test_idle_sleep_is_per_log_not_global(meta, objs):
    """A log with nothing to do sleeps; a log with work keeps its worker busy."""

    def behaviour(tp):
        if tp == A:
            return result(tp, CompactionOutcome.COMPACTED, lag=100)
        return result(tp, CompactionOutcome.NOTHING_TO_DO)

    fake = FakeCompactor(behaviour, delay_s=0.002)
    with service(meta, objs, fake, workers=1, idle_sleep_ms=400) as svc:
        svc.start()
        wait_for(lambda: fake.calls[A] >= 30, what="A keeps being compacted")
    assert 1 <= fake.calls[B] <= 2


def test_errors_back_off_with_the_error_sleep(meta, objs):
    def behaviour(tp):
        if tp == A:
            raise RuntimeError("boom")
        return result(tp, CompactionOutcome.NOTHING_TO_DO)

    fake = FakeCompactor(behaviour)
    with service(meta, objs, fake, idle_sleep_ms=5, error_sleep_ms=10_000) as svc:
        svc.start()
        wait_for(lambda: fake.calls[B] >= 10)
    assert fake.calls[A] == 1
    assert svc.metrics.counter("compactor_tasks_total", outcome="error") == 1


def test_sleeps_are_jittered(meta, objs):
    svc = service(meta, objs, idle_sleep_ms=100, idle_jitter_ms=50, error_sleep_ms=1000, error_jitter_ms=500)
    with svc:
        idle = [svc._scheduler.delay_s("nothing_to_do", 0) for _ in range(200)]
        errors = [svc._scheduler.delay_s("error", 0) for _ in range(200)]
        assert svc._scheduler.delay_s("busy", None) >= 0.1
        assert svc._scheduler.delay_s("resumed", 0) == 0.0
        assert svc._scheduler.delay_s("compacted", 0) >= 0.1  # caught up: idle
    assert 0.1 <= min(idle) and max(idle) <= 0.15 and len(set(idle)) > 100
    assert 1.0 <= min(errors) and max(errors) <= 1.5


def test_at_most_workers_tasks_run_at_once(meta, objs):
    tps = tuple(TopicPartition("t", i) for i in range(8))
    fake = FakeCompactor(lambda tp: result(tp, CompactionOutcome.COMPACTED, lag=1), delay_s=0.01)
    peak = []

    def factory():
        return fake

    with service(meta, objs, compactor_factory=factory, targets=tps, workers=3) as svc:
        svc.start()
        for _ in range(50):
            with fake.lock:
                peak.append(sum(fake.running.values()))
            time.sleep(0.005)
    assert max(peak) <= 3
    assert all(fake.calls[tp] >= 1 for tp in tps)


def test_each_worker_thread_gets_its_own_compactor_all_closed(meta, objs):
    made = []

    def factory():
        c = FakeCompactor(lambda tp: result(tp, CompactionOutcome.COMPACTED, lag=1), delay_s=0.002)
        made.append(c)
        return c

    with service(meta, objs, compactor_factory=factory, workers=2) as svc:
        svc.start()
        wait_for(lambda: sum(sum(c.calls.values()) for c in made) >= 20)
    assert 1 <= len(made) <= 2
    assert all(c.closed == 1 for c in made)


# -- shutdown ----------------------------------------------------------------------------------------


def test_close_waits_for_the_run_in_flight_then_releases_its_claim(meta, objs):
    entered, proceed = threading.Event(), threading.Event()

    def behaviour(tp):
        entered.set()
        proceed.wait(5)
        return result(tp, CompactionOutcome.COMPACTED)

    svc = service(meta, objs, FakeCompactor(behaviour), targets=(A,), workers=1)
    svc.start()
    assert entered.wait(5)
    closer = threading.Thread(target=svc.close)
    closer.start()
    closer.join(0.2)  # the run is held by `proceed`: close() cannot finish before it is set
    assert closer.is_alive(), "close() must wait for the run in flight"
    assert meta.get(claim_key(A), str(A)) is not None
    proceed.set()
    closer.join(5)
    assert not closer.is_alive()
    assert meta.get(claim_key(A), str(A)) is None
    assert svc.health()["status"] == "stopping"
    svc.close()  # twice is fine


def test_shutdown_wait_is_bounded(meta, objs):
    entered, never = threading.Event(), threading.Event()

    def behaviour(tp):
        entered.set()
        never.wait(10)
        return result(tp, CompactionOutcome.COMPACTED)

    svc = service(meta, objs, FakeCompactor(behaviour), targets=(A,), workers=1, shutdown_timeout_ms=200)
    svc.start()
    assert entered.wait(5)
    t0 = time.monotonic()
    assert svc.stop() is False
    svc.close()
    assert time.monotonic() - t0 < 3
    never.set()


def test_no_new_tasks_after_stop(meta, objs):
    fake = FakeCompactor(lambda tp: result(tp, CompactionOutcome.COMPACTED, lag=1))
    with service(meta, objs, fake) as svc:
        svc.start()
        wait_for(lambda: sum(fake.calls.values()) >= 5)
    calls = sum(fake.calls.values())
    # Only the scheduler hands out tasks: close() joined it with nothing in
    # flight, so no task can start any more.
    assert not svc._scheduler_thread.is_alive() and svc._scheduler.in_flight == 0
    assert sum(fake.calls.values()) == calls


# -- vacuum from the service -------------------------------------------------------------------------------


def test_vacuum_runs_on_its_interval_and_errors_do_not_stop_it(meta, objs):
    class FakeVacuum:
        def __init__(self):
            self.runs = 0
            self.closed = False

        def run_once(self, dry_run=False):
            self.runs += 1
            if self.runs == 1:
                raise MetadataStoreError("Oxia is down")
            from server.leaderless_log_vacuum import VacuumReport

            return VacuumReport(False, 0, "llog", "llog", 0, 0, {}, (), 0, (), 0)

        def close(self):
            self.closed = True

    vac = FakeVacuum()
    cfg = config(vacuum=VacuumConfig(interval_ms=20))
    svc = CompactorService(cfg, OXIA, S3, metadata_store=meta, object_store=objs, serve_http=False,
                           compactor_factory=FakeCompactor, vacuum_factory=lambda: vac)
    with svc:
        svc.start()
        wait_for(lambda: vac.runs >= 3)
    assert vac.closed


def test_vacuum_disabled_by_interval_zero(meta, objs):
    with service(meta, objs) as svc:
        svc.start()
        assert svc._vacuum_runner.thread is None


# -- HTTP ----------------------------------------------------------------------------------------------------


def get(port, path):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
            return resp.status, resp.headers.get("Content-Type"), resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Content-Type"), exc.read().decode()


def test_http_endpoints(meta, objs):
    fill(meta, objs, [A])
    svc = CompactorService(config(targets=(A,)), OXIA, S3, metadata_store=meta, object_store=objs)
    with svc:
        svc.start()
        wait_for(lambda: cursor(meta, A) == 4)
        port = svc.http_port
        status, ctype, body = get(port, "/health")
        health = json.loads(body)
        assert (status, ctype) == (200, "application/json")
        assert health["status"] == "ok" and health["compactor_id"] == "me" and health["port"] == port

        status, _, body = get(port, "/metrics")
        doc = json.loads(body)
        assert status == 200
        assert doc["info"]["compactor_id"] == "me"
        assert doc["counters"]["compactor_claims_total"]["result=won"] >= 1
        assert doc["counters"]["compactor_runs_total"]["outcome=compacted"] == 1
        assert doc["gauges"]["compactor_lag_offsets"]["partition=0,topic=orders"] == 0
        assert doc["gauges"]["compactor_partitions_known"] == {"": 1}
        assert doc["service"]["partitions"]["orders:0"]["lag_offsets"] == 0
        assert "compactor_stage_seconds" in doc["histograms"]

        status, ctype, text = get(port, "/metrics/prometheus")
        assert status == 200 and ctype.startswith("text/plain")
        samples = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples
        }
        me = ("compactor_id", "me")
        assert samples[("llog_compactor_claims_total", (me, ("result", "won")))] >= 1
        assert samples[("llog_compactor_lag_offsets", (me, ("partition", "0"), ("topic", "orders")))] == 0
        assert samples[("llog_compactor_compacted_offsets_total", (me,))] == 3

        status, _, body = get(port, "/nope")
        assert status == 404 and "/metrics" in body


# -- configuration ----------------------------------------------------------------------------------------------


def test_config_defaults():
    c = CompactorServiceConfig.from_env({})
    assert (c.bind_host, c.port, c.workers, c.targets) == ("127.0.0.1", 8090, 2, ())
    assert (c.discovery_interval_ms, c.idle_sleep_ms, c.error_sleep_ms) == (30_000, 1_000, 5_000)
    assert (c.idle_jitter_ms, c.error_jitter_ms) == (500, 2_000)
    assert (c.max_offsets_per_run, c.max_bytes_per_run) == (100_000, 64 * 1024 * 1024)
    assert c.blob_cache_bytes == 128 * 1024 * 1024
    assert c.vacuum == VacuumConfig(3_600_000, 600_000, True)
    assert c.compactor_id.endswith(f"-{__import__('os').getpid()}")


def test_config_from_env():
    c = CompactorServiceConfig.from_env({
        "LLOG_COMPACTOR_ID": "c1", "LLOG_COMPACTOR_BIND_HOST": "0.0.0.0", "LLOG_COMPACTOR_PORT": "0",
        "LLOG_COMPACTOR_TARGETS": " orders:0, orders:1,,orders:0 ", "LLOG_COMPACTOR_WORKERS": "4",
        "LLOG_COMPACTOR_DISCOVERY_INTERVAL_MS": "0", "LLOG_COMPACTOR_IDLE_SLEEP_MS": "10",
        "LLOG_COMPACTOR_ERROR_SLEEP_MS": "20", "LLOG_COMPACTOR_IDLE_JITTER_MS": "1",
        "LLOG_COMPACTOR_ERROR_JITTER_MS": "2", "LLOG_COMPACTOR_MAX_OFFSETS_PER_RUN": "1_000",
        "LLOG_COMPACTOR_SHUTDOWN_TIMEOUT_MS": "3", "LLOG_VACUUM_GRACE_MS": "5",
        "LLOG_VACUUM_INTERVAL_MS": "0", "LLOG_VACUUM_DELETE_REDUNDANT_ENTRIES": "0",
    })
    assert c == CompactorServiceConfig(
        compactor_id="c1", bind_host="0.0.0.0", port=0, targets=(A, B), workers=4, discovery_interval_ms=0,
        idle_sleep_ms=10, error_sleep_ms=20, idle_jitter_ms=1, error_jitter_ms=2, max_offsets_per_run=1000,
        max_bytes_per_run=64 * 1024 * 1024, shutdown_timeout_ms=3, vacuum=VacuumConfig(5, 0, False),
    )


@pytest.mark.parametrize(("name", "value"), [
    ("LLOG_COMPACTOR_WORKERS", "0"),
    ("LLOG_COMPACTOR_PORT", "70000"),
    ("LLOG_COMPACTOR_IDLE_SLEEP_MS", "-1"),
    ("LLOG_COMPACTOR_MAX_OFFSETS_PER_RUN", "0"),
    ("LLOG_COMPACTOR_TARGETS", "orders"),
    ("LLOG_COMPACTOR_TARGETS", "bad/topic:0"),
    ("LLOG_COMPACTOR_TARGETS", "orders:-1"),
    ("LLOG_VACUUM_GRACE_MS", "-5"),
    ("LLOG_COMPACTOR_BLOB_CACHE_BYTES", "-1"),
    ("LLOG_COMPACTOR_ERROR_SLEEP_MS", "soon"),
])
def test_config_errors_name_the_variable(name, value):
    with pytest.raises(ConfigError, match=name):
        CompactorServiceConfig.from_env({name: value})


def test_parse_targets():
    assert parse_targets(None) == ()
    assert parse_targets("a.b:3") == (TopicPartition("a.b", 3),)


def test_flags_override_the_environment():
    env = {"LLOG_COMPACTOR_PORT": "9000", "LLOG_COMPACTOR_TARGETS": "orders:0", "LLOG_VACUUM_GRACE_MS": "10",
           "LLOG_COMPACTOR_WORKERS": "3"}
    args = parse_args(["--port", "0", "--targets", "x:1,x:2", "--vacuum-interval-ms", "0", "--once"])
    assert isinstance(args, argparse.Namespace) and args.once
    c = config_from_args(args, env)
    assert (c.port, c.targets, c.workers) == (0, (TopicPartition("x", 1), TopicPartition("x", 2)), 3)
    assert c.vacuum == VacuumConfig(grace_ms=10, interval_ms=0)


def test_help_exits_zero(capsys):
    with pytest.raises(SystemExit) as info:
        parse_args(["--help"])
    assert info.value.code == 0
    assert "--targets" in capsys.readouterr().out


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


def test_service_compactors_use_the_blob_cache_and_vacuum_does_not(meta, objs):
    from server._compaction.blob_cache import SharedBlobCache

    fill(meta, objs, [A, B, TopicPartition("orders", 2)])
    with real_service(meta, objs, targets=(A, B, TopicPartition("orders", 2))) as svc:
        assert isinstance(svc._compactor_stores.objects, SharedBlobCache)
        for tp in svc.known_partitions():
            assert svc.attempt(tp).outcome == "compacted"
        assert svc.metrics.counter("compactor_blob_cache_requests_total", result="fill") == 3
        assert svc.metrics.counter("compactor_blob_cache_requests_total", result="hit") == 3
    with real_service(meta, objs, blob_cache_bytes=0) as svc:
        assert svc._compactor_stores.objects is svc._objects


def test_metrics_carry_the_s3_billing_estimate(meta, objs):
    fill(meta, objs, [A, B])
    with real_service(meta, objs, targets=(A, B)) as svc:
        svc.run_pass()
        billing = svc.metrics_json()["s3"]["billing"]
    # The fake counts no requests itself; the scan sees the WAL blobs and the compacted objects.
    assert billing["objects"] == len(objs.objects) and billing["stored_bytes"] > 0
    assert billing["usage_complete"] is True
    assert svc.metrics.snapshot()["gauges"]["s3_billing_objects"][""] == len(objs.objects)
