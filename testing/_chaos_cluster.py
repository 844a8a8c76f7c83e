"""The chaos test's processes: a private Oxia + MinIO stack, brokers, a compactor.

``ChaosCluster`` starts a ``LocalStack`` (standalone Oxia and MinIO) in a
data directory, initializes the topic's partitions under a fresh root
prefix, and runs ``brokers`` role-both brokers and one compactor service as
real processes, each logging to ``<data_dir>/logs/``. The nemesis calls
``kill_broker``/``start_broker``, ``kill_compactor``/``start_compactor`` and
``kill_oxia``/``start_oxia``; a restarted process gets its old port back, so
clients keep their addresses. ``heal()`` restarts whatever is down.

Every child is started from one long-lived thread (``_Spawner``): children
are started through ``die_with_parent_argv`` (``setpriv --pdeathsig``), and
Linux delivers that signal when the *thread* that started the child exits,
so a broker restarted from the nemesis thread would die with it.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Mapping, TypeVar

from devstack import LocalStack, ManagedProcess, StackError, die_with_parent_argv, free_ports, shard_leaders

__all__ = ["ChaosCluster", "ServiceProcess", "BROKER_ENV", "COMPACTOR_ENV"]

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parent.parent
T = TypeVar("T")

BROKER_ENV = {
    "LLOG_BATCH_MAX_DELAY_MS": "50",
    # Shorter than the clients' socket timeout, so a stuck flush answers 504
    # (outcome unknown) instead of the client giving up first.
    "LLOG_BROKER_PRODUCE_TIMEOUT_MS": "10000",
}
COMPACTOR_ENV = {
    "LLOG_COMPACTOR_WORKERS": "4",
    "LLOG_COMPACTOR_IDLE_SLEEP_MS": "200",
    "LLOG_COMPACTOR_IDLE_JITTER_MS": "100",
    "LLOG_COMPACTOR_ERROR_SLEEP_MS": "500",
    "LLOG_COMPACTOR_ERROR_JITTER_MS": "250",
    "LLOG_COMPACTOR_DISCOVERY_INTERVAL_MS": "2000",
    "LLOG_COMPACTOR_SHUTDOWN_TIMEOUT_MS": "5000",
    "LLOG_VACUUM_INTERVAL_MS": "10000",
}
READY_TIMEOUT_S = 60.0


class _Spawner:
    """One named thread that starts every child (see the module docstring)."""

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="chaos-spawner")

    def run(self, fn: Callable[[], T]) -> T:
        return self._pool.submit(fn).result()

    def close(self) -> None:
        self._pool.shutdown(wait=True)


def _http_get_json(url: str, timeout_s: float = 2.0) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, None
    except (OSError, ValueError):
        return 0, None


class ServiceProcess:
    """A broker or compactor process that can be SIGKILLed and started again on its port."""

    def __init__(self, name: str, argv: list[str], env: Mapping[str, str], log_path: Path, port: int,
                 spawner: _Spawner) -> None:
        self.name = name
        self.port = port
        self.log_path = log_path
        self.starts = 0
        self._argv = argv
        self._env = {**os.environ, **env, "PYTHONPATH": str(REPO)}
        self._spawner = spawner
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self._ready = False

    def __repr__(self) -> str:
        return f"ServiceProcess({self.name!r}, port={self.port}, running={self.running})"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def ready(self) -> bool:
        """Started and answered ``/health`` since its last kill: worth sending requests to."""
        return self._ready and self.running

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def healthy(self) -> bool:
        return self.running and _http_get_json(f"{self.url}/health")[0] == 200

    def start(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Start the process and wait until ``/health`` answers 200 (or it exits)."""
        with self._lock:
            if self.running:
                return
            self.starts += 1

            def popen() -> subprocess.Popen[bytes]:
                with open(self.log_path, "ab") as out:
                    out.write(f"\n=== {time.strftime('%H:%M:%S')} start #{self.starts}\n".encode())
                    out.flush()
                    return subprocess.Popen(
                        die_with_parent_argv([*self._argv]), env=self._env, cwd=REPO,
                        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=out,
                    )

            self._proc = self._spawner.run(popen)
            proc = self._proc
        deadline = time.monotonic() + timeout_s
        while not self.healthy():
            if proc.poll() is not None:
                raise StackError(f"{self.name} exited with status {proc.returncode} on start; see {self.log_path}")
            if time.monotonic() > deadline:
                raise StackError(f"{self.name} was not healthy after {timeout_s:.0f}s; see {self.log_path}")
            time.sleep(0.05)
        self._ready = True

    def kill(self) -> None:
        """SIGKILL and reap: no chance to flush or answer anything."""
        with self._lock:
            self._ready = False
            if self._proc is not None and self._proc.poll() is None:
                self._proc.kill()
                self._proc.wait(30)

    def stop(self, timeout_s: float = 15.0) -> None:
        """SIGTERM, SIGKILL after ``timeout_s``."""
        with self._lock:
            self._ready = False
            proc = self._proc
            if proc is None or proc.poll() is not None:
                return
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(30)


