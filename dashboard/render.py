"""Draw every panel of a Grafana dashboard to PNG from Prometheus: a look at a run without Grafana.

Example:
  $LLOG_PY -m dashboard.render --prometheus http://127.0.0.1:9090 --out /tmp/dash --last 15m

Output: one image per dashboard row, DIR/NN-<row>.png (the row's panels in
a grid of 2 or 3 columns), and DIR/index.html showing them with the time
range, the panels without data and the failed queries. The PNG paths go to
stdout, one a line; a progress line per row and the summary go to stderr.

Queries: every panel's targets run as /api/v1/query_range over the range,
with Grafana's variables filled in: $__interval is the step, $__rate_interval
is max(step + scrape interval, 4 x scrape interval) as in Grafana (with
--scrape-interval 15s, Grafana's default, never under 1m), $__range is the
range. A dashboard variable that offers "All", or whose values come from a
Prometheus query, matches everything (its allValue, else .*); others keep
their saved value; --var sets one.

Drawing: the unit of each panel (fieldConfig.defaults.unit: s, bytes, Bps,
MBs, reqps, ops, percentunit, currencyUSD, short, ...) on the y axis, time in
UTC, at most 12 series a panel (the largest; the legend says how many more),
and "no data" across a panel whose queries returned nothing.

Exit status: 0; 1 when Prometheus cannot be reached or a query failed (each
failure names the panel and the expression); 2 with --fail-on-empty when a
panel returned no data (the summary names them).
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import html
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from devstack import PrometheusQueryError, query, query_range

from ._model import Dashboard, Panel, Row, load_dashboard
from ._draw import QUERIED_KINDS, draw_row
from ._panel_data import PanelData, QueryRange, TimeRange, fetch_panel

__all__ = ["RenderResult", "main", "render", "auto_step_s", "parse_duration_s"]

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DASHBOARD = REPO / "grafana" / "leaderless-log-observability.json"
TARGET_POINTS = 300
"""``--step auto`` aims at this many points per series: plenty for a 640-pixel-wide panel."""
MAX_POINTS = 11_000
"""Prometheus refuses a range query with more points per series."""
_NICE_STEPS_S = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
_DURATION_S = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


@dataclass(frozen=True)
class RenderResult:
    images: tuple[Path, ...]
    index: Path
    empty: tuple[str, ...]
    """Titles of the panels that returned no data."""
    errors: tuple[str, ...]
    """One entry per failed query: panel title, expression, Prometheus's error."""
    panels: tuple[PanelData, ...] = ()
    """What each panel drew, in dashboard order."""


# -- time --------------------------------------------------------------------------------------


def parse_duration_s(text: str) -> float:
    """``90s``, ``15m``, ``1h30m``, ``500ms``, ``2d`` or plain seconds."""
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        pass
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"not a duration: {text!r} (e.g. 90s, 15m, 1h30m)")
    return sum(float(n) * _DURATION_S[u] for n, u in parts)


def parse_time_s(text: str, now_s: float) -> float:
    """``now``, ``now-5m``, Unix seconds, or ISO 8601 (UTC unless it names a zone)."""
    text = text.strip()
    if text.startswith("now"):
        rest = text[3:]
        if not rest:
            return now_s
        if rest[0] in "+-":
            offset = parse_duration_s(rest[1:])
            return now_s - offset if rest[0] == "-" else now_s + offset
        raise ValueError(f"not a time: {text!r}")
    try:
        return float(text)
    except ValueError:
        pass
    try:
        moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise ValueError(f"not a time: {text!r} (now-15m, 1717000000, 2024-05-29T12:00:00Z)") from exc
    return (moment if moment.tzinfo else moment.replace(tzinfo=dt.timezone.utc)).timestamp()


def auto_step_s(range_s: float) -> float:
    """The smallest of a few round steps giving at most about :data:`TARGET_POINTS` points."""
    wanted = range_s / TARGET_POINTS
    return float(next((s for s in _NICE_STEPS_S if s >= wanted), _NICE_STEPS_S[-1]))


