"""loadtest.metrics_collector without the stack: scrapes of small local HTTP servers,
stack.json checks, and the command line."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator

import pytest

from loadtest.metrics_collector import METRICS_FILE, MetricsCollector, load_stack, main
from tests._waiting import wait_until

REPO = Path(__file__).resolve().parents[2]


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        status, body = {"/metrics": (200, b'{"counters": {"produce_records_total": {"": 3.0}}}'),
                        "/text": (200, b"not json"),
                        "/list": (200, b"[1, 2]")}.get(self.path, (500, b"{}"))
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def http_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, name="fake-metrics-server", daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stack(url: str) -> dict[str, Any]:
    return {"processes": [
        {"name": "broker-1", "kind": "broker", "pid": os.getpid(), "metrics_url": f"{url}/metrics"},
        {"name": "broker-2", "kind": "broker", "pid": None,
         "metrics_url": f"http://127.0.0.1:{_closed_port()}/metrics"},
        {"name": "compactor-1", "kind": "compactor", "metrics_url": f"{url}/text"},
        {"name": "compactor-2", "kind": "compactor", "metrics_url": f"{url}/list"},
        {"name": "compactor-3", "kind": "compactor", "metrics_url": f"{url}/boom"},
        {"name": "minio", "kind": "s3", "pid": 2 ** 22 + 1, "metrics_url": None},  # above pid_max: never alive
    ]}


def test_a_sample_records_failed_scrapes_and_dead_pids_without_raising(http_url: str, tmp_path: Path) -> None:
    out = tmp_path / METRICS_FILE
    sample = MetricsCollector(_stack(http_url), out, interval_s=60).sample_now()
    assert json.loads(out.read_text()) == sample
    services = sample["services"]
    assert services["broker-1"] == {"ok": True, "error": None,
                                    "metrics": {"counters": {"produce_records_total": {"": 3.0}}}}
    assert "ConnectionRefusedError" in services["broker-2"]["error"]
    assert "JSONDecodeError" in services["compactor-1"]["error"]
    assert "not an object" in services["compactor-2"]["error"]
    assert services["compactor-3"]["error"].startswith("HTTP 500")
    assert not any(services[n]["ok"] or services[n]["metrics"] for n in services if n != "broker-1")
    # processes: only those with a pid
    assert set(sample["processes"]) == {"broker-1", "minio"}
    assert sample["processes"]["broker-1"]["alive"] and sample["processes"]["broker-1"]["cpu_s"] > 0
    assert sample["processes"]["minio"]["alive"] is False


def test_samples_follow_the_interval_and_stop_is_idempotent(http_url: str, tmp_path: Path) -> None:
    out = tmp_path / "nested" / METRICS_FILE
    collector = MetricsCollector(_stack(http_url), out, interval_s=0.05)
    collector.start()
    wait_until(lambda: collector.samples_written >= 3, 30, "three samples")
    collector.stop()
    collector.stop()
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == collector.samples_written >= 3
    assert lines[0]["elapsed_s"] < lines[-1]["elapsed_s"]
    with pytest.raises(RuntimeError, match="already started"):
        collector.start()


@pytest.mark.parametrize("stack, message", [
    ({}, "'processes' list"),
    ({"processes": [{"kind": "broker"}]}, "non-empty 'name'"),
    ({"processes": [{"name": "a"}, {"name": "a"}]}, "used twice"),
    ({"processes": [{"name": "a", "pid": "12"}]}, "'pid' must be a positive integer"),
    ({"processes": [{"name": "a", "metrics_url": 5}]}, "'metrics_url' must be a string"),
])
def test_stack_json_faults_are_named(tmp_path: Path, stack: dict, message: str) -> None:
    path = tmp_path / "stack.json"
    path.write_text(json.dumps(stack))
    with pytest.raises(ValueError, match=message):
        load_stack(path)
    with pytest.raises(ValueError, match=message):
        MetricsCollector(stack, tmp_path / METRICS_FILE)


def test_bad_intervals_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="interval_s"):
        MetricsCollector({"processes": []}, tmp_path / METRICS_FILE, interval_s=0)


def test_cli_help_and_a_missing_stack(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0
    assert "--stack" in capsys.readouterr().out
    assert main(["--stack", str(tmp_path / "missing.json"), "--once"]) == 2
    assert "cannot read stack.json" in capsys.readouterr().err


def test_cli_runs_until_sigterm_then_takes_a_last_sample(http_url: str, tmp_path: Path) -> None:
    (tmp_path / "stack.json").write_text(json.dumps(_stack(http_url)))
    out = tmp_path / METRICS_FILE
    argv = [sys.executable, "-m", "loadtest.metrics_collector", "--stack", str(tmp_path / "stack.json"),
            "--interval", "0.05"]
    proc = subprocess.Popen(argv, cwd=REPO, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        wait_until(lambda: out.exists() and len(out.read_text().splitlines()) >= 2, 30, "two samples")
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    n = len(out.read_text().splitlines())
    assert f"{n} samples appended to {out}" in err


def test_track_follows_a_restarted_process(tmp_path):
    import os

    from loadtest.metrics_collector import MetricsCollector

    stack = {"processes": [{"name": "oxia", "kind": "oxia", "pid": 2 ** 22 + 7, "metrics_url": None}]}
    collector = MetricsCollector(stack, tmp_path / "m.jsonl", interval_s=60)
    assert collector.sample_now()["processes"]["oxia"]["alive"] is False
    collector.track({"processes": [{"name": "oxia", "kind": "oxia", "pid": os.getpid(), "metrics_url": None}]})
    sample = collector.sample_now()["processes"]["oxia"]
    assert sample["alive"] is True and sample["pid"] == os.getpid()
