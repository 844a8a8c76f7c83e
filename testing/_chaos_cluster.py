"""The chaos test's processes: a private Oxia + MinIO stack, brokers, compactors.

``ChaosCluster`` starts a ``LocalStack`` (standalone Oxia, or a 3-server
Oxia cluster, and MinIO) in a data directory, initializes the topic's
partitions under a fresh root prefix, and runs ``brokers`` role-both
brokers and ``compactors`` compactor services (competing for the same
partitions' claims) as real processes, each logging to
``<data_dir>/logs/``. The nemesis calls ``kill_broker``/``start_broker``,
``kill_compactor``/``start_compactor``, ``kill_oxia``/``start_oxia``
(standalone), ``kill_oxia_node``/``start_oxia_node`` (cluster),
``kill_s3``/``start_s3`` and ``pause``/``resume`` (SIGSTOP/SIGCONT of any
process named by ``pausable()``); a restarted process gets its old port and
data back, so clients keep their addresses. ``heal()`` continues whatever is
paused and restarts whatever is down.

The compactors run vacuum every second with the smallest legal grace
(``MIN_SAFE_GRACE_MS``), so a writer or compactor paused past its Oxia
session races a running vacuum.

Every child is started from one long-lived thread (``_Spawner``): children
are started through ``die_with_parent_argv`` (``setpriv --pdeathsig``), and
Linux delivers that signal when the *thread* that started the child exits,
so a broker restarted from the nemesis thread would die with it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
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
from typing import Any, Callable, Iterator, Mapping, TypeVar

from devstack import (
    LocalStack, ManagedProcess, StackError, die_with_parent_argv, free_ports, s3_client, shard_leaders,
)
from server._protocol.constants import MIN_SAFE_GRACE_MS

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
    # Deferral on, short: runs wait for 256 KiB or 2 s, so faults also hit deferred runs.
    "LLOG_COMPACTOR_MIN_BYTES_PER_RUN": "262144",
    "LLOG_COMPACTOR_MAX_DELAY_MS": "2000",
    "LLOG_COMPACTOR_IDLE_JITTER_MS": "100",
    "LLOG_COMPACTOR_ERROR_SLEEP_MS": "500",
    "LLOG_COMPACTOR_ERROR_JITTER_MS": "250",
    "LLOG_COMPACTOR_DISCOVERY_INTERVAL_MS": "2000",
    "LLOG_COMPACTOR_SHUTDOWN_TIMEOUT_MS": "5000",
    "LLOG_VACUUM_INTERVAL_MS": "1000",
    "LLOG_VACUUM_GRACE_MS": str(MIN_SAFE_GRACE_MS),
    "LLOG_RETENTION_INTERVAL_MS": "1000",
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
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

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
    """The stack, ``brokers`` brokers and ``compactors`` compactors, on a fresh root prefix.

    A context manager; ``close()`` stops everything (safe twice).
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        topic: str = "chaos",
        partitions: int = 16,
        brokers: int = 3,
        compactors: int = 1,
        oxia_mode: str = "standalone",
        broker_env: Mapping[str, str] | None = None,
        compactor_env: Mapping[str, str] | None = None,
        retention_ms: int = -1,
        kafka: bool = False,
        kafka_security: str = "PLAINTEXT",
    ) -> None:
        if brokers < 1 or partitions < 1 or compactors < 1:
            raise ValueError("need at least one broker, one compactor and one partition")
        self.data_dir = Path(data_dir).resolve()
        self.topic = topic
        self.partitions = partitions
        self.retention_ms = retention_ms
        """The topic's retention.ms (-1 keeps everything)."""
        self.kafka = kafka
        """Every broker runs its Kafka listener, on a port it keeps across restarts."""
        self.kafka_bootstrap = ""
        self.kafka_security = kafka_security
        """The listeners' security (PLAINTEXT, SSL or SASL_SSL, ``devstack/pki.py``'s certificates)."""
        self.librdkafka_conf: dict[str, str] = {}
        """What a librdkafka client adds to reach the listeners (its security settings)."""
        self.kafka_python_conf: dict[str, str] = {}
        """The same for a kafka-python client."""
        self.root_prefix = f"chaos-{uuid.uuid4().hex[:8]}"
        self._broker_count = brokers
        self._compactor_count = compactors
        self.oxia_mode = oxia_mode
        self._broker_env = {**BROKER_ENV, **(broker_env or {})}
        self._compactor_env = {**COMPACTOR_ENV, **(compactor_env or {})}
        self._spawner = _Spawner()
        # Three shards on the 3-node cluster spread leadership, so a node that
        # leads a shard other than the bootstrap server (0) is usually there to lose.
        self._stack = LocalStack(self.data_dir / "stack", oxia_mode=oxia_mode,
                                 oxia_shards=3 if oxia_mode == "cluster" else 1)
        self.env: dict[str, str] = {}
        self.brokers: list[ServiceProcess] = []
        self.compactors: list[ServiceProcess] = []
        self._oxia: ManagedProcess | None = None
        self._s3: ManagedProcess | None = None
        self._paused: set[str] = set()
        self._closed = False

    def _secure(self) -> dict[str, str]:
        """The brokers' environment for ``kafka_security``; fills the clients' settings."""
        if self.kafka_security == "PLAINTEXT":
            return {}
        from devstack.pki import make_pki

        pki = make_pki(self.data_dir / "pki")
        env = pki.broker_env
        self.librdkafka_conf = pki.librdkafka(self.kafka_security)
        self.kafka_python_conf = {"security_protocol": self.kafka_security, "ssl_cafile": pki.ca}
        if self.kafka_security == "SASL_SSL":
            # librdkafka's user in Oxia (read at each authentication, while Oxia is killed too),
            # kafka-python's in the users file
            self._add_scram_user("chaos", "chaos-password")
            users = self.data_dir / "kafka-users"
            users.write_text("chaos-file:chaos-file-password\n")
            env.update({"LLOG_KAFKA_SASL": "on", "LLOG_KAFKA_SASL_USERS": str(users)})
            self.librdkafka_conf.update({"sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "chaos",
                                         "sasl.password": "chaos-password"})
            self.kafka_python_conf.update({"sasl_mechanism": "PLAIN", "sasl_plain_username": "chaos-file",
                                           "sasl_plain_password": "chaos-file-password"})
        return env

    def __enter__(self) -> ChaosCluster:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def compactor(self) -> ServiceProcess | None:
        """The first compactor service."""
        return self.compactors[0] if self.compactors else None

    @property
    def logs_dir(self) -> Path:
        return self.data_dir / "logs"

    def start(self) -> ChaosCluster:
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        try:
            self._spawner.run(self._stack.start)
            self._oxia = next((p for p in self._stack.processes if p.name == "oxia-standalone"), None)
            self._s3 = self._stack.processes[0]  # the S3 server starts first
            self.env = self._stack.settings.env(root_prefix=self.root_prefix)
            self._initialize_partitions()
            ports = free_ports(self._broker_count + self._compactor_count)
            kafka_ports = free_ports(self._broker_count) if self.kafka else []
            self.kafka_bootstrap = ",".join(f"127.0.0.1:{p}" for p in kafka_ports)
            security_env = self._secure() if self.kafka else {}
            for i in range(self._broker_count):
                name = f"broker-{i + 1}"
                kafka = ["--kafka-port", str(kafka_ports[i])] if self.kafka else []
                self.brokers.append(ServiceProcess(
                    name,
                    [sys.executable, "-m", "server.leaderless_log_broker", "--port", str(ports[i]),
                     "--role", "both", "--broker-id", name, *kafka],
                    {**self.env, **self._broker_env, **security_env}, self.logs_dir / f"{name}.log", ports[i],
                    self._spawner,
                ))
            for i, port in enumerate(ports[self._broker_count:]):
                self.compactors.append(self._compactor_process("compactor" + (f"-{i + 1}" if i else ""), port))
            threads = [threading.Thread(target=p.start, name=f"start-{p.name}") for p in self._services()]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            # ``ready``: answered /health in start() and still running (a second /health could time out
            # on a loaded machine; a start that failed left it not ready).
            down = [p.name for p in self._services() if not p.ready]
            if down:
                raise StackError(f"did not start: {', '.join(down)}; logs in {self.logs_dir}")
        except BaseException:
            self.close()
            raise
        return self

    def _compactor_process(self, name: str, port: int) -> ServiceProcess:
        return ServiceProcess(
            name,
            [sys.executable, "-m", "server.leaderless_log_compactor_server", "--port", str(port)],
            {**self.env, **self._compactor_env, "LLOG_COMPACTOR_ID": f"chaos-{name}",
             "LLOG_COMPACTOR_TARGETS": ",".join(f"{self.topic}:{p}" for p in range(self.partitions))},
            self.logs_dir / f"{name}.log", port, self._spawner,
        )

    def _services(self) -> list[ServiceProcess]:
        return [*self.brokers, *self.compactors]

    def _initialize_partitions(self) -> None:
        """The topic in the catalogue, with its retention (the compactor service applies it), and its logs."""
        from server._catalogue.catalogue import TopicCatalogue
        from server._protocol.keys import LogLayout

        with self._meta() as meta:
            TopicCatalogue(meta, LogLayout(self.root_prefix)).create(
                self.topic, self.partitions, {"retention.ms": self.retention_ms})

    def _add_scram_user(self, name: str, password: str) -> None:
        from server._kafka.scram import ScramCredential
        from server._kafka.scram_users import ScramUsers
        from server._protocol.keys import LogLayout

        with self._meta() as meta:
            ScramUsers(meta, LogLayout(self.root_prefix)).upsert(
                name, "SCRAM-SHA-256", ScramCredential.derive("SCRAM-SHA-256", password, uuid.uuid4().bytes))

    @contextlib.contextmanager
    def _meta(self) -> Iterator[Any]:
        """A metadata store on the stack's Oxia, for the harness's own set-up writes."""
        from server._config import OxiaConfig
        from server._storage.metastore import OxiaMetadataStore

        meta = OxiaMetadataStore(OxiaConfig.from_env(self.env))
        try:
            yield meta
        finally:
            meta.close()

    # -- faults -------------------------------------------------------------------------

    def kill_broker(self, index: int) -> None:
        self.brokers[index].kill()

    def start_broker(self, index: int) -> None:
        self.brokers[index].start()

    def kill_compactor(self, index: int = 0) -> None:
        self.compactors[index].kill()

    def start_compactor(self, index: int = 0) -> None:
        self.compactors[index].start()

    @property
    def oxia_running(self) -> bool:
        return self._oxia is not None and self._oxia.running

    def kill_oxia(self) -> None:
        """SIGKILL the standalone Oxia server (its data and WAL stay on disk)."""
        if self._oxia is None:
            raise StackError("kill_oxia needs the standalone Oxia; a cluster loses nodes (kill_oxia_node)")
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

    @property
    def s3_running(self) -> bool:
        return self._s3 is not None and self._s3.running

    def kill_s3(self) -> None:
        """SIGKILL the S3 server (its data stays on disk)."""
        assert self._s3 is not None
        self._s3.kill()

    def start_s3(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Start the S3 server again on its port and data; wait until it lists the bucket."""
        assert self._s3 is not None
        if self._s3.running:
            return
        self._spawner.run(self._s3.start)
        client = s3_client(self._stack.settings.s3_endpoint_url)

        def serving() -> bool:
            try:
                client.head_bucket(Bucket=self._stack.settings.bucket)
            except Exception:  # connection errors while it starts  # noqa: BLE001
                return False
            return True

        self._s3.wait_healthy(serving, timeout_s=timeout_s, what="serving its bucket")

    def oxia_node_victim(self, rng: random.Random) -> tuple[int, tuple[int, ...]]:
        """The Oxia server to lose and the shards it leads: a leader of some
        shard other than server 0 when there is one, else server 1 or 2.

        Clients know one service address (server 0); losing it would test a
        missing load balancer in front of Oxia, not the log.
        """
        led: dict[int, list[int]] = {}
        try:
            for shard, leader in sorted(self._stack.oxia_shard_leaders().items()):
                led.setdefault(self._stack.oxia_cluster.server_index(leader), []).append(shard)
        except Exception:  # no leader known right now  # noqa: BLE001
            led = {}
        leaders = sorted(i for i in led if i > 0)
        index = rng.choice(leaders) if leaders else rng.randrange(1, self._stack.oxia_servers)
        return index, tuple(led.get(index, ()))

    def kill_oxia_node(self, index: int) -> None:
        """SIGKILL one server of the Oxia cluster (its data and WAL stay on disk)."""
        self._stack.kill_oxia_server(index)

    def start_oxia_node(self, index: int) -> None:
        """Start the server again on its ports and data; the coordinator adds it back."""
        self._spawner.run(lambda: self._stack.restart_oxia_server(index))

    def _stack_processes(self) -> dict[str, ManagedProcess]:
        found = {"s3": self._s3} if self._s3 is not None else {}
        if self._oxia is not None:
            found["oxia"] = self._oxia
        found.update({p.name: p for p in self._stack.processes if p.name.startswith("oxia-server-")})
        return found

    def pausable(self) -> list[str]:
        """Names ``pause`` takes: every broker, compactor and Oxia server, and the S3 server."""
        return [*(p.name for p in self._services()), *self._stack_processes()]

    def _pid(self, name: str) -> int | None:
        procs: dict[str, Any] = {**{p.name: p for p in self._services()}, **self._stack_processes()}
        proc = procs[name]
        return proc.pid if proc.running else None

    def pause(self, name: str) -> None:
        """SIGSTOP: the process keeps its sockets and state but does nothing (a GC pause, a VM stall)."""
        pid = self._pid(name)
        if pid is not None:
            self._paused.add(name)
            os.kill(pid, signal.SIGSTOP)

    def resume(self, name: str) -> None:
        """SIGCONT what ``pause`` stopped."""
        self._paused.discard(name)
        pid = self._pid(name)
        if pid is not None:
            os.kill(pid, signal.SIGCONT)

    def heal(self) -> list[str]:
        """Continue what is paused, start whatever is down (S3 and Oxia first); returns what was done."""
        started = [f"continued {name}" for name in sorted(self._paused)]
        for name in sorted(self._paused):
            self.resume(name)
        if not self.s3_running:
            self.start_s3()
            started.append("s3")
        if self._oxia is not None and not self.oxia_running:
            self.start_oxia()
            started.append("oxia")
        for i in range(self._stack.oxia_servers if self.oxia_mode == "cluster" else 0):
            if not self._stack.oxia_cluster.server_running(i):
                self.start_oxia_node(i)
                started.append(f"oxia-server-{i}")
        for i, b in enumerate(self.brokers):
            if not b.running:
                self.start_broker(i)
                started.append(b.name)
        for i, c in enumerate(self.compactors):
            if not c.running:
                self.start_compactor(i)
                started.append(c.name)
        return started

    def live_brokers(self) -> list[ServiceProcess]:
        """Brokers that are up and announced themselves healthy since their last start."""
        return [b for b in self.brokers if b.ready]

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for name in list(self._paused):
            self.resume(name)  # a stopped process would not see SIGTERM
        for p in self._services():
            p.stop()
        self._spawner.run(self._stack.stop)
        self._spawner.close()
