"""A panel's data: its targets run as Prometheus range queries, turned into named series.

The query function is injected (:class:`QueryRange`, the shape of
``devstack.query_range`` with the URL bound) so tests can answer with canned
JSON. A failed query does not stop the panel: its error, naming the panel
title and the expanded expression, is kept with whatever the other targets
returned.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Protocol

from devstack import PrometheusQueryError

from ._model import Dashboard, Panel, legend_label

__all__ = ["PanelData", "QueryRange", "Series", "TimeRange", "fetch_panel", "reduce_values"]


class QueryRange(Protocol):
    def __call__(self, promql: str, *, start_s: float, end_s: float, step_s: float) -> Mapping[str, Any]:
        """Prometheus's ``/api/v1/query_range`` answer's ``data``; raises PrometheusQueryError."""
        ...


@dataclass(frozen=True)
class TimeRange:
    """What every query of a render asks for (Unix seconds)."""

    start_s: float
    end_s: float
    step_s: float

    @property
    def range_s(self) -> float:
        return self.end_s - self.start_s


@dataclass(frozen=True)
class Series:
    """One line of a panel."""

    label: str
    """The legend text (``legendFormat`` applied), not yet shortened."""
    times_s: tuple[float, ...]
    values: tuple[float, ...]
    """In the panel's unit; NaN where Prometheus had no value."""

    @property
    def finite(self) -> tuple[float, ...]:
        return tuple(v for v in self.values if math.isfinite(v))

    @property
    def peak(self) -> float:
        """The largest magnitude, 0 for a series without a finite value."""
        return max((abs(v) for v in self.finite), default=0.0)


@dataclass(frozen=True)
class PanelData:
    panel: Panel
    series: tuple[Series, ...]
    errors: tuple[str, ...] = ()
    """One line per failed target: panel title, refId, expression, Prometheus's error."""
    queries: int = 0

    @property
    def empty(self) -> bool:
        """True when the panel has queries and none of them failed or gave a single finite value."""
        return bool(self.panel.targets) and not self.errors and not any(s.finite for s in self.series)


def fetch_panel(dashboard: Dashboard, panel: Panel, query_range: QueryRange, window: TimeRange,
                *, scrape_interval_s: float) -> PanelData:
    """Run every target of ``panel`` over ``window``; never raises for a failed query."""
    series: list[Series] = []
    errors: list[str] = []
    for target in panel.targets:
        expr = dashboard.expand(target.expr, window.step_s, range_s=window.range_s,
                                scrape_interval_s=scrape_interval_s)
        try:
            data = query_range(expr, start_s=window.start_s, end_s=window.end_s, step_s=window.step_s)
        except PrometheusQueryError as exc:
            errors.append(f"panel {panel.title!r}, query {target.ref_id or '?'}: {expr}\n    {exc}")
            continue
        for result in data.get("result") or []:
            metric = result.get("metric") or {}
            label = legend_label(target.legend_format, metric, expr) or expr
            series.append(_series(label, result.get("values") or [], window.step_s))
    return PanelData(panel, tuple(series), tuple(errors), len(panel.targets))


def _series(label: str, points: list[list[Any]], step_s: float) -> Series:
    """Prometheus's ``[[t, "v"], ...]`` with a NaN put in every gap longer than a step and a half,
    so the line breaks where the series had no samples instead of bridging the gap."""
    times: list[float] = []
    values: list[float] = []
    for t, v in points:
        t = float(t)
        if times and t - times[-1] > 1.5 * step_s:
            times.append(times[-1] + step_s)
            values.append(math.nan)
        times.append(t)
        values.append(_number(v))
    return Series(label, tuple(times), tuple(values))


def _number(text: Any) -> float:
    try:
        value = float(text)  # "NaN", "+Inf" and "-Inf" parse too
    except (TypeError, ValueError):
        return math.nan
    return value if math.isfinite(value) else math.nan


_REDUCERS = {
    "lastNotNull": lambda v: v[-1],
    "last": lambda v: v[-1],
    "firstNotNull": lambda v: v[0],
    "first": lambda v: v[0],
    "mean": lambda v: sum(v) / len(v),
    "max": max,
    "min": min,
    "sum": sum,
    "count": len,
    "range": lambda v: max(v) - min(v),
}


def reduce_values(series: Series, calc: str) -> float:
    """A stat panel's one number for ``series`` (Grafana's ``reduceOptions.calcs``); NaN if none."""
    finite = series.finite
    if not finite:
        return math.nan
    return float(_REDUCERS.get(calc, _REDUCERS["lastNotNull"])(finite))
