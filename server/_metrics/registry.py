"""The per-process metric registry, over ``prometheus_client``.

:class:`LlogMetrics` owns one ``CollectorRegistry`` and creates a
``prometheus_client`` Counter, Gauge or Histogram for a catalogue entry the
first time it is used (or named in :meth:`LlogMetrics.present`). Both
exports are derived from those objects: ``prometheus_text()`` is
``prometheus_client``'s own text format (``CONTENT_TYPE``), and
``snapshot()`` is the JSON shape of ``GET /metrics``::

    {"info": {...}, "uptime_s": 12.3,
     "counters":   {"http_requests_total": {"method=POST,path=/produce,status=200": 41.0}},
     "gauges":     {"batcher_inflight_bytes": {"": 0.0}},
     "histograms": {"batcher_flush_seconds": {"": {"count", "sum_s", "max_s", "p50_s", "p99_s"}}}}

Histograms also keep their last ``RECENT`` raw samples and the maximum, so
the JSON quantiles are exact over recent traffic (Prometheus computes its own
from the buckets). ``static_labels`` (a broker's ``broker_id``) are added to
every exported series but not to the JSON keys. ``_created`` series are not
exported: they double the series count and no dashboard reads them.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import product
from typing import Any, Iterable, Iterator

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client import Histogram as _PromHistogram
from prometheus_client import PlatformCollector, ProcessCollector

from .._errors import VersionConflict
from .catalogue import CATALOGUE
from .spec import Kind, MetricSpec, UnknownMetric

__all__ = ["LlogMetrics", "Histogram", "CONTENT_TYPE"]

CONTENT_TYPE = CONTENT_TYPE_LATEST
RECENT = 4096

_Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Histogram:
    """A copy of one histogram series: exact count, sum and max, and the
    recent raw samples for quantiles."""

    count: int
    total: float
    max: float
    recent: tuple[float, ...]

    def quantile(self, q: float) -> float:
        """The q-quantile of the recent samples (exact while count <= RECENT)."""
        if not self.recent:
            return 0.0
        ordered = sorted(self.recent)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class _Recent:
    __slots__ = ("samples", "max")

    def __init__(self) -> None:
        self.samples: deque[float] = deque(maxlen=RECENT)
        self.max = 0.0


_FACTORY = {Kind.COUNTER: Counter, Kind.GAUGE: Gauge, Kind.INFO: Gauge, Kind.HISTOGRAM: _PromHistogram}


class LlogMetrics:
    """Thread-safe metric registry for one process (see the module docstring)."""

    def __init__(
        self,
        *,
        prefix: str = "llog",
        static_labels: dict[str, str] | None = None,
        catalogue: Iterable[MetricSpec] = CATALOGUE,
        process_metrics: bool = False,
    ) -> None:
        """``process_metrics``: also export ``process_*`` (CPU, memory, open
        files) and ``python_info``, as a service process does."""
        self._prefix = prefix
        self._static = {k: str(v) for k, v in (static_labels or {}).items()}
        self._specs = {spec.name: spec for spec in catalogue}
        self._registry = CollectorRegistry(auto_describe=False)
        self._lock = threading.Lock()
        self._families: dict[str, Any] = {}
        self._children: dict[tuple[str, _Labels], Any] = {}
        self._recent: dict[tuple[str, _Labels], _Recent] = {}
        self._info: dict[str, object] = {}
        if process_metrics:
            ProcessCollector(registry=self._registry)
            PlatformCollector(registry=self._registry)
        self._exported = _Exported(self._registry, self._static)
        self.started_at = time.time()

    # -- recording ---------------------------------------------------------
    def inc(self, name: str, value: float = 1, **labels: object) -> None:
        self._child(name, Kind.COUNTER, labels).inc(value)

    def set_gauge(self, name: str, value: float, **labels: object) -> None:
        self._child(name, Kind.GAUGE, labels).set(value)

    def observe(self, name: str, value: float, **labels: object) -> None:
        key = (name, _label_key(labels))
        self._child(name, Kind.HISTOGRAM, labels).observe(value)
        with self._lock:
            recent = self._recent.get(key)
            if recent is None:
                recent = self._recent[key] = _Recent()
            recent.samples.append(value)
            if value > recent.max:
                recent.max = value

    def set_info_metric(self, name: str, **labels: object) -> None:
        """Set an info metric (value 1) to ``labels``, replacing its previous label set."""
        spec = self._spec(name, Kind.INFO, labels)
        with self._lock:
            family = self._family(spec)
            family.clear()
            self._children = {k: v for k, v in self._children.items() if k[0] != name}
        family.labels(**{k: str(v) for k, v in labels.items()}).set(1)

    def set_info(self, **info: object) -> None:
        """Static facts shown in the JSON snapshot's ``info`` (ids, settings)."""
        with self._lock:
            self._info.update(info)

    def present(self, *names: str) -> None:
        """Export these metrics from now on, at zero: each series whose labels
        the catalogue enumerates (``values``), or the unlabelled one."""
        for name in names:
            spec = self._specs.get(name)
            if spec is None:
                raise UnknownMetric(f"metric {name!r} is not in the catalogue")
            if not all(label in spec.values for label in spec.labels):
                with self._lock:
                    self._family(spec)
                continue
            for combo in product(*(spec.values[label] for label in spec.labels)):
                self._child(name, spec.kind, dict(zip(spec.labels, combo)))

    @contextmanager
    def timed(self, family: str, op: str, nbytes: int = 0) -> Iterator[None]:
        """Count and time one ``family`` (oxia, s3) operation, by outcome:
        ``ok``, ``conflict`` (a conditional write or delete met another
        version: the protocol working, not a failure) or ``error``."""
        start = time.perf_counter()
        outcome = "error"
        try:
            yield
            outcome = "ok"
        except VersionConflict:
            outcome = "conflict"
            raise
        finally:
            self.inc(f"{family}_operations_total", op=op, outcome=outcome)
            self.observe(f"{family}_operation_seconds", time.perf_counter() - start, op=op)
            if nbytes and outcome == "ok":
                self.inc(f"{family}_bytes_total", nbytes, op=op)

    def oxia_op(self, op: str, nbytes: int = 0):  # -> ContextManager[None]
        return self.timed("oxia", op, nbytes)

    def s3_op(self, op: str, nbytes: int = 0):
        return self.timed("s3", op, nbytes)

    # -- reading -----------------------------------------------------------
    def counter(self, name: str, **labels: object) -> float:
        """Sum of a counter (or gauge) over every label set that includes ``labels``."""
        want = set(_label_key(labels))
        with self._lock:
            children = [(lbl, child) for (n, lbl), child in self._children.items() if n == name]
        if name in self._specs and self._specs[name].kind is Kind.HISTOGRAM:
            raise UnknownMetric(f"metric {name!r} is a histogram: read it with histogram()")
        return sum(_scalar_value(child) for lbl, child in children if want <= set(lbl))

    def histogram(self, name: str, **labels: object) -> Histogram | None:
        key = (name, _label_key(labels))
        with self._lock:
            child, recent = self._children.get(key), self._recent.get(key)
            if child is None or recent is None:
                return None
            samples, top = tuple(recent.samples), recent.max
        count, total = _histogram_count_sum(child)
        return Histogram(count, total, top, samples)

    def snapshot(self) -> dict[str, object]:
        """The JSON view: info, counters, gauges (info metrics among them), histograms."""
        out: dict[str, dict[str, Any]] = {"counters": {}, "gauges": {}, "histograms": {}}
        with self._lock:
            children = sorted(self._children.items(), key=lambda item: item[0])
            recents = {k: (tuple(r.samples), r.max) for k, r in self._recent.items()}
            info = dict(self._info)
        for (name, lbl), child in children:
            spec = self._specs[name]
            label = ",".join(f"{k}={v}" for k, v in lbl)
            if spec.kind is Kind.HISTOGRAM:
                samples, top = recents.get((name, lbl), ((), 0.0))
                out["histograms"].setdefault(name, {})[label] = _histogram_json(spec, child, samples, top)
            else:
                section = "counters" if spec.kind is Kind.COUNTER else "gauges"
                out[section].setdefault(name, {})[label] = _scalar_value(child)
        return {"info": info, "uptime_s": round(time.time() - self.started_at, 3), **out}

    def prometheus_text(self) -> bytes:
        """The Prometheus text exposition (``CONTENT_TYPE``), by ``prometheus_client``."""
        return generate_latest(self._exported)

    # -- internals ---------------------------------------------------------
    def _spec(self, name: str, kind: Kind, labels: dict[str, object]) -> MetricSpec:
        spec = self._specs.get(name)
        if spec is None:
            raise UnknownMetric(f"metric {name!r} is not in the catalogue (server/_metrics/catalogue.py)")
        if spec.kind is not kind:
            raise UnknownMetric(f"metric {name!r} is a {spec.kind.value}, used as a {kind.value}")
        if set(labels) != set(spec.labels):
            raise UnknownMetric(f"metric {name!r} takes labels {sorted(spec.labels)}, given {sorted(labels)}")
        return spec

    def _child(self, name: str, kind: Kind, labels: dict[str, object]) -> Any:
        key = (name, _label_key(labels))
        child = self._children.get(key)
        if child is not None:
            return child
        spec = self._spec(name, kind, labels)
        with self._lock:
            child = self._children.get(key)
            if child is None:
                family = self._family(spec)
                child = family.labels(**dict(key[1])) if spec.labels else family
                self._children[key] = child
        return child

    def _family(self, spec: MetricSpec) -> Any:
        """The prometheus_client object of ``spec`` (caller holds the lock)."""
        family = self._families.get(spec.name)
        if family is None:
            name = f"{self._prefix}_{spec.name}"
            kwargs: dict[str, Any] = {"labelnames": spec.labels, "registry": self._registry}
            if spec.kind is Kind.HISTOGRAM:
                kwargs["buckets"] = spec.buckets
            family = self._families[spec.name] = _FACTORY[spec.kind](name, spec.help, **kwargs)
        return family


