"""``format_summary``: a ``summary.json`` as a few lines of text for the end of a run.

One line per part (run, client, brokers, compactors, S3, processes, host),
then the reconciliation: its verdict, the counter comparison, the read-back,
and every error and warning in full. Numbers read as people read them
(``1.2 MB/s``, ``$0.0123``), through :mod:`dashboard._units`.
"""

from __future__ import annotations

from typing import Any, Mapping

from dashboard._units import unit_for

__all__ = ["format_summary"]

_BYTES = unit_for("decbytes")
_RATE = unit_for("Bps")


def _n(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float) and not value.is_integer():
        return f"{value:,.2f}"
    return f"{int(value):,}"


def _bytes(value: Any) -> str:
    return "-" if value is None else _BYTES.format(float(value))


def _usd(value: Any) -> str:
    return "-" if value is None else f"${value:,.4f}"


def _pairs(counts: Mapping[str, Any] | None, skip_zero: bool = True) -> str:
    shown = [f"{k} {_n(v)}" for k, v in sorted((counts or {}).items()) if v or not skip_zero]
    return ", ".join(shown) or "none"


def _latency(values: Mapping[str, Any] | None, keys: tuple[str, ...] = ("p50", "p99", "p999")) -> str:
    if not values:
        return "-"
    return " ".join(f"{k} {_n(values[k])}" for k in keys if values.get(k) is not None) or "-"


def format_summary(summary: Mapping[str, Any]) -> str:
    """The summary as text, one part a line (reconciliation messages one a line)."""
    lines = [_run_line(summary["run"])]
    lines += _client_lines(summary["client"])
    lines += [_brokers_line(summary["brokers"]), _compactors_line(summary["compactors"]),
              _s3_line(summary["s3"]), _processes_line(summary["processes"]), _host_line(summary["host"])]
    lines += _reconciliation_lines(summary["reconciliation"])
    return "\n".join(lines)


def _run_line(run: Mapping[str, Any]) -> str:
    git = run.get("git") or {}
    commit = (git.get("commit") or "?")[:12] + (" (dirty)" if git.get("dirty") else "")
    return (f"run        {run.get('run_id')}  scenario {run.get('scenario')}  commit {commit}\n"
            f"           {run.get('started_at')} -> {run.get('ended_at')}  ({_n(run.get('duration_s'))} s)")


def _client_lines(client: Mapping[str, Any]) -> list[str]:
    produce, consume, tp = client["produce"], client["consume"], client["throughput"]
    windows = client["windows"].get("records_per_s") or {}
    lat = client["latency_ms"]
    mb_s = None if tp.get("mb_per_s") is None else tp["mb_per_s"] * 1e6
    return [
        f"client     produce {_n(produce.get('requests'))} requests ({_pairs(produce.get('status'))}); "
        f"acked {_n(produce.get('acked_records'))} records, {_bytes(produce.get('acked_bytes'))}",
        f"           {_n(tp.get('records_per_s'))} records/s, {_RATE.format(mb_s) if mb_s is not None else '-'} "
        f"over {_n(tp.get('seconds'))} s; per window min {_n(windows.get('min'))} / median "
        f"{_n(windows.get('median'))} / max {_n(windows.get('max'))} records/s",
        f"           consume {_n(consume.get('requests'))} requests, {_n(consume.get('records'))} records; "
        f"errors produce: {_pairs(client['errors']['produce'])}; consume: {_pairs(client['errors']['consume'])}",
        f"           latency ms  produce {_latency(lat.get('produce'))} | consume {_latency(lat.get('consume'))}"
        f" | e2e {_latency(lat.get('e2e'), ('p50', 'p99'))}",
        f"           remaps {_n(client['remaps'].get('count'))} ({_pairs(client['remaps'].get('by_reason'))}); "
        f"unknown-outcome requests {_n(client['unknown_outcome']['requests'])}, "
        f"partial {_n(client['unknown_outcome']['partial_requests'])}",
    ]


