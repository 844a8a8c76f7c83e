"""A Grafana dashboard JSON as values: rows of panels, their PromQL targets, its variables.

Shared by the PNG renderer (``dashboard.render``) and by anything
else that wants to run a dashboard's expressions, e.g. a test that sends every
panel's PromQL to a real Prometheus::

    dashboard = load_dashboard(Path("grafana/leaderless-log-observability.json"))
    for panel in dashboard.panels():
        for target in panel.targets:
            promql = dashboard.expand(target.expr, step_s=15)

Layout, as Grafana draws it. Top-level panels are ordered by ``gridPos``
(``y``, then ``x``); a panel of type ``row`` starts a section that holds every
panel after it up to the next row. A collapsed row carries its panels in its
own ``panels`` list instead. Panels above the first row form a section with an
empty title.

Expansion (:func:`expand`). Grafana's built-in variables, for a query of step
``step_s`` over ``range_s``:

- ``$__interval`` is the step (``$__interval_ms`` in milliseconds);
- ``$__rate_interval`` is Grafana's own rule, ``max($__interval + scrape,
  4 * scrape)``, with ``scrape`` the data source's scrape interval (Grafana's
  default: 15 s, so never under 1m). A rate window holds at least four scrapes
  and never skips a sample between two steps;
- ``$__range`` is the whole time range (``$__range_s``, ``$__range_ms``).

Dashboard variables (``templating.list``) become one fixed string each (see
:func:`_variable_value`): a variable that offers "All" (``includeAll``), and a
``query`` variable whose values would come from Prometheus, matches
everything: its ``allValue``, else the regex ``.*`` (use it with ``=~``, as
Grafana dashboards do). Others take their saved current value. ``$name``,
``${name}``, ``${name:format}`` and ``[[name]]`` are all replaced; an unknown
name is left alone, so Prometheus reports it with the expression.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping

__all__ = [
    "Dashboard",
    "Panel",
    "Row",
    "Target",
    "Variable",
    "expand",
    "format_duration",
    "legend_label",
    "load_dashboard",
    "rate_interval_s",
]

MATCH_ALL = ".*"
DEFAULT_SCRAPE_INTERVAL_S = 15.0
"""Grafana's default scrape interval for a Prometheus data source."""
DEFAULT_RANGE_S = 900.0
"""Grafana's default time range, the last 15 minutes."""

_VARIABLE = re.compile(r"\$\{(\w+)(?::[^}]*)?\}|\[\[(\w+)(?::[^\]]*)?\]\]|\$(\w+)")
_LEGEND_LABEL = re.compile(r"\{\{\s*([^{}\s]+)\s*\}\}")
_REGEX_SPECIAL = re.compile(r"[\\^$*+?.()|\[\]{}/]")


@dataclass(frozen=True)
class Target:
    """One query of a panel."""

    ref_id: str
    """Grafana's ``refId`` (``A``, ``B``, ...)."""
    expr: str
    """The PromQL, before variables are expanded."""
    legend_format: str = ""
    """The legend template: ``{{label}}`` takes that label of each series; empty or ``__auto``: all labels."""


@dataclass(frozen=True)
class Panel:
    """A panel that shows data: its title, type, unit and queries."""

    title: str
    kind: str
    """Grafana's panel ``type``: ``timeseries``, ``stat``, ``gauge``, ``text``, ..."""
    unit: str = ""
    """Grafana's unit id from ``fieldConfig.defaults.unit`` (``s``, ``bytes``, ``reqps``, ...)."""
    targets: tuple[Target, ...] = ()
    """The visible queries (hidden targets and targets without ``expr`` are left out)."""
    description: str = ""
    content: str = ""
    """A ``text`` panel's text."""
    width: int = 12
    """``gridPos.w``, of Grafana's 24 columns."""
    reduce: str = "lastNotNull"
    """A stat or gauge's ``reduceOptions.calcs[0]``: ``lastNotNull``, ``mean``, ``max``, ..."""


@dataclass(frozen=True)
class Row:
    """A section of the dashboard: a row's title and the panels below it."""

    title: str
    """Empty for the panels above the first row."""
    panels: tuple[Panel, ...]


