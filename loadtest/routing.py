"""Routing for the load-test harness: owner sets, the routing manifest, the remap rule.

Owner sets. Every partition is served by a fixed set of brokers, its owner
set, computed once per run by rendezvous hashing: each broker gets the score
``sha256(f"{topic}\\x00{partition}\\x00{broker_id}\\x00{seed}")`` (first 8
bytes, big-endian) and the ``k`` highest win, highest first (ties broken by
``broker_id``). Adding a broker only moves the partitions where the new
broker now scores among the top ``k``; nothing else changes.

The manifest. :func:`build_manifest` writes the owner sets in the format of
``routing-manifest.json`` (loadtest/README.md, "Load-test harness"): produce
owners from the ``write`` and ``both`` brokers, and, when the scenario has
``read`` brokers, ``read_owners`` from the ``read`` and ``both`` brokers.
When fewer brokers can serve than ``owners_per_partition``, every one of them
is an owner. :func:`load_manifest` checks a manifest (shape, roles, and that
the owners are the rendezvous owners) and raises :class:`ManifestError`
naming what is wrong.

The router. :class:`Router` is the reference of what ``http_hammer.go``
does, for tests and for reading a run back:

- selection stays inside a partition's available owners: ``round_robin``
  cycles over them, ``least_inflight`` takes the one with the fewest
  requests in flight (ties: owner order, highest score first);
- when a broker is marked unavailable, every partition it owns moves to the
  partition's first available owner of its ORIGINAL owner set (never
  outside it), or to nobody (``"to": None``) when no owner is left; each
  move is a remap event ``{"ts_ms", "topic", "partition", "from", "to",
  "reason"}``;
- a broker marked available again gets its partitions back, one event per
  partition (``reason`` ``"recovered"``, ``from`` the partition's first
  available owner until then, or None).

The router is not thread-safe: it serves tests and reading a run back.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, NamedTuple, Sequence

from loadtest._harness.json_files import load_checked_json, write_json_atomic

__all__ = [
    "BrokerSpec",
    "ManifestError",
    "PRODUCE_ROLES",
    "READ_ROLES",
    "REMAP_REASONS",
    "ROLES",
    "Router",
    "RouterConfig",
    "SELECTIONS",
    "build_manifest",
    "load_manifest",
    "owner_set",
    "remap_violations",
    "rendezvous_score",
    "validate_manifest",
    "write_manifest",
]

ROLES = ("write", "read", "both")
PRODUCE_ROLES = frozenset({"write", "both"})
READ_ROLES = frozenset({"read", "both"})
SELECTIONS = ("round_robin", "least_inflight")
REMAP_REASONS = ("connect", "timeout", "http_503", "recovered")
"""Why a partition moved: the three failures the hammer marks a broker down
for, and ``recovered`` when the broker came back."""


class ManifestError(ValueError):
    """A routing manifest (or the input to build one) is malformed; the message says where."""


class BrokerSpec(NamedTuple):
    """One broker of a scenario, as the manifest lists it."""

    broker_id: str
    """Unique id, as the broker's ``--broker-id``."""
    url: str
    """Base URL, e.g. ``http://127.0.0.1:18080``."""
    role: str
    """``write``, ``read`` or ``both``."""


TopicPartition = tuple[str, int]


# -- rendezvous hashing ----------------------------------------------------------------


def rendezvous_score(topic: str, partition: int, broker_id: str, seed: int) -> int:
    """The broker's score for the partition: the first 8 bytes of the SHA-256, big-endian."""
    key = f"{topic}\x00{partition}\x00{broker_id}\x00{seed}".encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:8], "big")


def owner_set(topic: str, partition: int, broker_ids: Iterable[str], seed: int, k: int) -> tuple[str, ...]:
    """The ``k`` brokers with the highest score, highest first (ties by broker_id);
    all of them when there are fewer than ``k``."""
    ids = list(broker_ids)
    if k < 1:
        raise ValueError(f"owner set size must be at least 1, got {k}")
    if len(set(ids)) != len(ids):
        raise ValueError(f"broker ids repeat: {sorted(ids)}")
    ranked = sorted(ids, key=lambda b: (-rendezvous_score(topic, partition, b, seed), b))
    return tuple(ranked[:k])


# -- the manifest --------------------------------------------------------------------------


