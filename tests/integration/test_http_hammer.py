"""The Go hammer (``loadtest/http_hammer.go``) against real brokers: its artifacts
parse, every range it reports acknowledged is in the log with its records, and a
killed broker's partitions move only inside their owner sets."""

from __future__ import annotations

import hashlib
import json
import re
import signal
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from devstack import die_with_parent_argv
from loadtest._harness.hammer import HammerConfig, ensure_hammer, run_hammer
from server.leaderless_log_reader import LeaderlessLogReader
from tests._waiting import wait_until

from .conftest import BrokerFactory, BrokerProcess

pytestmark = [pytest.mark.integration, pytest.mark.exclusive]
TOPIC = "lt"
SEED = 7
TIMESTAMPED = re.compile(rb"^[0-9a-f]{16}\|")


def _owners(topic: str, partition: int, broker_ids: list[str], count: int) -> list[str]:
    """The README's rendezvous rule: the ``count`` highest
    sha256(f"{topic}\\0{partition}\\0{broker_id}\\0{seed}") scores (first 8 bytes), highest first."""

    def score(broker_id: str) -> int:
        key = f"{topic}\x00{partition}\x00{broker_id}\x00{SEED}".encode()
        return int.from_bytes(hashlib.sha256(key).digest()[:8], "big")

    return sorted(broker_ids, key=score, reverse=True)[:count]


def _write_manifest(path: Path, brokers: list[BrokerProcess], partitions: int, owners: int) -> dict[str, Any]:
    ids = [b.info["broker_id"] for b in brokers]
    manifest = {
        "seed": SEED,
        "owners_per_partition": owners,
        "selection": "round_robin",
        "brokers": [{"broker_id": i, "url": b.url, "role": "both"} for i, b in zip(ids, brokers)],
        "partitions": [
            {"topic": TOPIC, "partition": p, "owners": _owners(TOPIC, p, ids, owners)} for p in range(partitions)
        ],
    }
    path.write_text(json.dumps(manifest, indent=2))
    return manifest


def _run(config: HammerConfig, manifest: Path, out: Path) -> dict[str, Any]:
    log = out / "http_hammer.log"
    code = run_hammer(config, manifest, out, log)
    assert code == 0, log.read_text()
    return _artifacts(out)


def _artifacts(out: Path) -> dict[str, Any]:
    summary = json.loads((out / "client-summary.json").read_text())
    windows = [json.loads(line) for line in (out / "client-30s.jsonl").read_text().splitlines()]
    events = [json.loads(line) for line in (out / "remap-events.jsonl").read_text().splitlines()]
    assert windows, "no window lines"
    for w in windows:
        assert w["window_start_ms"] <= w["window_end_ms"]
        assert {"requests", "ok_requests", "records", "bytes", "status", "errors", "latency_ms"} <= set(w["produce"])
        assert {"p50", "p90", "p99", "p999", "max"} <= set(w["produce"]["latency_ms"])
        assert {"requests", "records", "e2e_latency_ms"} <= set(w["consume"]) and "remaps" in w
    # The windows add up to the run.
    assert sum(w["produce"]["requests"] for w in windows) == summary["produce"]["requests"]
    assert sum(w["produce"]["records"] for w in windows) == summary["produce"]["acked_records"]
    assert sum(w["remaps"] for w in windows) == summary["remaps"] == len(events)
    return {"summary": summary, "windows": windows, "events": events}


def _check_read_back(reader: LeaderlessLogReader, acked: dict[str, list[list[int]]]) -> int:
    """Every acknowledged range reads back whole, each record stamped with its send time."""
    total = 0
    for key, ranges in acked.items():
        topic, partition = key.rsplit(":", 1)
        for start, end in ranges:
            records = reader.read_range(topic, int(partition), start, end)
            assert [r.offset for r in records] == list(range(start, end + 1)), (key, start, end)
            assert all(TIMESTAMPED.match(r.payload) for r in records), (key, start, end)
            total += len(records)
    return total


