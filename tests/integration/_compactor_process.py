"""A compactor service process for integration tests: ``python -m
server.leaderless_log_compactor_server`` (or a wrapper that patches
``compact_once`` in the child only), its HTTP port, log file and metrics."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
from pathlib import Path

from devstack import die_with_parent_argv

REPO = Path(__file__).resolve().parents[2]

# Runs the service with compact_once patched in this child process only:
# TEST_HANG_PARTITIONS blocks forever inside compact_once for those logs (the
# claim stays held); TEST_COMPACT_DELAY_S sleeps before each real run;
# TEST_MARK_FILE is created when a run starts.
WRAPPER = textwrap.dedent("""
    import os, sys, time
    from server import leaderless_log_compactor as c
    real = c.LeaderlessLogCompactor.compact_once
    hang = set(filter(None, os.environ.get("TEST_HANG_PARTITIONS", "").split(",")))
    delay = float(os.environ.get("TEST_COMPACT_DELAY_S", "0"))
    mark = os.environ.get("TEST_MARK_FILE")

    def patched(self, topic, partition, max_offsets=None):
        if mark:
            open(mark, "a").write(f"{topic}:{partition}\\n")
        if f"{topic}:{partition}" in hang:
            time.sleep(3600)
        if delay:
            time.sleep(delay)
        return real(self, topic, partition, max_offsets)

    c.LeaderlessLogCompactor.compact_once = patched
    from server.leaderless_log_compactor_server import main
    sys.exit(main(sys.argv[1:]))
""")

FAST = {
    "LLOG_COMPACTOR_IDLE_SLEEP_MS": "50",
    "LLOG_COMPACTOR_IDLE_JITTER_MS": "50",
    "LLOG_COMPACTOR_ERROR_SLEEP_MS": "200",
    "LLOG_COMPACTOR_ERROR_JITTER_MS": "100",
    "LLOG_COMPACTOR_DISCOVERY_INTERVAL_MS": "0",
    "LLOG_COMPACTOR_MAX_DELAY_MS": "0",
    "LLOG_VACUUM_INTERVAL_MS": "0",
    "LLOG_COMPACTOR_SHUTDOWN_TIMEOUT_MS": "10000",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Service:
    """One compactor service process with its HTTP port and log file."""

    def __init__(self, env: dict[str, str], tmp: Path, name: str, *, wrapper: bool = False,
                 extra_env: dict[str, str] | None = None, args: tuple[str, ...] = ()) -> None:
        self.name = name
        self.port = free_port()
        self.log_path = tmp / f"{name}.log"
        full_env = {**os.environ, **env, **FAST, "LLOG_COMPACTOR_ID": name, **(extra_env or {}),
                    "PYTHONPATH": str(REPO)}
        cmd = [sys.executable, "-c", WRAPPER] if wrapper else [sys.executable, "-m", "server.leaderless_log_compactor_server"]
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(die_with_parent_argv([*cmd, "--port", str(self.port), *args]), env=full_env,
                                     stdout=self._log, stderr=subprocess.STDOUT)

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def metrics(self) -> dict:
        return json.loads(self.get("/metrics")[1])

    def counter(self, name: str, label: str = "") -> float:
        values = self.metrics()["counters"].get(name, {})
        return sum(v for k, v in values.items() if label in k.split(",") or not label)

    def wait_healthy(self, timeout: float = 30) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"{self.name} exited with {self.proc.returncode}:\n{self.output()}")
            try:
                status, body = self.get("/health")
                if status == 200:
                    return json.loads(body)
            except OSError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"{self.name} did not become healthy:\n{self.output()}")

    def terminate(self, timeout: float = 30) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def output(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")[-6000:]

    def close(self) -> None:
        self.kill()
        self._log.close()