@dataclass(frozen=True)
class Variable:
    """A dashboard variable and the one value it is expanded to."""

    name: str
    kind: str
    """Grafana's variable ``type``: ``query``, ``custom``, ``constant``, ``datasource``, ``interval``, ..."""
    value: str


@dataclass(frozen=True)
class Dashboard:
    title: str
    rows: tuple[Row, ...]
    variables: tuple[Variable, ...] = ()
    time_from: str = "now-15m"
    """The saved time range's start, as Grafana writes it (``now-15m``)."""
    source: Path | None = field(default=None, compare=False)

    def panels(self) -> Iterator[Panel]:
        for row in self.rows:
            yield from row.panels

    def expand(self, expr: str, step_s: float, *, range_s: float = DEFAULT_RANGE_S,
               scrape_interval_s: float = DEFAULT_SCRAPE_INTERVAL_S) -> str:
        """``expr`` with this dashboard's variables and Grafana's built-ins replaced."""
        values = {v.name: v.value for v in self.variables}
        return expand(expr, step_s, range_s=range_s, variables=values, scrape_interval_s=scrape_interval_s)

    def with_values(self, overrides: Mapping[str, str]) -> Dashboard:
        """A copy whose variables take ``overrides`` (name -> value); new names are added."""
        known = {v.name for v in self.variables}
        variables = tuple(
            Variable(v.name, v.kind, overrides.get(v.name, v.value)) for v in self.variables
        ) + tuple(Variable(name, "override", value) for name, value in overrides.items() if name not in known)
        return Dashboard(self.title, self.rows, variables, self.time_from, self.source)


# -- loading -----------------------------------------------------------------------------------


def load_dashboard(path: Path) -> Dashboard:
    """Read a dashboard JSON file (the dashboard itself, or an export wrapping it in ``dashboard``)."""
    doc = json.loads(Path(path).read_text())
    if "panels" not in doc and isinstance(doc.get("dashboard"), dict):
        doc = doc["dashboard"]
    return parse_dashboard(doc, source=Path(path))


def parse_dashboard(doc: Mapping[str, Any], *, source: Path | None = None) -> Dashboard:
    variables = tuple(_variable(v) for v in doc.get("templating", {}).get("list", []) if v.get("name"))
    time_from = str((doc.get("time") or {}).get("from", "now-15m"))
    return Dashboard(str(doc.get("title", "")), _rows(doc.get("panels", [])), variables, time_from, source)


def _grid_key(panel: Mapping[str, Any]) -> tuple[float, float]:
    grid = panel.get("gridPos") or {}
    return (grid.get("y", 0), grid.get("x", 0))


def _rows(raw_panels: list[Mapping[str, Any]]) -> tuple[Row, ...]:
    sections: list[tuple[str, list[Mapping[str, Any]]]] = [("", [])]
    for raw in sorted(raw_panels, key=_grid_key):
        if raw.get("type") == "row":
            sections.append((str(raw.get("title", "")), sorted(raw.get("panels") or [], key=_grid_key)))
        else:
            sections[-1][1].append(raw)
    rows = [Row(title, tuple(_panel(p) for p in panels)) for title, panels in sections]
    return tuple(row for i, row in enumerate(rows) if i > 0 or row.panels)  # no empty untitled top


def _panel(raw: Mapping[str, Any]) -> Panel:
    targets = tuple(
        Target(str(t.get("refId", "")), str(t["expr"]), str(t.get("legendFormat") or ""))
        for t in raw.get("targets") or []
        if t.get("expr") and not t.get("hide") and _is_prometheus(t.get("datasource"))
    )
    unit = ((raw.get("fieldConfig") or {}).get("defaults") or {}).get("unit") or raw.get("format") or ""
    options = raw.get("options") or {}
    content = options.get("content") or raw.get("content") or ""
    calcs = (options.get("reduceOptions") or {}).get("calcs") or ["lastNotNull"]
    width = int((raw.get("gridPos") or {}).get("w") or 12)
    return Panel(str(raw.get("title", "")), str(raw.get("type", "")), str(unit), targets,
                 str(raw.get("description") or ""), str(content), width, str(calcs[0]))


def _is_prometheus(datasource: Any) -> bool:
    """A target's own data source, when it names one of another type (Loki, ...), is not ours."""
    kind = datasource.get("type") if isinstance(datasource, dict) else None
    return kind in (None, "", "prometheus", "datasource")  # "datasource": Grafana's mixed/dashboard refs


