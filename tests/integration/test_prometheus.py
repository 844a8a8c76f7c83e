"""A real Prometheus scrapes a real broker through file-based service discovery.

Prometheus (Debian's package, fetched into the per-user cache on first use)
starts once per module; each test registers its own broker as a target.
"""

from __future__ import annotations

import subprocess
import time
import uuid
from pathlib import Path
from typing import Iterator

import pytest

from devstack import (
    PrometheusQueryError,
    PrometheusServer,
    ScrapeTarget,
    ensure_prometheus,
    ensure_promtool,
    free_ports,
)
from tests._waiting import wait_until

from .conftest import BrokerFactory, BrokerProcess

SCRAPE_WAIT_S = 30.0


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusServer]:
    server = PrometheusServer(ensure_prometheus(), tmp_path_factory.mktemp("prometheus"), port=free_ports(1)[0])
    with server:
        yield server


def _values(server: PrometheusServer, promql: str) -> list[float]:
    return [float(sample["value"][1]) for sample in server.query(promql)["result"]]


def _scraped(server: PrometheusServer, instance: str) -> bool:
    return _values(server, f'up{{job="broker",instance="{instance}"}}') == [1.0]


def _produce(broker: BrokerProcess, topic: str, count: int) -> None:
    reply = broker.client.produce([{"topic": topic, "partition": 0, "records": [f"r{i}" for i in range(count)]}])
    assert reply.status == 200, reply.body
    assert all(result["ok"] for result in reply.json["results"]), reply.json


def test_prometheus_scrapes_a_broker_through_file_sd(
    prometheus: PrometheusServer, broker_factory: BrokerFactory
) -> None:
    broker = broker_factory()
    instance = f"{broker.host}:{broker.port}"
    prometheus.set_targets([ScrapeTarget(instance, job="broker", labels={"test": "file_sd"})])
    topic = f"topic-{uuid.uuid4().hex[:10]}"
    _produce(broker, topic, 5)

    wait_until(lambda: _scraped(prometheus, instance), SCRAPE_WAIT_S,
               f"up == 1 for {instance}; targets: {prometheus.active_targets()}")
    records = f'llog_produce_records_total{{job="broker",instance="{instance}",test="file_sd"}}'
    wait_until(lambda: _values(prometheus, records) == [5.0], SCRAPE_WAIT_S, f"{records} == 5")

    _produce(broker, topic, 3)
    wait_until(lambda: _values(prometheus, records) == [8.0], SCRAPE_WAIT_S, f"{records} == 8 after 3 more")
    # Evaluated at end, end - 1 s, ...: the last step sees the latest scrape.
    end_s = time.time()
    (series,) = prometheus.query_range(records, start_s=end_s - 120, end_s=end_s, step_s=1)["result"]
    seen = [float(v) for _, v in series["values"]]
    assert seen[0] <= 5.0 < seen[-1] == 8.0, seen  # the counter rose between scrapes
    assert series["metric"]["__name__"] == "llog_produce_records_total"


def test_replacing_targets_stops_scraping_the_old_one(
    prometheus: PrometheusServer, broker_factory: BrokerFactory
) -> None:
    first, second = broker_factory(), broker_factory()
    old, new = f"{first.host}:{first.port}", f"{second.host}:{second.port}"
    prometheus.set_targets([ScrapeTarget(old, job="broker")])
    wait_until(lambda: _scraped(prometheus, old), SCRAPE_WAIT_S, f"up == 1 for {old}")
    prometheus.set_targets([ScrapeTarget(new, job="broker")])
    wait_until(
        lambda: {t["labels"]["instance"] for t in prometheus.active_targets()} == {new},
        SCRAPE_WAIT_S, f"only {new} among the active targets",
    )
    wait_until(lambda: _scraped(prometheus, new), SCRAPE_WAIT_S, f"up == 1 for {new}")


def test_a_bad_query_raises_with_prometheus_error_text(prometheus: PrometheusServer) -> None:
    with pytest.raises(PrometheusQueryError, match="bad_data"):
        prometheus.query("sum(")


def test_promtool_check_metrics_on_the_broker_exposition(
    broker_factory: BrokerFactory, tmp_path: Path, record_property: pytest.RecordProperty
) -> None:
    broker = broker_factory()
    _produce(broker, f"topic-{uuid.uuid4().hex[:10]}", 2)
    reply = broker.client.request("GET", "/metrics/prometheus")
    assert reply.status == 200
    result = subprocess.run(
        [ensure_promtool(), "check", "metrics"], input=reply.body, capture_output=True, timeout=60, check=False
    )
    report = (result.stdout + result.stderr).decode(errors="replace")
    (tmp_path / "promtool-check-metrics.txt").write_text(report)
    record_property("promtool_check_metrics", report)
    print(f"promtool check metrics (exit {result.returncode}):\n{report}")
    # promtool 2.42 exits 3 for lint findings (no help text, a counter not
    # ending in _total, a unit not in base units ...) and 1 when the
    # exposition does not parse: both fail.
    assert result.returncode == 0 and not report.strip(), report
