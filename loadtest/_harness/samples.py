"""The metrics collector's samples (``metrics-30s.jsonl``), per service and per process.

A line of the file holds one scrape of every service's JSON ``/metrics``
and one reading of every process's CPU and memory. This module regroups
them: :class:`ServiceSeries` holds one service's successful scrapes in
time order, :class:`ProcessSeries` one process's readings.

Metrics are process-local (``OBSERVABILITY.md``): a service killed and
restarted starts its counters again at zero. A restart is seen where
``uptime_s`` drops, the pid changes, or a counter goes down between two
samples; :meth:`ServiceSeries.total` then adds the last value before each
restart to the last value of the run (what Prometheus's ``increase`` does),
which is still a lower bound: what happened between the last scrape and
the kill is lost.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

__all__ = [
    "ProcessSeries",
    "ServiceSeries",
    "add_up",
    "by_labels",
    "host_cpu_series",
    "host_usage",
    "increase",
    "label_values",
    "metric_sum",
    "number",
    "numbers",
    "process_series",
    "run_total",
    "service_series",
    "summed_rate",
]

Doc = Mapping[str, Any]
"""One JSON ``/metrics`` document."""


def label_values(key: str) -> dict[str, str]:
    """``"op=put,outcome=ok"`` -> ``{"op": "put", "outcome": "ok"}`` (``""`` -> ``{}``)."""
    pairs = (part.split("=", 1) for part in key.split(",") if "=" in part)
    return {k: v for k, v in pairs}


def metric_sum(doc: Doc, section: str, name: str, **want: str) -> float:
    """The sum of ``doc[section][name]`` over the label sets that include ``want``."""
    series = (doc.get(section) or {}).get(name) or {}
    wanted = {k: str(v) for k, v in want.items()}
    return float(sum(v for key, v in series.items()
                     if wanted.items() <= label_values(key).items() and _finite(v)))


def by_labels(series: Mapping[str, float], *names: str) -> dict[str, Any]:
    """A label-keyed series as nested dicts, one level per label in ``names``:
    ``by_labels(s, "op", "outcome") == {"put": {"ok": 3.0, "error": 0.0}}``."""
    out: dict[str, Any] = {}
    for key, value in series.items():
        labels = label_values(key)
        node = out
        for name in names[:-1]:
            node = node.setdefault(labels.get(name, ""), {})
        last = labels.get(names[-1], "") if names else ""
        node[last] = node.get(last, 0.0) + value
    return out


def run_total(values: Sequence[float], resets: Iterable[int] = ()) -> float:
    """A counter's total over a run: the last value, plus the last value before
    each restart (an index in ``resets``, or a value lower than the one before)."""
    if not values:
        return 0.0
    restart_at = set(resets)
    total = 0.0
    for i in range(1, len(values)):
        if i in restart_at or values[i] < values[i - 1]:
            total += values[i - 1]
    return total + values[-1]


def increase(values: Sequence[float], resets: Iterable[int] = ()) -> float:
    """How much a counter grew from its first to its last sample, across restarts."""
    restart_at = set(resets)
    grown = 0.0
    for i in range(1, len(values)):
        restarted = i in restart_at or values[i] < values[i - 1]
        grown += values[i] if restarted else values[i] - values[i - 1]
    return grown


@dataclass
class ServiceSeries:
    """One service's successful scrapes, oldest first."""

    name: str
    kind: str
    """``broker``, ``compactor``, or ``""`` when neither stack.json nor the document says."""
    times_ms: list[int] = field(default_factory=list)
    docs: list[dict[str, Any]] = field(default_factory=list)
    failed: int = 0
    """Scrapes that did not answer (``ok`` false)."""
    last_error: str | None = None
    resets: set[int] = field(default_factory=set)
    """Indices of ``docs`` that come from a new process (uptime or the counters
    went down, or the pid changed)."""
    ended_unreachable: bool = False
    """The last scrapes failed after a successful one: the process died (or
    stopped answering), and whatever it counted since its last scrape is lost."""

    @property
    def last(self) -> dict[str, Any] | None:
        return self.docs[-1] if self.docs else None

    def values(self, extract: Callable[[Doc], float]) -> list[float]:
        return [extract(doc) for doc in self.docs]

    def total(self, extract: Callable[[Doc], float]) -> float:
        """``extract``'s run total across restarts (:func:`run_total`)."""
        return run_total(self.values(extract), self.resets)

    def counter_total(self, name: str, **want: str) -> float:
        return self.total(lambda doc: metric_sum(doc, "counters", name, **want))

    def series_totals(self, name: str, section: str = "counters") -> dict[str, float]:
        """Every label set of a counter, each with its run total (absent = 0)."""
        keys = sorted({k for doc in self.docs for k in ((doc.get(section) or {}).get(name) or {})})
        return {k: self.total(lambda doc, k=k: float(((doc.get(section) or {}).get(name) or {}).get(k, 0.0)))
                for k in keys}

    def restarts(self) -> int:
        return len(self.resets)

    def lost_counts(self) -> bool:
        """Whether its counters undercount the run (a restart, or no answer at the end)."""
        return bool(self.resets) or self.ended_unreachable