def _variable(raw: Mapping[str, Any]) -> Variable:
    return Variable(str(raw["name"]), str(raw.get("type", "")), _variable_value(raw))


def _variable_value(raw: Mapping[str, Any]) -> str:
    kind = raw.get("type", "")
    current = raw.get("current") or {}
    value = current.get("value")
    unset = value in (None, "", [])
    if kind == "constant":
        return str(raw.get("query", ""))
    if kind == "datasource":
        return str(current.get("text") or value or raw.get("query") or "")
    if kind == "textbox":
        return str(raw.get("query", "")) if unset else str(value)
    if kind == "interval" and (unset or value == "auto" or str(value).startswith("$__auto_interval")):
        return "$__interval"  # expanded again as the built-in
    if raw.get("includeAll") and (unset or kind == "query" or value in ("$__all", ["$__all"])):
        return str(raw.get("allValue") or MATCH_ALL)
    if kind == "query":  # its saved value names a series of the last run Grafana saw
        return MATCH_ALL
    if unset:
        options = [o.get("value") for o in raw.get("options") or [] if o.get("value") not in (None, "$__all")]
        value = options[0] if options else MATCH_ALL
    if isinstance(value, list):
        if len(value) == 1:
            return str(value[0])
        return "(" + "|".join(_regex_escape(str(v)) for v in value) + ")"
    return str(value)


def _regex_escape(value: str) -> str:
    # As Grafana's Prometheus data source does: doubled backslashes, since the
    # regex sits inside a PromQL string literal.
    return _REGEX_SPECIAL.sub(lambda m: "\\\\" + m.group(0), value)


# -- expansion ---------------------------------------------------------------------------------


def rate_interval_s(step_s: float, scrape_interval_s: float = DEFAULT_SCRAPE_INTERVAL_S) -> float:
    """Grafana's ``$__rate_interval``: ``max(step + scrape, 4 * scrape)``."""
    return max(step_s + scrape_interval_s, 4 * scrape_interval_s)


def format_duration(seconds: float) -> str:
    """A PromQL duration: ``500ms``, ``15s``, ``5m``, ``2h``, ``75s``."""
    ms = max(1, int(math.ceil(seconds * 1000 - 1e-6)))
    if ms % 1000:
        return f"{ms}ms"
    s = ms // 1000
    for size, suffix in ((86400, "d"), (3600, "h"), (60, "m")):
        if s % size == 0:
            return f"{s // size}{suffix}"
    return f"{s}s"


def expand(expr: str, step_s: float, *, range_s: float = DEFAULT_RANGE_S,
           variables: Mapping[str, str] | None = None,
           scrape_interval_s: float = DEFAULT_SCRAPE_INTERVAL_S) -> str:
    """``expr`` with Grafana's built-ins (for ``step_s`` over ``range_s``) and ``variables`` replaced."""
    builtins = {
        "__interval": format_duration(step_s),
        "__interval_ms": str(int(round(step_s * 1000))),
        "__rate_interval": format_duration(rate_interval_s(step_s, scrape_interval_s)),
        "__range": format_duration(range_s),
        "__range_s": str(int(round(range_s))),
        "__range_ms": str(int(round(range_s * 1000))),
    }
    user = dict(variables or {})

    def replace(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2) or match.group(3)
        if name in user:
            # A variable's value may itself be a built-in (an "auto" interval).
            return _VARIABLE.sub(lambda m: builtins.get(m.group(3) or "", m.group(0)), user[name])
        return builtins.get(name, match.group(0))

    return _VARIABLE.sub(replace, expr)


def legend_label(legend_format: str, metric: Mapping[str, str], expr: str = "") -> str:
    """A series' name as Grafana shows it.

    ``{{label}}`` takes that label's value (empty when the series lacks it);
    an empty format or ``__auto`` gives ``name{label="value", ...}``, and for a
    series without labels (``sum(...)``) the expression itself.
    """
    if legend_format and legend_format != "__auto":
        return _LEGEND_LABEL.sub(lambda m: str(metric.get(m.group(1), "")), legend_format)
    labels = {k: v for k, v in metric.items() if k != "__name__"}
    name = metric.get("__name__", "")
    if not labels:
        return name or expr
    return name + "{" + ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"
