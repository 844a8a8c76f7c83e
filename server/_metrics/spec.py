"""What a metric is: its declaration (:class:`MetricSpec`) and the bucket sets.

Every metric a process exports is declared once in ``catalogue.py``; the
registry refuses a name that is not declared, a label set other than the
declared one, and a use that does not match the kind (``inc`` on a gauge), so
a typo fails loudly instead of creating a new series. Names carry their unit
(``_seconds``, ``_bytes``, ``_usd``) and counters end in ``_total``, as
Prometheus's naming conventions ask; ``prefix`` (``llog_``) is added on export.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Mapping

from .._errors import LlogError

__all__ = [
    "Kind", "MetricSpec", "UnknownMetric", "LATENCY_BUCKETS_S", "SIZE_BUCKETS_BYTES", "COUNT_BUCKETS",
]

# Dense where llog's latencies live (a flush: tens of ms; a produce: the
# batch delay, 25-500 ms, plus the flush), so histogram_quantile's linear
# interpolation inside a bucket stays close.
LATENCY_BUCKETS_S = (
    0.0005, 0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.025, 0.035, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4,
    0.5, 0.6, 0.75, 1.0, 1.5, 2.5, 5.0, 10.0,
)
_KIB = 1024
SIZE_BUCKETS_BYTES = tuple(
    float(b) for b in (
        _KIB, 4 * _KIB, 16 * _KIB, 64 * _KIB, 256 * _KIB, 512 * _KIB, 768 * _KIB, 1024 * _KIB, 1536 * _KIB,
        2048 * _KIB, 3072 * _KIB, 4096 * _KIB, 6144 * _KIB, 8192 * _KIB, 12288 * _KIB, 16384 * _KIB,
        32768 * _KIB, 65536 * _KIB,
    )
)
COUNT_BUCKETS = (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 5000.0, 10000.0, 100000.0)


class Kind(Enum):
    COUNTER = "counter"
    GAUGE = "gauge"
    HISTOGRAM = "histogram"
    INFO = "info"
    """A gauge fixed at 1 whose labels carry facts (ids, settings); setting it
    again replaces the previous label set."""


class UnknownMetric(LlogError, LookupError):
    """A metric used under a name, kind or label set the catalogue does not
    declare: a programming error, raised at the call."""


@dataclass(frozen=True)
class MetricSpec:
    """One declared metric. ``values`` lists the possible values of labels
    that take a known few, so :meth:`LlogMetrics.present` can export every
    series at zero before the first event (``rate()`` and dashboards then
    see the series from the start). ``aggregate`` says how to combine the
    metric across processes (``sum`` or ``max``); docs and dashboards follow it."""

    name: str
    kind: Kind
    help: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = LATENCY_BUCKETS_S
    values: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    aggregate: str = "sum"

    def __post_init__(self) -> None:
        if self.kind is Kind.COUNTER and not self.name.endswith("_total"):
            raise ValueError(f"counter {self.name!r} must end in _total")
        if self.kind is Kind.INFO and not self.name.endswith("_info"):
            raise ValueError(f"info metric {self.name!r} must end in _info")
        if self.kind is not Kind.COUNTER and self.name.endswith("_total"):
            raise ValueError(f"only counters end in _total: {self.name!r}")
        unknown = set(self.values) - set(self.labels)
        if unknown:
            raise ValueError(f"{self.name}: values for undeclared labels {sorted(unknown)}")
        if self.aggregate not in ("sum", "max"):
            raise ValueError(f"{self.name}: aggregate must be sum or max")

    @property
    def unit_suffix(self) -> str:
        """The JSON snapshot's key suffix for this histogram's figures."""
        if self.name.endswith("_seconds"):
            return "_s"
        if self.name.endswith("_bytes"):
            return "_bytes"
        return ""
