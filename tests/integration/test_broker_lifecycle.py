"""The broker process: CLI, /health, /metrics, concurrency, graceful shutdown."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests._exposition import sample_value
from tests._records import stored_size
from tests._signals import signal_a_worker_thread
from tests._waiting import wait_until

pytestmark = pytest.mark.integration
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "server.leaderless_log_broker", *args],
        env={**os.environ, **(env or {}), "PYTHONPATH": REPO}, capture_output=True, text=True, timeout=60, cwd=REPO,
    )


def test_help() -> None:
    out = run_cli("--help")
    assert out.returncode == 0
    for flag in ("--role", "--broker-id", "--host", "--port", "--tail-cache-dir"):
        assert flag in out.stdout


def test_bad_configuration_exits_2_with_the_reason(llog_env) -> None:
    out = run_cli(env={**llog_env, "LLOG_BROKER_ROLE": "leader"})
    assert out.returncode == 2 and "LLOG_BROKER_ROLE" in out.stderr
    out = run_cli("--role", "both", env={**llog_env, "LLOG_BROKER_MAX_WAIT_MS": "soon"})
    assert out.returncode == 2 and "LLOG_BROKER_MAX_WAIT_MS" in out.stderr


def test_a_broker_whose_parent_stopped_reading_exits_instead_of_serving_on(llog_env) -> None:
    """The listening line goes to a pipe nobody reads (the parent died):
    the broker shuts down with status 1 instead of living on, unannounced."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "server.leaderless_log_broker", "--port", "0", "--role", "both"],
        env={**os.environ, **llog_env, "PYTHONPATH": REPO}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        cwd=REPO,
    )
    proc.stdout.close()  # the reading end is gone before the broker announces itself
    try:
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 1, err.decode()
    assert b"cannot start" in err and b"Broken pipe" in err


def test_health_is_exactly_the_contract(shared_broker, openapi) -> None:
    reply = shared_broker.client.request("GET", "/health")
    body = reply.json
    assert set(body) == {"status", "broker_id", "host", "port", "started_at_ms"}
    assert (body["status"], body["broker_id"], body["port"]) == ("ok", "session-1-both", shared_broker.port)
    assert abs(body["started_at_ms"] / 1000 - time.time()) < 3600
    assert reply.headers["Content-Type"] == "application/json"


def test_metrics_json_and_prometheus(broker_factory) -> None:
    b = broker_factory()
    c = b.client
    c.produce([{"topic": "t", "partition": 0, "records": ["a", "b"]}])
    c.consume([{"topic": "t", "partition": 0, "fetch_offset": 1}])
    c.consume([{"topic": "t", "partition": 9, "fetch_offset": 1}])
    c.request("GET", "/nope")
    m = c.metrics()
    assert m["broker"]["role"] == "both" and m["broker"]["tail_cache_mode"] == "memory"
    assert m["info"]["broker_id"] == b.info["broker_id"]
    counters = m["counters"]
    for name in (
        "http_requests_total", "produce_records_total", "consume_records_total", "batcher_flushes_total",
        "oxia_operations_total", "s3_operations_total", "tail_cache_lookups_total",
    ):
        assert counters.get(name), name
    assert counters["http_requests_total"]["method=POST,path=/produce,status=200"] == 1
    assert counters["http_requests_total"]["method=GET,path=other,status=404"] == 1
    assert "produce_request_seconds" in m["histograms"]
    prom = c.request("GET", "/metrics/prometheus")
    assert prom.status == 200 and prom.headers["Content-Type"].startswith("text/plain")
    text = prom.body.decode()
    assert sample_value(
        text, "llog_http_requests_total", broker_id="broker-1-both", method="POST", path="/produce", status="200"
    ) == 1
    assert "# TYPE llog_produce_request_seconds histogram" in text
    assert "llog_s3_operations_total" in text and "llog_oxia_operations_total" in text


def test_concurrent_produce_requests_share_flushes(broker_factory) -> None:
    records = {i: [f"r{i}"] * 10 for i in range(16)}
    # What the producer buffers is each request's stored batch.
    total = sum(stored_size([r.encode() for r in rs]) for rs in records.values())
    # The one flush is due only when all 16 requests' bytes are buffered (the
    # delay never comes), so 16 answers prove the requests were in the broker
    # at once: no process-wide lock serializes them.
    b = broker_factory(env={"LLOG_BATCH_MAX_BYTES": str(total), "LLOG_BATCH_MAX_DELAY_MS": "600000"})
    clients = [b.new_client() for _ in range(16)]
    with ThreadPoolExecutor(16) as pool:
        replies = list(pool.map(
            lambda i: clients[i].produce([{"topic": "t", "partition": i % 4, "records": records[i]}]), range(16)
        ))
    assert all(r.status == 200 for r in replies)
    assert b.client.counter("batcher_flushes_total") == 1
    for p in range(4):
        assert len(b.client.consume_all("t", p)) == 40


def test_sigterm_answers_accepted_produce_requests_then_exits(broker_factory) -> None:
    # A flush delay no test outlives: only the shutdown can flush the request.
    b = broker_factory(env={"LLOG_BATCH_MAX_DELAY_MS": "600000"})
    out: dict = {}
    t = threading.Thread(target=lambda: out.setdefault(
        "reply", b.new_client().produce([{"topic": "t", "partition": 0, "records": ["kept"]}])
    ))
    t.start()
    wait_until(lambda: b.client.gauge("batcher_inflight_bytes") >= 4, 10, "the request to reach the producer")
    b.proc.send_signal(signal.SIGTERM)
    t.join(10)
    assert not t.is_alive(), "the accepted request was not answered at shutdown"
    assert out["reply"].status == 200  # flushed at shutdown
    assert b.proc.wait(10) == 0
    with pytest.raises(OSError):
        b.new_client().request("GET", "/health")
    reader = broker_factory("read")
    assert [x for _, x in reader.client.consume_all("t", 0)] == [b"kept"]


def test_sigterm_taken_by_a_worker_thread_still_stops_the_broker(broker_factory) -> None:
    """The kernel may hand SIGTERM to any of the broker's threads (gRPC's,
    the listeners'); the broker must shut down gracefully all the same, not
    wait for a SIGKILL."""
    b = broker_factory(env={"LLOG_KAFKA_PORT": "0"})
    assert b.client.produce([{"topic": "t", "partition": 0, "records": ["a"]}]).status == 200
    signal_a_worker_thread(b.proc.pid, signal.SIGTERM)
    assert b.proc.wait(10) == 0
    assert "stopped" in b.log_path.read_text()


def test_sigterm_wakes_long_polls(broker_factory) -> None:
    b = broker_factory()
    b.client.produce([{"topic": "t", "partition": 0, "records": ["a"]}])
    out: dict = {}
    t = threading.Thread(target=lambda: out.setdefault(
        "reply", b.new_client().consume([{"topic": "t", "partition": 0, "fetch_offset": 2}], max_wait_ms=20_000)
    ))
    t.start()
    wait_until(lambda: b.client.gauge("consume_waiting_requests") == 1, 10, "the long poll to be registered")
    b.proc.send_signal(signal.SIGINT)
    t.join(10)  # half its max_wait_ms: an answer by then was woken by the shutdown
    assert not t.is_alive(), "the shutdown did not wake the long poll"
    assert out["reply"].status == 200 and out["reply"].json["results"][0]["records"] == []
    assert b.proc.wait(10) == 0
