"""Drawing one dashboard row to a PNG with matplotlib (Agg, no display).

A row becomes one image: a heading (the row title, the time range in UTC and
the step) above a grid of its panels, two columns when Grafana gives panels
half the width or more, three when they are narrower. Every panel keeps a
fixed size (:data:`PANEL_PX`), so an image is ``columns x PANEL_PX[0]`` wide
and ``HEADER_PX + rows x PANEL_PX[1]`` high.

- time series: one line per series, at most :data:`MAX_SERIES` (those with the
  largest peaks; the legend says how many more there were), legend below
  the plot with each series' last and largest value;
- stat, gauge and the like: the reduced value in large type over a faint
  sparkline;
- text: its content; other panel types: a notice that they are not drawn.

A panel without data says "no data" in its middle, a failed query says
"query failed" with Prometheus's error; neither is hidden.

Each panel's plot is placed in its cell by fixed pixel margins (:data:`MARGIN_PX`:
the title above, the tick labels left and below), less the rows its legend
takes below it: matplotlib's constrained layout measured every tick label of
every panel twice per image, and took half of the drawing time.
"""

from __future__ import annotations

import datetime as dt
import math
import textwrap
from pathlib import Path
from typing import Sequence

import matplotlib

matplotlib.use("Agg")  # before anything imports pyplot: never look for a display
matplotlib.rcParams["text.parse_math"] = False  # "$0.01" in a legend is money, not mathtext

from matplotlib import dates as mdates  # noqa: E402
from matplotlib import ticker as mticker  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

from ._panel_data import PanelData, Series, TimeRange, reduce_values  # noqa: E402
from ._units import Unit, unit_for  # noqa: E402

__all__ = ["DPI", "HEADER_PX", "MAX_SERIES", "MUTED", "PANEL_PX", "UTC", "UnitFormatter", "UnitLocator", "columns_for",
           "draw_row", "image_size_px", "notice", "series_to_draw", "style_time_axis", "style_value_axis"]

DPI = 100
PANEL_PX = (640, 420)
HEADER_PX = 64
MAX_SERIES = 12
LABEL_CHARS = 42
TITLE_CHARS = 72
TIME_SERIES_KINDS = {"timeseries", "graph", "heatmap", "histogram", "trend", "state-timeline", "status-history"}
VALUE_KINDS = {"stat", "gauge", "bargauge", "singlestat", "table", "piechart"}
QUERIED_KINDS = TIME_SERIES_KINDS | VALUE_KINDS
UTC = dt.timezone.utc
MUTED = "#8a8a8a"
MARGIN_PX = {"top": 34, "left": 78, "right": 16, "bottom": 30, "legend_gap": 26, "legend_row": 14, "ylabel": 16}
"""Room around each plot inside its cell: the title, the y and x tick labels, the legend's rows."""
LEGEND_FONT = 7.5


def columns_for(panels: Sequence[PanelData]) -> int:
    """3 when most panels are a third of Grafana's width or narrower, else 2."""
    narrow = sum(1 for p in panels if p.panel.width <= 8)
    return 3 if narrow * 2 > len(panels) else 2


def image_size_px(panel_count: int, columns: int) -> tuple[int, int]:
    rows = max(1, math.ceil(panel_count / columns))
    return (columns * PANEL_PX[0], HEADER_PX + rows * PANEL_PX[1])


def shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def shorten_middle(text: str, limit: int) -> str:
    """Labels of one panel often share a long start and differ at the end: keep both ends."""
    if len(text) <= limit:
        return text
    head = (limit - 1) * 2 // 5
    return text[:head] + "…" + text[len(text) - (limit - 1 - head):]


