"""devstack's Prometheus pieces that need no server: targets file, config, CLI targets, errors."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from devstack import PrometheusQueryError, PrometheusServer, ScrapeTarget, free_ports, query
from devstack.__main__ import _scrape_target


def test_targets_file_carries_job_and_metrics_path_per_group(tmp_path: Path) -> None:
    server = PrometheusServer(Path("/nonexistent/prometheus"), tmp_path, port=9)
    server.set_targets([ScrapeTarget("127.0.0.1:1", job="broker", labels={"zone": "a"})])
    server.add_targets([ScrapeTarget("127.0.0.1:2", job="compactor", metrics_path="/m")])
    server.add_targets([ScrapeTarget("127.0.0.1:1", job="broker")])  # same address and path: replaced
    groups = json.loads(server.targets_path.read_text())
    assert groups == [
        {"targets": ["127.0.0.1:1"], "labels": {"job": "broker", "__metrics_path__": "/metrics/prometheus"}},
        {"targets": ["127.0.0.1:2"], "labels": {"job": "compactor", "__metrics_path__": "/m"}},
    ]
    server.remove_target("127.0.0.1:2", "/m")
    assert [g["targets"] for g in json.loads(server.targets_path.read_text())] == [["127.0.0.1:1"]]


def test_config_scrapes_the_targets_file_at_the_interval(tmp_path: Path) -> None:
    server = PrometheusServer(Path("/nonexistent/prometheus"), tmp_path, port=9, scrape_interval_ms=500)
    server._write_config()
    text = server.config_path.read_text()
    assert "scrape_interval: 500ms" in text and "scrape_timeout: 500ms" in text
    assert json.dumps(str(server.targets_path.resolve())) in text


def test_cli_target_syntax() -> None:
    assert _scrape_target("127.0.0.1:8080", "/p") == ScrapeTarget("127.0.0.1:8080", job="broker", metrics_path="/p")
    assert _scrape_target("compactor=localhost:9", "/p").job == "compactor"
    with pytest.raises(argparse.ArgumentTypeError):
        _scrape_target("localhost", "/p")


def test_query_against_nothing_raises_a_clear_error() -> None:
    (port,) = free_ports(1)
    with pytest.raises(PrometheusQueryError, match="cannot reach Prometheus"):
        query(f"http://127.0.0.1:{port}", "up", timeout_s=2)
