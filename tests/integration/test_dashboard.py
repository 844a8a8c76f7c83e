"""Every panel of the Grafana dashboard shows data from a real run.

No Grafana server can be installed here, so the dashboard is proven against
Prometheus directly: a real Prometheus scrapes a real broker and a real
compactor service through file-based service discovery, their targets
labelled with a run's shape as the load-test harness labels them; the test produces,
consumes (long-polls included), sends malformed requests, waits for a
compaction and a vacuum pass to be scraped, and then runs every target of
every panel through Prometheus's HTTP API, expanded as Grafana would expand
it. Each expression must parse and return at least one finite value over the
run; the failures name the panel.
"""

from __future__ import annotations

import math
import threading
import time
import uuid
from pathlib import Path
from typing import Iterator

import pytest

from devstack import PrometheusQueryError, PrometheusServer, ScrapeTarget, ensure_prometheus, free_ports
from dashboard._model import load_dashboard
from tests._waiting import wait_until
from tests.integration._compactor_process import Service

from .conftest import BrokerFactory, BrokerProcess

pytestmark = pytest.mark.integration

DASHBOARD = Path(__file__).resolve().parents[2] / "grafana" / "leaderless-log-observability.json"
SCRAPE_MS = 500
PARTITIONS = 4


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[PrometheusServer]:
    server = PrometheusServer(ensure_prometheus(), tmp_path, port=free_ports(1)[0], scrape_interval_ms=SCRAPE_MS)
    with server:
        yield server


def _has_value(server: PrometheusServer, promql: str) -> bool:
    return any(float(s["value"][1]) > 0 for s in server.query(promql)["result"])


def _load(broker: BrokerProcess, topic: str, seconds: float) -> None:
    """Produce to every partition and follow the tail with long-polling consumes."""
    client = broker.new_client()
    follower = broker.new_client()
    next_offset = {p: 1 for p in range(PARTITIONS)}
    stop = threading.Event()

    def follow() -> None:
        while not stop.is_set():
            reply = follower.consume(
                [{"topic": topic, "partition": p, "fetch_offset": o} for p, o in next_offset.items()],
                max_wait_ms=300,
            )
            assert reply.status == 200, reply.body
            for part in reply.json["results"]:
                if part.get("next_fetch_offset"):
                    next_offset[part["partition"]] = part["next_fetch_offset"]

    def malformed() -> None:
        reply = client.request("POST", "/produce", {"topic_partitions": [{"topic": topic, "partition": -1}]})
        assert reply.status == 400

    # A counter series appears at its first increment, which rate() cannot
    # see; the second malformed request is the one the panel shows.
    malformed()
    thread = threading.Thread(target=follow, daemon=True)
    thread.start()
    deadline = time.monotonic() + seconds
    i = 0
    while time.monotonic() < deadline:
        batches = [{"topic": topic, "partition": p, "records": [f"r{i}-{k}" * 20 for k in range(20)]}
                   for p in range(PARTITIONS)]
        reply = client.produce(batches)
        assert reply.status == 200, reply.body
        i += 1
    malformed()
    stop.set()
    thread.join(10)
    follower.close()
    client.close()


def test_every_panel_returns_data_from_a_real_broker_and_compactor(
    prometheus: PrometheusServer, broker_factory: BrokerFactory, llog_env: dict[str, str], tmp_path: Path
) -> None:
    topic = f"dash-{uuid.uuid4().hex[:8]}"
    broker = broker_factory()
    # The labels the load-test harness gives every target of a run (stack.json's scrape_labels).
    run = {"scenario": "dashboard-test", "run_id": topic, "brokers": "1", "partitions": str(PARTITIONS),
           "target_records_per_second": "0", "concurrency": "1", "record_bytes": "80"}
    compactor = Service(llog_env, tmp_path, "dash-compactor", extra_env={
        "LLOG_COMPACTOR_DISCOVERY_INTERVAL_MS": "500", "LLOG_VACUUM_INTERVAL_MS": "1000",
        "LLOG_VACUUM_GRACE_MS": "1000",
        "LLOG_VACUUM_ALLOW_UNSAFE_GRACE": "true", "LLOG_RETENTION_INTERVAL_MS": "1000",
    })
    try:
        compactor.wait_healthy()
        prometheus.set_targets([
            ScrapeTarget(f"{broker.host}:{broker.port}", job="broker", labels=run),
            ScrapeTarget(f"127.0.0.1:{compactor.port}", job="compactor", labels=run),
        ])
        wait_until(lambda: _has_value(prometheus, "sum(up)") and len(prometheus.query("up == 1")["result"]) == 2,
                   30, f"Prometheus to scrape both services: {prometheus.active_targets()}")
        started = time.time() - 2
        _load(broker, topic, seconds=6)
        wait_until(lambda: _has_value(prometheus, "sum(llog_compactor_compacted_offsets_total)"), 60,
                   "a compaction to be scraped")
        wait_until(lambda: _has_value(prometheus, 'sum(llog_vacuum_runs_total{dry_run="False"})'), 60,
                   "a vacuum pass to be scraped")
        wait_until(lambda: _has_value(prometheus, "sum(llog_consume_long_poll_wait_seconds_count)"), 30,
                   "a long poll to be scraped")
        committed = broker.client.request("POST", f"/groups/{topic}-group/offsets", {"offsets": [
            {"topic": topic, "partition": 0, "offset": 1}]})
        assert committed.status == 200, committed.json
        lag = f'sum(llog_consumer_group_lag{{group="{topic}-group"}})'  # in the panels' range, at a 1 s step
        wait_until(lambda: prometheus.query_range(lag, start_s=started, end_s=time.time(), step_s=1.0)["result"],
                   60, "a consumer group's lag to be scraped")
        failures = _empty_panels(prometheus, started, time.time())
    finally:
        compactor.close()
    assert not failures, "panels that show nothing:\n" + "\n".join(failures)


def _empty_panels(prometheus: PrometheusServer, start_s: float, end_s: float) -> list[str]:
    dashboard = load_dashboard(DASHBOARD)
    step_s = 1.0
    failures = []
    panels = list(dashboard.panels())
    assert len(panels) >= 40, "the dashboard lost its panels"
    for panel in panels:
        assert panel.targets, f"panel {panel.title!r} has no query"
        for target in panel.targets:
            promql = dashboard.expand(target.expr, step_s, range_s=end_s - start_s,
                                      scrape_interval_s=SCRAPE_MS / 1000)
            try:
                result = prometheus.query_range(promql, start_s=start_s, end_s=end_s, step_s=step_s)["result"]
            except PrometheusQueryError as exc:
                failures.append(f"{panel.title!r} [{target.ref_id}] does not run: {exc}")
                continue
            finite = [v for series in result for _, v in series["values"] if math.isfinite(float(v))]
            if not finite:
                failures.append(f"{panel.title!r} [{target.ref_id} {target.legend_format!r}] is empty: {promql}")
    return failures
