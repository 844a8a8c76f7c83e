"""The compactor service as real processes against the real Oxia and S3.

Services run as ``python -m server.leaderless_log_compactor_server`` (or, to
make a run hang or slow down at a known point, through a small wrapper that
patches ``compact_once`` in the child process only). Oxia sessions are 5 s
(``llog_env``), so a SIGKILLed service's claims expire within seconds.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest

from server._config import OxiaConfig, S3Config
from tests._exposition import sample_value
from tests._signals import signal_a_worker_thread
from devstack import OxiaServerPorts, OxiaStandalone, ensure_oxia, free_ports
from server._protocol.keys import LogLayout, TopicPartition
from server._protocol.records import CompactionCursor, CompactorClaim, ControlRecord
from server._storage.metastore import OxiaMetadataStore
from server._storage.objectstore import S3ObjectStore
from server.leaderless_log_writer import SharedAppendGroup
from tests.integration._compactor_process import FAST, REPO, Service
from tests.integration._raw_http import MALFORMED_REQUESTS, parse_answer, raw_until_closed
from testing.invariants import assert_log, check_index, object_uris, read_index

pytestmark = pytest.mark.integration
@pytest.fixture
def services(llog_env, tmp_path):
    started: list[Service] = []

    def start(name: str, **kw) -> Service:
        svc = Service(llog_env, tmp_path, name, **kw)
        started.append(svc)
        return svc

    yield start
    for svc in started:
        svc.close()


@pytest.fixture
def meta(llog_env):
    store = OxiaMetadataStore(OxiaConfig.from_env(llog_env))
    yield store
    store.close()


def layout(llog_env) -> LogLayout:
    return LogLayout(llog_env["LLOG_ROOT_PREFIX"])


def log_objects(llog_env) -> set[str]:
    """Every object of the test's root, as the URIs index entries name."""
    s3 = S3Config.from_env(llog_env)
    objects = S3ObjectStore(s3)
    try:
        return object_uris(objects, s3.bucket, layout(llog_env).object_prefix)
    finally:
        objects.close()


def cursor(meta, keys) -> int:
    return CompactionCursor.decode(meta.get(keys.compaction_cursor, keys.partition_key).value).offset


def high_watermark(meta, keys) -> int:
    return ControlRecord.decode(meta.get(keys.control, keys.partition_key).value).high_watermark


def wait_until(cond, timeout: float, what: str, interval: float = 0.1) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if cond():
            return time.monotonic() - started
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def fully_compacted(meta, keys) -> bool:
    return cursor(meta, keys) == high_watermark(meta, keys) + 1


def claim_holder(meta, keys) -> str | None:
    rec = meta.get(keys.compactor_claim, keys.partition_key)
    return None if rec is None else CompactorClaim.decode(rec.value).compactor_id


def fill(writer, tps, batches: int, per: int = 3) -> dict[TopicPartition, list[bytes]]:
    written = {tp: [] for tp in tps}
    for tp in tps:
        writer.initialize_partition(tp.topic, tp.partition)
    for b in range(batches):
        groups = [SharedAppendGroup(tp.topic, tp.partition, [f"{tp}/{b}/{i}".encode() for i in range(per)]) for tp in tps]
        writer.append_shared(groups)
        for g in groups:
            written[g.tp].extend(g.payloads)
    return written


# -- two services, one writer --------------------------------------------------------------------------


