"""The processes of one run: Oxia and MinIO (devstack's ``LocalStack``),
brokers and compactor services, and ``stack.json``, which describes them.

``stack.json`` is the source of truth for ``orchestrate.py status``,
``precreate``, ``run`` and ``down`` (its format is in loadtest/README.md):
a later command finds every process by pid (checked against its command
line, so a recycled pid is never signalled) and every service by URL.

Brokers and compactors run as ``python -m server.leaderless_log_broker`` /
``server.leaderless_log_compactor_server`` with the stack's ``LLOG_*``
variables and the scenario's batch settings. The run's shape is not theirs
to export: ``stack.json``'s ``scrape_labels`` (scenario, run id, brokers,
partitions, load) are the labels Prometheus puts on every series it scrapes
from the run (``quick_observability``).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from devstack import LocalStack, ManagedProcess, StackError, free_ports
from devstack._process import pid_alive
from devstack._stack import stop_from_state

from .json_files import write_json_atomic
from .scenario import Scenario

__all__ = ["RunStack", "load_stack_json", "stop_stack_json", "stack_status"]

REPO = Path(__file__).resolve().parents[2]
HEALTH_TIMEOUT_S = 60.0
COMPACTOR_ENV = {
    "LLOG_COMPACTOR_DISCOVERY_INTERVAL_MS": "2000",
    "LLOG_COMPACTOR_IDLE_SLEEP_MS": "500",
    "LLOG_VACUUM_INTERVAL_MS": "30000",
}


@dataclass
class Service:
    """A broker or compactor process of the run."""

    name: str
    kind: str
    role: str
    port: int
    process: ManagedProcess

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=2) as reply:
                return reply.status == 200
        except OSError:
            return False

    def describe(self, run_dir: Path) -> dict[str, Any]:
        record: dict[str, Any] = {
            "name": self.name, "kind": self.kind, "pid": self.process.pid, "host": "127.0.0.1", "port": self.port,
            "url": self.url, "metrics_url": f"{self.url}/metrics", "role": self.role,
            "log": str(self.process.log_path.relative_to(run_dir)), "data_dir": None, "argv": self.process.argv,
        }
        if self.kind == "broker":
            record["broker_id"] = self.name
        return record


class RunStack:
    """Start, describe, break and stop the processes of a scenario run."""

    def __init__(self, scenario: Scenario, run_dir: Path, run_id: str, *, die_with_parent: bool = True,
                 say: Callable[[str], None] = print) -> None:
        self.scenario = scenario
        self.run_dir = run_dir
        self.run_id = run_id
        self.root_prefix = f"lt-{run_id.lower().replace('_', '-')}"[:60]
        self._die_with_parent = die_with_parent
        self._say = say
        self.local = LocalStack(
            run_dir / "stack", oxia_mode=scenario.stack.oxia, oxia_shards=scenario.stack.oxia_shards,
            s3_kind=scenario.stack.s3, die_with_parent=die_with_parent,
        )
        self.services: dict[str, Service] = {}
        self.llog_env: dict[str, str] = {}
        self.doc: dict[str, Any] = {}
        """What stack.json holds now (written by :meth:`write_stack_json`)."""
        self.listeners: list[Callable[[dict[str, Any]], None]] = []
        """Called with the new stack.json after every change (a restart: new pids)."""

    # -- up / down ---------------------------------------------------------------------------------
    def up(self) -> None:
        started = time.monotonic()
        self._say(f"starting Oxia ({self.scenario.stack.oxia}) and {self.scenario.stack.s3}")
        self.local.start()
        self.llog_env = self.local.settings.env(root_prefix=self.root_prefix)
        names = self.scenario.broker_roles()
        ports = free_ports(len(names) + self.scenario.compactors)
        for (name, role), port in zip(names, ports):
            self.services[name] = self._service(name, "broker", role, port)
        for name, port in zip(self.scenario.compactor_names(), ports[len(names):]):
            self.services[name] = self._service(name, "compactor", "compactor", port)
        for svc in self.services.values():
            svc.process.start()
        for svc in self.services.values():
            svc.process.wait_healthy(svc.healthy, timeout_s=HEALTH_TIMEOUT_S)
        self.write_stack_json()
        self._say(f"stack up in {time.monotonic() - started:.1f}s: "
                  + ", ".join(f"{s.name}={s.url}" for s in self.services.values()))

    def down(self) -> None:
        for svc in reversed(list(self.services.values())):
            svc.process.stop()
        self.local.stop()

    def detach(self) -> None:
        """Leave everything running (``orchestrate.py up``); ``down`` stops it from stack.json."""
        self.local.detach()

    # -- faults ------------------------------------------------------------------------------------
    def kill(self, target: str, *, hard: bool = True) -> None:
        if target.startswith("oxia-server-"):
            self.local.kill_oxia_server(int(target.rsplit("-", 1)[1]))
        elif hard:
            self.services[target].process.kill()
        else:
            self.services[target].process.stop()
        self.write_stack_json()

    def restart(self, target: str) -> None:
        if target.startswith("oxia-server-"):
            self.local.restart_oxia_server(int(target.rsplit("-", 1)[1]))
        else:
            svc = self.services[target]
            svc.process.start()
            svc.process.wait_healthy(svc.healthy, timeout_s=HEALTH_TIMEOUT_S)
        self.write_stack_json()

    # -- stack.json --------------------------------------------------------------------------------
    def write_stack_json(self) -> Path:
        settings = self.local.settings
        infra = [
            {"name": p.name, "kind": _infra_kind(p.name), "pid": p.pid, "host": "127.0.0.1", "port": None,
             "url": None, "metrics_url": None, "role": None, "log": str(p.log_path), "data_dir": settings.data_dir,
             "argv": p.argv}
            for p in self.local.processes
        ]
        doc = {
            "run_id": self.run_id, "scenario": self.scenario.name, "run_dir": str(self.run_dir.resolve()),
            "created_at_ms": int(time.time() * 1000), "root_prefix": self.root_prefix,
            "llog_env": self.llog_env, "scrape_labels": self.scrape_labels(), "stack_data_dir": settings.data_dir,
            "oxia_addresses": list(settings.oxia_addresses), "s3_endpoint_url": settings.s3_endpoint_url,
            "processes": infra + [svc.describe(self.run_dir) for svc in self.services.values()],
        }
        path = self.run_dir / "stack.json"
        write_json_atomic(path, doc)
        self.doc = doc
        for listener in self.listeners:
            listener(doc)
        return path

    def _service(self, name: str, kind: str, role: str, port: int) -> Service:
        env = {**self.llog_env, "PYTHONPATH": str(REPO)}
        if kind == "broker":
            argv = [sys.executable, "-m", "server.leaderless_log_broker", "--role", role, "--broker-id", name,
                    "--port", str(port)]
            env["LLOG_BATCH_MAX_DELAY_MS"] = str(self.scenario.batch.max_delay_ms)
            env["LLOG_BATCH_MAX_BYTES"] = str(self.scenario.batch.max_bytes)
            env["LLOG_BATCH_MAX_BUFFER_BYTES"] = str(max(64 << 20, 4 * self.scenario.batch.max_bytes))
            if self.scenario.batch.shared_tail_cache:
                env["LLOG_TAIL_CACHE_DIR"] = str(self.run_dir / "tail-cache")
        else:
            argv = [sys.executable, "-m", "server.leaderless_log_compactor_server", "--port", str(port)]
            env.update(COMPACTOR_ENV)
            env["LLOG_COMPACTOR_ID"] = name
        # The scenario's [env] goes last: it may override any harness setting above.
        env.update(self.scenario.env.broker if kind == "broker" else self.scenario.env.compactor)
        process = ManagedProcess(name, argv, log_path=self.run_dir / "logs" / f"{name}.log", env=env,
                                 cwd=REPO, die_with_parent=self._die_with_parent)
        return Service(name, kind, role, port, process)

    def scrape_labels(self) -> dict[str, str]:
        """The run's shape, as the labels of every series Prometheus scrapes from it."""
        load = self.scenario.load
        return {
            "scenario": self.scenario.name,
            "run_id": self.run_id,
            "brokers": str(len(self.scenario.broker_roles())),
            "partitions": str(load.partitions),
            "target_records_per_second": str(load.rate if load.mode == "open" else 0),
            "concurrency": str(load.concurrency if load.mode == "closed" else 0),
            "record_bytes": str(load.record_bytes),
        }


