"""``LocalStack``: Oxia plus an S3 server on 127.0.0.1, for tests and development.

Everything lives in one data directory, so reusing the directory keeps the
data across a stop and a start::

    <data_dir>/
        stack-ports.json   ports of the last start; reused when still free
        stack-state.json   present while the stack runs: settings and pids,
                           read by ``python -m devstack down|status|env``
        oxia/ or oxia-cluster/, minio/ or versitygw/

Ports are reused so that a restarted cluster finds its servers under the
addresses in its coordinator's status file; a standalone stack falls back to
fresh ports when the old ones are taken.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping, NamedTuple

from server._errors import ConfigError

from ._binaries import S3_KINDS, ensure_oxia, ensure_s3_server
from ._oxia import OxiaCluster, OxiaServerPorts, OxiaStandalone, shard_leaders
from ._process import ManagedProcess, StackError, free_ports, pid_alive, ports_free, stop_pid
from ._s3 import ACCESS_KEY_ID, REGION_NAME, SECRET_ACCESS_KEY, S3Server, ensure_bucket

__all__ = [
    "OXIA_MODES",
    "LocalStack",
    "StackSettings",
    "StackState",
    "ProcessInfo",
    "default_s3_kind",
    "read_state",
    "stop_from_state",
]

logger = logging.getLogger(__name__)

OXIA_MODES = ("standalone", "cluster")
STATE_FILE = "stack-state.json"
PORTS_FILE = "stack-ports.json"
DEFAULT_SESSION_TIMEOUT_MS = 5_000
"""Short, so tests of ephemeral records (compactor claims) do not wait 30 s."""


def default_s3_kind(env: Mapping[str, str] | None = None) -> str:
    """``LLOG_DEVSTACK_S3`` (``minio`` or ``versitygw``), default ``minio``."""
    env = os.environ if env is None else env
    kind = (env.get("LLOG_DEVSTACK_S3") or "minio").strip()
    if kind not in S3_KINDS:
        raise ConfigError(f"LLOG_DEVSTACK_S3 must be one of {', '.join(S3_KINDS)}, got {kind!r}")
    return kind


@dataclass(frozen=True)
class StackSettings:
    """How to reach a running local stack."""

    oxia_address: str
    """``host:port`` of an Oxia public endpoint (the first server in cluster mode)."""
    s3_endpoint_url: str
    bucket: str
    access_key_id: str
    secret_access_key: str = field(repr=False)
    region_name: str
    oxia_metrics_url: str
    oxia_namespace: str = "default"
    oxia_mode: str = "standalone"
    oxia_addresses: tuple[str, ...] = ()
    """Every Oxia server's public address (one entry in standalone mode)."""
    s3_kind: str = "minio"
    data_dir: str = ""

    def env(
        self, root_prefix: str = "llog", *, session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS
    ) -> dict[str, str]:
        """The ``LLOG_*`` variables that point the library at this stack."""
        return {
            # Every server of a cluster: clients learn of leader changes while one of them is down.
            "LLOG_OXIA_SERVICE_ADDRESS": ",".join(self.oxia_addresses) or self.oxia_address,
            "LLOG_OXIA_NAMESPACE": self.oxia_namespace,
            "LLOG_OXIA_SESSION_TIMEOUT_MS": str(session_timeout_ms),
            "LLOG_S3_BUCKET": self.bucket,
            "LLOG_S3_ENDPOINT_URL": self.s3_endpoint_url,
            "LLOG_S3_REGION_NAME": self.region_name,
            "LLOG_S3_ACCESS_KEY_ID": self.access_key_id,
            "LLOG_S3_SECRET_ACCESS_KEY": self.secret_access_key,
            "LLOG_ROOT_PREFIX": root_prefix,
        }

    def to_dict(self) -> dict[str, Any]:
        record = asdict(self)
        record["oxia_addresses"] = list(self.oxia_addresses)
        return record

    @classmethod
    def from_dict(cls, record: Mapping[str, Any]) -> StackSettings:
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in record.items() if k in known}
        values["oxia_addresses"] = tuple(values.get("oxia_addresses", ()))
        return cls(**values)


class ProcessInfo(NamedTuple):
    """A stack process as recorded in the state file."""

    name: str
    pid: int
    argv0: str
    """The executable, checked against /proc so a recycled pid is never signalled."""
    log: str

    @property
    def alive(self) -> bool:
        return pid_alive(self.pid, self.argv0)


@dataclass(frozen=True)
class StackState:
    """The contents of ``stack-state.json``."""

    settings: StackSettings
    processes: tuple[ProcessInfo, ...]
    owner_pid: int
    started_at: float

    @property
    def all_alive(self) -> bool:
        return all(p.alive for p in self.processes)

    @property
    def any_alive(self) -> bool:
        return any(p.alive for p in self.processes)


