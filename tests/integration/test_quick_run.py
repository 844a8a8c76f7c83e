"""``./quick_run.sh`` end to end on a small data set, with its Prometheus and dashboard.

One run (2,000 rows, 2 partitions) on its own stack: it must pass its own
checks, have Prometheus scrape the broker and the compactor service, draw
the dashboard over the run to PNGs that show something, write an index.html
that shows each of them, print the index beside the report, and stop
Prometheus when it ends (no --keep). A second Prometheus opened on the
run's TSDB afterwards shows what the first one scraped.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from PIL import Image

from devstack import PrometheusServer, ensure_prometheus, free_ports

pytest.importorskip("pyspark")

pytestmark = [pytest.mark.integration, pytest.mark.exclusive]
REPO = Path(__file__).resolve().parents[2]
ROWS = 2000
PANELS_WITH_DATA = ("Produce and commit rate", "Produce and consume MB/s", "Processes up", "Compacted MB/s")
"""Panels the run must fill: produce, consume, the scrape itself, compaction."""


def _distinct_colours(path: Path) -> int:
    with Image.open(path) as png:
        return len(png.convert("RGB").getcolors(1 << 20) or ())


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    data_dir = tmp_path_factory.mktemp("quick-run")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "loadtest.quick_run", "--rows", str(ROWS), "--partitions", "2",
         "--data-dir", str(data_dir), "--timeout-s", "300"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=900, check=False,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return done, data_dir


def test_the_run_is_scraped_and_its_dashboard_drawn(quick_run: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    done, data_dir = quick_run
    out = done.stdout
    assert re.search(r"prometheus +starting Prometheus", out), out
    assert re.search(r"has scraped the broker and the compactor service", out), out
    assert re.search(r"exactly once \(idempotent tasks\): [\d,]+ records sent again were recognized", out), out
    assert re.search(r"dashboard +\[observability\] row 1/\d+ ", out), out  # progress while drawing
    # Spark's own Kafka source read the topic through the broker's Kafka listener, key for key.
    assert re.search(r"kafka +2,000 records, checksum [0-9a-f]{16}: match the input, 2,000 keys = customer_id", out), out

    index = data_dir / "dashboard" / "index.html"
    assert re.search(rf"^  dashboard +{re.escape(str(index))}$", out, re.MULTILINE), out
    images = sorted(index.parent.glob("*.png"))
    assert len(images) >= 5, images
    page = index.read_text()
    for image in images:
        assert f"src='{image.name}'" in page, image
        assert image.name in out  # listed in the report
        assert _distinct_colours(image) > 10, f"{image} looks blank"
    assert page.count("<img ") == len(images)
    empty = re.search(r"<b>No data:</b> (.*)</p>", page)
    missing = [title for title in PANELS_WITH_DATA if empty and title in empty.group(1)]
    assert missing == [], f"panels without data from the run: {missing}"


def test_prometheus_stops_with_the_run(quick_run: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    done, _ = quick_run
    match = re.search(r"Prometheus (http://127\.0\.0\.1:\d+) has scraped", done.stdout)
    assert match, done.stdout
    with pytest.raises((urllib.error.URLError, OSError)):
        urllib.request.urlopen(f"{match.group(1)}/-/ready", timeout=2)


def test_prometheus_scraped_the_produced_records_and_the_compaction(
    quick_run: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    _, data_dir = quick_run
    # The same data directory, so the same TSDB: the run's samples, read back after it.
    with PrometheusServer(ensure_prometheus(), data_dir, port=free_ports(1)[0]) as server:
        def peak(promql: str) -> float:
            return sum(float(s["value"][1]) for s in server.query(promql)["result"])

        assert peak('max_over_time(llog_produce_records_total{job="broker",scenario="quick-run"}[1h])') == ROWS
        assert peak('max_over_time(llog_compactor_compacted_bytes_total{job="compactor"}[1h])') > 0
