"""``loadtest.bench_kafka`` with librdkafka, against the test stack on a small topic: the
benchmark runs end to end (a broker with its listener, produce, consume every record back)
and prints its figures. Its numbers are not judged here (benchmarks print, tests do not time)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.exclusive]
REPO = Path(__file__).resolve().parents[2]


def test_the_librdkafka_benchmark_moves_every_record_and_prints_its_figures(llog_env: dict[str, str]) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "loadtest.bench_kafka", "--client", "librdkafka", "--no-kafka", "--records", "2000",
         "--partitions", "4"],
        cwd=REPO, env={**os.environ, **llog_env, "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
        timeout=300, check=False)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    assert "starting a private local stack" not in out  # it used the stack it was given
    assert re.search(r"llog run 1: consume [\d.]+ MB/s \(2,000 records\)", out), out[-4000:]
    for row in ("produce MB/s", "produce p99 ms", "produce broker CPU ms/MB", "consume MB/s"):
        figure = re.search(rf"^  {re.escape(row)} +([\d.]+) \[", out, re.MULTILINE)
        assert figure and float(figure.group(1)) > 0, f"{row}: {out[-2000:]}"