@dataclass
class ProcessSeries:
    """One process's readings (``processes`` of each line), oldest first."""

    name: str
    times_ms: list[int] = field(default_factory=list)
    cpu_s: list[float] = field(default_factory=list)
    rss_bytes: list[float] = field(default_factory=list)
    alive: list[bool] = field(default_factory=list)
    pids: list[Any] = field(default_factory=list)
    resets: set[int] = field(default_factory=set)
    """Indices where the pid changed: a restarted process."""

    def cpu_used_s(self) -> float:
        return increase(self.cpu_s, self.resets)

    def cpu_percent(self) -> list[tuple[int, int, float]]:
        """(start, end, CPU % of one core) between consecutive readings."""
        out = []
        for i in range(1, len(self.times_ms)):
            t0, t1 = self.times_ms[i - 1], self.times_ms[i]
            if t1 > t0:
                used = increase(self.cpu_s[i - 1:i + 1], {1} if i in self.resets else ())
                out.append((t0, t1, 100.0 * used / ((t1 - t0) / 1000)))
        return out


def service_series(samples: Sequence[Doc], kinds: Mapping[str, str]) -> dict[str, ServiceSeries]:
    """Every service of ``samples``, with restarts found from uptime and pid."""
    out: dict[str, ServiceSeries] = {}
    last_pid: dict[str, Any] = {}
    for sample in samples:
        ts = int(sample.get("ts_ms", 0))
        for name, scrape in (sample.get("services") or {}).items():
            series = out.get(name)
            doc = (scrape or {}).get("metrics")
            if series is None:
                series = out[name] = ServiceSeries(name, kinds.get(name) or _kind_of(doc))
            if not (scrape or {}).get("ok") or not isinstance(doc, dict):
                series.failed += 1
                series.last_error = (scrape or {}).get("error") or series.last_error
                series.ended_unreachable = bool(series.docs)
                continue
            pid = ((sample.get("processes") or {}).get(name) or {}).get("pid")
            if series.docs and (_restarted(series.docs[-1], doc) or _pid_changed(last_pid.get(name), pid)):
                series.resets.add(len(series.docs))
            last_pid[name] = pid if pid is not None else last_pid.get(name)
            series.times_ms.append(ts)
            series.docs.append(doc)
            series.ended_unreachable = False
    return out


def _kind_of(doc: Any) -> str:
    if isinstance(doc, dict):
        if "broker" in doc:
            return "broker"
        if "service" in doc:
            return "compactor"
    return ""


def _restarted(before: Doc, after: Doc) -> bool:
    """Uptime went back, or the counters together went down: a new process."""
    return _uptime(after) < _uptime(before) or _counters_sum(after) < _counters_sum(before)


def _uptime(doc: Doc) -> float:
    value = doc.get("uptime_s")
    return float(value) if isinstance(value, (int, float)) else 0.0


def _counters_sum(doc: Doc) -> float:
    return float(sum(v for series in (doc.get("counters") or {}).values() if isinstance(series, dict)
                     for v in series.values() if _finite(v)))


def _pid_changed(before: Any, now: Any) -> bool:
    return before is not None and now is not None and before != now


def process_series(samples: Sequence[Doc]) -> dict[str, ProcessSeries]:
    """Every process's CPU and memory readings, restarts found from the pid."""
    out: dict[str, ProcessSeries] = {}
    for sample in samples:
        for name, reading in (sample.get("processes") or {}).items():
            if not isinstance(reading, dict) or reading.get("cpu_s") is None:
                continue
            series = out.setdefault(name, ProcessSeries(name))
            pid = reading.get("pid")
            if series.pids and _pid_changed(series.pids[-1], pid):
                series.resets.add(len(series.times_ms))
            series.pids.append(pid)
            series.times_ms.append(int(sample.get("ts_ms", 0)))
            series.cpu_s.append(float(reading.get("cpu_s") or 0.0))
            series.rss_bytes.append(float(reading.get("rss_bytes") or 0.0))
            series.alive.append(bool(reading.get("alive", True)))
    return out