class ChaosCluster:
    """The stack, ``brokers`` brokers and one compactor, on a fresh root prefix.

    A context manager; ``close()`` stops everything (safe twice).
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        topic: str = "chaos",
        partitions: int = 16,
        brokers: int = 3,
        broker_env: Mapping[str, str] | None = None,
        compactor_env: Mapping[str, str] | None = None,
    ) -> None:
        if brokers < 1 or partitions < 1:
            raise ValueError("need at least one broker and one partition")
        self.data_dir = Path(data_dir).resolve()
        self.topic = topic
        self.partitions = partitions
        self.root_prefix = f"chaos-{uuid.uuid4().hex[:8]}"
        self._broker_count = brokers
        self._broker_env = {**BROKER_ENV, **(broker_env or {})}
        self._compactor_env = {**COMPACTOR_ENV, **(compactor_env or {})}
        self._spawner = _Spawner()
        self._stack = LocalStack(self.data_dir / "stack")
        self.env: dict[str, str] = {}
        self.brokers: list[ServiceProcess] = []
        self.compactor: ServiceProcess | None = None
        self._oxia: ManagedProcess | None = None
        self._closed = False

    def __enter__(self) -> ChaosCluster:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def logs_dir(self) -> Path:
        return self.data_dir / "logs"

    def start(self) -> ChaosCluster:
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        try:
            self._spawner.run(self._stack.start)
            self._oxia = next(p for p in self._stack.processes if p.name == "oxia-standalone")
            self.env = self._stack.settings.env(root_prefix=self.root_prefix)
            self._initialize_partitions()
            ports = free_ports(self._broker_count + 1)
            for i in range(self._broker_count):
                name = f"broker-{i + 1}"
                self.brokers.append(ServiceProcess(
                    name,
                    [sys.executable, "-m", "server.leaderless_log_broker", "--port", str(ports[i]),
                     "--role", "both", "--broker-id", name],
                    {**self.env, **self._broker_env}, self.logs_dir / f"{name}.log", ports[i], self._spawner,
                ))
            self.compactor = ServiceProcess(
                "compactor",
                [sys.executable, "-m", "server.leaderless_log_compactor_server", "--port", str(ports[-1])],
                {**self.env, **self._compactor_env, "LLOG_COMPACTOR_ID": "chaos-compactor",
                 "LLOG_COMPACTOR_TARGETS": ",".join(f"{self.topic}:{p}" for p in range(self.partitions))},
                self.logs_dir / "compactor.log", ports[-1], self._spawner,
            )
            threads = [threading.Thread(target=p.start, name=f"start-{p.name}") for p in [*self.brokers, self.compactor]]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            down = [p.name for p in [*self.brokers, self.compactor] if not p.healthy()]
            if down:
                raise StackError(f"did not start: {', '.join(down)}; logs in {self.logs_dir}")
        except BaseException:
            self.close()
            raise
        return self

    def _initialize_partitions(self) -> None:
        from server.leaderless_log_writer import LeaderlessLogWriter

        with LeaderlessLogWriter.from_env(self.env) as writer:
            for p in range(self.partitions):
                writer.initialize_partition(self.topic, p)

    # -- faults -------------------------------------------------------------------------

    def kill_broker(self, index: int) -> None:
        self.brokers[index].kill()

    def start_broker(self, index: int) -> None:
        self.brokers[index].start()

    def kill_compactor(self) -> None:
        assert self.compactor is not None
        self.compactor.kill()

    def start_compactor(self) -> None:
        assert self.compactor is not None
        self.compactor.start()

    @property
    def oxia_running(self) -> bool:
        return self._oxia is not None and self._oxia.running

    def kill_oxia(self) -> None:
        """SIGKILL the standalone Oxia server (its data and WAL stay on disk)."""
        assert self._oxia is not None
        self._oxia.kill()

    def start_oxia(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Start Oxia again on its ports and data; wait until its shard has a leader."""
        assert self._oxia is not None
        if self._oxia.running:
            return
        self._spawner.run(self._oxia.start)
        address = self._stack.settings.oxia_address

        def has_leader() -> bool:
            try:
                leaders = shard_leaders(address, timeout_s=1.0)
            except Exception:  # grpc errors while it starts  # noqa: BLE001
                return False
            return bool(leaders) and all(leaders.values())

        self._oxia.wait_healthy(has_leader, timeout_s=timeout_s, what="serving its shards")

    def heal(self) -> list[str]:
        """Start whatever is down (Oxia first); returns what was started."""
        started = []
        if not self.oxia_running:
            self.start_oxia()
            started.append("oxia")
        for i, b in enumerate(self.brokers):
            if not b.running:
                self.start_broker(i)
                started.append(b.name)
        if self.compactor is not None and not self.compactor.running:
            self.start_compactor()
            started.append(self.compactor.name)
        return started

    def live_brokers(self) -> list[ServiceProcess]:
        """Brokers that are up and announced themselves healthy since their last start."""
        return [b for b in self.brokers if b.ready]

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for p in [*self.brokers, *([self.compactor] if self.compactor else [])]:
            p.stop()
        self._spawner.run(self._stack.stop)
        self._spawner.close()
