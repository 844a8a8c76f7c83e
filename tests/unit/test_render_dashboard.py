"""The dashboard renderer without a Prometheus: variables, legends, units, and a render from canned answers."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from devstack import PrometheusQueryError
from dashboard import render as render_dashboard
from dashboard._model import expand, format_duration, legend_label, load_dashboard, parse_dashboard
from dashboard._draw import HEADER_PX, MAX_SERIES, PANEL_PX, series_to_draw
from dashboard._panel_data import Series, TimeRange
from dashboard._units import unit_for
from dashboard.render import auto_step_s, parse_duration_s, parse_time_s, render

END_S = 1_717_000_000.0
WINDOW = TimeRange(END_S - 600, END_S, 5.0)


# -- variables ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("expr", "step_s", "expected"), [
    ("rate(x[$__rate_interval])", 1, "rate(x[1m])"),  # max(1 + 15, 4 x 15) s
    ("rate(x[$__rate_interval])", 60, "rate(x[75s])"),
    ("rate(x[${__rate_interval}])", 120, "rate(x[135s])"),
    ("avg_over_time(x[$__interval])", 30, "avg_over_time(x[30s])"),
    ("x / $__interval_ms", 0.5, "x / 500"),
    ("increase(x[$__range])", 5, "increase(x[10m])"),
    ("x * $__range_s", 5, "x * 600"),
])
def test_builtins_expand_for_the_step_and_range(expr: str, step_s: float, expected: str) -> None:
    assert expand(expr, step_s, range_s=600) == expected


def test_rate_interval_follows_the_scrape_interval() -> None:
    assert expand("[$__rate_interval]", 1, scrape_interval_s=1) == "[4s]"
    assert expand("[$__rate_interval]", 10, scrape_interval_s=1) == "[11s]"


def test_variables_in_every_syntax_and_unknown_ones_left_alone() -> None:
    values = {"instance": ".*", "job": "broker"}
    expr = 'up{instance=~"$instance", job="${job}", a="${job:raw}", b="[[job]]", c="$other"}'
    assert expand(expr, 15, variables=values) == (
        'up{instance=~".*", job="broker", a="broker", b="broker", c="$other"}'
    )


def _templated(*variables: dict[str, Any]) -> dict[str, str]:
    dashboard = parse_dashboard({"title": "t", "panels": [], "templating": {"list": list(variables)}})
    return {v.name: v.value for v in dashboard.variables}


def test_variable_values_from_the_templating_list() -> None:
    values = _templated(
        {"name": "instance", "type": "query", "includeAll": True, "current": {"value": "$__all"}},
        {"name": "pod", "type": "query", "includeAll": True, "allValue": "pod-.+", "current": {"value": "x"}},
        {"name": "stale", "type": "query", "current": {"value": "10.0.0.1:8080"}},
        {"name": "zone", "type": "custom", "current": {"value": "eu"}, "options": [{"value": "us"}]},
        {"name": "first", "type": "custom", "options": [{"value": "a"}, {"value": "b"}]},
        {"name": "many", "type": "custom", "multi": True, "current": {"value": ["a.b", "c"]}},
        {"name": "k", "type": "constant", "query": "42"},
        {"name": "datasource", "type": "datasource", "query": "prometheus", "current": {"text": "Prom"}},
        {"name": "win", "type": "interval", "current": {"value": "auto"}},
        {"name": "fixed", "type": "interval", "current": {"value": "5m"}},
    )
    assert values == {
        "instance": ".*", "pod": "pod-.+", "stale": ".*", "zone": "eu", "first": "a",
        "many": "(a\\\\.b|c)", "k": "42", "datasource": "Prom", "win": "$__interval", "fixed": "5m",
    }
    assert expand("rate(x[$win]) > $k", 30, variables=values) == "rate(x[30s]) > 42"


def test_format_duration() -> None:
    assert [format_duration(s) for s in (0.25, 1, 59, 60, 75, 3600, 5400, 86400)] == [
        "250ms", "1s", "59s", "1m", "75s", "1h", "90m", "1d"]


# -- legends -----------------------------------------------------------------------------------


def test_legend_format_like_grafana() -> None:
    metric = {"__name__": "llog_ops_total", "op": "put", "outcome": "ok"}
    assert legend_label("{{op}} / {{ outcome }}", metric) == "put / ok"
    assert legend_label("errors {{missing}}", metric) == "errors "
    assert legend_label("", metric) == 'llog_ops_total{op="put", outcome="ok"}'
    assert legend_label("__auto", {"op": "get"}) == '{op="get"}'
    assert legend_label("", {}, "sum(rate(x[1m]))") == "sum(rate(x[1m]))"


def test_at_most_max_series_are_drawn_largest_peaks_first() -> None:
    series = [Series(f"s{i}", (0.0,), (float(i),)) for i in range(MAX_SERIES + 3)]
    series.append(Series("nothing", (0.0,), (math.nan,)))
    shown, hidden = series_to_draw(series)
    assert hidden == 3 and [s.label for s in shown] == [f"s{i}" for i in range(3, MAX_SERIES + 3)]


# -- units -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("unit", "value", "text"), [
    ("s", 0.0042, "4.20 ms"),
    ("s", 95, "1.58 min"),
    ("ms", 1500, "1.50 s"),
    ("bytes", 1536, "1.50 KiB"),
    ("decbytes", 2_500_000, "2.50 MB"),
    ("Bps", 12_300_000, "12.3 MB/s"),
    ("MBs", 5, "5.00 MB/s"),
    ("reqps", 0.25, "0.250 req/s"),
    ("ops", 12_345, "12.3k ops/s"),
    ("percentunit", 0.5, "50.0%"),
    ("percent", 99.5, "99.5%"),
    ("currencyUSD", 1234, "$1.23K"),
    ("currencyUSD", 0.0123, "$0.0123"),
    ("currencyUSD", 0.0000412, "$0.0000412"),  # a few requests' cost: three digits, not $0.0000
    ("s", 2e-10, "0.200 ns"),
    ("short", 2_000_000, "2.00 Mil"),
    ("s", 0, "0 s"),
    ("furlongs", 7, "7.00"),
])
def test_units_read_as_people_write_them(unit: str, value: float, text: str) -> None:
    assert unit_for(unit).format(value) == text


def test_unknown_unit_is_named() -> None:
    assert not unit_for("furlongs").known and unit_for("bytes").known


# -- time --------------------------------------------------------------------------------------


def test_durations_times_and_steps() -> None:
    assert parse_duration_s("1h30m") == 5400 and parse_duration_s("500ms") == 0.5 and parse_duration_s("90") == 90
    with pytest.raises(ValueError):
        parse_duration_s("15 minutes")
    assert parse_time_s("now-5m", 1000.0) == 700.0
    assert parse_time_s("2024-05-29T16:26:40Z", 0) == parse_time_s("2024-05-29T16:26:40", 0) == END_S
    assert parse_time_s("1717000000", 0) == END_S
    assert [auto_step_s(r) for r in (60, 900, 3600, 86400)] == [1, 5, 15, 300]


# -- rendering from canned answers -------------------------------------------------------------

DASHBOARD = {
    "title": "Test dashboard",
    "templating": {"list": [{"name": "instance", "type": "query", "includeAll": True}]},
    "panels": [
        {"type": "row", "title": "Second row", "gridPos": {"x": 0, "y": 20, "w": 24, "h": 1}},
        {"type": "timeseries", "title": "Broken", "gridPos": {"x": 0, "y": 21, "w": 12, "h": 8},
         "targets": [{"refId": "A", "expr": "sum(broken"}]},
        {"type": "row", "title": "Traffic & latency", "gridPos": {"x": 0, "y": 0, "w": 24, "h": 1}},
        {"type": "timeseries", "title": "Requests by op", "gridPos": {"x": 0, "y": 1, "w": 12, "h": 8},
         "fieldConfig": {"defaults": {"unit": "reqps"}},
         "targets": [{"refId": "A", "legendFormat": "{{op}}",
                      "expr": 'sum by (op) (rate(requests_total{instance=~"$instance"}[$__rate_interval]))'},
                     {"refId": "B", "expr": "hidden_total", "hide": True}]},
        {"type": "timeseries", "title": "Nothing here", "gridPos": {"x": 12, "y": 1, "w": 12, "h": 8},
         "fieldConfig": {"defaults": {"unit": "s"}}, "targets": [{"refId": "A", "expr": "absent_metric"}]},
        {"type": "stat", "title": "Spend", "gridPos": {"x": 0, "y": 9, "w": 12, "h": 8},
         "fieldConfig": {"defaults": {"unit": "currencyUSD"}}, "targets": [{"refId": "A", "expr": "spend_usd"}]},
    ],
}


class CannedPrometheus:
    """Answers query_range like Prometheus: ``requests_total`` has 15 ops, ``spend_usd`` one
    series, ``sum(broken`` is a parse error, anything else returns no series."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def __call__(self, promql: str, *, start_s: float, end_s: float, step_s: float) -> dict[str, Any]:
        self.asked.append(promql)
        if "broken" in promql:
            raise PrometheusQueryError(f"{promql!r} at canned: bad_data: 1:11: parse error: unclosed left paren")
        steps = [start_s + i * step_s for i in range(int((end_s - start_s) / step_s) + 1)]
        if promql.startswith("sum by (op)"):
            result = [{"metric": {"op": f"operation-{i}"}, "values": [[t, f"{(i + 1) * (1 + math.sin(t / 60))}"]
                                                                     for t in steps]} for i in range(15)]
        elif promql == "spend_usd":
            result = [{"metric": {}, "values": [[t, f"{t - start_s:.2f}"] for t in steps]}]
        else:
            result = []
        return {"resultType": "matrix", "result": result}


def test_render_draws_a_png_per_row_and_reports_empty_panels(tmp_path: Path) -> None:
    path = tmp_path / "dashboard.json"
    path.write_text(json.dumps(DASHBOARD))
    prometheus = CannedPrometheus()
    lines: list[str] = []
    result = render(load_dashboard(path), tmp_path / "out", prometheus, WINDOW, progress=lines.append)

    assert [p.name for p in result.images] == ["01-traffic-latency.png", "02-second-row.png"]
    for image, panels in zip(result.images, (3, 1)):
        with Image.open(image) as png:
            png.verify()
        with Image.open(image) as png:
            assert png.format == "PNG"
            assert png.size == (2 * PANEL_PX[0], HEADER_PX + math.ceil(panels / 2) * PANEL_PX[1])
    assert prometheus.asked[0] == 'sum by (op) (rate(requests_total{instance=~".*"}[1m]))'
    assert "hidden_total" not in prometheus.asked
    assert result.empty == ("Nothing here",)
    assert len(result.errors) == 1 and "'Broken'" in result.errors[0] and "sum(broken" in result.errors[0]
    assert len(lines) == 3 and lines[0].startswith("row 1/2 'Traffic & latency': 3 panels")
    index = result.index.read_text()
    assert index.count("<img ") == 2 and "Nothing here" in index and "Traffic &amp; latency" in index


def test_command_line_exit_codes_and_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    dashboard = {**DASHBOARD, "panels": [p for p in DASHBOARD["panels"] if p["title"] not in ("Second row", "Broken")]}
    path = tmp_path / "dashboard.json"
    path.write_text(json.dumps(dashboard))
    canned = CannedPrometheus()
    monkeypatch.setattr(render_dashboard, "query", lambda url, promql, **kw: {"resultType": "scalar"})
    monkeypatch.setattr(render_dashboard, "query_range", lambda url, promql, timeout_s, **kw: canned(promql, **kw))
    argv = ["--prometheus", "http://prometheus.invalid", "--out", str(tmp_path / "out"), "--dashboard", str(path),
            "--start", "2024-05-29T16:16:40Z", "--end", "2024-05-29T16:26:40Z"]

    assert render_dashboard.main(argv) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines() == [str(tmp_path / "out" / "01-traffic-latency.png")]
    assert "panels with no data (1): 'Nothing here'" in captured.err
    assert render_dashboard.main([*argv, "--fail-on-empty"]) == 2


def test_unreachable_prometheus_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from devstack import free_ports

    (port,) = free_ports(1)
    code = render_dashboard.main(["--prometheus", f"http://127.0.0.1:{port}", "--out", str(tmp_path), "--timeout", "2"])
    assert code == 1 and "cannot reach Prometheus" in capsys.readouterr().err


def test_help_explains_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        render_dashboard.main(["--help"])
    out = capsys.readouterr().out
    assert exit_info.value.code == 0
    assert "query_range" in out and "--fail-on-empty" in out and "Exit status" in out
