"""``orchestrate.py`` end to end: the smoke scenario on its own real stack.

``run smoke`` starts Oxia, MinIO, a broker and a compactor service, the
project's Prometheus and the Go hammer (one consumer following the tail),
and must leave a complete, auditable run directory whose reconciliation
passes: the client's acknowledged records equal the broker's accepted
counters, and a read-back finds every acknowledged offset range. ``up``,
``status``, ``precreate`` and ``down`` drive a stack across processes
through ``stack.json``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from devstack._process import pid_alive

pytestmark = [pytest.mark.integration, pytest.mark.exclusive]
REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = (
    "resolved-config.json", "stack.json", "git.json", "environment.json", "routing-manifest.json",
    "client-30s.jsonl", "client-summary.json", "remap-events.jsonl", "metrics-30s.jsonl", "summary.json",
)


def _orchestrate(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "loadtest.orchestrate", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)


def _run_dir(results: Path) -> Path:
    (run_dir,) = [p for p in results.iterdir() if p.is_dir()]
    return run_dir


def _still_alive(run_dir: Path) -> list[str]:
    stack = json.loads((run_dir / "stack.json").read_text())
    return [p["name"] for p in stack["processes"] if p["pid"] and pid_alive(p["pid"], p["argv"][0])]


def test_run_smoke_writes_an_auditable_run_directory_and_reconciles(tmp_path: Path) -> None:
    done = _orchestrate("run", "smoke", "--results-dir", str(tmp_path), "--prometheus", "--duration", "8")
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-6000:]
    run_dir = _run_dir(tmp_path)
    assert run_dir.name.endswith("-smoke")
    for name in ARTIFACTS:
        assert (run_dir / name).is_file(), f"{name} missing; output:\n{output[-3000:]}"
    logs = {p.name for p in (run_dir / "logs").iterdir()}
    assert {"broker-1.log", "compactor-1.log", "http_hammer.log"} <= logs

    client = json.loads((run_dir / "client-summary.json").read_text())
    assert client["intent"]["mode"] == "closed" and client["produce"]["acked_records"] > 0
    assert client["acked"], "no acknowledged ranges"
    windows = [json.loads(line) for line in (run_dir / "client-30s.jsonl").read_text().splitlines()]
    assert len(windows) >= 2  # 8 s in 5 s windows
    samples = [json.loads(line) for line in (run_dir / "metrics-30s.jsonl").read_text().splitlines()]
    assert len(samples) >= 2 and all(s["services"]["broker-1"]["ok"] for s in samples)

    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["reconciliation"]["ok"] is True, json.dumps(summary["reconciliation"], indent=1)[:4000]
    assert not summary["reconciliation"].get("warnings"), summary["reconciliation"]["warnings"]

    plots = sorted((run_dir / "plots").glob("*.png"))
    dashboard = sorted((run_dir / "dashboard").glob("*.png"))
    assert len(plots) >= 4 and len(dashboard) >= 8
    printed = set(done.stdout.split())
    assert {str(p) for p in plots + dashboard} <= printed, "run prints the path of every picture"
    assert not _still_alive(run_dir), "every process of the run is stopped"


def test_up_status_precreate_down_share_a_stack_through_stack_json(tmp_path: Path) -> None:
    up = _orchestrate("up", "smoke", "--results-dir", str(tmp_path))
    assert up.returncode == 0, (up.stdout + up.stderr)[-4000:]
    run_dir = _run_dir(tmp_path)
    try:
        status = _orchestrate("status", "--run-dir", str(run_dir))
        assert status.returncode == 0, status.stdout + status.stderr
        assert "broker-1" in status.stdout and "healthy" in status.stdout and "DEAD" not in status.stdout
        again = _orchestrate("precreate", "--run-dir", str(run_dir))
        assert again.returncode == 0 and "0 created, 8 already there" in again.stderr, again.stderr
    finally:
        down = _orchestrate("down", "--run-dir", str(run_dir))
    assert down.returncode == 0, down.stderr
    assert not _still_alive(run_dir)
    status = _orchestrate("status", "--run-dir", str(run_dir))
    assert status.returncode == 3 and "DEAD" in status.stdout