def draw_row(heading: str, panels: Sequence[PanelData], window: TimeRange, path: Path) -> None:
    """Draw ``panels`` under ``heading`` into the PNG ``path``."""
    columns = columns_for(panels)
    width_px, height_px = image_size_px(len(panels), columns)
    # Half a pixel more: the PNG's size is inches x dpi truncated, and 904 / 100 * 100 is 903.99...
    fig = Figure(figsize=((width_px + 0.5) / DPI, (height_px + 0.5) / DPI), dpi=DPI, facecolor="white")
    header, _ = fig.subfigures(2, 1, height_ratios=[HEADER_PX, height_px - HEADER_PX], hspace=0)
    _draw_header(header, heading, window)
    for index, data in enumerate(panels):
        row, column = divmod(index, columns)
        cell = (column * PANEL_PX[0], height_px - HEADER_PX - (row + 1) * PANEL_PX[1])  # its lower left, in pixels
        ax = fig.add_axes(_plot_box(cell, width_px, height_px, legend_rows=0, ylabel=False))
        draw_panel(ax, data, window)
        legend = ax.get_legend()
        labels = [t.get_text() for t in legend.get_texts()] if legend is not None else []
        rows = math.ceil(len(labels) / _legend_columns(labels)) if labels else 0
        ylabel = bool(ax.yaxis.label.get_text())
        if rows or ylabel:
            ax.set_position(_plot_box(cell, width_px, height_px, legend_rows=rows, ylabel=ylabel))
        if legend is not None:  # its top a fixed distance below the plot, under the tick labels
            legend.set_bbox_to_anchor((0.0, -MARGIN_PX["legend_gap"] / (ax.get_position().height * height_px)),
                                      transform=ax.transAxes)
    fig.savefig(path, dpi=DPI, facecolor="white")