def build_manifest(
    topic: str,
    partitions: int,
    brokers: Sequence[tuple[str, str, str]],
    seed: int,
    owners_per_partition: int,
    selection: str,
) -> dict[str, Any]:
    """The routing manifest of ``partitions`` partitions (0 .. partitions-1) of
    ``topic`` over ``brokers`` (``(broker_id, url, role)``)."""
    specs = [BrokerSpec(*b) for b in brokers]
    manifest: dict[str, Any] = {
        "seed": seed,
        "owners_per_partition": owners_per_partition,
        "selection": selection,
        "brokers": [s._asdict() for s in specs],
        "partitions": [],
    }
    _check_header(manifest)
    producers = [s.broker_id for s in specs if s.role in PRODUCE_ROLES]
    readers = [s.broker_id for s in specs if s.role in READ_ROLES]
    with_read = any(s.role == "read" for s in specs)
    if not isinstance(partitions, int) or partitions < 1:
        raise ManifestError(f"partitions must be a positive integer, got {partitions!r}")
    for p in range(partitions):
        entry: dict[str, Any] = {"topic": topic, "partition": p,
                                 "owners": list(owner_set(topic, p, producers, seed, owners_per_partition))}
        if with_read:
            entry["read_owners"] = list(owner_set(topic, p, readers, seed, owners_per_partition))
        manifest["partitions"].append(entry)
    validate_manifest(manifest)
    return manifest


def write_manifest(path: str | Path, manifest: Mapping[str, Any]) -> None:
    """Check ``manifest`` and write it as JSON (written whole, then renamed)."""
    validate_manifest(manifest)
    write_json_atomic(path, manifest)


def load_manifest(path: str | Path) -> dict[str, Any]:
    """Read and check a routing manifest; :class:`ManifestError` names the file and the fault."""
    return load_checked_json(path, validate_manifest, "the routing manifest", ManifestError)


def validate_manifest(manifest: Any) -> None:
    """Raise :class:`ManifestError` unless ``manifest`` is a well-formed routing
    manifest whose owner sets are the rendezvous owner sets of its brokers."""
    if not isinstance(manifest, dict):
        raise ManifestError(f"the manifest must be a JSON object, got {type(manifest).__name__}")
    _check_header(manifest)
    roles = {b["broker_id"]: b["role"] for b in manifest["brokers"]}
    parts = manifest.get("partitions")
    if not isinstance(parts, list) or not parts:
        raise ManifestError("'partitions' must be a non-empty list")
    with_read = "read" in roles.values()
    seen: set[TopicPartition] = set()
    for i, entry in enumerate(parts):
        tp = _check_partition_entry(i, entry, with_read)
        if tp in seen:
            raise ManifestError(f"partitions[{i}]: {tp[0]}/{tp[1]} is listed twice")
        seen.add(tp)
        _check_owners(manifest, roles, entry, "owners", PRODUCE_ROLES)
        if "read_owners" in entry:
            _check_owners(manifest, roles, entry, "read_owners", READ_ROLES)


def _check_header(manifest: Mapping[str, Any]) -> None:
    for key, kind in (("seed", int), ("owners_per_partition", int), ("selection", str), ("brokers", list)):
        value = manifest.get(key)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise ManifestError(f"{key!r} must be a {kind.__name__}, got {value!r}")
    if manifest["owners_per_partition"] < 1:
        raise ManifestError(f"'owners_per_partition' must be at least 1, got {manifest['owners_per_partition']}")
    if manifest["selection"] not in SELECTIONS:
        raise ManifestError(f"'selection' must be one of {', '.join(SELECTIONS)}, got {manifest['selection']!r}")
    ids: set[str] = set()
    for i, b in enumerate(manifest["brokers"]):
        if not isinstance(b, dict) or set(b) != {"broker_id", "url", "role"}:
            raise ManifestError(f"brokers[{i}] must be an object with broker_id, url and role, got {b!r}")
        if not all(isinstance(b[k], str) and b[k] for k in ("broker_id", "url", "role")):
            raise ManifestError(f"brokers[{i}]: broker_id, url and role must be non-empty strings, got {b!r}")
        if b["role"] not in ROLES:
            raise ManifestError(f"brokers[{i}] ({b['broker_id']}): role must be one of {', '.join(ROLES)}, "
                                f"got {b['role']!r}")
        if b["broker_id"] in ids:
            raise ManifestError(f"brokers[{i}]: broker_id {b['broker_id']!r} is listed twice")
        ids.add(b["broker_id"])
    if not any(b["role"] in PRODUCE_ROLES for b in manifest["brokers"]):
        raise ManifestError("no broker can take produce requests (role 'write' or 'both')")


