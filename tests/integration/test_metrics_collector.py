"""loadtest.metrics_collector against a real broker and a real compactor service."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from loadtest.metrics_collector import METRICS_FILE, MetricsCollector
from tests._waiting import wait_until
from tests.integration._compactor_process import REPO, Service

from .conftest import BrokerFactory, BrokerProcess

SAMPLE_KEYS = {"ts_ms", "elapsed_s", "services", "processes", "host"}
PROCESS_KEYS = {"pid", "cpu_s", "rss_bytes", "threads", "open_files", "alive"}


@pytest.fixture
def compactor(llog_env: dict[str, str], tmp_path: Path):
    service = Service(llog_env, tmp_path, "compactor-1")
    try:
        service.wait_healthy()
        yield service
    finally:
        service.close()


def _stack(run_dir: Path, broker: BrokerProcess, compactor: Service) -> dict[str, Any]:
    """A stack.json as the orchestrator writes it; this test's own process plays Oxia."""
    return {
        "run_id": "test-collector", "scenario": "test", "run_dir": str(run_dir), "created_at_ms": 0,
        "llog_env": {},
        "processes": [
            {"name": "broker-1", "kind": "broker", "pid": broker.proc.pid, "host": broker.host,
             "port": broker.port, "url": broker.url, "metrics_url": f"{broker.url}/metrics", "role": "both",
             "broker_id": "broker-1"},
            {"name": "compactor-1", "kind": "compactor", "pid": compactor.proc.pid, "host": "127.0.0.1",
             "port": compactor.port, "url": f"http://127.0.0.1:{compactor.port}",
             "metrics_url": f"http://127.0.0.1:{compactor.port}/metrics"},
            {"name": "oxia", "kind": "oxia", "pid": os.getpid(), "metrics_url": None},
        ],
    }


def _lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_collector_samples_services_processes_and_host(
    broker_factory: BrokerFactory, compactor: Service, tmp_path: Path
) -> None:
    broker = broker_factory()
    reply = broker.client.produce([{"topic": "lt", "partition": p, "records": [f"r{p}-{i}" for i in range(5)]}
                                   for p in range(3)])
    assert reply.status == 200, reply.body
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    out = run_dir / METRICS_FILE
    with MetricsCollector(_stack(run_dir, broker, compactor), out, interval_s=0.2) as collector:
        wait_until(lambda: len(_lines(out)) >= 3, 30, "three samples")
        samples = _lines(out)
        for s in samples:
            assert set(s) == SAMPLE_KEYS
            assert set(s["services"]) == {"broker-1", "compactor-1"}
            assert set(s["processes"]) == {"broker-1", "compactor-1", "oxia"}
            assert all(set(p) == PROCESS_KEYS for p in s["processes"].values())
            assert set(s["host"]) == {"cpu_s", "mem_available_bytes", "net_bytes", "disk_bytes"}
        last = samples[-1]
        assert [s["elapsed_s"] for s in samples] == sorted(s["elapsed_s"] for s in samples)
        assert last["services"]["broker-1"]["ok"], last["services"]["broker-1"]
        assert last["services"]["broker-1"]["metrics"]["counters"]["produce_records_total"][""] == 15
        assert last["services"]["compactor-1"]["ok"], last["services"]["compactor-1"]
        assert "service" in last["services"]["compactor-1"]["metrics"]
        for name, proc in last["processes"].items():
            assert proc["alive"] and proc["cpu_s"] > 0 and proc["rss_bytes"] > 0, (name, proc)
            assert proc["threads"] >= 1 and proc["open_files"] >= 1, (name, proc)
        assert last["processes"]["oxia"]["pid"] == os.getpid()
        assert last["host"]["mem_available_bytes"] > 0 and last["host"]["cpu_s"]["user"] > 0

        broker.stop()
        seen = len(_lines(out))
        down = wait_until(lambda: [s for s in _lines(out)[seen:] if not s["services"]["broker-1"]["ok"]],
                          30, "a sample with the stopped broker")[0]
        assert down["services"]["broker-1"]["error"] and down["services"]["broker-1"]["metrics"] is None
        assert down["processes"]["broker-1"]["alive"] is False
        assert down["services"]["compactor-1"]["ok"] and down["processes"]["compactor-1"]["alive"]
        after = len(_lines(out))
        wait_until(lambda: len(_lines(out)) > after, 30, "a sample after the failed one")
        final = collector.sample_now()
    assert _lines(out)[-1] == final
    assert collector.samples_written == len(_lines(out))


def test_cli_once_writes_one_sample_beside_stack_json(
    broker_factory: BrokerFactory, compactor: Service, tmp_path: Path
) -> None:
    broker = broker_factory()
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "stack.json").write_text(json.dumps(_stack(run_dir, broker, compactor)))
    done = subprocess.run([sys.executable, "-m", "loadtest.metrics_collector", "--stack", str(run_dir / "stack.json"),
                           "--once"], cwd=REPO, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    (sample,) = _lines(run_dir / METRICS_FILE)
    assert sample["services"]["broker-1"]["ok"] and sample["processes"]["broker-1"]["alive"]