def _plot_box(cell: tuple[int, int], width_px: int, height_px: int, *, legend_rows: int,
              ylabel: bool) -> tuple[float, float, float, float]:
    """The plot's ``[left, bottom, width, height]`` in figure fractions, inside the cell whose lower
    left is ``cell`` (pixels), leaving :data:`MARGIN_PX` around it and ``legend_rows`` below."""
    m = MARGIN_PX
    left = cell[0] + m["left"] + (m["ylabel"] if ylabel else 0)
    below = m["legend_gap"] + legend_rows * m["legend_row"] + 6 if legend_rows else m["bottom"]
    bottom = cell[1] + below
    width = PANEL_PX[0] - (left - cell[0]) - m["right"]
    height = max(PANEL_PX[1] - m["top"] - below, PANEL_PX[1] // 4)
    return (left / width_px, bottom / height_px, width / width_px, height / height_px)


def _draw_header(header: Figure, heading: str, window: TimeRange) -> None:
    start, end = _utc(window.start_s), _utc(window.end_s)
    end_text = end.strftime("%H:%M:%S" if start.date() == end.date() else "%Y-%m-%d %H:%M:%S")
    span = f"{start:%Y-%m-%d %H:%M:%S} – {end_text} UTC   ·   step {_seconds_text(window.step_s)}"
    header.text(0.012, 0.62, heading, fontsize=17, fontweight="bold", va="center", ha="left")
    header.text(0.012, 0.2, span, fontsize=10, color="#555555", va="center", ha="left")
    header.add_artist(Line2D([0.01, 0.99], [0.02, 0.02], color="#cccccc", linewidth=1, transform=header.transSubfigure))


def _seconds_text(seconds: float) -> str:
    return f"{seconds:g} s" if seconds < 120 else f"{seconds / 60:g} min"


def _utc(seconds: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(seconds, UTC)


def draw_panel(ax: Axes, data: PanelData, window: TimeRange) -> None:
    ax.set_title(shorten(data.panel.title, TITLE_CHARS), loc="left", fontsize=11, fontweight="bold", pad=6)
    kind = data.panel.kind
    if kind == "text":
        _text_panel(ax, data.panel.content or data.panel.description)
    elif kind not in QUERIED_KINDS:
        _text_panel(ax, f"panel type '{kind}' is not drawn")
    elif not data.panel.targets:
        notice(ax, "no Prometheus queries", MUTED, window)
    elif data.errors and not any(s.finite for s in data.series):
        notice(ax, "query failed", "#c0392b", window, detail=data.errors[0])
    elif data.empty:
        notice(ax, "no data", MUTED, window)
    elif kind in VALUE_KINDS:
        _value_panel(ax, data, window)
    else:
        _time_series_panel(ax, data, window)


def style_time_axis(ax: Axes, window: TimeRange) -> None:
    ax.set_xlim(_utc(window.start_s), _utc(window.end_s))
    locator = mdates.AutoDateLocator(tz=UTC, minticks=4, maxticks=8)
    for unit in (mdates.SECONDLY, mdates.MINUTELY):  # 2-minute ticks for 10 minutes, not 5
        locator.intervald[unit] = [1, 2, 5, 10, 15, 30]
    long_range = window.range_s > 86400
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%m-%d %H:%M" if long_range else "%H:%M:%S", tz=UTC))
    ax.tick_params(axis="both", labelsize=8, colors="#444444")
    ax.grid(True, color="#e5e5e5", linewidth=0.8)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


def notice(ax: Axes, message: str, color: str, window: TimeRange, *, detail: str = "") -> None:
    style_time_axis(ax, window)
    ax.set_yticks([])
    ax.text(0.5, 0.56 if detail else 0.5, message, transform=ax.transAxes, ha="center", va="center",
            fontsize=18, color=color, fontweight="bold",
            bbox={"boxstyle": "round,pad=0.5", "facecolor": "#f7f7f7", "edgecolor": color})
    if detail:
        wrapped = "\n".join([w for line in detail.splitlines() for w in textwrap.wrap(line.strip(), 80)][:6])
        ax.text(0.5, 0.3, wrapped, transform=ax.transAxes, ha="center", va="top", fontsize=7, color=color,
                family="monospace")


def _text_panel(ax: Axes, content: str) -> None:
    ax.set_axis_off()
    lines = [line for paragraph in content.splitlines() for line in (textwrap.wrap(paragraph, 90) or [""])]
    ax.text(0.0, 1.0, "\n".join(lines[:18]), transform=ax.transAxes, ha="left", va="top", fontsize=9)


def series_to_draw(series: Sequence[Series]) -> tuple[list[Series], int]:
    """The series to draw (largest peaks first, then in query order) and how many are left out."""
    with_data = [s for s in series if s.finite]
    if len(with_data) <= MAX_SERIES:
        return with_data, 0
    keep = set(map(id, sorted(with_data, key=lambda s: s.peak, reverse=True)[:MAX_SERIES]))
    return [s for s in with_data if id(s) in keep], len(with_data) - MAX_SERIES


def _time_series_panel(ax: Axes, data: PanelData, window: TimeRange) -> None:
    unit = unit_for(data.panel.unit)
    shown, hidden = series_to_draw(data.series)
    handles = []
    for s in shown:
        times, values = [_utc(t) for t in s.times_s], [v * unit.to_base for v in s.values]
        (line,) = ax.plot(times, values, linewidth=1.4)
        lone = _isolated(values)
        if lone:
            ax.plot([times[i] for i in lone], [values[i] for i in lone], "o", markersize=3, color=line.get_color())
        line.set_label(_legend_text(s, unit))
        handles.append(line)
    if hidden:
        handles.append(Line2D([], [], color="none", label=f"+{hidden} more series not drawn (smaller peaks)"))
    if data.errors:
        handles.append(Line2D([], [], color="none", label=f"{len(data.errors)} query failed: see the summary"))
    style_time_axis(ax, window)
    style_value_axis(ax, unit, [v * unit.to_base for s in shown for v in s.finite])
    _legend_below(ax, handles)


def _isolated(values: Sequence[float]) -> list[int]:
    """Points with no finite neighbour: a line alone would not show them."""
    def finite(i: int) -> bool:
        return 0 <= i < len(values) and math.isfinite(values[i])

    return [i for i in range(len(values)) if finite(i) and not finite(i - 1) and not finite(i + 1)]


def _legend_text(series: Series, unit: Unit) -> str:
    last, peak = unit.format(series.finite[-1]), unit.format(max(series.finite))
    return f"{shorten_middle(series.label, LABEL_CHARS)}   last {last}, max {peak}"


def _legend_columns(labels: Sequence[str]) -> int:
    return 1 if max(map(len, labels), default=0) > 44 or len(labels) < 2 else 2


def _legend_below(ax: Axes, handles: list) -> None:
    columns = _legend_columns([h.get_label() for h in handles])
    # Anchored at the plot's lower left here; draw_row moves it below the tick labels once the plot is placed.
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(0.0, 0.0), ncol=columns, fontsize=LEGEND_FONT,
              frameon=False, handlelength=1.6, borderaxespad=0.0, columnspacing=1.2, labelspacing=0.3)


def style_value_axis(ax: Axes, unit: Unit, values: Sequence[float]) -> None:
    low, high = min(values, default=0.0), max(values, default=0.0)
    if low >= 0:
        ax.set_ylim(bottom=0, top=high * 1.08 if high > 0 else 1)
    ax.yaxis.set_major_locator(UnitLocator(unit))
    ax.yaxis.set_major_formatter(UnitFormatter(unit))
    if not unit.known:
        ax.set_ylabel(unit.id, fontsize=8, color="#444444")


def _value_panel(ax: Axes, data: PanelData, window: TimeRange) -> None:
    unit = unit_for(data.panel.unit)
    shown, hidden = series_to_draw(data.series)
    first = shown[0]
    ax.plot([_utc(t) for t in first.times_s], [v * unit.to_base for v in first.values],
            color="#9ecae1", linewidth=1.2)
    style_time_axis(ax, window)
    style_value_axis(ax, unit, [v * unit.to_base for v in first.finite])
    if len(shown) == 1:
        text, size = unit.format(reduce_values(first, data.panel.reduce)), 30
    else:
        lines = [f"{shorten_middle(s.label, 30)}: {unit.format(reduce_values(s, data.panel.reduce))}"
                 for s in shown[:6]]
        extra = hidden + max(0, len(shown) - 6)
        text, size = "\n".join(lines + ([f"+{extra} more"] if extra else [])), 12
    ax.text(0.5, 0.55, text, transform=ax.transAxes, ha="center", va="center", fontsize=size,
            fontweight="bold", color="#1f4e79")


class UnitLocator(mticker.MaxNLocator):
    """Nice ticks in the unit the axis is shown in (0, 0.5, 1 MiB rather than 0, 524288 B)."""

    def __init__(self, unit: Unit) -> None:
        super().__init__(nbins=5, steps=[1, 2, 2.5, 5, 10])
        self.unit = unit

    def tick_values(self, vmin: float, vmax: float):
        size, _ = self.unit.rung(max(abs(vmin), abs(vmax)))
        return super().tick_values(vmin / size, vmax / size) * size


class UnitFormatter(mticker.Formatter):
    """Every tick in one rung of the unit's ladder, with as many decimals as the tick spacing needs."""

    def __init__(self, unit: Unit) -> None:
        self.unit = unit

    def __call__(self, x: float, pos: int | None = None) -> str:
        if x == 0:
            return "0"
        vmin, vmax = self.axis.get_view_interval() if self.axis else (x, x)
        size, suffix = self.unit.rung(max(abs(vmin), abs(vmax)))
        steps = [abs(b - a) for a, b in zip(self.locs, self.locs[1:]) if b != a]
        spacing = min(steps) / size if steps else 1.0
        decimals = next((d for d in range(7) if _whole(spacing * 10**d)), 6)
        return self.unit.format_scaled(x / size, suffix, decimals)


def _whole(value: float) -> bool:
    return abs(value - round(value)) < 1e-6 * max(1.0, abs(value))
