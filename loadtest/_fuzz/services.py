"""A broker and a compactor service for a fuzz run, on the stack of ``stack_env``.

Both get a short HTTP read timeout (so stalled senders are checked in
seconds, not minutes), a small request limit (so oversized bodies are cheap
to send), a short consume wait cap and produce timeout, a small tail cache
(its memory is part of the resource check: small, it is full after the
warm-up) and a compactor that discovers and compacts the fuzzed partitions
while the run goes on. Each process logs to a file in ``log_dir``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from contextlib import ExitStack
from pathlib import Path

from loadtest._common import REPO, Broker

from .runner import Target

__all__ = ["FUZZ_ENV", "start_services"]

FUZZ_ENV = {
    "LLOG_BROKER_MAX_REQUEST_BYTES": str(64 * 1024),
    "LLOG_BROKER_MAX_RECORDS_PER_REQUEST": "1000",
    "LLOG_BROKER_MAX_WAIT_MS": "1000",
    "LLOG_BROKER_PRODUCE_TIMEOUT_MS": "20000",
    "LLOG_BATCH_MAX_DELAY_MS": "20",
    "LLOG_TAIL_CACHE_MAX_BYTES": str(64 * 1024),
    "LLOG_COMPACTOR_DISCOVERY_INTERVAL_MS": "2000",
    "LLOG_COMPACTOR_IDLE_SLEEP_MS": "500",
    "LLOG_COMPACTOR_IDLE_JITTER_MS": "200",
    "LLOG_COMPACTOR_ERROR_SLEEP_MS": "500",
    "LLOG_VACUUM_INTERVAL_MS": "0",
}


def _free_port() -> int:
    from devstack import free_ports

    return free_ports(1)[0]


def _start_compactor(stack: ExitStack, env: dict[str, str], log_path: Path) -> Target:
    from devstack import die_with_parent_argv

    port = _free_port()
    log = stack.enter_context(open(log_path, "wb"))
    proc = subprocess.Popen(
        die_with_parent_argv([sys.executable, "-m", "server.leaderless_log_compactor_server", "--port", str(port),
                              "--compactor-id", "fuzz-compactor", "--log-level", "WARNING"]),
        env={**os.environ, **env, "PYTHONPATH": str(REPO)}, stdout=log, stderr=subprocess.STDOUT,
    )

    def stop() -> None:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    stack.callback(stop)
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as resp:
                if resp.status == 200:
                    return Target("compactor", "127.0.0.1", port, proc.pid)
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the compactor service did not start; see {log_path}")
        time.sleep(0.2)


def start_services(stack: ExitStack, env: dict[str, str], log_dir: Path, read_timeout_s: float) -> dict[str, Target]:
    """Start both on ``env`` (an ``LLOG_*`` environment with a fresh root
    prefix); they stop when ``stack`` closes."""
    timeout_ms = str(int(read_timeout_s * 1000))
    full = {**env, **FUZZ_ENV, "LLOG_BROKER_HTTP_READ_TIMEOUT_MS": timeout_ms,
            "LLOG_COMPACTOR_HTTP_READ_TIMEOUT_MS": timeout_ms}
    broker = Broker(full, "both", log_dir / "broker.log")
    stack.callback(broker.stop)
    compactor = _start_compactor(stack, full, log_dir / "compactor.log")
    return {"broker": Target("broker", "127.0.0.1", broker.port, broker.proc.pid), "compactor": compactor}
