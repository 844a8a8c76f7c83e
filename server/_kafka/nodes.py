"""The live Kafka listeners and who answers for what: Metadata's leaders, groups' coordinators.

Each listener registers an ephemeral Oxia record ``{root}/__llog/brokers/
{node_id:010d}`` holding ``{"node_id", "broker_id", "host", "port"}``; it
goes away with the broker's Oxia session (a killed broker is gone within the
session timeout). A listener lists the records every ``refresh_ms`` and puts
its own back if its session lost it.

**Node ids.** Kafka needs an int32 per broker. A broker takes the CRC-32 of
its ``broker_id`` (31 bits), and the next free id if another broker holds
that one: the same broker keeps its id across restarts, so clients' cached
metadata stays right.

**Leaders.** Any broker can write and read any partition, so a leader is only
where a client sends its requests. Each partition's leader is chosen by
rendezvous hashing over the live nodes (the highest ``hash(node, topic,
partition)``): partitions spread evenly over the brokers, every broker
computes the same answer from the same list, and when a broker joins or
leaves only the partitions it gains or loses move. Since no broker refuses a
partition, a client with stale metadata is still served: NOT_LEADER is never
answered. A group's coordinator is chosen the same way from its name.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import zlib
from dataclasses import dataclass
from typing import Sequence

from .._errors import VersionConflict
from .._protocol.keys import BROKERS_PARTITION_KEY, LogLayout
from .._runtime import REAL_RUNTIME, Runtime
from .._storage.metastore import EXPECT_ABSENT, MetadataStore

__all__ = ["Node", "Nodes", "rendezvous"]

log = logging.getLogger(__name__)

_MAX_NODE_ID = (1 << 31) - 1


@dataclass(frozen=True, order=True)
class Node:
    node_id: int
    host: str
    port: int
    broker_id: str = ""

    def encode(self) -> bytes:
        return json.dumps({"node_id": self.node_id, "broker_id": self.broker_id, "host": self.host,
                           "port": self.port}, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, raw: bytes) -> Node | None:
        try:
            doc = json.loads(raw)
            return cls(int(doc["node_id"]), str(doc["host"]), int(doc["port"]), str(doc.get("broker_id", "")))
        except (ValueError, KeyError, TypeError):
            return None


def rendezvous(nodes: Sequence[Node], key: str) -> Node:
    """The node with the highest hash of ``(node, key)``: stable as other nodes come and go."""
    return max(nodes, key=lambda n: (hashlib.blake2b(f"{n.node_id}\x00{key}".encode(), digest_size=8).digest(),
                                     n.node_id))


class Nodes:
    """This listener's registration and the cached list of live ones (module docstring)."""

    def __init__(self, meta: MetadataStore, layout: LogLayout, *, broker_id: str, host: str, port: int,
                 refresh_ms: int = 1_000, runtime: Runtime = REAL_RUNTIME) -> None:
        self._meta = meta
        self._layout = layout
        self._runtime = runtime
        self._refresh_s = refresh_ms / 1000
        self.me = Node(zlib.crc32(broker_id.encode()) & _MAX_NODE_ID, host, port, broker_id)
        self._live: tuple[Node, ...] = (self.me,)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Nodes:
        self.register()
        self.refresh()
        self._thread = threading.Thread(target=self._loop, name="llog-kafka-nodes", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        try:
            self._meta.delete(self._layout.broker_key(self.me.node_id), BROKERS_PARTITION_KEY)
        except Exception:  # the session's end removes it anyway
            log.debug("could not remove the broker record", exc_info=True)

    def register(self) -> None:
        """Put this listener's record, taking the next node id while another broker holds one."""
        node = self.me
        for _ in range(1000):
            key = self._layout.broker_key(node.node_id)
            try:
                self._meta.put(key, node.encode(), BROKERS_PARTITION_KEY, expected_version=EXPECT_ABSENT,
                               ephemeral=True)
                break
            except VersionConflict:
                rec = self._meta.get(key, BROKERS_PARTITION_KEY)
                held = None if rec is None else Node.decode(rec.value)
                if held is not None and held.broker_id == node.broker_id:  # our own, from a lost reply
                    self._meta.put(key, node.encode(), BROKERS_PARTITION_KEY, ephemeral=True)
                    break
                if rec is not None:
                    node = Node((node.node_id + 1) & _MAX_NODE_ID, node.host, node.port, node.broker_id)
        self.me = node
        log.info("kafka listener registered as node %d (%s:%d)", node.node_id, node.host, node.port)

    def refresh(self) -> tuple[Node, ...]:
        prefix = self._layout.brokers_prefix
        found = []
        for rec in self._meta.range_scan(prefix, prefix + "~", BROKERS_PARTITION_KEY):
            node = Node.decode(rec.value)
            if node is not None:
                found.append(node)
        if self.me not in found:
            self.register()
            found.append(self.me)
        with self._lock:
            self._live = tuple(sorted(set(found)))
        return self._live

    def live(self) -> tuple[Node, ...]:
        with self._lock:
            return self._live

    def leader(self, topic: str, partition: int) -> Node:
        return rendezvous(self.live(), f"{topic}\x00{partition}")

    def coordinator(self, group: str) -> Node:
        return rendezvous(self.live(), f"group\x00{group}")

    def _loop(self) -> None:
        while not self._stop.wait(self._refresh_s):
            try:
                self.refresh()
            except Exception:
                log.warning("could not refresh the live brokers", exc_info=True)
