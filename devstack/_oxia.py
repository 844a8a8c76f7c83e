"""Oxia for the local stack: one standalone process, or a 3-server cluster.

Layout under the stack's data directory::

    oxia/                      standalone: db/, wal/, oxia.log
    oxia-cluster/
        cluster.yaml           coordinator config: namespace + the servers' addresses
        cluster-status.json    the coordinator's state (shard ensembles, terms)
        coordinator.log
        server-0/ db/ wal/ server.log   (and server-1, server-2)

A cluster's status file names its servers by address, so a cluster restarted
on the same data directory must get the same ports back (``_stack`` keeps
them in a ports file).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from ._process import ManagedProcess, StackError, http_ok, tcp_open

__all__ = [
    "OxiaServerPorts",
    "shard_leaders",
    "OxiaStandalone",
    "OxiaCluster",
    "probe_oxia",
]

logger = logging.getLogger(__name__)

@dataclass(frozen=True)
class OxiaServerPorts:
    """Ports of one Oxia server on 127.0.0.1 (internal unused in standalone)."""

    public: int
    internal: int
    metrics: int

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.public}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics}/metrics"


_ASSIGNMENTS_METHOD = "/io.streamnative.oxia.proto.OxiaClient/GetShardAssignments"


def shard_leaders(address: str, *, namespace: str = "default", timeout_s: float = 2.0) -> dict[int, str]:
    """The first shard-assignments message ``address`` streams: shard id -> leader address.

    A leader is ``""`` while its shard has none. Spoken in plain gRPC rather
    than through ``oxia.Client``: oxia 0.2.1's client blocks its discovery
    thread for good on the second assignments update (a ``Barrier(2)`` it
    waits on for every update), after which ``close()`` never returns, so a
    probe must not depend on it.
    """
    import grpc  # deferred: keeps ``--help`` and unit tests free of grpc start-up
    from oxia.internal.proto.io.streamnative.oxia import proto as pb

    with grpc.insecure_channel(address) as channel:
        call = channel.unary_stream(
            _ASSIGNMENTS_METHOD,
            request_serializer=pb.ShardAssignmentsRequest.SerializeToString,
            response_deserializer=pb.ShardAssignments.FromString,
        )(pb.ShardAssignmentsRequest(namespace=namespace), timeout=timeout_s)
        try:
            first = next(call)
        finally:
            call.cancel()
    assignments = first.namespaces.get(namespace)
    if assignments is None:
        return {}
    return {int(a.shard): a.leader for a in assignments.assignments}


def probe_oxia(address: str, *, shards: int, timeout_s: float) -> dict[int, str]:
    """Wait until ``address`` reports a reachable leader for each of ``shards`` shards."""
    import grpc

    deadline = time.monotonic() + timeout_s
    last: object = "no answer"
    while True:
        try:
            leaders = shard_leaders(address)
            last = leaders
            if len(leaders) == shards and all(
                leader and tcp_open(int(leader.rsplit(":", 1)[1])) for leader in leaders.values()
            ):
                return leaders
        except grpc.RpcError as exc:  # "server not initialized yet" until the coordinator assigns shards
            last = f"{exc.code().name}: {exc.details()}"
        if time.monotonic() >= deadline:
            raise StackError(f"Oxia at {address} had no leader for all {shards} shards after {timeout_s:.0f}s: {last}")
        time.sleep(0.2)


class OxiaStandalone:
    """``oxia standalone``: one process, all shards, no replication."""

    mode = "standalone"

    def __init__(
        self,
        binary: Path,
        data_dir: Path,
        *,
        ports: OxiaServerPorts,
        shards: int = 1,
        die_with_parent: bool = True,
    ) -> None:
        self.ports = ports
        self.data_dir = data_dir / "oxia"
        self._shards = shards
        self._process = ManagedProcess(
            "oxia-standalone",
            [
                binary, "standalone",
                "-p", f"127.0.0.1:{ports.public}",
                "-m", f"127.0.0.1:{ports.metrics}",
                "--data-dir", self.data_dir / "db",
                "--wal-dir", self.data_dir / "wal",
                "--shards", str(shards),
            ],
            log_path=self.data_dir / "oxia.log",
            die_with_parent=die_with_parent,
        )

    @property
    def address(self) -> str:
        return self.ports.address

    @property
    def metrics_url(self) -> str:
        return self.ports.metrics_url

    @property
    def processes(self) -> list[ManagedProcess]:
        return [self._process]

    def start(self, timeout_s: float = 60.0) -> None:
        self._process.start()
        self._process.wait_healthy(
            lambda: http_ok(self.metrics_url) and tcp_open(self.ports.public),
            timeout_s=timeout_s,
            what="listening",
        )
        probe_oxia(self.address, shards=self._shards, timeout_s=timeout_s)

    def stop(self) -> None:
        self._process.stop()


class OxiaCluster:
    """A coordinator and ``len(servers)`` servers, each shard replicated on all of them.

    With replication factor 3 a shard keeps its quorum with one server down,
    which is what :meth:`kill_server` / :meth:`restart_server` are for.
    """

    mode = "cluster"

    def __init__(
        self,
        binary: Path,
        data_dir: Path,
        *,
        server_ports: Sequence[OxiaServerPorts],
        coordinator_ports: OxiaServerPorts,
        shards: int = 1,
        replication_factor: int = 3,
        die_with_parent: bool = True,
    ) -> None:
        if replication_factor > len(server_ports):
            raise StackError(
                f"replication factor {replication_factor} needs at least as many servers, got {len(server_ports)}"
            )
        self.server_ports = tuple(server_ports)
        self.coordinator_ports = coordinator_ports
        self.data_dir = data_dir / "oxia-cluster"
        self._shards = shards
        self._replication_factor = replication_factor
        self._servers = [
            ManagedProcess(
                f"oxia-server-{i}",
                [
                    binary, "server",
                    "-p", f"127.0.0.1:{p.public}",
                    "-i", f"127.0.0.1:{p.internal}",
                    "-m", f"127.0.0.1:{p.metrics}",
                    "--data-dir", self.data_dir / f"server-{i}" / "db",
                    "--wal-dir", self.data_dir / f"server-{i}" / "wal",
                ],
                log_path=self.data_dir / f"server-{i}" / "server.log",
                die_with_parent=die_with_parent,
            )
            for i, p in enumerate(self.server_ports)
        ]
        self._coordinator = ManagedProcess(
            "oxia-coordinator",
            [
                binary, "coordinator",
                "--conf", self.data_dir / "cluster.yaml",
                "--metadata", "file",
                "--file-clusters-status-path", self.data_dir / "cluster-status.json",
                "-i", f"127.0.0.1:{coordinator_ports.internal}",
                "-m", f"127.0.0.1:{coordinator_ports.metrics}",
            ],
            log_path=self.data_dir / "coordinator.log",
            die_with_parent=die_with_parent,
        )

    @property
    def address(self) -> str:
        """The first server's public address; any server routes a client to the leaders."""
        return self.server_ports[0].address

    @property
    def addresses(self) -> list[str]:
        return [p.address for p in self.server_ports]

    @property
    def metrics_url(self) -> str:
        return self.server_ports[0].metrics_url

    @property
    def processes(self) -> list[ManagedProcess]:
        return [*self._servers, self._coordinator]

    def start(self, timeout_s: float = 90.0) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._write_config()
        for i in range(len(self._servers)):
            self._servers[i].start()
        for i in range(len(self._servers)):
            self._wait_server(i, timeout_s)
        self._coordinator.start()
        self._coordinator.wait_healthy(
            lambda: http_ok(f"http://127.0.0.1:{self.coordinator_ports.metrics}/metrics"),
            timeout_s=timeout_s,
            what="listening",
        )
        probe_oxia(self.address, shards=self._shards, timeout_s=timeout_s)

    def stop(self) -> None:
        # Coordinator first, so it does not start elections while servers go away.
        self._coordinator.stop()
        for server in self._servers:
            server.stop()

    def kill_server(self, index: int) -> None:
        """SIGKILL server ``index`` (a crash; its data stays on disk)."""
        logger.info("killing oxia server %s", index)
        self._servers[index].kill()

    def stop_server(self, index: int) -> None:
        """SIGTERM server ``index`` (a clean shutdown)."""
        self._servers[index].stop()

    def restart_server(self, index: int, timeout_s: float = 60.0) -> None:
        """Start server ``index`` again on its ports and data; the coordinator re-adds it."""
        self._servers[index].stop()
        self._servers[index].start()
        self._wait_server(index, timeout_s)

    def server_running(self, index: int) -> bool:
        return self._servers[index].running

    def server_index(self, address: str) -> int:
        """Which server has public ``address`` (as in :func:`shard_leaders`)."""
        for i, ports in enumerate(self.server_ports):
            if ports.address == address:
                return i
        raise StackError(f"no Oxia server of this cluster has address {address!r}")

    def shard_leaders(self) -> dict[int, str]:
        """Shard id -> leader address, asked of the running servers in turn (one just
        restarted answers "not initialized" until the coordinator has reached it)."""
        last: Exception | None = None
        for i, ports in enumerate(self.server_ports):
            if self._servers[i].running:
                try:
                    return shard_leaders(ports.address)
                except Exception as exc:  # grpc errors of a server still starting  # noqa: BLE001
                    last = exc
        if last is not None:
            raise last
        raise StackError("no Oxia server of this cluster is running")

    def _wait_server(self, index: int, timeout_s: float) -> None:
        ports = self.server_ports[index]
        self._servers[index].wait_healthy(
            lambda: http_ok(ports.metrics_url) and tcp_open(ports.public) and tcp_open(ports.internal),
            timeout_s=timeout_s,
            what="listening",
        )

    def _write_config(self) -> None:
        # Plain YAML by hand: two flat lists, not worth a YAML dependency.
        lines = [
            "namespaces:",
            "  - name: default",
            f"    initialShardCount: {self._shards}",
            f"    replicationFactor: {self._replication_factor}",
            "servers:",
        ]
        for p in self.server_ports:
            lines += [f"  - public: 127.0.0.1:{p.public}", f"    internal: 127.0.0.1:{p.internal}"]
        (self.data_dir / "cluster.yaml").write_text("\n".join(lines) + "\n")