def test_two_services_with_overlapping_targets_while_a_writer_appends(services, meta, writer, reader, llog_env):
    tps = [TopicPartition("orders", p) for p in range(6)]
    keys = {tp: layout(llog_env).keys(tp) for tp in tps}
    for tp in tps:
        writer.initialize_partition(tp.topic, tp.partition)
    small_runs = {"LLOG_COMPACTOR_MAX_OFFSETS_PER_RUN": "40", "LLOG_COMPACTOR_IDLE_SLEEP_MS": "20",
                  "LLOG_COMPACTOR_IDLE_JITTER_MS": "20"}
    a = services("svc-a", extra_env=small_runs, args=("--targets", "orders:0,orders:1,orders:2,orders:3"))
    b = services("svc-b", extra_env=small_runs, args=("--targets", "orders:2,orders:3,orders:4,orders:5"))
    a.wait_healthy()
    b.wait_healthy()

    written = {tp: [] for tp in tps}
    stop = threading.Event()
    overlap_errors: list[str] = []

    def append() -> None:
        i = 0
        while not stop.is_set():
            groups = [SharedAppendGroup(tp.topic, tp.partition, [f"{tp}/{i}/{j}".encode() for j in range(5)])
                      for tp in tps]
            writer.append_shared(groups)
            for g in groups:
                written[g.tp].extend(g.payloads)
            i += 1

    def watch() -> None:  # SPEC 8.2's overlap rules hold for any index scan, even one racing the services
        while not stop.is_set():
            for tp in tps:
                overlap_errors.extend(check_index(str(tp), read_index(meta, keys[tp])))
            time.sleep(0.05)

    threads = [threading.Thread(target=append, name="appender"), threading.Thread(target=watch, name="watcher")]
    for t in threads:
        t.start()
    try:
        time.sleep(5)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert not overlap_errors, overlap_errors[:3]

    wait_until(lambda: all(fully_compacted(meta, keys[tp]) for tp in tps), 60, "both services to catch up")
    total = sum(len(v) for v in written.values())
    assert total >= 6 * 5 * 5, "the writer should have appended for a while"
    objects = log_objects(llog_env)
    for tp in tps:
        view = assert_log(meta, keys[tp], objects, settled=True)  # SPEC 8, tiled, no compaction in flight
        assert all(e.compacted for e in view.entries)
        assert view.entries[-1].end == len(written[tp])
        assert [r.payload for r in reader.iter_from(tp.topic, tp.partition, 1)] == written[tp]

    ma, mb = a.metrics(), b.metrics()
    compacted = [m["counters"]["compactor_compacted_offsets_total"][""] for m in (ma, mb)]
    # Every offset was compacted exactly once, by one of the two.
    assert sum(compacted) == total, (compacted, total)
    assert all(c > 0 for c in compacted)
    won = [m["counters"]["compactor_claims_total"].get("result=won", 0) for m in (ma, mb)]
    lost = [m["counters"]["compactor_claims_total"].get("result=lost", 0) for m in (ma, mb)]
    assert all(w > 0 for w in won), won
    assert sum(lost) > 0, "orders:2 and orders:3 are contended: someone must have found them busy"
    assert {k for k in ma["gauges"]["compactor_lag_offsets"]} == {f"partition={p},topic=orders" for p in range(4)}

    assert a.terminate() == 0 and b.terminate() == 0
    assert all(claim_holder(meta, keys[tp]) is None for tp in tps)


# -- claims across processes ----------------------------------------------------------------------------


def test_killed_service_frees_its_claim_after_the_session_timeout(services, meta, writer, reader, llog_env, tmp_path):
    tp = TopicPartition("orders", 0)
    keys = layout(llog_env).keys(tp)
    written = fill(writer, [tp], batches=4)
    a = services("svc-a", wrapper=True, args=("--targets", "orders:0"),
                 extra_env={"TEST_HANG_PARTITIONS": "orders:0"})
    wait_until(lambda: claim_holder(meta, keys) == "svc-a", 30, "svc-a to claim orders:0")

    b = services("svc-b", args=("--targets", "orders:0"))
    b.wait_healthy()
    wait_until(lambda: b.counter("compactor_claims_total", "result=lost") >= 2, 15, "svc-b to find orders:0 busy")
    assert b.counter("compactor_tasks_total", "outcome=busy") >= 2
    assert cursor(meta, keys) == 1 and claim_holder(meta, keys) == "svc-a"

    a.proc.send_signal(signal.SIGKILL)
    a.proc.wait(10)
    took = wait_until(lambda: fully_compacted(meta, keys), 30, "svc-b to take over orders:0")
    session_timeout_s = int(llog_env["LLOG_OXIA_SESSION_TIMEOUT_MS"]) / 1000
    assert took >= session_timeout_s / 2, f"the claim vanished after {took:.1f}s: before the session expired?"
    assert b.counter("compactor_claims_total", "result=won") >= 1
    assert b.counter("compactor_runs_total", "outcome=compacted") >= 1
    assert [r.payload for r in reader.iter_from("orders", 0, 1)] == written[tp]
    assert b.terminate() == 0
    assert claim_holder(meta, keys) is None


