"""Runs fuzz cases against the two services and tallies what came back.

Cases are drawn on the calling thread (one seeded ``random.Random``) and run
on worker threads, stalled senders on their own pool (each holds a server
connection for the read timeout). After every burst of requests the runner
waits for the cases in flight and asks both services for ``GET /health``: a
service that stopped serving fails the run there, not at the end. Progress
goes to ``log`` every few seconds.
"""

from __future__ import annotations

import json
import random
import sys
import threading
import time
from collections import Counter, defaultdict
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import TextIO

from server._errors import PartitionNotInitialized
from server._protocol.outcomes import OUTCOMES

from . import wire
from .checks import answer_problems
from .ledger import Ledger, Records, value_bytes
from .mutations import next_case
from .requests import Case, Ctx, Req, http_request

_NEVER_WRITTEN = OUTCOMES[PartitionNotInitialized.__name__].error_code
"""A consume partition's error_code for a partition nothing was written to."""

__all__ = ["Target", "Settings", "Failure", "Runner", "read_partition"]


@dataclass(frozen=True)
class Target:
    name: str
    host: str
    port: int
    pid: int | None = None

    @property
    def addr(self) -> tuple[str, int]:
        return self.host, self.port


@dataclass(frozen=True)
class Settings:
    read_timeout_s: float
    """The services' HTTP read timeout: a stalled connection must be closed by then (plus ``grace_s``)."""
    answer_timeout_s: float = 60.0
    """A whole request must be answered within this."""
    grace_s: float = 5.0
    workers: int = 8
    stall_workers: int = 8
    burst: int = 500
    progress_s: float = 3.0


@dataclass(frozen=True)
class Failure:
    case_no: int
    kind: str
    target: str
    problem: str
    request: bytes

    def describe(self) -> str:
        return f"case {self.case_no} {self.kind} -> {self.target}: {self.problem}\n    request: {self.request[:160]!r}"


@dataclass
class Tally:
    requests: int = 0
    health_probes: int = 0
    by_status: Counter[str] = field(default_factory=Counter)
    by_kind: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    failures: list[Failure] = field(default_factory=list)


