"""``soak.png``: the soak run's series, one panel each, on one UTC time axis.

1. RSS of the brokers and compactors (the processes judged) and 2. of Oxia
and MinIO (hundreds of MiB: on one axis they would flatten the others);
3. open files per process; 4. threads per process; 5. CPU per process (%
of one core); 6. S3 objects under the run's root (all, WAL, compacted);
7. produce (acknowledged) and consume rate per client window; 8. compaction
lag (the max over partitions and the worst partitions). Vertical lines mark where the second half of the load phase
begins (the flatness checks' window) and where load stopped.

Drawn with the harness's plot style (:mod:`.plots`): the values' unit on
each axis, a legend with each line's max and last value.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from dashboard._panel_data import TimeRange

from .plots import MAX_LINES, Line, Panel, _draw_figure
from .soak_checks import GARBAGE_KINDS, PRODUCT_KINDS, load_samples, second_half

__all__ = ["render_soak_plot"]


def render_soak_plot(samples: Sequence[Mapping[str, Any]], windows: Sequence[Mapping[str, Any]], path: Path,
                     title: str) -> Path:
    """Draw the samples and the client's windows into ``path`` (a PNG)."""
    markers = _markers(samples)
    panels = [
        _process_panel(samples, "Resident memory: brokers and compactors (judged flat)", "bytes", "RSS", "rss_bytes",
                       kinds=PRODUCT_KINDS),
        _process_panel(samples, "Resident memory: Oxia and MinIO (shown, not judged)", "bytes", "RSS", "rss_bytes",
                       kinds=None),
        _process_panel(samples, "Open files per process", "short", "open files", "open_files"),
        _process_panel(samples, "Threads per process", "short", "threads", "threads"),
        Panel("CPU per process (% of one core)", "percent", "CPU (%)", _cpu_lines(samples)),
        Panel("S3 objects under the run's root (listed every sample)", "short", "objects", _object_lines(samples)),
        Panel("Produce (acknowledged) and consume rate, per client window", "short", "records/s",
              _rate_lines(windows)),
        Panel("Compaction lag: high watermark - (cursor - 1)", "short", "offsets", _lag_lines(samples)),
    ]
    for panel in panels:
        panel.markers, panel.marker_name = markers, "phase"
    times = [s["ts_ms"] for s in samples] + [w[k] for w in windows for k in ("window_start_ms", "window_end_ms")]
    start, end = (min(times) / 1000, max(times) / 1000) if times else (0.0, 10.0)
    path.parent.mkdir(parents=True, exist_ok=True)
    _draw_figure(title, panels, TimeRange(start, max(end, start + 10), 30), path)
    return path


def _markers(samples: Sequence[Mapping[str, Any]]) -> list[tuple[int, str]]:
    out = []
    half = second_half(samples)
    if half:
        out.append((int(half[0]["ts_ms"]), "second half (flatness window)"))
    load = load_samples(samples)
    if load and len(load) < len(samples):
        out.append((int(load[-1]["ts_ms"]), "load stopped"))
    return out


def _process_names(samples: Sequence[Mapping[str, Any]], kinds: Sequence[str] | None = ()) -> list[str]:
    """Every process (``kinds`` empty), those of ``kinds``, or (None) those of no product kind."""
    def wanted(kind: str) -> bool:
        return kind not in PRODUCT_KINDS if kinds is None else (not kinds or kind in kinds)

    return sorted({n for s in samples for n, p in (s.get("processes") or {}).items() if wanted(p.get("kind", ""))})


def _process_panel(samples: Sequence[Mapping[str, Any]], title: str, unit: str, ylabel: str, key: str,
                   kinds: Sequence[str] | None = ()) -> Panel:
    lines = []
    for name in _process_names(samples, kinds):
        points = [(s["ts_ms"], float(p[key])) for s in samples
                  if (p := (s.get("processes") or {}).get(name)) and p.get(key) is not None]
        lines.append(Line(name, points=points))
    return Panel(title, unit, ylabel, lines)


def _cpu_lines(samples: Sequence[Mapping[str, Any]]) -> list[Line]:
    lines = []
    for name in _process_names(samples):
        readings = [(s["ts_ms"], p.get("cpu_s")) for s in samples if (p := (s.get("processes") or {}).get(name))]
        readings = [(t, c) for t, c in readings if c is not None]
        intervals = [(t0, t1, 100.0 * (c1 - c0) / ((t1 - t0) / 1000))
                     for (t0, c0), (t1, c1) in zip(readings, readings[1:]) if t1 > t0 and c1 >= c0]
        lines.append(Line(name, intervals))
    return lines


def _object_lines(samples: Sequence[Mapping[str, Any]]) -> list[Line]:
    counted = [(s["ts_ms"], s["objects"]) for s in samples if (s.get("objects") or {}).get("ok")]
    return [
        Line("all objects", points=[(t, float(o["total"])) for t, o in counted],
             style={"linewidth": 2.4, "color": "black"}),
        Line("WAL (vacuum's to collect)", points=[(t, float(sum(o["by_kind"].get(k, 0) for k in GARBAGE_KINDS)))
                                                 for t, o in counted]),
        Line("compacted (the log's data)", points=[(t, float(o["by_kind"].get("compacted", 0))) for t, o in counted]),
    ]


def _rate_lines(windows: Sequence[Mapping[str, Any]]) -> list[Line]:
    lines = []
    for label, side, key in (("produce acknowledged", "produce", "records"), ("consumed", "consume", "records")):
        intervals = []
        for w in windows:
            span_s = (w["window_end_ms"] - w["window_start_ms"]) / 1000
            if span_s >= 1.0:
                intervals.append((w["window_start_ms"], w["window_end_ms"],
                                  float((w.get(side) or {}).get(key) or 0) / span_s))
        lines.append(Line(label, intervals))
    return lines


def _lag_lines(samples: Sequence[Mapping[str, Any]]) -> list[Line]:
    lags = [(s["ts_ms"], s["compaction"]["lag"]) for s in samples if (s.get("compaction") or {}).get("ok")]
    if not lags:
        return [Line("max over partitions")]
    partitions = sorted({p for _, lag in lags for p in lag})
    worst = sorted(partitions, key=lambda p: -max(lag.get(p, 0) for _, lag in lags))[:MAX_LINES - 1]
    lines = [Line(f"max over {len(partitions)} partitions", points=[(t, float(max(lag.values(), default=0)))
                                                                    for t, lag in lags],
                  style={"linewidth": 2.4, "color": "black"})]
    lines += [Line(f"partition {p}", points=[(t, float(lag.get(p, 0))) for t, lag in lags]) for p in worst]
    return lines
