"""A load-test scenario: what to start, what load to drive, what to break.

Scenarios are TOML files (``loadtest/scenarios/<name>.toml``). Every key is
optional except ``name``; :func:`load_scenario` fills in the defaults below,
refuses unknown keys (naming them, so a typo does not silently run the
default) and validates values. :meth:`Scenario.to_dict` is what the run
directory's ``resolved-config.json`` holds::

    name = "broker-loss"
    description = "3 brokers, one SIGKILLed mid-run and restarted"
    duration_s = 40

    [stack]
    oxia = "standalone"          # or "cluster": a coordinator and 3 servers
    oxia_shards = 1
    s3 = "minio"
    prometheus = false           # start the project's Prometheus and render the dashboard

    [[brokers]]                  # groups of brokers; names are broker-1, broker-2, ...
    role = "both"                # write, read or both
    count = 3

    [compactors]
    count = 1

    [batch]
    max_delay_ms = 100
    max_bytes = 8388608
    shared_tail_cache = false    # brokers share LLOG_TAIL_CACHE_DIR=<run-dir>/tail-cache

    [load]
    topic = "lt"
    partitions = 16
    mode = "closed"              # closed: `concurrency` requests in flight; open: `rate` records/s
    concurrency = 8
    rate = 0
    record_bytes = 1024
    records_per_request = 64
    partitions_per_request = 4
    consumers = 0                # goroutines following the tail with /consume
    selection = "round_robin"    # or least_inflight, inside each partition's owner set
    owners_per_partition = 2
    seed = 7
    window_s = 5
    timeout_s = 10

    [[faults]]
    at_s = 15
    action = "kill"              # SIGKILL; or "stop" (SIGTERM)
    target = "broker-2"          # a broker, compactor-N, or oxia-server-N (cluster)
    restart_after_s = 5          # omit to leave it down

    [env.broker]                 # LLOG_* settings for every broker (over the harness's own)
    LLOG_TAIL_CACHE_MAX_BYTES = 16777216
    [env.compactor]              # and for every compactor service
    LLOG_VACUUM_GRACE_MS = 150000
"""

from __future__ import annotations

import tomllib
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping

__all__ = ["BrokerGroup", "EnvSpec", "Fault", "Scenario", "ScenarioError", "load_scenario", "scenario_path",
           "SCENARIOS_DIR"]

SCENARIOS_DIR = Path(__file__).resolve().parents[1] / "scenarios"
ROLES = ("write", "read", "both")


class ScenarioError(ValueError):
    """A scenario file that cannot be run: says which key and why."""


@dataclass(frozen=True)
class BrokerGroup:
    role: str = "both"
    count: int = 1


@dataclass(frozen=True)
class Fault:
    at_s: float
    target: str
    action: str = "kill"
    restart_after_s: float | None = None


@dataclass(frozen=True)
class StackSpec:
    oxia: str = "standalone"
    oxia_shards: int = 1
    s3: str = "minio"
    prometheus: bool = False


@dataclass(frozen=True)
class BatchSpec:
    max_delay_ms: int = 100
    max_bytes: int = 8 * 1024 * 1024
    shared_tail_cache: bool = False


@dataclass(frozen=True)
class LoadSpec:
    topic: str = "lt"
    partitions: int = 8
    mode: str = "closed"
    concurrency: int = 8
    rate: int = 0
    record_bytes: int = 1024
    records_per_request: int = 64
    partitions_per_request: int = 4
    consumers: int = 0
    selection: str = "round_robin"
    owners_per_partition: int = 2
    seed: int = 7
    window_s: float = 5.0
    timeout_s: float = 10.0