class _Exported:
    """The registry's families with the static labels added and ``_created`` dropped."""

    def __init__(self, registry: CollectorRegistry, static: dict[str, str]) -> None:
        self._registry = registry
        self._static = static

    def collect(self) -> Iterator[Any]:
        for family in self._registry.collect():
            family.samples = [
                s._replace(labels={**self._static, **s.labels})
                for s in family.samples if not s.name.endswith("_created")
            ]
            yield family


def _label_key(labels: dict[str, object]) -> _Labels:
    return tuple(sorted((k, str(v)) for k, v in labels.items()))


def _scalar_value(child: Any) -> float:
    """A counter's or gauge's value, read through prometheus_client's public
    ``collect()`` (its ``_created`` timestamp sample skipped)."""
    for metric in child.collect():
        for s in metric.samples:
            if not s.name.endswith("_created"):
                return s.value
    return 0.0


def _histogram_count_sum(child: Any) -> tuple[int, float]:
    count, total = 0, 0.0
    for metric in child.collect():
        for s in metric.samples:
            if s.name.endswith("_count"):
                count = int(s.value)
            elif s.name.endswith("_sum"):
                total = s.value
    return count, total


def _histogram_json(spec: MetricSpec, child: Any, samples: tuple[float, ...], top: float) -> dict[str, float]:
    count, total = _histogram_count_sum(child)
    view = Histogram(count, total, top, samples)
    u = spec.unit_suffix
    return {
        "count": count,
        f"sum{u}": round(total, 6),
        f"max{u}": round(top, 6),
        f"p50{u}": round(view.quantile(0.5), 6),
        f"p99{u}": round(view.quantile(0.99), 6),
    }
