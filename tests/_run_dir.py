"""A synthetic load-test run directory, in the formats of ``loadtest/HARNESS.md``
("Run directory"), for the summary and plot tests.

:func:`write_run` writes a consistent run: two brokers, one compactor, four
partitions of topic ``lt``, five 30 s client windows and six metrics
samples 30 s apart. The client acknowledges 5,000 records of 100 bytes in
requests of 10 records; each broker accepts 2,500. Tests change what they
need through the arguments (a broker's counter values per sample, client
errors) or by editing the files afterwards.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Sequence

T0_MS = 1795485710000
"""The run's start (2026-11-24T..Z)."""
SAMPLE_S = 30
SAMPLES = 6
WINDOW_RECORDS = (900, 1000, 1100, 1000, 1000)
RECORD_BYTES = 100
RECORDS_PER_REQUEST = 10
PARTITIONS = 4
TOPIC = "lt"
RUN_ID = "20261124T021500Z-smoke"
BROKER_RECORDS = (0, 500, 1000, 1500, 2000, 2500)
"""A broker's produce_records_total at each sample."""
BROKER_COST_USD = 0.003
COMPACTOR_COST_USD = 0.001
STORED_BYTES = 750_000


def write_json(path: Path, value: Any) -> None:
    path.write_text(json.dumps(value, indent=1))


