"""What every answer must satisfy, and the resource watch of a server process.

Per answer (``answer_problems``):

- a documented status only (``server/HTTP_API.md``, ``server/openapi.yaml``):
  no 5xx but the documented 503s and 504 (503 ``BackPressureRejected``,
  ``ProducerClosed`` or ``ShuttingDown`` and 504 ``OutcomeUnknown`` on the
  broker, 503 on the compactor's ``/health`` while it stops) and 505 for a
  request line whose HTTP version the case made unsupported;
- every non-2xx body is the JSON error body (``_protocol/http_error.py``):
  an object with a non-empty string ``error`` and ``error_type``, ``field`` a
  string when present, ``Content-Type: application/json``; no answer is an
  HTML page; a 405 names ``Allow``; an answer to HEAD has no body;
- no answer mentions a path the fuzzer hid inside a body (``/smuggled-...``):
  that would be a body read as a request.

``ProcessWatch`` samples a process's RSS and open file descriptors
(``/proc/<pid>``): a baseline after the warm-up, then after the run it waits
for both to settle back within a tolerance. The connections the process
opened itself (to S3 and Oxia) are counted apart with a tolerance of their
own: its S3 connection pool (32 connections) grows with the run's peak
concurrency and keeps them open, as it should; a leak, one per request or
per case, still shows in a run of a thousand.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Callable

from loadtest._harness.procfs import outbound_tcp, sample_process

from server._protocol.outcomes import BACK_PRESSURE_REJECTED, OUTCOME_UNKNOWN, PRODUCER_CLOSED, SHUTTING_DOWN

from .requests import Case, Req
from .wire import Answer

__all__ = ["SMUGGLED", "answer_problems", "ProcessWatch", "Resources"]

SMUGGLED = b"/smuggled-"
_CLIENT_ERRORS = {
    "broker": frozenset({400, 403, 404, 405, 408, 409, 411, 413, 414, 431}),
    "compactor": frozenset({400, 404, 405, 414, 431}),
}
_BROKER_5XX = {  # the documented 5xx answers of /produce (server/_protocol/outcomes.py)
    (503, "/produce"): {row.error_type for row in (BACK_PRESSURE_REJECTED, PRODUCER_CLOSED, SHUTTING_DOWN)},
    (504, "/produce"): {OUTCOME_UNKNOWN.error_type},
}


def _allowed(case: Case, req: Req, answer: Answer, doc: Any) -> str | None:
    """Why the status is not allowed here, or None."""
    status = answer.status
    if req.expect and status not in req.expect:
        return f"status {status}, expected one of {sorted(req.expect)}"
    if 200 <= status < 300:
        return None
    if status in case.allow:
        return None
    if 400 <= status < 500:
        return None if status in _CLIENT_ERRORS[case.target] else f"undocumented status {status}"
    error_type = doc.get("error_type") if isinstance(doc, dict) else None
    if case.target == "broker":
        if status == 503 and error_type == SHUTTING_DOWN.error_type:
            return None
        if error_type in _BROKER_5XX.get((status, req.path), ()):
            return None
    elif status == 503 and req.path.rstrip("/") == "/health":
        return None
    return f"undocumented {status} ({error_type})"


def answer_problems(case: Case, req: Req, answer: Answer) -> list[str]:
    """What is wrong with ``answer`` to ``req`` (empty: nothing)."""
    problems = []
    ctype = (answer.header("content-type") or "").split(";")[0].strip().lower()
    doc: Any = None
    if ctype == "application/json" and answer.body:
        try:
            doc = json.loads(answer.body)
        except ValueError as exc:
            problems.append(f"a JSON Content-Type with a body that is not JSON: {exc}")
    if ctype == "text/html" or answer.body.lstrip()[:1] == b"<":
        problems.append("an HTML answer")
    if SMUGGLED in answer.body:
        problems.append("an answer to a request hidden inside a body (request smuggling)")
    if req.head and answer.body:
        problems.append("an answer to HEAD with a body")
    why = _allowed(case, req, answer, doc)
    if why:
        problems.append(why)
    if answer.status >= 300:
        problems += _error_body_problems(answer, ctype, doc, req.head)
    if answer.status == 405 and not answer.header("allow"):
        problems.append("a 405 without Allow")
    return problems


def _error_body_problems(answer: Answer, ctype: str, doc: Any, head: bool) -> list[str]:
    if ctype != "application/json":
        return [f"a {answer.status} with Content-Type {ctype!r}, not the JSON error body"]
    if head:
        return []
    if not isinstance(doc, dict):
        return [f"a {answer.status} whose body is not a JSON object: {answer.body[:120]!r}"]
    problems = []
    for key in ("error", "error_type"):
        if not isinstance(doc.get(key), str) or not doc[key]:
            problems.append(f"a {answer.status} without a string {key!r}: {doc}")
    if "field" in doc and not isinstance(doc["field"], str):
        problems.append(f"a {answer.status} whose field is not a string: {doc}")
    return problems


# -- resources -------------------------------------------------------------------------


@dataclass(frozen=True)
class Resources:
    rss_bytes: int
    open_fds: int
    threads: int
    outbound: int = 0
    """Of ``open_fds``, the TCP connections the process opened (its S3 and Oxia clients)."""

    def to_json(self) -> dict[str, Any]:
        return {"rss_mib": round(self.rss_bytes / 2**20, 1), "open_fds": self.open_fds,
                "outbound_connections": self.outbound, "threads": self.threads}


POOL_TOLERANCE = 40
"""Outbound connections beyond the baseline allowed: the S3 pool's 32 and Oxia's few."""


class ProcessWatch:
    """RSS and open descriptors of one process against a baseline."""

    def __init__(self, name: str, pid: int, *, rss_tolerance_bytes: int, fd_tolerance: int,
                 own_ports: tuple[int, ...] = (), pool_tolerance: int = POOL_TOLERANCE) -> None:
        """``own_ports``: the ports it serves (a connection on one is a client's, not its own)."""
        self.name = name
        self.pid = pid
        self.rss_tolerance_bytes = rss_tolerance_bytes
        self.fd_tolerance = fd_tolerance
        self.own_ports = own_ports
        self.pool_tolerance = pool_tolerance
        self.baseline: Resources | None = None

    def sample(self) -> Resources:
        s = sample_process(self.pid)
        if not s.alive or s.rss_bytes is None or s.open_files is None:
            raise RuntimeError(f"{self.name} (pid {self.pid}) is gone or unreadable")
        return Resources(s.rss_bytes, s.open_files, s.threads or 0, outbound_tcp(self.pid, self.own_ports) or 0)

    def take_baseline(self) -> Resources:
        self.baseline = self.sample()
        return self.baseline

    def within(self, now: Resources) -> bool:
        base = self.baseline
        assert base is not None, "take_baseline first"
        return (now.rss_bytes <= base.rss_bytes + self.rss_tolerance_bytes
                and now.open_fds - now.outbound <= base.open_fds - base.outbound + self.fd_tolerance
                and now.outbound <= base.outbound + self.pool_tolerance)

    def settle(self, timeout_s: float, sleep: Callable[[float], None] = time.sleep) -> tuple[bool, Resources]:
        """Wait up to ``timeout_s`` for RSS and descriptors to come back within
        tolerance of the baseline: ``(settled, last sample)``."""
        deadline = time.monotonic() + timeout_s
        while True:
            now = self.sample()
            if self.within(now) or time.monotonic() >= deadline:
                return self.within(now), now
            sleep(0.5)