def read_state(data_dir: Path) -> StackState | None:
    """The state file of a stack started on ``data_dir``, or None if there is none."""
    try:
        record = json.loads((Path(data_dir) / STATE_FILE).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise StackError(f"unreadable stack state file in {data_dir}: {exc}") from exc
    return StackState(
        settings=StackSettings.from_dict(record["settings"]),
        processes=tuple(ProcessInfo(**p) for p in record["processes"]),
        owner_pid=int(record.get("owner_pid", 0)),
        started_at=float(record.get("started_at", 0.0)),
    )


def stop_from_state(data_dir: Path, timeout_s: float = 10.0) -> list[str]:
    """Stop the processes a state file names (from any process); returns the names stopped."""
    state = read_state(data_dir)
    if state is None:
        return []
    stopped = []
    # Reverse start order: the cluster coordinator before its servers.
    for info in reversed(state.processes):
        if stop_pid(info.pid, info.argv0, timeout_s):
            stopped.append(info.name)
    (Path(data_dir) / STATE_FILE).unlink(missing_ok=True)
    return stopped


def _write_json(path: Path, record: Mapping[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(json.dumps(record, indent=2) + "\n")
    os.replace(tmp, path)


class LocalStack:
    """Oxia (standalone or a 3-server cluster) and an S3 server with one bucket.

    Use as a context manager, or call :meth:`start` and :meth:`stop` (safe to
    call twice)::

        with LocalStack(tmp_path) as stack:
            env = stack.settings.env(root_prefix="t-1234")
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        oxia_shards: int = 1,
        oxia_mode: str = "standalone",
        oxia_servers: int = 3,
        oxia_replication_factor: int = 3,
        s3_kind: str | None = None,
        bucket: str = "llog",
        die_with_parent: bool = True,
        start_timeout_s: float = 90.0,
    ) -> None:
        if oxia_mode not in OXIA_MODES:
            raise ConfigError(f"oxia_mode must be one of {', '.join(OXIA_MODES)}, got {oxia_mode!r}")
        if oxia_shards < 1:
            raise ConfigError(f"oxia_shards must be >= 1, got {oxia_shards}")
        if oxia_mode == "cluster" and not 1 <= oxia_replication_factor <= oxia_servers:
            raise ConfigError(
                f"oxia_replication_factor must be in 1..oxia_servers ({oxia_servers}), got {oxia_replication_factor}"
            )
        self.s3_kind = s3_kind if s3_kind is not None else default_s3_kind()
        if self.s3_kind not in S3_KINDS:
            raise ConfigError(f"s3_kind must be one of {', '.join(S3_KINDS)}, got {self.s3_kind!r}")
        self.data_dir = Path(data_dir).resolve()
        self.oxia_shards = oxia_shards
        self.oxia_mode = oxia_mode
        self.oxia_servers = oxia_servers
        self.oxia_replication_factor = oxia_replication_factor
        self.bucket = bucket
        self._die_with_parent = die_with_parent
        self._start_timeout_s = start_timeout_s
        self._oxia: OxiaStandalone | OxiaCluster | None = None
        self._s3: S3Server | None = None
        self._settings: StackSettings | None = None

    def __repr__(self) -> str:
        return (
            f"LocalStack({str(self.data_dir)!r}, oxia_mode={self.oxia_mode!r}, "
            f"s3_kind={self.s3_kind!r}, running={self.running})"
        )

    def __enter__(self) -> LocalStack:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self._settings is not None

    @property
    def settings(self) -> StackSettings:
        if self._settings is None:
            raise StackError("the local stack is not running; call start() first")
        return self._settings

    @property
    def processes(self) -> list[ManagedProcess]:
        """In start order: the S3 server, then Oxia (cluster: servers, then coordinator)."""
        found: list[ManagedProcess] = []
        if self._s3 is not None:
            found += self._s3.processes
        if self._oxia is not None:
            found += self._oxia.processes
        return found

    @property
    def oxia_cluster(self) -> OxiaCluster:
        """The cluster, for failure tests; only in ``oxia_mode="cluster"``."""
        if not isinstance(self._oxia, OxiaCluster):
            raise StackError("the local stack runs Oxia standalone; use oxia_mode='cluster'")
        return self._oxia

    def kill_oxia_server(self, index: int) -> None:
        """SIGKILL one cluster server (cluster mode)."""
        self.oxia_cluster.kill_server(index)

    def oxia_shard_leaders(self) -> dict[int, str]:
        """Shard id -> public address of its current leader."""
        if isinstance(self._oxia, OxiaCluster):
            return self._oxia.shard_leaders()
        return shard_leaders(self.settings.oxia_address)

    def restart_oxia_server(self, index: int) -> None:
        """Start one cluster server again on its ports and data (cluster mode)."""
        self.oxia_cluster.restart_server(index, timeout_s=self._start_timeout_s)
        self._write_state()  # new pid

    def start(self) -> LocalStack:
        if self.running:
            return self
        self.data_dir.mkdir(parents=True, exist_ok=True)
        previous = read_state(self.data_dir)
        if previous is not None and previous.any_alive:
            raise StackError(
                f"a local stack already runs on {self.data_dir} "
                f"(pids {', '.join(str(p.pid) for p in previous.processes if p.alive)}); "
                f"stop it with: python -m devstack down --data-dir {self.data_dir}"
            )
        oxia_binary = ensure_oxia()
        s3_binary = ensure_s3_server(self.s3_kind)
        ports = self._ports()
        started = time.monotonic()
        try:
            self._s3 = S3Server(
                self.s3_kind, s3_binary, self.data_dir,
                port=ports["s3"][0], console_port=ports["s3"][1], die_with_parent=self._die_with_parent,
            )
            self._oxia = self._make_oxia(oxia_binary, ports)
            self._s3.start(timeout_s=self._start_timeout_s)
            ensure_bucket(self._s3.endpoint_url, self.bucket, timeout_s=self._start_timeout_s)
            self._oxia.start(timeout_s=self._start_timeout_s)
        except BaseException:
            self._stop_processes()
            raise
        self._settings = StackSettings(
            oxia_address=self._oxia.address,
            s3_endpoint_url=self._s3.endpoint_url,
            bucket=self.bucket,
            access_key_id=ACCESS_KEY_ID,
            secret_access_key=SECRET_ACCESS_KEY,
            region_name=REGION_NAME,
            oxia_metrics_url=self._oxia.metrics_url,
            oxia_mode=self.oxia_mode,
            oxia_addresses=tuple(self._oxia.addresses if isinstance(self._oxia, OxiaCluster) else [self._oxia.address]),
            s3_kind=self.s3_kind,
            data_dir=str(self.data_dir),
        )
        self._write_state()
        logger.info(
            "local stack up in %.1fs: oxia %s (%s), %s %s",
            time.monotonic() - started, self._settings.oxia_address, self.oxia_mode,
            self.s3_kind, self._settings.s3_endpoint_url,
        )
        return self

    def stop(self) -> None:
        if self._oxia is None and self._s3 is None:
            return
        self._stop_processes()
        state = read_state(self.data_dir)
        if state is not None and state.owner_pid == os.getpid():
            (self.data_dir / STATE_FILE).unlink(missing_ok=True)
        self._settings = None

    def detach(self) -> None:
        """Forget the processes without stopping them (``devstack up`` leaves them running)."""
        self._oxia = None
        self._s3 = None
        self._settings = None

    def _stop_processes(self) -> None:
        oxia, s3 = self._oxia, self._s3
        self._oxia = None
        self._s3 = None
        if oxia is not None:
            oxia.stop()
        if s3 is not None:
            s3.stop()

    def _make_oxia(self, binary: Path, ports: Mapping[str, Any]) -> OxiaStandalone | OxiaCluster:
        servers = [OxiaServerPorts(*p) for p in ports["oxia"]]
        if self.oxia_mode == "standalone":
            return OxiaStandalone(
                binary, self.data_dir, ports=servers[0], shards=self.oxia_shards, die_with_parent=self._die_with_parent
            )
        return OxiaCluster(
            binary,
            self.data_dir,
            server_ports=servers,
            coordinator_ports=OxiaServerPorts(*ports["coordinator"]),
            shards=self.oxia_shards,
            replication_factor=self.oxia_replication_factor,
            die_with_parent=self._die_with_parent,
        )

    def _ports(self) -> dict[str, Any]:
        """The previous run's ports if the layout matches and they are free, else fresh ones."""
        path = self.data_dir / PORTS_FILE
        servers = 1 if self.oxia_mode == "standalone" else self.oxia_servers
        try:
            previous = json.loads(path.read_text())
        except (OSError, ValueError):
            previous = None
        if previous is not None and previous.get("oxia_mode") == self.oxia_mode and len(previous["oxia"]) == servers:
            flat = [p for group in previous["oxia"] for p in group] + list(previous["coordinator"]) + list(previous["s3"])
            if ports_free(flat):
                return previous
            if self.oxia_mode == "cluster":
                raise StackError(
                    f"the Oxia cluster in {self.data_dir} must restart on its previous ports, "
                    f"but some of {sorted(flat)} are in use"
                )
            logger.info("previous ports in %s are taken; picking new ones", path)
        fresh = free_ports(3 * servers + 3 + 2)
        ports = {
            "oxia_mode": self.oxia_mode,
            "oxia": [fresh[3 * i : 3 * i + 3] for i in range(servers)],
            "coordinator": fresh[3 * servers : 3 * servers + 3],
            "s3": fresh[3 * servers + 3 :],
        }
        _write_json(path, ports)
        return ports

    def _write_state(self) -> None:
        _write_json(
            self.data_dir / STATE_FILE,
            {
                "settings": self.settings.to_dict(),
                "processes": [p.describe() for p in self.processes],
                "owner_pid": os.getpid(),
                "started_at": time.time(),
            },
        )
