"""Pictures of one run, from its artifacts alone: ``run_dir/plots/*.png``.

1. ``01-throughput.png``: the client's acked bytes/s and records/s per window
   and the brokers' accepted rate (from consecutive metrics samples of
   ``produce_payload_bytes_total`` and ``produce_records_total``, summed
   across brokers) on one time axis;
2. ``02-latency.png``: produce p50/p99/p99.9 and consume end-to-end p50/p99 per window;
3. ``03-errors.png``: client errors by kind per window, remap events as labelled vertical lines;
4. ``04-compaction.png``: compaction backlog (the largest partitions, and the max
   over all, each partition's lag the max across compactors) and compacted offsets/s;
5. ``05-processes.png``: CPU % per process (and the host's busy %) and RSS per process.

Every axis is UTC time against a value with its unit (``loadtest/_units``
ladders: ``1.2 MB/s``, ``250 ms``, ``512 MiB``); a panel without data says
"no data" in its middle rather than disappearing. Client figures are drawn
as steps over their window; metrics rates as steps over the interval between
two samples; gauges as points joined by lines.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import matplotlib

matplotlib.use("Agg")  # never look for a display
matplotlib.rcParams["text.parse_math"] = False  # "$" in a label is money, not mathtext

from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.layout_engine import ConstrainedLayoutEngine  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

from dashboard._draw import DPI, MUTED, UTC, notice, style_time_axis, style_value_axis  # noqa: E402
from dashboard._panel_data import TimeRange  # noqa: E402
from dashboard._units import unit_for  # noqa: E402
from .run_files import RunFiles, load_run  # noqa: E402
from .samples import (  # noqa: E402
    ServiceSeries,
    host_cpu_series,
    label_values,
    metric_sum,
    process_series,
    service_series,
    summed_rate,
)

__all__ = ["PLOT_NAMES", "render_plots"]

WIDTH_PX = 1280
PANEL_HEIGHT_PX = 360
MAX_LINES = 8
"""Partitions or processes drawn one line each; the rest are named in the legend."""
MAX_MARKER_LABELS = 12
PLOT_NAMES = ("01-throughput", "02-latency", "03-errors", "04-compaction", "05-processes")

Interval = tuple[int, int, float]
"""(start ms, end ms, value): a figure that holds over a window."""
Point = tuple[int, float]
Marker = tuple[int, str]
"""(time ms, label): an event drawn as a labelled vertical line."""


@dataclass
class Line:
    """One line of a panel: intervals (drawn as steps) or points."""

    label: str
    intervals: list[Interval] = field(default_factory=list)
    points: list[Point] = field(default_factory=list)
    style: dict[str, Any] = field(default_factory=dict)

    def xy(self) -> tuple[list[Any], list[float]]:
        """Coordinates to plot: a step per interval, a break (NaN) at a gap between intervals."""
        if self.points:
            return [_utc(t) for t, _ in self.points], [v for _, v in self.points]
        xs: list[Any] = []
        ys: list[float] = []
        for i, (t0, t1, v) in enumerate(self.intervals):
            if i and t0 != self.intervals[i - 1][1]:
                xs.append(_utc(t0))
                ys.append(math.nan)
            xs += [_utc(t0), _utc(t1)]
            ys += [v, v]
        return xs, ys

    @property
    def values(self) -> list[float]:
        raw = [v for _, v in self.points] + [v for _, _, v in self.intervals]
        return [v for v in raw if math.isfinite(v)]


@dataclass
class Panel:
    title: str
    unit: str
    """A ``loadtest/_units`` id; values are in that unit."""
    ylabel: str
    lines: list[Line]
    markers: list[Marker] = field(default_factory=list)
    marker_name: str = ""
    """What the markers are, for the legend (``remap``, ``restart``)."""


@dataclass
class RunData:
    """What the plots draw, taken from the artifacts once."""

    files: RunFiles
    services: dict[str, ServiceSeries]

    def of_kind(self, kind: str) -> list[ServiceSeries]:
        return [s for _, s in sorted(self.services.items()) if s.kind == kind]


def render_plots(run_dir: Path) -> list[Path]:
    """Write every plot of ``run_dir`` into ``run_dir/plots/`` and return their paths."""
    files = load_run(Path(run_dir))
    data = RunData(files, service_series(files.metric_samples, files.process_kinds()))
    window = _time_range(files)
    out_dir = Path(run_dir) / "plots"
    out_dir.mkdir(parents=True, exist_ok=True)
    builders: Sequence[tuple[str, str, Callable[[RunData], list[Panel]]]] = (
        (PLOT_NAMES[0], "Throughput: client acked vs brokers accepted (vertical lines: restarts)", _throughput_panels),
        (PLOT_NAMES[1], "Client latency percentiles per window", _latency_panels),
        (PLOT_NAMES[2], "Client errors by kind, and partition remaps", _error_panels),
        (PLOT_NAMES[3], "Compaction", _compaction_panels),
        (PLOT_NAMES[4], "Processes", _process_panels),
    )
    paths = []
    for name, title, build in builders:
        path = out_dir / f"{name}.png"
        panels = build(data)
        _draw_figure(f"{title}  ·  {_run_name(files)}", panels, window, path)
        paths.append(path)
    return paths


# -- what each plot shows -----------------------------------------------------------------------


def _client_intervals(files: RunFiles, pick: Callable[[dict[str, Any]], float | None]) -> list[Interval]:
    out = []
    for w in files.client_windows:
        start, end = w.get("window_start_ms"), w.get("window_end_ms")
        value = pick(w)
        if start is not None and end is not None and end > start and value is not None:
            out.append((int(start), int(end), float(value)))
    return out


MIN_RATE_SPAN_S = 1.0
"""A rate over a shorter window (the run's last, cut off) is noise: a few
requests over a few milliseconds; it is not drawn."""


def _per_second(key: str) -> Callable[[dict[str, Any]], float | None]:
    def pick(w: dict[str, Any]) -> float | None:
        span_s = (w["window_end_ms"] - w["window_start_ms"]) / 1000
        return ((w.get("produce") or {}).get(key) or 0) / span_s if span_s >= MIN_RATE_SPAN_S else None
    return pick


def _restarts(services: Sequence[ServiceSeries]) -> list[Marker]:
    return sorted((s.times_ms[i], f"{s.name} restarted") for s in services for i in s.resets)


def _throughput_panels(data: RunData) -> list[Panel]:
    brokers = data.of_kind("broker")
    accepted = "brokers accepted (metrics)"
    panels = [
        Panel("Bytes per second", "Bps", "payload (B/s)", [
            Line("client acked (per window)", _client_intervals(data.files, _per_second("bytes"))),
            Line(accepted, summed_rate(brokers, lambda d: metric_sum(d, "counters", "produce_payload_bytes_total")),
                 style={"linestyle": "--"})]),
        Panel("Records per second", "short", "records/s", [
            Line("client acked (per window)", _client_intervals(data.files, _per_second("records"))),
            Line(accepted, summed_rate(brokers, lambda d: metric_sum(d, "counters", "produce_records_total")),
                 style={"linestyle": "--"})]),
    ]
    for panel in panels:
        panel.markers, panel.marker_name = _restarts(brokers), "restart"
    return panels


def _latency_panels(data: RunData) -> list[Panel]:
    def pick(path: str, key: str, quantile: str) -> Callable[[dict[str, Any]], float | None]:
        return lambda w: ((w.get(path) or {}).get(key) or {}).get(quantile)

    produce = [Line(f"produce {q}", _client_intervals(data.files, pick("produce", "latency_ms", q)))
               for q in ("p50", "p99", "p999")]
    e2e = [Line(f"consume end-to-end {q}", _client_intervals(data.files, pick("consume", "e2e_latency_ms", q)))
           for q in ("p50", "p99")]
    return [Panel("Produce request latency", "ms", "latency (ms)", produce),
            Panel("Consume end-to-end latency (produce to consume)", "ms", "latency (ms)", e2e)]


def _error_panels(data: RunData) -> list[Panel]:
    lines = []
    for path in ("produce", "consume"):
        kinds = sorted({k for w in data.files.client_windows for k in ((w.get(path) or {}).get("errors") or {})})
        for kind in kinds:
            intervals = _client_intervals(data.files, lambda w, k=kind: ((w.get(path) or {}).get("errors") or {})
                                          .get(k, 0))
            if any(v for _, _, v in intervals):
                lines.append(Line(f"{path} {kind}", intervals))
    if not lines and data.files.client_windows:
        lines = [Line("errors (none in any window)", _client_intervals(data.files, lambda w: 0.0))]
    return [Panel("Client errors per window, by kind (vertical lines: remaps)", "short", "requests per window",
                  lines, _remap_markers(data.files.remap_events), "remap")]


def _remap_markers(events: Sequence[Mapping[str, Any]]) -> list[Marker]:
    """One marker per burst: a broker going down (or coming back) moves all its
    partitions within a moment, and one label per partition would overprint."""
    bursts: dict[tuple[int, str, str], list[Mapping[str, Any]]] = {}
    for e in events:
        if e.get("ts_ms"):
            key = (int(e["ts_ms"]) // 2000, str(e.get("from") if e.get("reason") != "recovered" else e.get("to")),
                   str(e.get("reason")))
            bursts.setdefault(key, []).append(e)
    markers = []
    for (_, broker, reason), group in bursts.items():
        first = min(int(e["ts_ms"]) for e in group)
        moved = "back to" if reason == "recovered" else "off"
        markers.append((first, f"{len(group)} partition{'s' if len(group) > 1 else ''} {moved} {broker} ({reason})"))
    return sorted(markers)


def _lag_points(data: RunData) -> dict[str, list[Point]]:
    """Per partition, its lag at each sample: the max across compactors."""
    by_time: dict[int, dict[str, float]] = {}
    for series in data.of_kind("compactor"):
        for ts, doc in zip(series.times_ms, series.docs):
            gauges = doc.get("gauges") or {}
            lag = gauges.get("compactor_backlog_offsets") or gauges.get("compactor_lag_offsets") or {}
            for key, value in lag.items():
                labels = label_values(key)
                partition = f"{labels.get('topic', '')}:{labels.get('partition', '')}"
                row = by_time.setdefault(ts, {})
                row[partition] = max(row.get(partition, 0.0), float(value))
    out: dict[str, list[Point]] = {}
    for ts in sorted(by_time):
        for partition, value in by_time[ts].items():
            out.setdefault(partition, []).append((ts, value))
    return out


def _compaction_panels(data: RunData) -> list[Panel]:
    lag = _lag_points(data)
    worst = sorted(lag, key=lambda p: -max(v for _, v in lag[p]))
    lines = [Line(f"partition {p}", points=lag[p]) for p in worst[:MAX_LINES]]
    if lag:
        times = sorted({t for points in lag.values() for t, _ in points})
        peaks = [(t, max(dict(points).get(t, 0.0) for points in lag.values())) for t in times]
        lines.insert(0, Line(f"max over {len(lag)} partitions", points=peaks,
                             style={"linewidth": 2.6, "color": "black"}))
    compacted = summed_rate(data.of_kind("compactor"),
                            lambda d: metric_sum(d, "counters", "compactor_compacted_offsets_total"))
    restarts = _restarts(data.of_kind("compactor"))
    return [Panel("Compaction lag per partition (max across compactors)", "short", "offsets", lines,
                  restarts, "restart"),
            Panel("Compacted offsets per second (all compactors)", "short", "offsets/s",
                  [Line("compacted offsets/s", compacted)])]


def _process_panels(data: RunData) -> list[Panel]:
    processes = process_series(data.files.metric_samples)
    cpu = [Line(name, p.cpu_percent()) for name, p in sorted(processes.items())]
    host = host_cpu_series(data.files.metric_samples)
    if host:
        cpu.append(Line("host busy (% of all CPUs)", [(t0, t1, c["busy"]) for t0, t1, c in host],
                        style={"linestyle": ":", "color": "black"}))
    rss = [Line(name, points=list(zip(p.times_ms, p.rss_bytes))) for name, p in sorted(processes.items())]
    return [Panel("CPU per process (% of one core)", "percent", "CPU (%)", cpu),
            Panel("Resident memory per process", "bytes", "RSS (bytes)", rss)]


# -- drawing --------------------------------------------------------------------------------------


def _draw_figure(title: str, panels: Sequence[Panel], window: TimeRange, path: Path) -> None:
    height_px = 70 + PANEL_HEIGHT_PX * len(panels)
    fig = Figure(figsize=(WIDTH_PX / DPI, height_px / DPI), dpi=DPI, facecolor="white",
                 layout=ConstrainedLayoutEngine(w_pad=0.1, h_pad=0.1))
    fig.suptitle(title, fontsize=14, fontweight="bold", x=0.01, ha="left")
    axes = fig.subplots(len(panels), 1, squeeze=False, sharex=True)[:, 0]
    for ax, panel in zip(axes, panels):
        _draw_panel(ax, panel, window)
    axes[-1].set_xlabel(f"time (UTC, {_utc(window.start_s * 1000):%Y-%m-%d})", fontsize=9)
    for ax in axes[:-1]:
        ax.tick_params(labelbottom=False)
    fig.savefig(path, dpi=DPI, facecolor="white")


def _draw_panel(ax: Axes, panel: Panel, window: TimeRange) -> None:
    ax.set_title(panel.title, loc="left", fontsize=11, fontweight="bold")
    unit = unit_for(panel.unit)
    drawn = [line for line in panel.lines if line.values]
    if not drawn:
        notice(ax, "no data", MUTED, window)
        ax.set_ylabel(panel.ylabel, fontsize=9)
        _draw_markers(ax, panel)
        return
    for line in drawn:
        xs, ys = line.xy()
        style = {"linewidth": 1.6, "marker": "o" if line.points else None, "markersize": 3, **line.style}
        ax.plot(xs, [y * unit.to_base for y in ys], label=_legend(line, unit), **style)
    hidden = len(panel.lines) - len(drawn)
    style_time_axis(ax, window)
    style_value_axis(ax, unit, [v * unit.to_base for line in drawn for v in line.values])
    ax.set_ylabel(panel.ylabel, fontsize=9)
    _draw_markers(ax, panel)
    handles, labels = ax.get_legend_handles_labels()
    if hidden:
        labels.append(f"+{hidden} without data")
        handles.append(Line2D([], [], color="none"))
    ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)


def _legend(line: Line, unit: Any) -> str:
    values = line.values
    return f"{line.label}  (max {unit.format(max(values))}, last {unit.format(values[-1])})"


def _draw_markers(ax: Axes, panel: Panel) -> None:
    for i, (ts_ms, text) in enumerate(panel.markers):
        when = _utc(ts_ms)
        ax.axvline(when, color="#c0392b", linewidth=1.0, linestyle="--", alpha=0.8,
                   label=panel.marker_name if i == 0 else None)
        if i < MAX_MARKER_LABELS:
            ax.text(when, 0.98, text, transform=ax.get_xaxis_transform(), rotation=90, va="top", ha="right",
                    fontsize=7, color="#c0392b")
    if len(panel.markers) > MAX_MARKER_LABELS:
        ax.text(0.99, 0.02, f"{len(panel.markers)} {panel.marker_name}s, first {MAX_MARKER_LABELS} labelled",
                transform=ax.transAxes, ha="right", fontsize=8, color="#c0392b")


def _time_range(files: RunFiles) -> TimeRange:
    """The run's span: the client's start to end, widened to every sample and window."""
    times = [files.client_summary.get("started_at_ms"), files.client_summary.get("ended_at_ms")]
    times += [s.get("ts_ms") for s in files.metric_samples]
    times += [w.get(k) for w in files.client_windows for k in ("window_start_ms", "window_end_ms")]
    times += [e.get("ts_ms") for e in files.remap_events]
    known = [t / 1000 for t in times if isinstance(t, (int, float)) and t > 0]
    if not known:
        known = [files.stack.get("created_at_ms", 0) / 1000 or 0.0]
    start, end = min(known), max(known)
    return TimeRange(start, max(end, start + 10), 30)  # a short run fills the axis


def _run_name(files: RunFiles) -> str:
    return str(files.stack.get("run_id") or files.run_dir.name)


def _utc(ms: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, UTC)
