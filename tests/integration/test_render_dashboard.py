"""The dashboard renderer against a real Prometheus scraping a real broker.

Prometheus (scraping every 250 ms) starts once for the module. Once, the
module produces through the session's broker and waits until Prometheus has
scraped the payload counter before and after a second produce (so ``rate()``
has two different samples); the tests draw the repository's own dashboard. ``LLOG_TEST_RENDER_OUT=<dir>`` keeps the
first test's PNGs there to look at.
"""

from __future__ import annotations

import functools
import json
import os
import re
import time
import uuid
from pathlib import Path
from typing import Iterator

import pytest
from PIL import Image

from devstack import PrometheusServer, ScrapeTarget, ensure_prometheus, free_ports, query_range
from dashboard._model import load_dashboard
from dashboard._draw import PANEL_PX, columns_for, image_size_px
from dashboard._panel_data import TimeRange
from dashboard.render import DEFAULT_DASHBOARD, auto_step_s, main, render
from tests._waiting import wait_until
from tests.conftest import TEST_TOPICS_ENV, new_root_prefix

from .conftest import BrokerProcess

SCRAPE_WAIT_S = 30.0
PRODUCE_PANEL = re.compile(r"\bproduce\b.*\b(MB/s|throughput)\b", re.IGNORECASE)
"""The produce-throughput panel, found by title (the dashboard's panels change)."""


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusServer]:
    server = PrometheusServer(ensure_prometheus(), tmp_path_factory.mktemp("prometheus"),
                              port=free_ports(1)[0], scrape_interval_ms=250)
    with server:
        yield server


def _values(server: PrometheusServer, promql: str) -> list[float]:
    return [float(sample["value"][1]) for sample in server.query(promql)["result"]]


def _produce(broker: BrokerProcess, topic: str, count: int) -> None:
    records = [f"record-{i}-" + "x" * 200 for i in range(count)]
    reply = broker.client.produce([{"topic": topic, "partition": 0, "records": records}])
    assert reply.status == 200, reply.body
    assert all(result["ok"] for result in reply.json["results"]), reply.json


def _broker_with_traffic(prometheus: PrometheusServer, broker: BrokerProcess) -> None:
    """Produce, let Prometheus scrape, produce again, and wait until it has scraped the rise."""
    instance = f"{broker.host}:{broker.port}"
    prometheus.set_targets([ScrapeTarget(instance, job="broker")])
    topic = f"topic-{uuid.uuid4().hex[:10]}"
    payload = f'llog_produce_payload_bytes_total{{job="broker",instance="{instance}"}}'
    scrapes = f"count_over_time({payload}[5m])"
    _produce(broker, topic, 20)
    first = wait_until(lambda: _values(prometheus, payload), SCRAPE_WAIT_S,
                       f"a scrape of {payload}; targets: {prometheus.active_targets()}")[0]
    _produce(broker, topic, 20)
    wait_until(lambda: any(v > first for v in _values(prometheus, payload)), SCRAPE_WAIT_S,
               f"{payload} above {first} after a second produce")
    wait_until(lambda: any(v >= 2 for v in _values(prometheus, scrapes)), SCRAPE_WAIT_S, f"{scrapes} >= 2")


@pytest.fixture(scope="module")
def scraped(prometheus: PrometheusServer, stack, openapi, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[PrometheusServer]:
    """Prometheus once it has scraped a broker's produce traffic rise (shared by the module's tests).
    The module's own broker: a session broker's idle keep-alive connection may be closed under a POST."""
    env = {**stack.env(root_prefix=new_root_prefix()), **TEST_TOPICS_ENV, "LLOG_BATCH_MAX_DELAY_MS": "20"}
    broker = BrokerProcess(env, ["--role", "both", "--broker-id", "render"],
                           tmp_path_factory.mktemp("render") / "broker.log", openapi)
    try:
        _broker_with_traffic(prometheus, broker)
        yield prometheus
    finally:
        broker.stop()


def test_renders_the_dashboard_with_produce_throughput(scraped: PrometheusServer, tmp_path: Path) -> None:
    prometheus = scraped
    out = Path(os.environ.get("LLOG_TEST_RENDER_OUT") or tmp_path / "render")  # set it to keep the PNGs
    end_s = time.time()
    window = TimeRange(end_s - 120, end_s, auto_step_s(120))
    dashboard = load_dashboard(DEFAULT_DASHBOARD)
    fetch = functools.partial(query_range, prometheus.url)
    result = render(dashboard, out, fetch, window, scrape_interval_s=prometheus.scrape_interval_ms / 1000)

    assert result.errors == (), "\n".join(result.errors)
    rows = [row for row in dashboard.rows if row.panels]
    assert len(result.images) == len(rows)
    for row, image in zip(rows, result.images):
        assert image.exists() and image.name[:3].rstrip("-").isdigit(), image
        with Image.open(image) as png:
            png.verify()
        with Image.open(image) as png:
            panels = [d for d in result.panels if d.panel in row.panels]
            assert png.size == image_size_px(len(row.panels), columns_for(panels)), image
            assert png.size[0] >= 2 * PANEL_PX[0]
    assert result.index.read_text().count("<img ") == len(result.images)

    produce = [d for d in result.panels if PRODUCE_PANEL.search(d.panel.title)]
    assert produce, f"no produce-throughput panel among {[d.panel.title for d in result.panels]}"
    peaks = [s.peak for d in produce for s in d.series]
    assert not any(d.empty for d in produce) and max(peaks) > 0, produce


def test_command_line_prints_the_images_and_names_empty_panels(
    scraped: PrometheusServer, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    prometheus = scraped
    # The real dashboard and one panel no process exports a metric for.
    doc = json.loads(DEFAULT_DASHBOARD.read_text())
    never = "sum(rate(llog_no_such_metric_total[$__rate_interval]))"
    doc["panels"].append({"type": "timeseries", "title": "Never scraped", "targets": [{"refId": "A", "expr": never}],
                          "gridPos": {"x": 0, "y": 999, "w": 12, "h": 8}})
    dashboard = tmp_path / "dashboard.json"
    dashboard.write_text(json.dumps(doc))
    out = tmp_path / "cli"
    code = main(["--prometheus", prometheus.url, "--out", str(out), "--dashboard", str(dashboard),
                 "--last", "2m", "--fail-on-empty"])
    captured = capsys.readouterr()
    printed = [Path(line) for line in captured.out.splitlines()]
    assert printed and all(p.exists() and p.suffix == ".png" and p.parent == out for p in printed)
    rows = [line for line in captured.err.splitlines() if re.match(r"\[render\] row \d+/\d+ ", line)]
    assert len(rows) == len(printed), captured.err
    assert code == 2, captured.err
    assert re.search(r"panels with no data \(\d+\): .*'Never scraped'", captured.err), captured.err


def test_a_bad_expression_names_the_panel_and_the_expression(
    prometheus: PrometheusServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dashboard = tmp_path / "bad.json"
    dashboard.write_text(json.dumps({"title": "bad", "panels": [
        {"type": "timeseries", "title": "Broken panel", "gridPos": {"x": 0, "y": 0, "w": 12, "h": 8},
         "targets": [{"refId": "A", "expr": "sum(rate(up[$__rate_interval])"}]},
    ]}))
    code = main(["--prometheus", prometheus.url, "--out", str(tmp_path / "out"), "--dashboard", str(dashboard),
                 "--last", "5m"])
    err = capsys.readouterr().err
    assert code == 1, err
    assert "'Broken panel'" in err and "sum(rate(up[1m])" in err and "bad_data" in err, err