def test_compaction_catches_up_after_oxia_restarts_under_a_held_claim(stack, services, tmp_path):
    """Oxia is killed while the service holds a claim and restarted a few
    seconds later. The run and the release fail, the service's Oxia session
    survives the outage (30 s), and so does its claim: the service must not
    take its own leftover claim for another compactor's and stay idle."""
    # A dedicated Oxia (the session stack's S3): restarting the session's Oxia would disturb other tests.
    oxia = OxiaStandalone(ensure_oxia(), tmp_path, ports=OxiaServerPorts(*free_ports(3)), shards=1)
    oxia.start()
    try:
        env = {**stack.env(root_prefix=f"t-{uuid.uuid4().hex[:8]}"),
               "LLOG_OXIA_SERVICE_ADDRESS": oxia.address, "LLOG_OXIA_SESSION_TIMEOUT_MS": "30000"}
        tp = TopicPartition("orders", 0)
        keys = LogLayout(env["LLOG_ROOT_PREFIX"]).keys(tp)
        from server.leaderless_log_writer import LeaderlessLogWriter

        with LeaderlessLogWriter.from_env(env) as w:
            fill(w, [tp], batches=3)
        mark = tmp_path / "run-started"
        svc = services("svc-o", wrapper=True, args=("--targets", "orders:0"),
                       extra_env={**env, "TEST_COMPACT_DELAY_S": "1", "TEST_MARK_FILE": str(mark)})
        wait_until(mark.exists, 30, "the first run to start (claim held)")
        oxia.processes[0].kill()
        wait_until(lambda: svc.counter("compactor_claim_releases_total", "outcome=error") >= 1, 60,
                   "the release to fail while Oxia is down")
        started = time.monotonic()
        oxia.start()
        restart_s = time.monotonic() - started
        print(f"dedicated Oxia restarted in {restart_s:.2f}s")

        meta = OxiaMetadataStore(OxiaConfig.from_env(env))
        try:
            with LeaderlessLogWriter.from_env(env) as w:
                fill(w, [tp], batches=3)
            # Well under the 30 s session timeout: an expiring claim cannot be what frees the log.
            took = wait_until(lambda: fully_compacted(meta, keys), 20, "compaction to catch up after the restart")
            assert high_watermark(meta, keys) == 18
        finally:
            meta.close()
        print(f"caught up {took:.1f}s after the restart")
        # The claim really was left behind (the session survived) and was dealt with as ours.
        retried = svc.counter("compactor_claim_release_retries_total", "outcome=released")
        leftovers = svc.counter("compactor_leftover_claims_total", "outcome=deleted")
        assert retried + leftovers >= 1, svc.output()
        assert svc.counter("compactor_tasks_total", "outcome=busy") == 0
        # The cursor moves inside the run; the gauge is set when the run returns.
        wait_until(lambda: svc.metrics()["gauges"].get("compactor_lag_offsets") == {"partition=0,topic=orders": 0},
                   10, "the lag gauge of the run that caught up")
        assert svc.terminate() == 0
    finally:
        oxia.stop()


def test_sigterm_lets_the_run_in_flight_finish_and_releases_its_claim(services, meta, writer, reader, llog_env, tmp_path):
    tp = TopicPartition("orders", 0)
    keys = layout(llog_env).keys(tp)
    written = fill(writer, [tp], batches=3)
    mark = tmp_path / "started"
    svc = services("svc-t", wrapper=True, args=("--targets", "orders:0"),
                   extra_env={"TEST_COMPACT_DELAY_S": "2", "TEST_MARK_FILE": str(mark)})
    wait_until(mark.exists, 30, "the first run to start")
    assert claim_holder(meta, keys) == "svc-t"
    t0 = time.monotonic()
    assert svc.terminate() == 0, svc.output()
    took = time.monotonic() - t0
    # It waited for the run (about 2 s of delay), which finished and released the claim.
    assert took >= 1.0, svc.output()
    assert claim_holder(meta, keys) is None
    assert fully_compacted(meta, keys)
    assert [r.payload for r in reader.iter_from("orders", 0, 1)] == written[tp]
    assert "stopped" in svc.output()


def test_sigterm_taken_by_a_worker_thread_still_stops_the_service(services):
    """As the broker's: whichever thread the kernel hands SIGTERM to, the service stops gracefully."""
    svc = services("svc-w", args=("--targets", "orders:0"))
    svc.wait_healthy()
    signal_a_worker_thread(svc.proc.pid, signal.SIGTERM)
    assert svc.proc.wait(10) == 0, svc.output()
    assert "SIGTERM: shutting down" in svc.output()


# -- discovery, HTTP, vacuum, CLI ---------------------------------------------------------------------------


