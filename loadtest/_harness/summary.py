"""``summary.json``: the roll-up and reconciliation of one load-test run.

:func:`build_summary` reads a run directory's artifacts
(:mod:`.run_files`), rolls up the client's view, the last metrics of every
broker and compactor (:mod:`.samples`), processes, host and S3, and
reconciles the client's acknowledgements with the brokers' counters and,
given a :class:`~.readback.ReadBack`, with the log itself. Every field is
described in ``loadtest/README.md`` ("summary.json"). :func:`format_summary`
(:mod:`.summary_text`) prints it.

``python -m loadtest._harness.summary RUN_DIR [--read-back]`` summarises a
run again; the exit code is 1 when the reconciliation failed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from .readback import LibraryReadBack, ReadBack
from .reconcile import Findings, counter_check, read_back_check
from .run_files import RunFiles, load_run
from .samples import (
    ServiceSeries,
    add_up,
    by_labels,
    host_usage,
    label_values,
    number,
    numbers,
    process_series,
    service_series,
)
from .summary_text import format_summary

__all__ = ["SUMMARY_FORMAT", "build_summary", "format_summary", "main"]

SUMMARY_FORMAT = "llog-loadtest-summary/1"
MB = 1e6
GB = 1e9
"""Throughput and cost per GB are decimal (as the dashboard's request cost per GB ingested)."""

BROKER_COUNTERS = {
    "accepted_records": "produce_records_total",
    "accepted_bytes": "produce_payload_bytes_total",
    "consumed_records": "consume_records_total",
    "consumed_bytes": "consume_payload_bytes_total",
    "flushes": "batcher_flushes_total",
    "produce_timeouts": "produce_timeouts_total",
    "backpressure_rejections": "batcher_backpressure_rejections_total",
}
COMPACTOR_COUNTERS = {
    "compacted_offsets": "compactor_compacted_offsets_total",
    "compacted_bytes": "compactor_compacted_bytes_total",
}
BILLING_SUMMED = ("request_cost_usd", "put_requests", "get_requests")
BILLING_MAX = ("objects", "stored_bytes", "stored_gb", "storage_cost_usd_per_month")


def build_summary(run_dir: Path, *, read_back: ReadBack | None) -> dict[str, Any]:
    """Summarise ``run_dir``, write ``run_dir/summary.json`` and return it."""
    files = load_run(Path(run_dir))
    notes = Findings()
    services = service_series(files.metric_samples, files.process_kinds())
    brokers = {n: s for n, s in sorted(services.items()) if s.kind == "broker"}
    compactors = {n: s for n, s in sorted(services.items()) if s.kind == "compactor"}
    _check_artifacts(files, notes)
    _check_services(files, services, notes)
    client = client_section(files, notes)
    summary: dict[str, Any] = {
        "format": SUMMARY_FORMAT,
        "generated_at": _iso(dt.datetime.now(dt.timezone.utc).timestamp() * 1000),
        "run": run_section(files),
        "artifacts": {"missing": files.missing, "malformed_lines": files.malformed},
        "client": client,
        "brokers": _services_section(brokers, broker_figures, "per_broker"),
        "compactors": compactors_section(compactors),
        "processes": processes_section(files),
        "host": host_usage(files.metric_samples),
        "s3": s3_section([*brokers.values(), *compactors.values()], client),
    }
    summary["reconciliation"] = {
        "counters": counter_check(client, summary["brokers"]["totals"], brokers, notes),
        "read_back": read_back_check(files, read_back, client, notes),
    }
    summary["reconciliation"] = {"ok": not notes.errors, "errors": notes.errors, "warnings": notes.warnings,
                                 **summary["reconciliation"]}
    _write_json(Path(run_dir) / "summary.json", summary)
    return summary


# -- run identity -------------------------------------------------------------------------


def run_section(files: RunFiles) -> dict[str, Any]:
    cs, stack, config = files.client_summary, files.stack, files.resolved_config
    times = [s.get("ts_ms") for s in files.metric_samples if s.get("ts_ms")]
    started = cs.get("started_at_ms") or (times[0] if times else stack.get("created_at_ms"))
    ended = cs.get("ended_at_ms") or (times[-1] if times else None)
    run_id = stack.get("run_id") or config.get("run_id") or files.run_dir.name
    scenario = stack.get("scenario") or config.get("scenario") or run_id.partition("-")[2] or None
    return {
        "run_id": run_id,
        "scenario": scenario if isinstance(scenario, str) else (scenario or {}).get("name"),
        "run_dir": str(files.run_dir),
        "git": {k: files.git.get(k) for k in ("commit", "dirty", "branch")},
        "started_at_ms": started,
        "ended_at_ms": ended,
        "started_at": _iso(started),
        "ended_at": _iso(ended),
        "duration_s": round((ended - started) / 1000, 3) if started and ended else None,
    }


def _check_artifacts(files: RunFiles, notes: Findings) -> None:
    for name in files.missing:
        notes.warn(f"artifact missing or unreadable: {name}")
    for name, count in files.malformed.items():
        notes.warn(f"{name}: {count} malformed line(s) skipped")
    if "metrics-30s.jsonl" not in files.missing and not files.metric_samples:
        notes.warn("metrics-30s.jsonl has no samples: broker, compactor, process and host figures are empty")


def _check_services(files: RunFiles, services: Mapping[str, ServiceSeries], notes: Findings) -> None:
    for name, kind in files.process_kinds().items():
        if kind in ("broker", "compactor") and name not in services and files.metric_samples:
            notes.warn(f"{name} ({kind}) never appears in metrics-30s.jsonl")
    for name, series in sorted(services.items()):
        tried = len(series.docs) + series.failed
        if series.failed:
            notes.warn(f"{name}: {series.failed} of {tried} scrapes failed (last error: {series.last_error})")
        if not series.docs:
            notes.warn(f"{name}: no successful metrics sample")
        if series.restarts():
            notes.warn(f"{name} restarted {series.restarts()} time(s) during the run (its counters started "
                       "again at zero): its totals add the last sample before each restart and are lower bounds")


# -- client --------------------------------------------------------------------------------


def client_section(files: RunFiles, notes: Findings) -> dict[str, Any]:
    cs = files.client_summary
    produce, consume = dict(cs.get("produce") or {}), dict(cs.get("consume") or {})
    acked = cs.get("acked") or {}
    acked_records = sum(int(e) - int(s) + 1 for ranges in acked.values() for s, e in ranges)
    if produce.get("acked_records") is not None and acked and acked_records != produce["acked_records"]:
        notes.warn(f"client-summary.json: acked_records is {produce['acked_records']} but its acked ranges "
                   f"hold {acked_records} offsets")
    latency = {"produce": produce.pop("latency_ms", None), "consume": consume.pop("latency_ms", None),
               "e2e": consume.pop("e2e_latency_ms", None)}
    errors = {"produce": produce.pop("errors", {}), "consume": consume.pop("errors", {})}
    return {
        "intent": cs.get("intent") or {},
        "produce": produce,
        "consume": consume,
        "errors": errors,
        "latency_ms": latency,
        "unknown_outcome": _unknown_outcome(cs.get("intent") or {}, produce, errors["produce"]),
        "remaps": _remaps(cs, files.remap_events),
        "acked": {"partitions": len(acked), "ranges": sum(len(r) for r in acked.values()),
                  "records": acked_records},
        "throughput": throughput(files),
        "windows": window_stats(files.client_windows),
    }


def _unknown_outcome(intent: Mapping[str, Any], produce: Mapping[str, Any], errors: Mapping[str, Any]) -> dict:
    status = produce.get("status") or {}
    # The hammer counts every request whose outcome it never learned (timeout,
    # connection lost after sending, 504, 500, an OutcomeUnknown batch).
    if "unknown_requests" in produce:
        unknown = int(produce["unknown_requests"])
    else:
        unknown = int(errors.get("timeout", 0)) + int(status.get("504", 0))
    per_request = intent.get("records_per_request")
    if not per_request and status.get("200") and produce.get("acked_records"):
        per_request = produce["acked_records"] / status["200"]
    return {"requests": unknown, "partial_requests": int(errors.get("partial", 0)),
            "records_per_request": per_request}


def _remaps(cs: Mapping[str, Any], events: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    by_reason: dict[str, int] = {}
    for event in events:
        reason = str(event.get("reason"))
        by_reason[reason] = by_reason.get(reason, 0) + 1
    return {"count": cs.get("remaps"), "events": len(events), "by_reason": by_reason,
            "no_owner_left": sum(1 for e in events if e.get("to") is None)}


def _window_span(window: Mapping[str, Any]) -> float:
    """Seconds a client window covers (0 when it does not say)."""
    start, end = window.get("window_start_ms"), window.get("window_end_ms")
    return (end - start) / 1000 if isinstance(start, (int, float)) and isinstance(end, (int, float)) else 0.0


def throughput(files: RunFiles) -> dict[str, Any]:
    """Acked records and MB per second over the measured window: the client's
    windows when there are any, else the client summary's start and end."""
    windows = [w for w in files.client_windows if _window_span(w) > 0]
    if windows:
        start, end = min(w["window_start_ms"] for w in windows), max(w["window_end_ms"] for w in windows)
        records = sum((w.get("produce") or {}).get("records", 0) for w in windows)
        nbytes = sum((w.get("produce") or {}).get("bytes", 0) for w in windows)
        source = "client-30s.jsonl"
    else:
        cs = files.client_summary
        start, end = cs.get("started_at_ms"), cs.get("ended_at_ms")
        records = (cs.get("produce") or {}).get("acked_records", 0)
        nbytes = (cs.get("produce") or {}).get("acked_bytes", 0)
        source = "client-summary.json"
    seconds = (end - start) / 1000 if start and end and end > start else None
    return {"source": source, "window_start_ms": start, "window_end_ms": end, "seconds": seconds,
            "records": records, "bytes": nbytes,
            "records_per_s": round(records / seconds, 3) if seconds else None,
            "mb_per_s": round(nbytes / MB / seconds, 6) if seconds else None}


def window_stats(windows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Min, median and max of the per-window acked throughput."""
    spans = [(w, _window_span(w)) for w in windows if _window_span(w) > 0]
    rates = [(w.get("produce") or {}).get("records", 0) / s for w, s in spans]
    mbs = [(w.get("produce") or {}).get("bytes", 0) / MB / s for w, s in spans]
    return {"count": len(spans),
            "window_s": statistics.median(s for _, s in spans) if spans else None,
            "records_per_s": _spread(rates, 3), "mb_per_s": _spread(mbs, 6)}


def _spread(values: Sequence[float], digits: int) -> dict[str, float] | None:
    if not values:
        return None
    return {"min": round(min(values), digits), "median": round(statistics.median(values), digits),
            "max": round(max(values), digits)}


# -- brokers, compactors, processes ---------------------------------------------------------------


def _service_meta(series: ServiceSeries) -> dict[str, Any]:
    last = series.last or {}
    return {"samples": len(series.docs), "failed_scrapes": series.failed, "restarts": series.restarts(),
            "uptime_s": last.get("uptime_s"), "last_sample_ts_ms": series.times_ms[-1] if series.times_ms else None}


def storage_figures(series: ServiceSeries) -> dict[str, Any]:
    return {
        "oxia_ops": numbers(by_labels(series.series_totals("oxia_operations_total"), "op", "outcome")),
        "s3_ops": numbers(by_labels(series.series_totals("s3_operations_total"), "op", "outcome")),
        "s3_bytes": numbers(by_labels(series.series_totals("s3_bytes_total"), "op")),
        "billing": billing_of(series),
    }


def broker_figures(series: ServiceSeries) -> dict[str, Any]:
    out: dict[str, Any] = {k: number(series.counter_total(name)) for k, name in BROKER_COUNTERS.items()}
    out["failed_batches"] = numbers(by_labels(series.series_totals("produce_failed_batches_total"), "error"))
    return {**out, **storage_figures(series)}


def compactor_figures(series: ServiceSeries) -> dict[str, Any]:
    out: dict[str, Any] = {k: number(series.counter_total(name)) for k, name in COMPACTOR_COUNTERS.items()}
    out["runs"] = numbers(by_labels(series.series_totals("compactor_runs_total"), "outcome"))
    vacuum_runs: dict[str, float] = {}
    for key, value in series.series_totals("vacuum_runs_total").items():
        labels = label_values(key)
        name = labels.get("outcome", "") + (" (dry run)" if labels.get("dry_run") == "True" else "")
        vacuum_runs[name] = vacuum_runs.get(name, 0.0) + value
    out["vacuum"] = {
        "runs": numbers(vacuum_runs),
        "objects_deleted": numbers(by_labels(series.series_totals("vacuum_objects_deleted_total"), "kind")),
        "bytes_reclaimed": number(series.counter_total("vacuum_bytes_reclaimed_total")),
        "errors": number(series.counter_total("vacuum_errors_total")),
    }
    out["lag_offsets"] = _lag_of(series.last or {})
    return {**out, **storage_figures(series)}


def _lag_of(doc: Mapping[str, Any]) -> dict[str, float]:
    """Per partition, how far behind the compactor was when it last came to it
    (``compactor_backlog_offsets``; older services only have the lag their
    last run left, ``compactor_lag_offsets``)."""
    all_gauges = doc.get("gauges") or {}
    gauges = all_gauges.get("compactor_backlog_offsets") or all_gauges.get("compactor_lag_offsets") or {}
    out = {}
    for key, value in gauges.items():
        labels = label_values(key)
        out[f"{labels.get('topic', '')}:{labels.get('partition', '')}"] = number(value)
    return out


def _services_section(services: Mapping[str, ServiceSeries], figures: Callable[[ServiceSeries], dict[str, Any]],
                      per_key: str) -> dict[str, Any]:
    per = {name: {**_service_meta(s), **figures(s)} for name, s in services.items()}
    totals = add_up([{k: v for k, v in p.items() if k not in _META_KEYS} for p in per.values()])
    totals["billing"] = combine_billing([p["billing"] for p in per.values()])
    return {"count": len(per), "totals": totals, per_key: per}


_META_KEYS = {"samples", "failed_scrapes", "restarts", "uptime_s", "last_sample_ts_ms", "billing", "lag_offsets"}


def compactors_section(compactors: Mapping[str, ServiceSeries]) -> dict[str, Any]:
    section = _services_section(compactors, compactor_figures, "per_compactor")
    lag: dict[str, float] = {}
    for figures in section["per_compactor"].values():  # one partition's lag is the same fact everywhere: max
        for partition, value in figures["lag_offsets"].items():
            lag[partition] = max(lag.get(partition, 0), value)
    worst = sorted(lag.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
    peak = max((max(_lag_of(doc).values(), default=0) for s in compactors.values() for doc in s.docs), default=None)
    section["totals"]["lag"] = {"partitions": len(lag), "max_offsets": max(lag.values(), default=None),
                                "peak_max_offsets": peak,
                                "sum_offsets": number(sum(lag.values())),
                                "worst": [{"partition": p, "offsets": v} for p, v in worst]}
    return section


def processes_section(files: RunFiles) -> dict[str, Any]:
    kinds = files.process_kinds()
    out = {}
    for name, p in sorted(process_series(files.metric_samples).items()):
        span_s = (p.times_ms[-1] - p.times_ms[0]) / 1000
        cpu_s = p.cpu_used_s()
        out[name] = {"kind": kinds.get(name), "samples": len(p.times_ms), "cpu_s": round(cpu_s, 3),
                     "cpu_pct": round(100 * cpu_s / span_s, 2) if span_s > 0 else None,
                     "peak_rss_bytes": number(max(p.rss_bytes)), "last_rss_bytes": number(p.rss_bytes[-1]),
                     "alive_at_end": p.alive[-1], "restarts": len(p.resets)}
    return out


# -- S3 and billing ---------------------------------------------------------------------------


def billing_of(series: ServiceSeries) -> dict[str, Any]:
    """One process's ``s3.billing`` over the run: request figures added up
    across restarts, the storage scan from the last sample."""
    def billed(name: str) -> Callable[[Mapping[str, Any]], float]:
        return lambda doc: float((((doc.get("s3") or {}).get("billing") or {}).get(name)) or 0.0)

    last = ((series.last or {}).get("s3") or {}).get("billing") or {}
    out: dict[str, Any] = {k: number(series.total(billed(k))) for k in BILLING_SUMMED}
    out.update({k: last.get(k) for k in BILLING_MAX})
    out["usage_complete"] = last.get("usage_complete")
    return out


def combine_billing(parts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Request figures sum across processes; storage figures take the max (one shared prefix)."""
    out: dict[str, Any] = {k: number(sum(p.get(k) or 0 for p in parts)) for k in BILLING_SUMMED}
    for k in BILLING_MAX:
        values = [p[k] for p in parts if p.get(k) is not None]
        out[k] = max(values) if values else None
    complete = [p["usage_complete"] for p in parts if p.get("usage_complete") is not None]
    out["usage_complete"] = all(complete) if complete else None
    return out


def s3_section(services: Sequence[ServiceSeries], client: Mapping[str, Any]) -> dict[str, Any]:
    ops = add_up([by_labels(s.series_totals("s3_operations_total"), "op", "outcome") for s in services])
    billing = combine_billing([billing_of(s) for s in services])
    ingested = (client.get("produce") or {}).get("acked_bytes") or 0
    cost = billing["request_cost_usd"]
    return {
        "requests_by_op": {op: number(sum(outcomes.values())) for op, outcomes in sorted(ops.items())},
        "errors_by_op": {op: number(outcomes.get("error", 0)) for op, outcomes in sorted(ops.items())},
        "requests_total": number(sum(sum(o.values()) for o in ops.values())),
        "bytes_by_op": numbers(add_up([by_labels(s.series_totals("s3_bytes_total"), "op") for s in services])),
        "billing": billing,
        "ingested_bytes": ingested,
        "ingested_gb": round(ingested / GB, 9),
        "request_cost_usd_per_gb_ingested": round(cost / (ingested / GB), 6) if ingested else None,
    }


# -- helpers ------------------------------------------------------------------------------------


def _iso(ms: float | None) -> str | None:
    if not ms:
        return None
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z")


def _write_json(path: Path, value: Mapping[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(value, indent=1, sort_keys=False) + "\n")
    os.replace(tmp, path)  # a reader never sees half a summary


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtest._harness.summary", description=__doc__.split("\n")[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--read-back", action="store_true",
                        help="read every acked range back from Oxia and S3 (stack.json's llog_env)")
    args = parser.parse_args(argv)
    if args.read_back:
        env = load_run(args.run_dir).stack.get("llog_env") or {}
        with LibraryReadBack(env) as read_back:
            summary = build_summary(args.run_dir, read_back=read_back)
    else:
        summary = build_summary(args.run_dir, read_back=None)
    print(format_summary(summary))
    return 0 if summary["reconciliation"]["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
