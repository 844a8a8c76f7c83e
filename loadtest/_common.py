"""What every benchmark shares: where to run.

``stack_env`` returns the ``LLOG_*`` environment of the stack named in this
process's environment, or of a private local stack (Oxia + MinIO in a
temporary directory, stopped with ``stack``) when ``LLOG_OXIA_SERVICE_ADDRESS``
is not set. Either way the benchmark gets a fresh root prefix, so it starts
from empty partitions and never writes into an existing log.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Callable, Iterable, Sequence

__all__ = ["Broker", "stack_env", "run_threads", "put_bandwidth", "process_cpu_seconds", "terminate"]

REPO = Path(__file__).resolve().parent.parent


def stack_env(stack: ExitStack) -> dict[str, str]:
    if os.environ.get("LLOG_OXIA_SERVICE_ADDRESS"):
        env = {k: v for k, v in os.environ.items() if k.startswith(("LLOG_", "AWS_"))}
    else:
        from devstack import LocalStack

        print("[bench] no LLOG_OXIA_SERVICE_ADDRESS: starting a private local stack ...", flush=True)
        data = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="llog-bench-")))
        env = stack.enter_context(LocalStack(data)).settings.env()
    env["LLOG_ROOT_PREFIX"] = f"bench-{uuid.uuid4().hex[:8]}"
    return env


def run_threads(target: Callable[..., object], args: Iterable[object], name: str = "bench") -> float:
    """Run ``target(arg)`` on one named thread per arg; return the seconds until all finished."""
    started = time.monotonic()
    threads = [threading.Thread(target=target, args=(a,), name=f"{name}-{i}") for i, a in enumerate(args)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.monotonic() - started


def process_cpu_seconds(pid: int) -> float:
    """CPU time (user + system) process ``pid`` has used so far (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Broker:
    """One broker process (``--role``) on a free port, logging to ``log_path``;
    it gets SIGTERM if the benchmark dies (see ``die_with_parent_argv``)."""

    def __init__(self, env: dict[str, str], role: str, log_path: Path, args: Sequence[str] = ()) -> None:
        from devstack import die_with_parent_argv

        self._log = open(log_path, "wb")
        self.proc = subprocess.Popen(
            die_with_parent_argv([sys.executable, "-m", "server.leaderless_log_broker", "--port", "0",
                                  "--role", role, "--log-level", "WARNING", *args]),
            env={**os.environ, **env, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE, stderr=self._log,
        )
        line = self.proc.stdout.readline() if self.proc.stdout else b""
        if not line:
            self.stop()
            raise RuntimeError(f"broker did not start; see {log_path}")
        info = json.loads(line)
        self.port = info["port"]
        self.url = f"http://127.0.0.1:{self.port}"
        self.kafka = None if info.get("kafka_port") is None else f"127.0.0.1:{info['kafka_port']}"
        """The Kafka listener's bootstrap server, when started with ``--kafka-port``."""

    def cpu_seconds(self) -> float:
        """CPU time (user + system) the broker process has used so far."""
        return process_cpu_seconds(self.proc.pid)

    def counter(self, name: str, labels: str = "") -> float:
        """A counter of the broker's ``/metrics`` (``labels`` as it writes them, e.g. ``api=Fetch,error=0``;
        summed over every label set when empty); 0 before its first count."""
        import urllib.request

        with urllib.request.urlopen(self.url + "/metrics", timeout=10) as answer:
            values = json.load(answer)["counters"].get(name, {})
        return float(values.get(labels, 0) if labels else sum(values.values()))

    def stop(self) -> None:
        terminate(self.proc)
        self._log.close()


def terminate(proc: subprocess.Popen, timeout_s: float = 30.0) -> None:
    """SIGTERM, then SIGKILL if ``proc`` has not ended within ``timeout_s``."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def put_bandwidth(env: dict[str, str], seconds: float = 4.0, threads: int = 4, blob_mib: int = 8) -> float:
    """The S3 server's own PUT bandwidth (MB/s): ``threads`` threads PUT
    ``blob_mib`` MiB objects for ``seconds`` through the library's S3 adapter,
    as a flush does; the objects are deleted afterwards. The yardstick for
    broker ingest measured in the same sitting."""
    from server._config import S3Config
    from server._storage.objectstore import S3ObjectStore

    config = S3Config.from_env(env)
    store = S3ObjectStore(config)
    body = os.urandom(blob_mib << 20)
    prefix = f"{env.get('LLOG_ROOT_PREFIX', 'bench')}/put-bandwidth/{uuid.uuid4().hex[:8]}"
    keys: list[str] = []
    lock = threading.Lock()
    deadline = time.monotonic() + seconds

    def put(worker: int) -> None:
        n = 0
        while time.monotonic() < deadline:
            key = f"{prefix}/{worker}-{n}"
            store.put(config.bucket, key, body)
            with lock:
                keys.append(key)
            n += 1

    try:
        elapsed = run_threads(put, range(threads), name="put-bandwidth")
        return round(len(keys) * len(body) / elapsed / 1e6, 1)
    finally:
        for i in range(0, len(keys), 1000):
            store.delete_many(config.bucket, keys[i:i + 1000])
        store.close()
