"""``loadtest/_harness/summary.py`` over a synthetic run directory (``tests/_run_dir.py``).

The reconciliation's outcomes each have a test: everything adds up; the
client acknowledged more than the brokers accepted; a broker restarted
(a lower bound, not a failure); an artifact is missing; the read-back finds
an acknowledged range missing; plus the arithmetic of the billing per GB.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadtest._harness.readback import OffsetRange, check_read_back, merge_ranges
from loadtest._harness.samples import increase, run_total
from loadtest._harness.summary import build_summary, format_summary
from tests._run_dir import BROKER_COST_USD, COMPACTOR_COST_USD, STORED_BYTES, write_json, write_run


class FakeReadBack:
    """Every partition holds offsets 1..high watermark, except the ``holes``."""

    def __init__(self, high_watermarks: dict[str, int], holes: dict[str, list[OffsetRange]] | None = None) -> None:
        self.hwm = high_watermarks
        self.holes = holes or {}

    def high_watermark(self, topic: str, partition: int) -> int:
        return self.hwm.get(f"{topic}:{partition}", 0)

    def missing_ranges(self, topic: str, partition: int, start: int, end: int) -> list[OffsetRange]:
        key, hwm = f"{topic}:{partition}", self.high_watermark(topic, partition)
        gone = [(max(s, start), min(e, end)) for s, e in self.holes.get(key, []) if s <= end and e >= start]
        if end > hwm:
            gone.append((max(start, hwm + 1), end))
        return merge_ranges(gone)


FULL_LOG = {f"lt:{p}": 1250 for p in range(4)}


def _sub(actual: dict, expected: dict) -> bool:
    """``actual`` holds every key of ``expected`` with the same value."""
    return {k: actual.get(k) for k in expected} == expected


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    return write_run(tmp_path / "run")


def test_ok_run_adds_up(run_dir: Path) -> None:
    summary = build_summary(run_dir, read_back=FakeReadBack(FULL_LOG))
    assert json.loads((run_dir / "summary.json").read_text()) == summary
    run = summary["run"]
    assert (run["run_id"], run["scenario"], run["duration_s"]) == ("20261124T021500Z-smoke", "smoke", 150.0)
    assert run["git"] == {"commit": "0123456789abcdef0123456789abcdef01234567", "dirty": True, "branch": "main"}
    client = summary["client"]
    assert client["produce"]["acked_records"] == 5000
    assert client["throughput"]["records_per_s"] == pytest.approx(5000 / 150, abs=1e-3)
    assert client["throughput"]["mb_per_s"] == pytest.approx(0.5 / 150, abs=1e-6)
    assert client["windows"]["records_per_s"] == {"min": 30.0, "median": 33.333, "max": 36.667}
    assert client["latency_ms"]["e2e"]["p99"] == 96.0
    assert client["remaps"] == {"count": 1, "events": 1, "by_reason": {"timeout": 1}, "no_owner_left": 0}
    brokers = summary["brokers"]
    assert brokers["totals"]["accepted_records"] == 5000 and brokers["totals"]["accepted_bytes"] == 500_000
    assert brokers["totals"]["oxia_ops"]["put_cas"] == {"ok": 200, "conflict": 2}
    assert brokers["per_broker"]["broker-1"]["s3_ops"]["put"] == {"ok": 25, "error": 0}
    compactors = summary["compactors"]["totals"]
    assert compactors["runs"]["compacted"] == 10 and compactors["compacted_offsets"] == 5000
    assert compactors["lag"]["max_offsets"] == 30 and compactors["lag"]["peak_max_offsets"] == 630
    assert compactors["lag"]["worst"][0] == {"partition": "lt:3", "offsets": 30}
    assert compactors["vacuum"]["runs"] == {"ok": 5, "ok (dry run)": 0}
    assert _sub(summary["processes"]["broker-2"], {"cpu_s": 30.0, "cpu_pct": 20.0, "peak_rss_bytes": 151 << 20})
    assert summary["host"]["busy_cpu_pct"] == 50.0 and summary["host"]["iowait_cpu_pct"] == 5.0
    rec = summary["reconciliation"]
    assert rec["ok"] is True and rec["errors"] == [] and rec["warnings"] == []
    assert rec["counters"]["outcome"] == "ok"
    assert _sub(rec["read_back"], {"ran": True, "records_confirmed": 5000, "records_missing": 0, "mismatches": []})
    text = format_summary(summary)
    assert "reconciliation OK" in text and "20261124T021500Z-smoke" in text


def test_billing_per_gb_ingested(run_dir: Path) -> None:
    s3 = build_summary(run_dir, read_back=None)["s3"]
    cost = 2 * BROKER_COST_USD + COMPACTOR_COST_USD  # 0.007: request cost sums across processes
    assert s3["billing"]["request_cost_usd"] == pytest.approx(cost)
    assert s3["billing"]["stored_bytes"] == STORED_BYTES  # storage takes the max: one shared prefix
    assert s3["ingested_bytes"] == 500_000
    assert s3["request_cost_usd_per_gb_ingested"] == pytest.approx(cost / 0.0005)  # $14 per GB
    assert s3["requests_by_op"] == {"delete": 15, "get": 20, "put": 60}


def test_client_acked_more_than_brokers_accepted_is_an_error(tmp_path: Path) -> None:
    run_dir = write_run(tmp_path / "run", broker_records={"broker-2": (0, 500, 1000, 1500, 2000, 2400)})
    rec = build_summary(run_dir, read_back=None)["reconciliation"]
    assert rec["ok"] is False
    assert rec["counters"]["outcome"] == "missing"
    assert rec["counters"]["records"] == {"client_acked": 5000, "brokers_accepted": 4900, "difference": -100,
                                          "outcome": "missing"}
    assert any("fewer records than the client acknowledged" in e for e in rec["errors"])


def test_brokers_accepting_more_is_explained_by_timeouts(tmp_path: Path) -> None:
    run_dir = write_run(tmp_path / "run", broker_records={"broker-2": (0, 500, 1000, 1500, 2000, 2510)},
                        produce_errors={"timeout": 2})
    rec = build_summary(run_dir, read_back=None)["reconciliation"]
    assert rec["ok"] is True
    assert rec["counters"]["outcome"] == "explained_by_unknown"
    assert rec["counters"]["unknown_records_bound"] == 20  # 2 timeouts x 10 records per request


def test_broker_restart_makes_counters_a_lower_bound(tmp_path: Path) -> None:
    # broker-2 is killed after the third sample (300 records it accepted then are lost with it)
    run_dir = write_run(tmp_path / "run", broker_records={"broker-2": (0, 500, 1000, 200, 700, 1200)},
                        broker_uptimes={"broker-2": (50, 80, 110, 10, 40, 70)})
    summary = build_summary(run_dir, read_back=FakeReadBack(FULL_LOG))
    rec = summary["reconciliation"]
    assert summary["brokers"]["per_broker"]["broker-2"]["restarts"] == 1
    assert summary["brokers"]["per_broker"]["broker-2"]["accepted_records"] == 1000 + 1200
    assert _sub(rec["counters"], {"outcome": "lower_bound", "lower_bound": True, "restarted_brokers": ["broker-2"]})
    assert rec["ok"] is True
    assert any("broker-2 restarted 1 time" in w for w in rec["warnings"])
    assert any("lower bound" in w for w in rec["warnings"])


def test_a_broker_dead_at_the_end_makes_counters_a_lower_bound(tmp_path: Path) -> None:
    # broker-2 died after its fourth sample: what it accepted since is counted nowhere
    run_dir = write_run(tmp_path / "run", broker_records={"broker-2": (0, 500, 1000, 1500, 1500, 1500)},
                        failed_scrapes={"broker-2": [4, 5]})
    rec = build_summary(run_dir, read_back=FakeReadBack(FULL_LOG))["reconciliation"]
    assert _sub(rec["counters"], {"outcome": "lower_bound", "restarted_brokers": ["broker-2"]})
    assert rec["ok"] is True and any("restarted or died" in w for w in rec["warnings"])


def test_missing_artifacts_and_failed_scrapes_are_warnings(tmp_path: Path) -> None:
    run_dir = write_run(tmp_path / "run", failed_scrapes={"broker-1": [2]})
    (run_dir / "git.json").unlink()
    (run_dir / "remap-events.jsonl").unlink()
    with (run_dir / "client-30s.jsonl").open("a") as f:
        f.write('{"window_start_ms": 1, "produce": {"rec')  # a writer killed mid-line
    summary = build_summary(run_dir, read_back=None)
    warnings = summary["reconciliation"]["warnings"]
    assert "artifact missing or unreadable: git.json" in warnings
    assert "artifact missing or unreadable: remap-events.jsonl" in warnings
    assert "client-30s.jsonl: 1 malformed line(s) skipped" in warnings
    assert any(w.startswith("broker-1: 1 of 6 scrapes failed (last error: connection refused)") for w in warnings)
    assert summary["artifacts"]["missing"] == ["git.json", "remap-events.jsonl"]
    assert summary["run"]["git"]["commit"] is None
    assert summary["reconciliation"]["ok"] is True  # the counters still add up: brokers are sampled after


def test_no_metrics_samples(tmp_path: Path) -> None:
    run_dir = write_run(tmp_path / "run")
    (run_dir / "metrics-30s.jsonl").write_text("")
    summary = build_summary(run_dir, read_back=None)
    warnings = summary["reconciliation"]["warnings"]
    assert any("metrics-30s.jsonl has no samples" in w for w in warnings)
    assert summary["reconciliation"]["counters"]["outcome"] == "unavailable"
    assert summary["brokers"]["count"] == 0 and summary["s3"]["request_cost_usd_per_gb_ingested"] == 0
    format_summary(summary)  # renders without the parts that are missing


def test_read_back_names_the_missing_range(run_dir: Path) -> None:
    read_back = FakeReadBack(FULL_LOG, holes={"lt:2": [(500, 600)]})
    rec = build_summary(run_dir, read_back=read_back)["reconciliation"]
    assert rec["ok"] is False
    assert rec["read_back"]["records_missing"] == 101
    (mismatch,) = rec["read_back"]["mismatches"]
    assert _sub(mismatch, {"partition": "lt:2", "missing": [[500, 600]], "problem": "acknowledged offsets missing"})
    assert any("lt:2" in e and "500-600" in e for e in rec["errors"])
    assert "reconciliation FAILED" in format_summary(build_summary(run_dir, read_back=read_back))


def test_read_back_high_watermark_short_of_acked(run_dir: Path) -> None:
    rec = build_summary(run_dir, read_back=FakeReadBack({**FULL_LOG, "lt:0": 1200}))["reconciliation"]
    assert rec["ok"] is False
    (mismatch,) = rec["read_back"]["mismatches"]
    assert _sub(mismatch, {"partition": "lt:0", "missing": [[1201, 1250]], "high_watermark": 1200,
                             "max_acked": 1250})


def test_read_back_counts_unacked_offsets_against_unknown_outcomes() -> None:
    acked = {"lt:0": [[1, 10], [21, 30]], "lt:1": [[1, 5]]}
    read_back = FakeReadBack({"lt:0": 32, "lt:1": 5, "lt:2": 3})
    result = check_read_back(read_back, acked, partitions=["lt:2"], unacked_bound=10)
    # lt:0: 11-20 and 31-32 unacknowledged; lt:2: 3 offsets nobody acknowledged
    assert _sub(result, {"partitions_checked": 3, "acked_records": 25, "unacked_offsets": 15,
                           "unacked_within_bound": False})
    assert [m["partition"] for m in result["mismatches"]] == ["lt:0", "lt:2"]


def test_counter_totals_across_restarts() -> None:
    assert run_total([0, 5, 9, 2, 4]) == 13  # restarted after 9
    assert run_total([0, 5, 9, 12], resets=[3]) == 21  # restarted and already past the old value
    assert increase([10, 15, 3, 8]) == 5 + 3 + 5
    assert merge_ranges([[5, 9], [1, 3], [4, 4], [12, 12]]) == [(1, 9), (12, 12)]


def test_summary_json_is_written_atomically(run_dir: Path) -> None:
    write_json(run_dir / "summary.json", {"stale": True})
    build_summary(run_dir, read_back=None)
    assert "stale" not in json.loads((run_dir / "summary.json").read_text())
    assert not list(run_dir.glob("*.tmp"))