class Runner:
    def __init__(self, settings: Settings, targets: dict[str, Target], ctx: Ctx, ledger: Ledger,
                 log: TextIO = sys.stderr) -> None:
        self.settings = settings
        self.targets = targets
        self.ctx = ctx
        self.ledger = ledger
        self.log = log
        self.tally = Tally()
        self._lock = threading.Lock()
        self._cases = 0

    # -- the loop --------------------------------------------------------------------
    def run(self, rng: random.Random, requests: int, label: str = "fuzz") -> None:
        """Draw and run cases until ``requests`` requests were sent."""
        s = self.settings
        stop = threading.Event()
        progress = threading.Thread(target=self._progress, args=(label, requests, stop), name="fuzz-progress", daemon=True)
        progress.start()
        slots = threading.BoundedSemaphore(s.workers * 2)
        stall_slots = threading.BoundedSemaphore(s.stall_workers)
        sent = since_probe = 0
        pending: list[Future] = []
        try:
            with ThreadPoolExecutor(s.workers, "fuzz") as pool, ThreadPoolExecutor(s.stall_workers, "fuzz-stall") as stalls:
                while sent < requests:
                    case = next_case(rng, self.ctx)
                    stalled = case.mode == "stall"
                    gate = stall_slots if stalled else slots
                    gate.acquire()
                    fut = (stalls if stalled else pool).submit(self._run_case, self._next_no(), case)
                    fut.add_done_callback(lambda _, g=gate: g.release())
                    if not stalled:
                        pending.append(fut)
                    sent += len(case.requests)
                    since_probe += len(case.requests)
                    if since_probe >= s.burst:
                        wait(pending)
                        pending.clear()
                        self.probe_health()
                        since_probe = 0
        finally:
            stop.set()
            progress.join()
        self.probe_health()

    def _next_no(self) -> int:
        self._cases += 1
        return self._cases

    def _progress(self, label: str, total: int, stop: threading.Event) -> None:
        started = time.monotonic()
        while not stop.wait(self.settings.progress_s):
            with self._lock:
                done, fails = self.tally.requests, len(self.tally.failures)
                top = ", ".join(f"{k}:{v}" for k, v in self.tally.by_status.most_common(6))
            rate = done / max(1e-9, time.monotonic() - started)
            print(f"[{label}] {done}/{total} requests ({rate:.0f}/s), failures {fails}; {top}", file=self.log, flush=True)

    def probe_health(self) -> None:
        """Both services answer GET /health with 200, on a fresh connection."""
        for target in self.targets.values():
            try:
                out = wire.exchange(target.addr, http_request("GET", "/health"), [False], 15.0)
                status = out.answers[0].status if out.answers else None
            except OSError as exc:
                status, out = None, exc
            problems = [] if status == 200 else [f"GET /health between bursts answered {status}: {out}"]
            self._record(0, Case("health-probe", target.name, "send", ()), None, None, problems)
            with self._lock:
                self.tally.health_probes += 1

    # -- one case ----------------------------------------------------------------------
    def _run_case(self, no: int, case: Case) -> None:
        target = self.targets[case.target]
        try:
            if case.mode == "stall":
                self._stall(no, case, target)
            elif case.mode == "abort":
                self._abort(no, case, target)
            else:
                self._exchange(no, case, target)
        except OSError as exc:
            for req in case.requests:
                self._record(no, case, req, "error", [f"could not talk to {target.name}: {exc!r}"])
        except Exception as exc:  # noqa: BLE001 - a fuzzer bug must not end the run unseen
            self._record(no, case, case.requests[0] if case.requests else None, "error", [f"fuzzer error: {exc!r}"])

    def _exchange(self, no: int, case: Case, target: Target) -> None:
        out = wire.exchange(
            target.addr, b"".join(r.data for r in case.requests), [r.head for r in case.requests],
            self.settings.answer_timeout_s, shut_write=case.mode == "shut", drip=case.drip,
            drip_pause_s=case.drip_pause_s,
        )
        closed_early = False
        for i, req in enumerate(case.requests):
            if i < len(out.answers):
                answer = out.answers[i]
                problems = answer_problems(case, req, answer)
                if req.produce:
                    problems += self.ledger.sent(req.produce, answer, processed=True)
                self._record(no, case, req, str(answer.status), problems)
                closed_early = answer.closes
                continue
            if closed_early:  # an earlier answer closed the connection: never read
                if req.produce:
                    self.ledger.sent(req.produce, None, processed=False)
                self._record(no, case, req, "not-read", [])
                continue
            problems, status = self._unanswered(out, req)
            if req.produce:
                problems += self.ledger.sent(req.produce, None, processed=True)
            self._record(no, case, req, status, problems)
        if out.error and len(out.answers) == len(case.requests):
            self._record(no, case, None, None, [f"malformed answer: {out.error}"])

    def _unanswered(self, out: wire.Outcome, req: Req) -> tuple[list[str], str]:
        if out.hung:
            return [f"no answer within {self.settings.answer_timeout_s:g} s (hung)"], "hung"
        if out.error:
            return [f"malformed answer: {out.error}"], "malformed"
        if 0 in req.expect:
            return [], "closed"
        return ["the connection closed without an answer"], "closed"

    def _stall(self, no: int, case: Case, target: Target) -> None:
        req = case.requests[0]
        limit = self.settings.read_timeout_s + self.settings.grace_s
        out = wire.stall(target.addr, case.prefix, limit + 5.0, head=req.head)
        problems = []
        if out.hung or out.elapsed_s > limit:
            problems.append(f"a sender stalled after {len(case.prefix)} bytes was still connected after "
                            f"{out.elapsed_s:.1f} s (read timeout {self.settings.read_timeout_s:g} s)")
        if out.error:
            problems.append(f"malformed answer: {out.error}")
        answer = out.answers[0] if out.answers else None
        if answer is not None:
            problems += answer_problems(case, req, answer)
        elif req.expect and 0 not in req.expect and not out.hung:
            problems.append(f"closed without an answer, expected one of {sorted(req.expect)}")
        if req.produce:
            problems += self.ledger.sent(req.produce, answer, processed=False)
        self._record(no, case, req, str(answer.status) if answer else ("hung" if out.hung else "closed"), problems)

    def _abort(self, no: int, case: Case, target: Target) -> None:
        req = case.requests[0]
        wire.abort(target.addr, req.data, case.read_bytes)
        if req.produce:
            self.ledger.sent(req.produce, None, processed=True)
        self._record(no, case, req, "aborted", [])

    def _record(self, no: int, case: Case, req: Req | None, status: str | None, problems: list[str]) -> None:
        with self._lock:
            if status is not None:
                self.tally.requests += 1
                self.tally.by_status[status] += 1
                self.tally.by_kind[case.kind][status] += 1
            data = req.data if req is not None else b""
            self.tally.failures += [Failure(no, case.kind, case.target, p, data) for p in problems]


def read_partition(broker: Target, topic: str, partition: int, timeout_s: float = 60.0) -> Records:
    """Every record of one partition from offset 1, through JSON /consume."""
    out: Records = []
    offset = 1
    while True:
        body = json.dumps({"topic_partitions": [{"topic": topic, "partition": partition, "fetch_offset": offset,
                                                 "partition_max_bytes": 1 << 20}],
                           "max_wait_ms": 0, "max_bytes": 1 << 22}).encode()
        got = wire.exchange(broker.addr, http_request("POST", "/consume", body), [False], timeout_s)
        if not got.answers or got.answers[0].status != 200:
            raise RuntimeError(f"reading {topic}:{partition} at {offset} failed: {got}")
        (res,) = json.loads(got.answers[0].body)["results"]
        if res.get("error_code") == _NEVER_WRITTEN:
            return out
        if not res["ok"]:
            raise RuntimeError(f"reading {topic}:{partition} at {offset}: {res}")
        out += [(r["offset"], value_bytes(r["value"])) for r in res["records"]]
        offset = res["next_fetch_offset"]
        if res["high_watermark"] is None or offset > res["high_watermark"]:
            return out