def test_discovery_http_and_vacuum(services, meta, writer, reader, llog_env):
    target, other = TopicPartition("orders", 0), TopicPartition("payments", 7)
    written = fill(writer, [target, other], batches=3)
    svc = services("svc-d", args=("--targets", "orders:0"), extra_env={
        "LLOG_COMPACTOR_DISCOVERY_INTERVAL_MS": "300",
        "LLOG_VACUUM_INTERVAL_MS": "500",
        "LLOG_VACUUM_GRACE_MS": "2000",
        "LLOG_VACUUM_ALLOW_UNSAFE_GRACE": "true",  # written before it starts; its compactions take far less
    })
    health = svc.wait_healthy()
    assert health["compactor_id"] == "svc-d" and health["port"] == svc.port and health["status"] == "ok"
    lay = layout(llog_env)
    wait_until(lambda: fully_compacted(meta, lay.keys(target)) and fully_compacted(meta, lay.keys(other)),
               30, "both logs compacted")

    doc = svc.metrics()
    assert doc["counters"]["compactor_discovery_passes_total"]["outcome=ok"] >= 1
    assert doc["gauges"]["compactor_partitions_known"][""] == 2
    assert doc["service"]["partitions"]["payments:7"]["source"] == "discovered"
    assert doc["counters"]["oxia_operations_total"]
    assert doc["counters"]["s3_operations_total"]
    status, text = svc.get("/metrics/prometheus")
    assert status == 200
    assert sample_value(text, "llog_compactor_partitions_known") == 2
    assert sample_value(text, "llog_compactor_lag_offsets", partition="7", topic="payments") == 0
    assert svc.get("/nope")[0] == 404

    # Vacuum runs in the service: once the blobs are older than the grace
    # period and both logs are compacted, the shared WAL objects go.
    wait_until(lambda: svc.counter("vacuum_objects_deleted_total", "kind=wal-shared") == 3, 30,
               "vacuum to delete the three shared blobs")
    assert svc.counter("vacuum_bytes_reclaimed_total") > 0
    for tp in (target, other):
        assert [r.payload for r in reader.iter_from(tp.topic, tp.partition, 1)] == written[tp]
    assert svc.terminate() == 0


@pytest.fixture(scope="module")
def http_service(stack, tmp_path_factory):
    """One compactor service (no targets, no discovery) for the HTTP-only tests."""
    root = f"t-{uuid.uuid4().hex[:8]}"
    svc = Service(stack.env(root_prefix=root), tmp_path_factory.mktemp("http-service"), "svc-http")
    try:
        svc.wait_healthy()
        yield svc
    finally:
        svc.close()


@pytest.mark.parametrize(("request_bytes", "status"), MALFORMED_REQUESTS)
def test_malformed_requests_get_the_json_error_body(http_service, request_bytes, status):
    got, headers, body = parse_answer(raw_until_closed("127.0.0.1", http_service.port, request_bytes))
    assert got == status, body
    assert headers["content-type"] == "application/json"
    assert headers["connection"] == "close" and int(headers["content-length"]) == len(body)
    doc = json.loads(body)
    assert doc["error_type"] == "HttpProtocolError" and doc["error"], doc
    assert http_service.get("/health")[0] == 200  # still serving


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "BREW"])
def test_http_errors_are_json(http_service, method):
    status, body = http_service.get("/nope")
    assert status == 404
    assert json.loads(body)["error_type"] == "NotFound"
    got, headers, body = parse_answer(raw_until_closed(
        "127.0.0.1", http_service.port,
        f"{method} /health HTTP/1.1\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{{}}".encode(),
    ))
    assert (got, headers["content-type"], headers["allow"]) == (405, "application/json", "GET")
    assert json.loads(body)["error_type"] == "MethodNotAllowed"


def test_once_compacts_each_log_and_exits(llog_env, writer, meta, reader):
    tps = [TopicPartition("orders", 0), TopicPartition("orders", 1)]
    written = fill(writer, tps, batches=2)
    env = {**os.environ, **llog_env, **FAST, "PYTHONPATH": str(REPO), "LLOG_COMPACTOR_DISCOVERY_INTERVAL_MS": "1000"}
    proc = subprocess.run(
        [sys.executable, "-m", "server.leaderless_log_compactor_server", "--once", "--targets", "orders:0"],
        env=env, capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"partitions": 2, "outcomes": {"compacted": 2}}
    for tp in tps:
        assert fully_compacted(meta, layout(llog_env).keys(tp))
        assert [r.payload for r in reader.iter_from(tp.topic, tp.partition, 1)] == written[tp]


def test_help():
    proc = subprocess.run(
        [sys.executable, "-m", "server.leaderless_log_compactor_server", "--help"],
        env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=30,
    )
    assert proc.returncode == 0
    assert "--targets" in proc.stdout and "SIGTERM" in proc.stdout


def test_bad_configuration_exits_2(llog_env):
    proc = subprocess.run(
        [sys.executable, "-m", "server.leaderless_log_compactor_server", "--workers", "0"],
        env={**os.environ, **llog_env, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=30,
    )
    assert proc.returncode == 2
    assert "LLOG_COMPACTOR_WORKERS" in proc.stderr