def time_range(args: argparse.Namespace, dashboard: Dashboard, now_s: float) -> TimeRange:
    end_s = parse_time_s(args.end, now_s)
    if args.start:
        start_s = parse_time_s(args.start, now_s)
    elif args.last:
        start_s = end_s - parse_duration_s(args.last)
    else:  # the dashboard's own default, "now-15m" and the like
        start_s = end_s - (now_s - parse_time_s(dashboard.time_from, now_s))
    if start_s >= end_s:
        raise ValueError("the time range is empty: the start is not before the end")
    step_s = auto_step_s(end_s - start_s) if args.step == "auto" else parse_duration_s(args.step)
    if step_s <= 0 or (end_s - start_s) / step_s > MAX_POINTS:
        raise ValueError(f"step {args.step} gives more than {MAX_POINTS} points per series: use a larger one")
    return TimeRange(start_s, end_s, step_s)


# -- rendering ---------------------------------------------------------------------------------


def slug(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")[:60] or "panels"


def render(dashboard: Dashboard, out_dir: Path, query_range_fn: QueryRange, window: TimeRange, *,
           scrape_interval_s: float = 15.0, progress: Callable[[str], None] = lambda line: None) -> RenderResult:
    """Draw each row of ``dashboard`` that has panels to ``out_dir/NN-<row>.png`` and write index.html."""
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = [row for row in dashboard.rows if row.panels]
    images: list[tuple[Row, Path]] = []
    drawn: list[PanelData] = []
    empty: list[str] = []
    errors: list[str] = []
    for number, row in enumerate(rows, start=1):
        started = time.monotonic()
        heading = row.title or "Overview"
        data = [_fetch(dashboard, panel, query_range_fn, window, scrape_interval_s) for panel in row.panels]
        path = out_dir / f"{number:02d}-{slug(heading)}.png"
        draw_row(heading, data, window, path)
        images.append((row, path))
        drawn += data
        row_empty = [d.panel.title for d in data if d.empty]
        row_errors = [e for d in data for e in d.errors]
        empty += row_empty
        errors += row_errors
        progress(f"row {number}/{len(rows)} {heading!r}: {len(data)} panels, {sum(d.queries for d in data)}"
                 f" queries, {len(row_empty)} empty, {len(row_errors)} failed -> {path}"
                 f" ({time.monotonic() - started:.1f} s)")
        for error in row_errors:
            progress(f"  query failed: {error}")
    index = _write_index(dashboard, out_dir, images, window, empty, errors)
    return RenderResult(tuple(p for _, p in images), index, tuple(empty), tuple(errors), tuple(drawn))


def _fetch(dashboard: Dashboard, panel: Panel, query_range_fn: QueryRange, window: TimeRange,
           scrape_interval_s: float) -> PanelData:
    if panel.kind not in QUERIED_KINDS:
        return PanelData(panel, ())
    return fetch_panel(dashboard, panel, query_range_fn, window, scrape_interval_s=scrape_interval_s)


def _write_index(dashboard: Dashboard, out_dir: Path, images: Sequence[tuple[Row, Path]], window: TimeRange,
                 empty: Sequence[str], errors: Sequence[str]) -> Path:
    def utc(seconds: float) -> str:
        return dt.datetime.fromtimestamp(seconds, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")

    esc = html.escape
    parts = [
        f"<!doctype html>\n<meta charset='utf-8'>\n<title>{esc(dashboard.title)}</title>",
        "<style>body{font-family:sans-serif;margin:1.5em} img{max-width:100%;border:1px solid #ddd}</style>",
        f"<h1>{esc(dashboard.title)}</h1>",
        f"<p>{utc(window.start_s)} to {utc(window.end_s)} UTC, step {window.step_s:g} s."
        f" Dashboard: {esc(str(dashboard.source or ''))}</p>",
    ]
    if empty:
        parts.append("<p><b>No data:</b> " + ", ".join(esc(t) for t in empty) + "</p>")
    if errors:
        parts.append("<p><b>Failed queries:</b></p><pre>" + esc("\n".join(errors)) + "</pre>")
    for row, path in images:
        parts.append(f"<h2>{esc(row.title or 'Overview')}</h2>\n<img src='{esc(path.name)}' alt='{esc(path.name)}'>")
    index = out_dir / "index.html"
    index.write_text("\n".join(parts) + "\n")
    return index


# -- command line ------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m dashboard.render",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--prometheus", required=True, metavar="URL",
                        help="Prometheus base URL, e.g. http://127.0.0.1:9090")
    parser.add_argument("--out", required=True, type=Path, metavar="DIR",
                        help="where the PNGs and index.html go (created if missing)")
    parser.add_argument("--dashboard", type=Path, default=DEFAULT_DASHBOARD, metavar="JSON",
                        help="Grafana dashboard JSON (default: grafana/leaderless-log-observability.json)")
    when = parser.add_mutually_exclusive_group()
    when.add_argument("--last", metavar="DURATION",
                      help="the range ending at --end: 15m, 1h30m (default: the dashboard's own, usually 15m)")
    when.add_argument("--start", metavar="TIME",
                      help="range start: now-1h, Unix seconds, or ISO 8601 (UTC unless it names a zone)")
    parser.add_argument("--end", default="now", metavar="TIME", help="range end, as --start (default: now)")
    parser.add_argument("--step", default="auto", metavar="DURATION",
                        help=f"query resolution; auto: a round step giving about {TARGET_POINTS} points (default)")
    parser.add_argument("--scrape-interval", default="15s", metavar="DURATION",
                        help="what $__rate_interval assumes, as Grafana's data source setting (default: 15s)")
    parser.add_argument("--var", action="append", default=[], metavar="NAME=VALUE",
                        help="give a dashboard variable this value instead of its default (repeatable)")
    parser.add_argument("--timeout", type=float, default=30.0, metavar="SECONDS",
                        help="per query (default: 30)")
    parser.add_argument("--fail-on-empty", action="store_true",
                        help="exit 2 when a panel returned no data")
    return parser


def _variables(pairs: Sequence[str]) -> dict[str, str]:
    values = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise ValueError(f"--var wants NAME=VALUE, got {pair!r}")
        values[name.lstrip("$")] = value
    return values


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    url = args.prometheus.rstrip("/")
    try:
        dashboard = load_dashboard(args.dashboard).with_values(_variables(args.var))
        window = time_range(args, dashboard, time.time())
        scrape_interval_s = parse_duration_s(args.scrape_interval)
    except (OSError, ValueError) as exc:
        parser.error(str(exc))
    say = functools.partial(print, "[render]", file=sys.stderr, flush=True)
    try:
        query(url, "time()", timeout_s=args.timeout)
    except PrometheusQueryError as exc:
        say(f"error: {exc}")
        return 1
    fetch = functools.partial(query_range, url, timeout_s=args.timeout)
    result = render(dashboard, args.out, fetch, window, scrape_interval_s=scrape_interval_s,
                    progress=lambda line: say(line))
    for image in result.images:
        print(image, flush=True)
    return _summary(result, args.fail_on_empty, say)


def _summary(result: RenderResult, fail_on_empty: bool, say: Callable[..., None]) -> int:
    say(f"{len(result.images)} images, index {result.index}")
    if result.empty:
        say(f"panels with no data ({len(result.empty)}): " + "; ".join(repr(t) for t in result.empty))
    if result.errors:
        say(f"{len(result.errors)} queries failed:")
        for error in result.errors:
            say(f"  {error}")
        return 1
    return 2 if fail_on_empty and result.empty else 0


if __name__ == "__main__":
    sys.exit(main())