@dataclass(frozen=True)
class EnvSpec:
    """``LLOG_*`` variables set on the services' processes, as ``(name, value)`` pairs."""

    broker: tuple[tuple[str, str], ...] = ()
    compactor: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str = ""
    duration_s: float = 20.0
    stack: StackSpec = StackSpec()
    brokers: tuple[BrokerGroup, ...] = (BrokerGroup(),)
    compactors: int = 1
    batch: BatchSpec = BatchSpec()
    load: LoadSpec = LoadSpec()
    faults: tuple[Fault, ...] = ()
    env: EnvSpec = EnvSpec()
    source: str = field(default="", compare=False)

    def broker_roles(self) -> list[tuple[str, str]]:
        """``(name, role)`` of every broker: broker-1, broker-2, ... in group order."""
        out: list[tuple[str, str]] = []
        for group in self.brokers:
            for _ in range(group.count):
                out.append((f"broker-{len(out) + 1}", group.role))
        return out

    def compactor_names(self) -> list[str]:
        return [f"compactor-{i + 1}" for i in range(self.compactors)]

    def to_dict(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["brokers"] = [asdict(g) for g in self.brokers]
        doc["faults"] = [asdict(f) for f in self.faults]
        doc["env"] = {kind: dict(pairs) for kind, pairs in (("broker", self.env.broker),
                                                            ("compactor", self.env.compactor))}
        return doc


def scenario_path(name_or_path: str) -> Path:
    """A scenario file: a path, or the name of one in ``loadtest/scenarios/``."""
    path = Path(name_or_path)
    if path.suffix == ".toml" or path.exists():
        return path
    candidate = SCENARIOS_DIR / f"{name_or_path}.toml"
    if not candidate.exists():
        known = ", ".join(sorted(p.stem for p in SCENARIOS_DIR.glob("*.toml")))
        raise ScenarioError(f"no scenario {name_or_path!r}; shipped ones: {known}")
    return candidate


def load_scenario(name_or_path: str) -> Scenario:
    path = scenario_path(name_or_path)
    try:
        doc = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ScenarioError(f"{path}: {exc}") from None
    return parse_scenario(doc, source=str(path))


def parse_scenario(doc: Mapping[str, Any], *, source: str = "") -> Scenario:
    _only(doc, {f.name for f in fields(Scenario)} - {"source"}, "")
    if not isinstance(doc.get("name"), str) or not doc["name"]:
        raise ScenarioError(f"{source or 'scenario'}: `name` is required (a short identifier)")
    brokers = tuple(_section(BrokerGroup, g, f"brokers[{i}]") for i, g in enumerate(doc.get("brokers", [{}])))
    faults = tuple(_section(Fault, f, f"faults[{i}]") for i, f in enumerate(doc.get("faults", [])))
    compactors = doc.get("compactors", {})
    _only(compactors, {"count"}, "compactors")
    scenario = Scenario(
        name=doc["name"],
        description=str(doc.get("description", "")),
        duration_s=float(doc.get("duration_s", Scenario.duration_s)),
        stack=_section(StackSpec, doc.get("stack", {}), "stack"),
        brokers=brokers,
        compactors=int(compactors.get("count", 1)),
        batch=_section(BatchSpec, doc.get("batch", {}), "batch"),
        load=_section(LoadSpec, doc.get("load", {}), "load"),
        faults=faults,
        env=_env_section(doc.get("env", {})),
        source=source,
    )
    _validate(scenario)
    return scenario


def _only(doc: Mapping[str, Any], allowed: set[str], where: str) -> None:
    if not isinstance(doc, Mapping):
        raise ScenarioError(f"`{where}` must be a table")
    unknown = sorted(set(doc) - allowed)
    if unknown:
        prefix = f"{where}." if where else ""
        raise ScenarioError(f"unknown key(s) {', '.join(prefix + k for k in unknown)}; known: {', '.join(sorted(allowed))}")


def _env_section(doc: Mapping[str, Any]) -> EnvSpec:
    _only(doc, {"broker", "compactor"}, "env")
    tables = {}
    for kind in ("broker", "compactor"):
        table = doc.get(kind, {})
        if not isinstance(table, Mapping):
            raise ScenarioError(f"`env.{kind}` must be a table")
        pairs = []
        for name, value in table.items():
            if not name.startswith("LLOG_"):
                raise ScenarioError(f"`env.{kind}.{name}`: only LLOG_* variables may be set")
            if isinstance(value, bool) or not isinstance(value, (str, int)):
                raise ScenarioError(f"`env.{kind}.{name}` must be a string or an integer, got {value!r}")
            pairs.append((name, str(value)))
        tables[kind] = tuple(pairs)
    return EnvSpec(**tables)


def _section(cls: type, doc: Mapping[str, Any], where: str) -> Any:
    _only(doc, {f.name for f in fields(cls)}, where)
    values = {}
    for f in fields(cls):
        if f.name not in doc:
            continue
        value = doc[f.name]
        want = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
        if want.startswith("float") and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        ok = {"int": isinstance(value, int) and not isinstance(value, bool), "float": isinstance(value, float),
              "str": isinstance(value, str), "bool": isinstance(value, bool)}
        base = want.split(" ")[0].split("|")[0]
        if base in ok and not ok[base]:
            raise ScenarioError(f"`{where}.{f.name}` must be {base}, got {value!r}")
        values[f.name] = value
    try:
        return cls(**values)
    except TypeError as exc:
        raise ScenarioError(f"`{where}`: {exc}") from None


def _validate(s: Scenario) -> None:
    def need(ok: bool, message: str) -> None:
        if not ok:
            raise ScenarioError(message)

    need(s.duration_s > 0, "`duration_s` must be > 0")
    need(s.stack.oxia in ("standalone", "cluster"), "`stack.oxia` must be standalone or cluster")
    need(s.stack.oxia_shards >= 1, "`stack.oxia_shards` must be >= 1")
    for i, g in enumerate(s.brokers):
        need(g.role in ROLES, f"`brokers[{i}].role` must be one of {', '.join(ROLES)}")
        need(g.count >= 1, f"`brokers[{i}].count` must be >= 1")
    writers = [n for n, r in s.broker_roles() if r in ("write", "both")]
    need(bool(writers), "at least one broker must have role write or both")
    need(s.compactors >= 0, "`compactors.count` must be >= 0")
    load = s.load
    need(load.mode in ("open", "closed"), "`load.mode` must be open or closed")
    need(load.mode != "open" or load.rate > 0, "`load.rate` (records/s) must be > 0 in open mode")
    need(load.mode != "closed" or load.concurrency > 0, "`load.concurrency` must be > 0 in closed mode")
    need(load.partitions >= 1, "`load.partitions` must be >= 1")
    need(load.record_bytes >= 24, "`load.record_bytes` must be >= 24 (each record carries its send time)")
    need(load.records_per_request >= 1 and load.partitions_per_request >= 1,
         "`load.records_per_request` and `load.partitions_per_request` must be >= 1")
    need(load.selection in ("round_robin", "least_inflight"), "`load.selection` must be round_robin or least_inflight")
    need(1 <= load.owners_per_partition, "`load.owners_per_partition` must be >= 1")
    need(load.window_s > 0 and load.timeout_s > 0, "`load.window_s` and `load.timeout_s` must be > 0")
    known = {n for n, _ in s.broker_roles()} | set(s.compactor_names())
    if s.stack.oxia == "cluster":
        known |= {f"oxia-server-{i}" for i in range(3)}
    for i, f in enumerate(s.faults):
        need(f.action in ("kill", "stop"), f"`faults[{i}].action` must be kill or stop")
        need(f.target in known, f"`faults[{i}].target` {f.target!r} is not a process of this scenario: "
                                f"{', '.join(sorted(known))}")
        need(0 <= f.at_s < s.duration_s, f"`faults[{i}].at_s` must be within the run (0..{s.duration_s})")