def _brokers_line(brokers: Mapping[str, Any]) -> str:
    t = brokers["totals"]
    if not brokers["count"]:
        return "brokers    no metrics"
    restarts = sum(b["restarts"] for b in brokers["per_broker"].values())
    return (f"brokers    {brokers['count']}: accepted {_n(t.get('accepted_records'))} records, "
            f"{_bytes(t.get('accepted_bytes'))}; consumed {_n(t.get('consumed_records'))} records; "
            f"flushes {_n(t.get('flushes'))}; restarts {_n(restarts)}")


def _compactors_line(compactors: Mapping[str, Any]) -> str:
    t = compactors["totals"]
    if not compactors["count"]:
        return "compactors no metrics"
    lag = t.get("lag") or {}
    worst = (lag.get("worst") or [{}])[0]
    return (f"compactors {compactors['count']}: runs {_pairs(t.get('runs'))}; compacted "
            f"{_n(t.get('compacted_offsets'))} offsets, {_bytes(t.get('compacted_bytes'))}; backlog max "
            f"{_n(lag.get('max_offsets'))} ({worst.get('partition', '-')}); vacuum reclaimed "
            f"{_bytes((t.get('vacuum') or {}).get('bytes_reclaimed'))}")


def _s3_line(s3: Mapping[str, Any]) -> str:
    billing = s3["billing"]
    return (f"S3         requests {_pairs(s3['requests_by_op'])}; errors {_pairs(s3['errors_by_op'])}\n"
            f"           request cost {_usd(billing.get('request_cost_usd'))}, "
            f"{_usd(s3.get('request_cost_usd_per_gb_ingested'))} per GB ingested "
            f"({_bytes(s3.get('ingested_bytes'))} ingested); stored {_bytes(billing.get('stored_bytes'))} "
            f"({_usd(billing.get('storage_cost_usd_per_month'))}/month)")


def _processes_line(processes: Mapping[str, Any]) -> str:
    parts = [f"{name} {_n(p['cpu_s'])} s CPU ({_n(p['cpu_pct'])}%), RSS max {_bytes(p['peak_rss_bytes'])}"
             for name, p in processes.items()]
    return "processes  " + ("\n           ".join(parts) if parts else "no readings")


def _host_line(host: Mapping[str, Any]) -> str:
    if host.get("busy_cpu_pct") is None:
        return "host       no readings"
    return (f"host       CPU busy {_n(host['busy_cpu_pct'])}% (peak {_n(host.get('peak_busy_cpu_pct'))}%, "
            f"iowait {_n(host.get('iowait_cpu_pct'))}%); least memory available "
            f"{_bytes(host.get('min_mem_available_bytes'))}")


def _reconciliation_lines(rec: Mapping[str, Any]) -> list[str]:
    counters, read_back = rec["counters"], rec["read_back"]
    lines = [f"reconciliation {'OK' if rec['ok'] else 'FAILED'}"]
    if "records" in counters:
        r = counters["records"]
        lines.append(f"  counters   {counters['outcome']}: client acked {_n(r['client_acked'])} records, "
                     f"brokers accepted {_n(r['brokers_accepted'])}"
                     + (" (a lower bound: a broker restarted)" if counters.get("lower_bound") else ""))
    else:
        lines.append(f"  counters   {counters['outcome']}")
    if read_back.get("ran"):
        lines.append(f"  read-back  {_n(read_back['partitions_checked'])} partitions, "
                     f"{_n(read_back['records_confirmed'])} of {_n(read_back['acked_records'])} acked records "
                     f"read, {_n(read_back['records_missing'])} missing; "
                     f"{_n(read_back['unacked_offsets'])} unacked offsets in the log")
    else:
        lines.append(f"  read-back  not run{': ' + read_back['error'] if read_back.get('error') else ''}")
    lines += [f"  error:   {e}" for e in rec["errors"]]
    lines += [f"  warning: {w}" for w in rec["warnings"]]
    return lines