def _host_readings(samples: Sequence[Doc]) -> list[tuple[int, dict[str, Any]]]:
    readings = [(int(s.get("ts_ms", 0)), s.get("host")) for s in samples]
    return [(ts, host) for ts, host in readings if isinstance(host, dict) and isinstance(host.get("cpu_s"), dict)]


def _cpu_split(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float] | None:
    """{"busy", "user", "system", "iowait"} in % of all CPUs between two readings
    (busy is everything but idle and iowait)."""
    delta = {k: float(after.get(k, 0.0)) - float(before.get(k, 0.0)) for k in after}
    total = sum(delta.values())
    if total <= 0:
        return None
    idle = delta.get("idle", 0.0) + delta.get("iowait", 0.0)
    return {"busy": 100.0 * (total - idle) / total,
            **{k: 100.0 * delta.get(k, 0.0) / total for k in ("user", "system", "iowait")}}


def host_cpu_series(samples: Sequence[Doc]) -> list[tuple[int, int, dict[str, float]]]:
    """(start, end, :func:`_cpu_split`) between consecutive samples."""
    readings = _host_readings(samples)
    split = [(t0, t1, _cpu_split(before["cpu_s"], after["cpu_s"]))
             for (t0, before), (t1, after) in zip(readings, readings[1:])]
    return [(t0, t1, cpu) for t0, t1, cpu in split if cpu is not None]


def host_usage(samples: Sequence[Doc]) -> dict[str, Any]:
    """The host over the run: CPU % (whole run and the busiest interval), the
    least memory available, network and disk bytes moved."""
    readings = _host_readings(samples)
    out: dict[str, Any] = {"samples": len(readings)}
    if len(readings) < 2:
        return out
    first, last = readings[0][1], readings[-1][1]
    whole = _cpu_split(first["cpu_s"], last["cpu_s"]) or {}
    out.update({f"{k}_cpu_pct": round(v, 2) for k, v in whole.items()})
    busiest = [cpu["busy"] for _, _, cpu in host_cpu_series(samples)]
    out["peak_busy_cpu_pct"] = round(max(busiest), 2) if busiest else None
    available = [h.get("mem_available_bytes") for _, h in readings if h.get("mem_available_bytes") is not None]
    out["min_mem_available_bytes"] = min(available) if available else None
    for name in ("net_bytes", "disk_bytes"):
        before, after = first.get(name) or {}, last.get(name) or {}
        out[name] = {k: after[k] - before.get(k, 0) for k in after if isinstance(after[k], (int, float))}
    return out


def summed_rate(services: Iterable[ServiceSeries], extract: Callable[[Doc], float]) -> list[tuple[int, int, float]]:
    """Per second, the increase of ``extract`` summed across ``services``: one
    ``(start_ms, end_ms, rate)`` per interval between sample times. A
    service's rate in an interval is that between its two successful scrapes
    around it, so a failed scrape is no dip."""
    intervals: list[list[tuple[int, int, float]]] = []
    times: set[int] = set()
    for series in services:
        values = series.values(extract)
        spans = []
        for i in range(1, len(values)):
            t0, t1 = series.times_ms[i - 1], series.times_ms[i]
            if t1 > t0:
                grown = increase(values[i - 1:i + 1], {1} if i in series.resets else ())
                spans.append((t0, t1, grown / ((t1 - t0) / 1000)))
        intervals.append(spans)
        times.update(series.times_ms)
    ordered = sorted(times)
    return [(start, t, sum(next((r for t0, t1, r in spans if t0 < t <= t1), 0.0) for spans in intervals))
            for start, t in zip(ordered, ordered[1:])]


def add_up(parts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Numbers at the same place of nested dicts, added up."""
    out: dict[str, Any] = {}
    for part in parts:
        for key, value in part.items():
            if isinstance(value, Mapping):
                out[key] = add_up([out.get(key, {}), value])
            elif isinstance(value, (int, float)) and not isinstance(value, bool):
                out[key] = number(out.get(key, 0) + value)
    return out


def number(value: float) -> float | int:
    """Whole floats (every JSON counter) as ints; others to 6 decimals."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return round(value, 6) if isinstance(value, float) else value


def numbers(tree: Mapping[str, Any]) -> dict[str, Any]:
    """:func:`number` at every leaf of nested dicts."""
    return {k: numbers(v) if isinstance(v, Mapping) else number(v) for k, v in tree.items()}


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)