def _check_partition_entry(i: int, entry: Any, with_read: bool) -> TopicPartition:
    if not isinstance(entry, dict):
        raise ManifestError(f"partitions[{i}] must be an object, got {entry!r}")
    topic, partition = entry.get("topic"), entry.get("partition")
    if not isinstance(topic, str) or not topic:
        raise ManifestError(f"partitions[{i}]: 'topic' must be a non-empty string, got {topic!r}")
    if not isinstance(partition, int) or isinstance(partition, bool) or partition < 0:
        raise ManifestError(f"partitions[{i}]: 'partition' must be an integer >= 0, got {partition!r}")
    extra = set(entry) - {"topic", "partition", "owners", "read_owners"}
    if extra:
        raise ManifestError(f"partitions[{i}] ({topic}/{partition}): unknown keys {sorted(extra)}")
    if with_read and "read_owners" not in entry:
        raise ManifestError(f"partitions[{i}] ({topic}/{partition}): 'read_owners' is missing, "
                            f"but the manifest has read-role brokers")
    return topic, partition


def _check_owners(manifest: Mapping[str, Any], roles: Mapping[str, str], entry: Mapping[str, Any],
                  key: str, allowed: frozenset[str]) -> None:
    where = f"{entry['topic']}/{entry['partition']} {key}"
    owners = entry.get(key)
    if not isinstance(owners, list) or not owners or not all(isinstance(o, str) for o in owners):
        raise ManifestError(f"{where}: must be a non-empty list of broker ids, got {owners!r}")
    for o in owners:
        if o not in roles:
            raise ManifestError(f"{where}: {o!r} is not a broker of the manifest")
        if roles[o] not in allowed:
            raise ManifestError(f"{where}: {o!r} has role {roles[o]!r}, which cannot serve them")
    eligible = [b for b, r in roles.items() if r in allowed]
    want = owner_set(entry["topic"], entry["partition"], eligible, manifest["seed"],
                     manifest["owners_per_partition"])
    if tuple(owners) != want:
        raise ManifestError(f"{where}: {owners} are not the rendezvous owners {list(want)} "
                            f"(seed {manifest['seed']})")


# -- the router --------------------------------------------------------------------------------


@dataclass(frozen=True)
class RouterConfig:
    """What a router needs from the manifest: the selection and each partition's owner set."""

    selection: str
    """``round_robin`` or ``least_inflight``."""
    owners: Mapping[TopicPartition, tuple[str, ...]]
    """Owner set of each (topic, partition), highest score first."""

    def __post_init__(self) -> None:
        if self.selection not in SELECTIONS:
            raise ValueError(f"selection must be one of {', '.join(SELECTIONS)}, got {self.selection!r}")
        for tp, owners in self.owners.items():
            if not owners or len(set(owners)) != len(owners):
                raise ValueError(f"{tp[0]}/{tp[1]}: the owner set must be non-empty without repeats, got {owners}")

    @classmethod
    def from_manifest(cls, manifest: Mapping[str, Any], *, read: bool = False) -> RouterConfig:
        """Produce routing (``owners``), or with ``read`` consume routing: ``read_owners``
        where the manifest has them, else the rendezvous owners among the
        read-capable brokers (``read`` and ``both``)."""
        readers = [b["broker_id"] for b in manifest["brokers"] if b["role"] in READ_ROLES]
        if read and not readers:
            raise ManifestError("no broker can serve consume requests (role 'read' or 'both')")
        owners: dict[TopicPartition, tuple[str, ...]] = {}
        for e in manifest["partitions"]:
            tp = (e["topic"], e["partition"])
            if not read:
                owners[tp] = tuple(e["owners"])
            elif "read_owners" in e:
                owners[tp] = tuple(e["read_owners"])
            else:
                owners[tp] = owner_set(*tp, readers, manifest["seed"], manifest["owners_per_partition"])
        return cls(selection=manifest["selection"], owners=owners)