@pytest.mark.parametrize("body", ["json", "binary"])
def test_closed_loop_acked_ranges_read_back(
    broker_factory: BrokerFactory, reader: LeaderlessLogReader, tmp_path: Path, body: str
) -> None:
    """Produce and consume in one format, JSON or binary (body and answer)."""
    ensure_hammer()  # built before the brokers start, so its time does not count against the run
    brokers = [broker_factory(), broker_factory()]
    manifest = _write_manifest(tmp_path / "routing-manifest.json", brokers, partitions=4, owners=2)
    config = HammerConfig(mode="closed", concurrency=4, duration_s=4, window_s=1, record_bytes=200,
                          records_per_request=20, partitions_per_request=2, consumers=1, max_wait_ms=200, body=body,
                          consume_body=body)
    run = _run(config, tmp_path / "routing-manifest.json", tmp_path / "out")
    summary = run["summary"]

    assert summary["intent"]["mode"] == "closed" and summary["intent"]["partitions"] == 4
    produce = summary["produce"]
    assert produce["ok_requests"] > 0 and produce["acked_records"] > 0
    acked = summary["acked"]
    assert acked and set(acked) <= {f"{TOPIC}:{p['partition']}" for p in manifest["partitions"]}
    assert _check_read_back(reader, acked) == produce["acked_records"]
    if produce["unknown_batches"] == 0 and produce["failed_batches"] == 0:
        # Nothing failed: what was acknowledged is the whole log, from offset 1.
        for key, ranges in acked.items():
            assert ranges == [[1, reader.high_watermark(TOPIC, int(key.rsplit(":", 1)[1]))]], key

    consume = summary["consume"]
    assert consume["records"] > 0 and consume["errors"].get("offset_gap", 0) == 0
    assert consume["e2e_latency_ms"]["count"] == consume["records"] and consume["e2e_latency_ms"]["p50"] > 0
    assert run["events"] == []


def test_killed_broker_remaps_inside_owner_sets(
    broker_factory: BrokerFactory, reader: LeaderlessLogReader, tmp_path: Path
) -> None:
    ensure_hammer()
    brokers = [broker_factory() for _ in range(3)]  # owner sets of 2 out of 3: remapping can go wrong
    manifest = _write_manifest(tmp_path / "routing-manifest.json", brokers, partitions=4, owners=2)
    owners = {p["partition"]: p["owners"] for p in manifest["partitions"]}
    ids = [b.info["broker_id"] for b in brokers]
    # The broker owning the fewest partitions (at least one), so some partitions must not move.
    owned = {i: sum(i in o for o in owners.values()) for i in ids}
    victim_id = min((i for i in ids if owned[i]), key=lambda i: owned[i])
    victim = brokers[ids.index(victim_id)]
    config = HammerConfig(mode="closed", concurrency=4, duration_s=4, window_s=1, record_bytes=200,
                          records_per_request=20, partitions_per_request=2, consumers=1, max_wait_ms=200)

    out = tmp_path / "out"
    result: dict[str, int] = {}
    hammer = threading.Thread(
        target=lambda: result.setdefault("code", run_hammer(config, tmp_path / "routing-manifest.json", out,
                                                            out / "http_hammer.log")),
        name="hammer",
    )
    hammer.start()
    try:
        # One second in: the hammer has closed its first 1 s window, and the victim has served it.
        wait_until(lambda: (out / "client-30s.jsonl").is_file() and (out / "client-30s.jsonl").read_text(),
                   timeout_s=30, what="the hammer's first window line")
        wait_until(lambda: victim.client.counter("http_requests_total", path="/produce", status=200) >= 1,
                   timeout_s=30, what=f"{victim_id} to acknowledge a produce request from the hammer")
        victim.kill()
    finally:
        hammer.join(config.deadline_s + 120)
    assert result.get("code") == 0, (out / "http_hammer.log").read_text()
    run = _artifacts(out)

    events = run["events"]
    assert events, "no remap events after a broker was killed"
    for ev in events:
        assert ev["topic"] == TOPIC
        assert ev["from"] in owners[ev["partition"]] and (ev["to"] is None or ev["to"] in owners[ev["partition"]]), ev
    moved_away = [ev for ev in events if ev["from"] == victim_id]
    assert moved_away and all(ev["reason"] in ("connect", "timeout", "http_503") for ev in moved_away)
    # Every partition the victim owned moved (to its other owner), and no other partition did.
    assert {ev["partition"] for ev in moved_away} == {p for p, o in owners.items() if victim_id in o}
    assert all(ev["to"] != victim_id for ev in moved_away)
    assert not [ev for ev in events if ev["reason"] == "recovered"]  # the victim never came back

    summary = run["summary"]
    assert summary["remaps"] == len(events)
    assert summary["produce"]["acked_records"] > 0
    assert _check_read_back(reader, summary["acked"]) == summary["produce"]["acked_records"]


