"""The quick run's wiring of Prometheus and the dashboard, without starting anything."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadtest._pipeline import Service
from loadtest.quick_observability import scrape_targets
from loadtest.quick_run import dashboard_dir, parse_args, scrape_doc


def test_the_broker_and_the_compactor_service_become_scrape_targets_labelled_with_the_run() -> None:
    services = [Service("broker", "http://127.0.0.1:41001", None),  # type: ignore[arg-type]
                Service("compactor", "http://127.0.0.1:41002", None)]  # type: ignore[arg-type]
    targets = scrape_targets(scrape_doc(services, partitions=3))
    assert [(t.address, t.job) for t in targets] == [("127.0.0.1:41001", "broker"), ("127.0.0.1:41002", "compactor")]
    labels = targets[0].labels
    assert labels["scenario"] == "quick-run" and labels["partitions"] == "3" and labels["brokers"] == "1"
    assert labels["run_id"].startswith("quick-run-")


@pytest.mark.parametrize(("argv", "expected"), [
    ([], Path(".llog-stack/quick-run-dashboard").resolve()),
    (["--data-dir", "/tmp/x"], Path("/data/dashboard")),
    (["--keep"], Path("/data/dashboard")),
    (["--dashboard-dir", "/tmp/pictures"], Path("/tmp/pictures")),
])
def test_the_dashboard_stays_with_a_lasting_data_directory(argv: list[str], expected: Path) -> None:
    assert dashboard_dir(parse_args(argv), Path("/data")) == expected


def test_help_tells_about_prometheus_the_dashboard_and_keep(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(["--help"])
    out = capsys.readouterr().out
    assert "Prometheus" in out and "index.html" in out and "--dashboard-dir" in out
    assert "Prometheus included" in out  # what --keep leaves running
