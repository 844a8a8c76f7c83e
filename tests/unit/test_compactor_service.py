"""The compactor service's wiring over the fakes: the real compactor, the
scheduler and worker threads, shutdown, the vacuum thread, HTTP, the blob
cache and the billing estimate.

The scheduling decisions alone (no threads) are in test_compactor_scheduler.py,
claims in test_compactor_claims.py, discovery in test_compactor_discovery.py,
configuration and flags in test_compactor_config.py, the blob cache itself in
test_compactor_blob_cache.py. The real processes, Oxia sessions and
SIGKILL/SIGTERM are exercised in tests/integration/test_compactor_service.py.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections import Counter

import pytest
from prometheus_client.parser import text_string_to_metric_families

from server._compaction.config import CompactorServiceConfig, VacuumConfig
from server._errors import MetadataStoreError
from server._protocol.keys import TopicPartition
from server._storage.metastore import InMemoryMetadataStore
from server._storage.objectstore import InMemoryObjectStore
from server.leaderless_log_compactor import CompactionOutcome
from server.leaderless_log_compactor_server import CompactorService
from server.leaderless_log_reader import LeaderlessLogReader

from ._compactor_service_fakes import (
    OXIA,
    S3,
    A,
    B,
    FakeCompactor,
    claim_key,
    config,
    cursor,
    fill,
    real_service,
    result,
    service,
    wait_for,
)


@pytest.fixture
def meta():
    return InMemoryMetadataStore()


@pytest.fixture
def objs():
    return InMemoryObjectStore()


# -- with the real compactor over the fakes ---------------------------------------------------------


def test_by_default_the_service_waits_for_a_small_tail_to_grow(meta, objs):
    """The service's defaults (4 MiB or 30 s) leave a few fresh records alone:
    at a trickle, compacting each second wrote one tiny object per log."""
    from server._compaction.config import DEFAULT_SERVICE_MAX_DELAY_MS, DEFAULT_SERVICE_MIN_BYTES

    fill(meta, objs, [A])
    defaults = CompactorServiceConfig(compactor_id="me")
    assert (defaults.min_bytes_per_run, defaults.max_delay_ms) == (DEFAULT_SERVICE_MIN_BYTES,
                                                                   DEFAULT_SERVICE_MAX_DELAY_MS)
    with real_service(meta, objs, targets=(A,), min_bytes_per_run=defaults.min_bytes_per_run,
                      max_delay_ms=defaults.max_delay_ms) as svc:
        [result] = svc.run_pass()
        assert result.outcome == "deferred" and result.result.lag_offsets == 3
        assert 0 < result.result.retry_after_ms <= DEFAULT_SERVICE_MAX_DELAY_MS
        assert svc.metrics.counter("compactor_runs_total", outcome="deferred") == 1
    assert cursor(meta, A) == 1


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


# -- the blob cache and the billing estimate in the service -------------------------------------------


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