def test_restarted_broker_gets_its_partitions_back(
    broker_factory: BrokerFactory, reader: LeaderlessLogReader, tmp_path: Path
) -> None:
    brokers = [broker_factory(), broker_factory()]
    manifest = _write_manifest(tmp_path / "routing-manifest.json", brokers, partitions=4, owners=2)
    victim, victim_id = brokers[0], brokers[0].info["broker_id"]
    # Long enough never to end by itself: the test ends it with SIGTERM once it has
    # seen what it waits for (the hammer then stops and writes its files).
    config = HammerConfig(mode="closed", concurrency=4, duration_s=300, window_s=1, record_bytes=200,
                          records_per_request=20, partitions_per_request=2, down_backoff_s=0.2)
    out = tmp_path / "out"
    out.mkdir()
    argv = config.argv(ensure_hammer(), tmp_path / "routing-manifest.json", out)
    with open(out / "http_hammer.log", "wb") as log:
        proc = subprocess.Popen(die_with_parent_argv(argv), stdout=log, stderr=subprocess.STDOUT)
    try:
        events = out / "remap-events.jsonl"

        def reasons() -> set[str]:
            return {json.loads(line)["reason"] for line in events.read_text().splitlines()} if events.is_file() else set()

        wait_until(lambda: victim.client.counter("http_requests_total", path="/produce", status=200) >= 1,
                   timeout_s=30, what=f"{victim_id} to acknowledge a produce request")
        victim.kill()
        wait_until(lambda: reasons() & {"connect", "timeout"}, timeout_s=30, what="the hammer to move partitions away")
        # The same address again (a new process; the hammer knows the broker by its URL).
        again = broker_factory(args=["--port", str(victim.port)])
        wait_until(lambda: "recovered" in reasons(), timeout_s=30, what="the hammer to move partitions back")
        wait_until(lambda: again.client.counter("http_requests_total", path="/produce", status=200) >= 1,
                   timeout_s=30, what="the restarted broker to get produce traffic again")
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(config.timeout_s + config.drain_s + 60)
    assert code == 0, (out / "http_hammer.log").read_text()
    run = _artifacts(out)
    back = [ev for ev in run["events"] if ev["reason"] == "recovered"]
    assert {ev["partition"] for ev in back} == {p["partition"] for p in manifest["partitions"] if victim_id in p["owners"]}
    assert all(ev["to"] == victim_id for ev in back)
    assert _check_read_back(reader, run["summary"]["acked"]) == run["summary"]["produce"]["acked_records"]


def test_open_loop_runs_on_its_schedule(
    broker_factory: BrokerFactory, reader: LeaderlessLogReader, tmp_path: Path
) -> None:
    ensure_hammer()
    broker = broker_factory()
    _write_manifest(tmp_path / "routing-manifest.json", [broker], partitions=2, owners=1)
    config = HammerConfig(mode="open", rate_records_per_s=400, duration_s=2, window_s=1, record_bytes=100,
                          records_per_request=10)
    summary = _run(config, tmp_path / "routing-manifest.json", tmp_path / "out")["summary"]
    intent = summary["intent"]
    assert intent["mode"] == "open" and intent["rate_records_per_s"] == 400 and intent["concurrency"] is None
    assert summary["produce"]["requests"] > 0
    assert summary["produce"]["schedule_lag_ms"]["count"] >= summary["produce"]["requests"]
    assert _check_read_back(reader, summary["acked"]) == summary["produce"]["acked_records"]
