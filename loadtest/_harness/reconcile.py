"""Reconciliation: does what the client was told add up with what the brokers counted and the log holds?

- :func:`counter_check`: the client's acked records and bytes against the
  brokers' ``produce_records_total`` and ``produce_payload_bytes_total``,
  with the difference the client's own uncertainty explains (unknown
  outcomes: committed, counted by a broker, never acknowledged) and the lower
  bound a restart leaves. A broker counts every batch it acknowledged, in a
  409 beside a failed one too, so brokers never count fewer than the client
  was acknowledged unless one restarted;
- :func:`read_back_check`: every acked range read back from the log
  (:mod:`.readback`).

Both add to one :class:`Findings`: errors fail the run, warnings say what
the figures cannot show. ``loadtest/README.md`` ("summary.json") has the
table of outcomes.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from server._errors import LlogError

from .readback import ReadBack, check_read_back
from .run_files import RunFiles
from .samples import ServiceSeries, number

__all__ = ["Findings", "OUTCOME_SEVERITY", "counter_check", "read_back_check"]

OUTCOME_SEVERITY = {"ok": 0, "explained_by_unknown": 0, "lower_bound": 1,
                    "unexplained_excess": 1, "unavailable": 1, "missing": 2}


class Findings:
    """What the summary found wrong: errors fail the reconciliation, warnings do not."""

    def __init__(self) -> None:
        self.errors: list[str] = []
        self.warnings: list[str] = []

    def error(self, message: str) -> None:
        self.errors.append(message)

    def warn(self, message: str) -> None:
        self.warnings.append(message)


FRAMING_BYTES_PER_RECORD = 21 + 61
"""The most RecordBatch v2 adds to a record: its head (length, attributes, deltas) and,
at worst, a batch header of its own (SPEC 6.3)."""


def _compare(acked: float, accepted: float, excess_bound: float, restarted: bool) -> str:
    diff = accepted - acked
    if diff == 0:
        return "ok"
    if diff > 0:
        return "explained_by_unknown" if diff <= excess_bound else "unexplained_excess"
    if restarted:
        return "lower_bound"
    return "missing"


def counter_check(client: Mapping[str, Any], totals: Mapping[str, Any], brokers: Mapping[str, ServiceSeries],
                  notes: Findings) -> dict[str, Any]:
    """Client acked records and bytes against the brokers' accepted counters."""
    acked_r, acked_b = (client["produce"].get(k) for k in ("acked_records", "acked_bytes"))
    if acked_r is None or not any(s.docs for s in brokers.values()):
        notes.warn("acked records not compared with the brokers' counters: "
                   + ("no client summary" if acked_r is None else "no broker metrics sample"))
        return {"outcome": "unavailable"}
    unknown = client["unknown_outcome"]
    per_request = unknown["records_per_request"] or 0
    record_bytes = acked_b / acked_r if acked_r else (client["intent"].get("record_bytes") or 0)
    restarted = sorted(n for n, s in brokers.items() if s.lost_counts())
    bound_r = unknown["requests"] * per_request
    rows = {}
    # Brokers count the stored batches' bytes (RecordBatch v2 framing included: at most
    # a record head and a batch header per record), clients count payload bytes.
    framing = FRAMING_BYTES_PER_RECORD * totals["accepted_records"]
    for name, acked, accepted, excess in (("records", acked_r, totals["accepted_records"], bound_r),
                                          ("bytes", acked_b or 0, totals["accepted_bytes"],
                                           bound_r * record_bytes + framing)):
        outcome = _compare(acked, accepted, excess, bool(restarted))
        rows[name] = {"client_acked": acked, "brokers_accepted": accepted, "difference": number(accepted - acked),
                      "outcome": outcome}
    outcome = max((r["outcome"] for r in rows.values()), key=OUTCOME_SEVERITY.__getitem__)
    _note_counters(outcome, rows, restarted, notes)
    return {"outcome": outcome, "lower_bound": bool(restarted), "restarted_brokers": restarted, **rows,
            "unknown_records_bound": number(bound_r)}


def _note_counters(outcome: str, rows: Mapping[str, Any], restarted: Sequence[str], notes: Findings) -> None:
    r = rows["records"]
    said = (f"client acked {number(r['client_acked'])} records, brokers accepted {number(r['brokers_accepted'])} "
            f"(difference {r['difference']})")
    if outcome == "missing":
        notes.error(f"{said}: brokers counted fewer records than the client acknowledged")
    elif outcome == "lower_bound":
        notes.warn(f"{said}: a lower bound, {', '.join(restarted)} restarted or died and lost counts; "
                   "the read-back is the check that counts")
    elif outcome == "unexplained_excess":
        notes.warn(f"{said}: more than the client's unknown-outcome requests explain (another producer?)")


def read_back_check(files: RunFiles, read_back: ReadBack | None, client: Mapping[str, Any],
                    notes: Findings) -> dict[str, Any]:
    """Every acked range read back from the log (see :mod:`.readback`)."""
    acked = files.client_summary.get("acked")
    if read_back is None:
        notes.warn("read-back not run: acknowledged offsets were not checked against the log")
        return {"ran": False, "error": None}
    if not isinstance(acked, dict):
        notes.error("read-back impossible: client-summary.json has no acked ranges")
        return {"ran": False, "error": "no acked ranges"}
    unknown = client["unknown_outcome"]
    per_request = unknown["records_per_request"]
    bound = int((unknown["requests"] + unknown["partial_requests"]) * per_request) if per_request else None
    partitions = [f"{p['topic']}:{p['partition']}" for p in files.routing.get("partitions", [])]
    try:
        result = check_read_back(read_back, acked, partitions=partitions, unacked_bound=bound)
    except (LlogError, OSError) as exc:
        notes.error(f"read-back could not finish: {exc}")
        return {"ran": False, "error": str(exc)}
    _note_read_back(result, notes)
    return result


def _note_read_back(result: Mapping[str, Any], notes: Findings) -> None:
    for m in result["mismatches"]:
        if m["missing"]:
            shown = ", ".join(f"{s}-{e}" for s, e in m["missing"][:5])
            more = f" (+{len(m['missing']) - 5} more ranges)" if len(m["missing"]) > 5 else ""
            notes.error(f"{m['partition']}: acknowledged offsets {shown}{more} missing from the log "
                        f"(high watermark {m['high_watermark']}, last acked {m['max_acked']})")
        elif m["high_watermark"] < m["max_acked"]:
            notes.error(f"{m['partition']}: high watermark {m['high_watermark']} is below the last "
                        f"acknowledged offset {m['max_acked']}")
    if result["unacked_within_bound"] is False:
        notes.warn(f"the log holds {result['unacked_offsets']} offsets nobody acknowledged, more than the "
                   f"client's unknown-outcome and partial requests explain ({result['unacked_bound']})")