def write_jsonl(path: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def write_run(
    run_dir: Path,
    *,
    broker_records: Mapping[str, Sequence[int]] | None = None,
    broker_uptimes: Mapping[str, Sequence[float]] | None = None,
    produce_errors: Mapping[str, int] | None = None,
    failed_scrapes: Mapping[str, Sequence[int]] | None = None,
) -> Path:
    """Write the run into ``run_dir`` (created) and return it.

    ``broker_records``: produce_records_total per sample, by broker (bytes
    follow at 100 per record); ``broker_uptimes``: uptime_s per sample;
    ``produce_errors``: the client's produce error counts;
    ``failed_scrapes``: sample indices where a service's scrape failed.
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    records = {"broker-1": BROKER_RECORDS, "broker-2": BROKER_RECORDS, **(broker_records or {})}
    uptimes = broker_uptimes or {}
    _write_orchestrator_files(run_dir)
    _write_client_files(run_dir, produce_errors or {})
    samples = [_sample(i, records, uptimes, failed_scrapes or {}) for i in range(SAMPLES)]
    write_jsonl(run_dir / "metrics-30s.jsonl", samples)
    return run_dir


def _write_orchestrator_files(run_dir: Path) -> None:
    processes = [_process("broker-1", "broker", 18080), _process("broker-2", "broker", 18081),
                 _process("compactor-1", "compactor", 18090),
                 {"name": "oxia", "kind": "oxia", "pid": 900, "host": "127.0.0.1", "port": 6648},
                 {"name": "minio", "kind": "s3", "pid": 901, "host": "127.0.0.1", "port": 9000}]
    write_json(run_dir / "stack.json", {
        "run_id": RUN_ID, "scenario": "smoke", "run_dir": str(run_dir), "created_at_ms": T0_MS - 20_000,
        "llog_env": {"LLOG_OXIA_SERVICE_ADDRESS": "127.0.0.1:6648", "LLOG_S3_BUCKET": "llog",
                     "LLOG_ROOT_PREFIX": "lt-test"},
        "processes": processes})
    write_json(run_dir / "resolved-config.json", {"scenario": "smoke", "brokers": 2, "partitions": PARTITIONS})
    write_json(run_dir / "git.json", {"commit": "0123456789abcdef0123456789abcdef01234567", "dirty": True,
                                      "branch": "main", "status": [" M README.md"]})
    write_json(run_dir / "environment.json", {"host": "test", "cpus": 4, "memory_bytes": 8 << 30})
    write_json(run_dir / "routing-manifest.json", {
        "seed": 7, "owners_per_partition": 2, "selection": "round_robin",
        "brokers": [{"broker_id": b, "url": f"http://127.0.0.1:{p}", "role": "both"}
                    for b, p in (("broker-1", 18080), ("broker-2", 18081))],
        "partitions": [{"topic": TOPIC, "partition": p, "owners": ["broker-1", "broker-2"]}
                       for p in range(PARTITIONS)]})


def _process(name: str, kind: str, port: int) -> dict[str, Any]:
    return {"name": name, "kind": kind, "pid": port, "host": "127.0.0.1", "port": port,
            "url": f"http://127.0.0.1:{port}", "metrics_url": f"http://127.0.0.1:{port}/metrics",
            "role": "both", "broker_id": name, "log": f"logs/{name}.log", "data_dir": None, "argv": []}


def _latency(base: float) -> dict[str, float]:
    return {"p50": base, "p90": base * 2, "p99": base * 4, "p999": base * 6, "max": base * 8}


def _write_client_files(run_dir: Path, errors: Mapping[str, int]) -> None:
    windows = []
    for i, n in enumerate(WINDOW_RECORDS):
        start = T0_MS + i * SAMPLE_S * 1000
        requests = n // RECORDS_PER_REQUEST
        windows.append({
            "window_start_ms": start, "window_end_ms": start + SAMPLE_S * 1000,
            "produce": {"requests": requests, "ok_requests": requests, "records": n, "bytes": n * RECORD_BYTES,
                        "status": {"200": requests}, "errors": {"timeout": 1 if i == 2 else 0},
                        "latency_ms": _latency(10.0 + i)},
            "consume": {"requests": 50, "records": n, "bytes": n * RECORD_BYTES, "status": {"200": 50}, "errors": {},
                        "latency_ms": _latency(5.0), "e2e_latency_ms": _latency(20.0 + 2 * i)},
            "remaps": 1 if i == 3 else 0})
    write_jsonl(run_dir / "client-30s.jsonl", windows)
    write_jsonl(run_dir / "remap-events.jsonl", [
        {"ts_ms": T0_MS + 100_000, "topic": TOPIC, "partition": 1, "from": "broker-2", "to": "broker-1",
         "reason": "timeout"}])
    total = sum(WINDOW_RECORDS)
    per_partition = total // PARTITIONS
    requests = total // RECORDS_PER_REQUEST
    write_json(run_dir / "client-summary.json", {
        "intent": {"mode": "open", "target_records_per_second": 35, "duration_s": 150,
                   "record_bytes": RECORD_BYTES, "records_per_request": RECORDS_PER_REQUEST, "partitions": PARTITIONS},
        "started_at_ms": T0_MS, "ended_at_ms": T0_MS + len(WINDOW_RECORDS) * SAMPLE_S * 1000,
        "produce": {"requests": requests + sum(errors.values()), "acked_records": total,
                    "acked_bytes": total * RECORD_BYTES, "status": {"200": requests},
                    "errors": {"connect": 0, "timeout": 0, "http_5xx": 0, "partial": 0, **errors},
                    "latency_ms": _latency(12.0)},
        "consume": {"requests": 250, "records": total, "bytes": total * RECORD_BYTES, "status": {"200": 250},
                    "errors": {}, "latency_ms": _latency(5.0), "e2e_latency_ms": _latency(24.0)},
        "remaps": 1,
        "acked": {f"{TOPIC}:{p}": [[1, per_partition]] for p in range(PARTITIONS)}})


def broker_doc(records: int, uptime_s: float, cost_usd: float) -> dict[str, Any]:
    """A broker's JSON /metrics with the series the summary reads."""
    puts = records // 100
    return {
        "info": {"broker_id": "b"}, "uptime_s": uptime_s,
        "counters": {
            "produce_records_total": {"": float(records)},
            "produce_payload_bytes_total": {"": float(records * RECORD_BYTES)},
            "consume_records_total": {"": float(records)},
            "consume_payload_bytes_total": {"": float(records * RECORD_BYTES)},
            "batcher_flushes_total": {"": float(puts)},
            "http_requests_total": {"method=POST,path=/produce,status=200": float(records // RECORDS_PER_REQUEST)},
            "oxia_operations_total": {"op=put_cas,outcome=ok": float(puts * 4), "op=put_cas,outcome=conflict": 1.0,
                                      "op=get,outcome=error": 0.0},
            "s3_operations_total": {"op=put,outcome=ok": float(puts), "op=put,outcome=error": 0.0,
                                    "op=get,outcome=ok": 0.0},
            "s3_bytes_total": {"op=put": float(records * RECORD_BYTES + puts * 50)}},
        "gauges": {}, "histograms": {},
        "broker": {"broker_id": "b", "role": "both"},
        "s3": {"billing": {"request_cost_usd": cost_usd, "put_requests": puts, "get_requests": 0,
                           "objects": puts, "stored_bytes": STORED_BYTES * records // 2500,
                           "stored_gb": 0.0007, "storage_cost_usd_per_month": 0.00002, "usage_complete": True}}}


def compactor_doc(i: int) -> dict[str, Any]:
    """The compactor's JSON /metrics at sample ``i``: lag rises then falls."""
    lag = (0, 300, 600, 400, 200, 0)[i]
    return {
        "info": {}, "uptime_s": 40.0 + i * SAMPLE_S,
        "counters": {
            "compactor_runs_total": {"outcome=compacted": float(2 * i), "outcome=nothing_to_do": float(i),
                                     "outcome=conflict": 0.0},
            "compactor_compacted_offsets_total": {"": float(1000 * i)},
            "compactor_compacted_bytes_total": {"": float(100_000 * i)},
            "vacuum_runs_total": {"dry_run=False,outcome=ok": float(i), "dry_run=True,outcome=ok": 0.0},
            "vacuum_objects_deleted_total": {"kind=wal": float(i * 3)},
            "vacuum_bytes_reclaimed_total": {"": float(i * 30_000)},
            "s3_operations_total": {"op=get,outcome=ok": float(4 * i), "op=put,outcome=ok": float(2 * i),
                                    "op=delete,outcome=ok": float(3 * i)},
            "s3_bytes_total": {"op=get": float(100_000 * i), "op=put": float(100_000 * i)}},
        "gauges": {"compactor_lag_offsets": {f"partition={p},topic={TOPIC}": float(lag + 10 * p)
                                             for p in range(PARTITIONS)}},
        "histograms": {},
        "service": {"compactor_id": "compactor-1"},
        "s3": {"billing": {"request_cost_usd": COMPACTOR_COST_USD * i / (SAMPLES - 1), "put_requests": 2 * i,
                           "get_requests": 4 * i, "objects": 30, "stored_bytes": STORED_BYTES // 2,
                           "stored_gb": 0.0003, "storage_cost_usd_per_month": 0.00001, "usage_complete": True}}}


def _sample(i: int, records: Mapping[str, Sequence[int]], uptimes: Mapping[str, Sequence[float]],
            failed: Mapping[str, Sequence[int]]) -> dict[str, Any]:
    services: dict[str, Any] = {}
    for name, values in records.items():
        uptime = uptimes.get(name, [50.0 + j * SAMPLE_S for j in range(SAMPLES)])[i]
        doc = broker_doc(values[i], uptime, BROKER_COST_USD * values[i] / max(values[-1], 1))
        services[name] = {"ok": True, "error": None, "metrics": doc}
    services["compactor-1"] = {"ok": True, "error": None, "metrics": compactor_doc(i)}
    for name, indices in failed.items():
        if i in indices:
            services[name] = {"ok": False, "error": "connection refused", "metrics": None}
    processes = {name: {"pid": 1000 + k, "cpu_s": 3.0 * i * (k + 1), "rss_bytes": (100 + 10 * i + k) << 20,
                        "threads": 10, "open_files": 20, "alive": True}
                 for k, name in enumerate(("broker-1", "broker-2", "compactor-1", "oxia", "minio"))}
    return {
        "ts_ms": T0_MS + i * SAMPLE_S * 1000, "elapsed_s": float(i * SAMPLE_S),
        "services": services, "processes": processes,
        "host": {"cpu_s": {"user": 40.0 * i, "system": 20.0 * i, "idle": 54.0 * i, "iowait": 6.0 * i},
                 "mem_available_bytes": (6 << 30) - i * (100 << 20),
                 "net_bytes": {"rx": 1000 * i, "tx": 2000 * i}, "disk_bytes": {"read": 0, "written": 5000 * i}}}