class Router:
    """Selection inside owner sets and the remap rule (see the module docstring).

    ``clock_ms`` stamps the remap events (wall-clock milliseconds unless a
    test gives its own)."""

    def __init__(self, config: RouterConfig, clock_ms: Callable[[], int] | None = None) -> None:
        self.config = config
        self._clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        self._down: set[str] = set()
        self._inflight: dict[str, int] = {}
        self._cursor: dict[TopicPartition, int] = {}

    def available_owners(self, topic: str, partition: int) -> tuple[str, ...]:
        """The partition's owners not marked unavailable, in owner order."""
        return tuple(b for b in self._owners(topic, partition) if b not in self._down)

    def current(self, topic: str, partition: int) -> str | None:
        """The broker that serves the partition first: its first available owner (None: none left)."""
        live = self.available_owners(topic, partition)
        return live[0] if live else None

    def pick(self, topic: str, partition: int) -> str | None:
        """The broker for the partition's next request, by the configured selection;
        None when no owner is available."""
        live = self.available_owners(topic, partition)
        if not live:
            return None
        if self.config.selection == "least_inflight":
            return min(live, key=lambda b: (self._inflight.get(b, 0), live.index(b)))
        n = self._cursor.get((topic, partition), 0)
        self._cursor[(topic, partition)] = n + 1
        return live[n % len(live)]

    def started(self, broker_id: str) -> None:
        """A request to ``broker_id`` is in flight."""
        self._inflight[broker_id] = self._inflight.get(broker_id, 0) + 1

    def finished(self, broker_id: str) -> None:
        """A request to ``broker_id`` has its answer (or failed)."""
        left = self._inflight.get(broker_id, 0) - 1
        if left < 0:
            raise ValueError(f"{broker_id}: finished more requests than were started")
        self._inflight[broker_id] = left

    def inflight(self, broker_id: str) -> int:
        return self._inflight.get(broker_id, 0)

    def is_available(self, broker_id: str) -> bool:
        return broker_id not in self._down

    def mark_unavailable(self, broker_id: str, reason: str, ts_ms: int | None = None) -> list[dict[str, Any]]:
        """Take ``broker_id`` out of every owner set; one remap event per partition it
        owns, ``to`` its first available owner left (none when it was already out)."""
        if reason not in REMAP_REASONS or reason == "recovered":
            raise ValueError(f"reason must be one of connect, timeout, http_503, got {reason!r}")
        if broker_id in self._down:
            return []
        self._down.add(broker_id)
        ts = self._clock_ms() if ts_ms is None else ts_ms
        return [_event(ts, tp, broker_id, self.current(*tp), reason) for tp in self._owned_by(broker_id)]

    def mark_available(self, broker_id: str, ts_ms: int | None = None) -> list[dict[str, Any]]:
        """Give ``broker_id`` its partitions back; one ``recovered`` event per partition
        (none when it was not out)."""
        if broker_id not in self._down:
            return []
        ts = self._clock_ms() if ts_ms is None else ts_ms
        before = {tp: self.current(*tp) for tp in self._owned_by(broker_id)}
        self._down.discard(broker_id)
        return [_event(ts, tp, was, broker_id, "recovered") for tp, was in before.items()]

    def _owners(self, topic: str, partition: int) -> tuple[str, ...]:
        try:
            return self.config.owners[(topic, partition)]
        except KeyError:
            raise KeyError(f"{topic}/{partition} is not in the routing manifest") from None

    def _owned_by(self, broker_id: str) -> list[TopicPartition]:
        return sorted(tp for tp, owners in self.config.owners.items() if broker_id in owners)


def _event(ts_ms: int, tp: TopicPartition, src: str | None, dst: str | None, reason: str) -> dict[str, Any]:
    return {"ts_ms": ts_ms, "topic": tp[0], "partition": tp[1], "from": src, "to": dst, "reason": reason}


def remap_violations(config: RouterConfig, events: Iterable[Mapping[str, Any]]) -> list[str]:
    """What is wrong with remap events (e.g. ``remap-events.jsonl`` read back):
    a partition outside the manifest, a ``from`` or ``to`` outside the
    partition's original owner set, an unknown reason. Empty when all is well."""
    problems: list[str] = []
    for i, ev in enumerate(events):
        tp = (ev.get("topic"), ev.get("partition"))
        owners = config.owners.get(tp)  # type: ignore[arg-type]
        if owners is None:
            problems.append(f"event {i}: {tp[0]}/{tp[1]} is not in the routing manifest")
            continue
        for end in ("from", "to"):
            b = ev.get(end)
            if b is not None and b not in owners:
                problems.append(f"event {i}: {tp[0]}/{tp[1]} {end} {b!r} is outside its owner set {list(owners)}")
        if ev.get("reason") not in REMAP_REASONS:
            problems.append(f"event {i}: unknown reason {ev.get('reason')!r}")
    return problems