def _infra_kind(name: str) -> str:
    if name.startswith("oxia-coordinator"):
        return "oxia-coordinator"
    if name.startswith("oxia"):
        return "oxia"
    return "s3"


def load_stack_json(run_dir: Path) -> dict[str, Any]:
    path = Path(run_dir) / "stack.json"
    if not path.exists():
        raise StackError(f"{path} does not exist: is {run_dir} a run directory of `orchestrate.py up`?")
    return json.loads(path.read_text())


def stack_status(stack: dict[str, Any]) -> list[dict[str, Any]]:
    """Every process of stack.json with ``alive`` and, for services, ``healthy``."""
    out = []
    for p in stack["processes"]:
        alive = p["pid"] is not None and pid_alive(p["pid"], p["argv"][0] if p.get("argv") else None)
        row = {"name": p["name"], "kind": p["kind"], "pid": p["pid"], "alive": alive, "url": p.get("url")}
        if p.get("url"):
            try:
                with urllib.request.urlopen(f"{p['url']}/health", timeout=2) as reply:
                    row["healthy"] = reply.status == 200
            except OSError:
                row["healthy"] = False
        out.append(row)
    return out


def stop_stack_json(stack: dict[str, Any], timeout_s: float = 10.0) -> list[str]:
    """Stop the services of stack.json (SIGTERM, then SIGKILL), then Oxia and MinIO; the names stopped."""
    stopped = []
    services = [p for p in stack["processes"] if p["kind"] in ("broker", "compactor", "prometheus")]
    for p in services:
        if p["pid"] and pid_alive(p["pid"], p["argv"][0] if p.get("argv") else None):
            os.kill(p["pid"], signal.SIGTERM)
            stopped.append(p["name"])
    deadline = time.monotonic() + timeout_s
    for p in services:
        while p["pid"] and pid_alive(p["pid"]) and time.monotonic() < deadline:
            time.sleep(0.1)
        if p["pid"] and pid_alive(p["pid"], p["argv"][0] if p.get("argv") else None):
            os.kill(p["pid"], signal.SIGKILL)
    stopped += stop_from_state(Path(stack["stack_data_dir"]), timeout_s)
    return stopped
