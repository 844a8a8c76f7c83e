"""Hostile HTTP input at volume against a real broker and a real compactor service.

    python -m loadtest.fuzz_http --requests 10000 [--seed S] [--broker URL --compactor URL]

Without ``--broker``/``--compactor`` it starts its own: a private Oxia +
MinIO stack (or the one ``LLOG_OXIA_SERVICE_ADDRESS`` and friends name, under
a fresh root prefix), ``python -m server.leaderless_log_broker`` and
``python -m server.leaderless_log_compactor_server`` with a short HTTP read
timeout (``--read-timeout-s``, 2 s), a 64 KiB request limit and a compactor
compacting the fuzzed partitions as the run goes.

Every request is built from a valid one by a seeded mutation (one
``random.Random``: a run's cases replay from its seed, which is printed
first): truncated, oversized and mis-framed bodies (wrong, missing, repeated
``Content-Length``; chunked, valid and broken), invalid UTF-8 and UTF-16,
deep JSON nesting, number edges (``1e400``, ``2**80``, ``-0``, ``NaN``,
5000 digits), wrong types and unknown fields everywhere; binary produce
bodies with every length field one off each way, wrong magic, version,
flags and CRC, counts that lie; header floods; slow senders that stop
mid-request; dripping senders; pipelined requests; a body that is itself a
request; connections reset mid-answer; unknown methods and odd paths
(``..``, ``%00``, 64 KiB paths); the admin routes (topics, delete-records,
group offsets, producers) with mutated bodies and names, their destructive
requests only on scratch topics, never the one read back. Cases go to both
services (the compactor gets the HTTP-level ones).

Checks (any failure: exit status 1):

- no 5xx but the documented 503s and 504 (and 505 for an unsupported HTTP
  version); only documented statuses; every non-2xx body is the JSON error
  body (``error``, ``error_type``, optional ``field``), never HTML; a 405
  names ``Allow``; a request's expected status when the contract fixes it;
- no connection hangs: a whole request is answered, a stalled one is closed
  within the read timeout (plus a grace of 5 s);
- both services answer ``GET /health`` with 200 between bursts;
- RSS and open file descriptors of both processes (``/proc``; for services
  given by URL only with ``--broker-pid``/``--compactor-pid``) come back
  within a tolerance of the baseline taken after a warm-up; the connections
  a service opened to S3 and Oxia apart, within their pools (40);
- nothing a refused request carried is stored: every record value carries a
  marker naming its request; at the end every partition any request named is
  read back through ``/consume``; each record must be one a 200 (or a 409's
  ok batch) acknowledged, at its acknowledged offset, or belong to a request
  whose outcome is unknown (reset before its answer); every acknowledged
  record must be there. A 200 for a body the contract refuses, and a 400
  for one it accepts, are failures too (the fuzzer decodes produce bodies
  itself, ``loadtest/_fuzz/oracle.py``; a topic name a mutation made is
  auto-created with the broker's default count, so only its partition 0 is
  sure to exist).

Prints progress on stderr every few seconds; at the end, on stdout: requests
per status and per mutation kind (with their statuses), the resource
baseline and final samples, the storage tallies, and every failed check.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Sequence
from urllib.parse import urlsplit

from loadtest._common import stack_env
from loadtest._fuzz.runner import Target
from loadtest._fuzz.services import start_services
from loadtest._fuzz.session import Options, run_fuzz

__all__ = ["main", "parse_args"]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m loadtest.fuzz_http",
        description="Fuzz the broker's and the compactor service's HTTP surface with mutated requests and check "
                    "statuses, error bodies, hangs, health, RSS/fds and what was stored.",
    )
    p.add_argument("--requests", type=int, default=10_000, help="requests to send after the warm-up (default 10000)")
    p.add_argument("--seed", type=int, help="seed of the case sequence (default: random, printed)")
    p.add_argument("--broker", help="URL of a running broker (role both); with --compactor")
    p.add_argument("--compactor", help="URL of a running compactor service; with --broker")
    p.add_argument("--broker-pid", type=int, help="pid of --broker, for the RSS/fd check")
    p.add_argument("--compactor-pid", type=int, help="pid of --compactor, for the RSS/fd check")
    p.add_argument("--read-timeout-s", type=float,
                   help="the services' HTTP read timeout (default: 2 for the services this starts; "
                        "300, the services' own default, with --broker/--compactor)")
    p.add_argument("--warmup", type=int, default=400, help="warm-up requests before the baseline (default 400)")
    p.add_argument("--workers", type=int, default=8, help="client threads (default 8)")
    p.add_argument("--rss-tolerance-mib", type=float, default=32.0, help="allowed RSS growth (default 32 MiB)")
    p.add_argument("--fd-tolerance", type=int, default=8, help="allowed growth of open fds other than the connections a service opened to S3 and Oxia, which may grow by 40, their pools (default 8)")
    p.add_argument("--settle-s", type=float, default=30.0, help="how long RSS/fds may take to settle (default 30)")
    p.add_argument("--log-dir", type=Path, help="where the started services log (default: a temporary directory)")
    p.add_argument("--json", type=Path, help="also write the report as JSON here")
    args = p.parse_args(argv)
    if bool(args.broker) != bool(args.compactor):
        p.error("--broker and --compactor go together")
    if args.requests < 1:
        p.error("--requests must be >= 1")
    return args


def _target(name: str, url: str, pid: int | None) -> Target:
    parts = urlsplit(url)
    return Target(name, parts.hostname or "127.0.0.1", parts.port or 80, pid)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    print(f"[fuzz] seed {seed} (replay with --seed {seed})", file=sys.stderr, flush=True)
    with ExitStack() as stack:
        if args.broker:
            targets = {"broker": _target("broker", args.broker, args.broker_pid),
                       "compactor": _target("compactor", args.compactor, args.compactor_pid)}
            read_timeout = args.read_timeout_s or 300.0
        else:
            read_timeout = args.read_timeout_s or 2.0
            log_dir = args.log_dir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="llog-fuzz-")))
            log_dir.mkdir(parents=True, exist_ok=True)
            targets = start_services(stack, stack_env(stack), log_dir, read_timeout)
        options = Options(requests=args.requests, seed=seed, read_timeout_s=read_timeout,
                          warmup_requests=args.warmup, workers=args.workers,
                          rss_tolerance_mib=args.rss_tolerance_mib, fd_tolerance=args.fd_tolerance,
                          settle_timeout_s=args.settle_s)
        report = run_fuzz(targets, options)
    print(report.render())
    if args.json:
        args.json.write_text(json.dumps(report.__dict__, indent=1, default=str))
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
