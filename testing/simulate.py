"""Deterministic simulation of the llog protocol: ``python -m testing.simulate``.

Runs the real writer, compactor, fencer, vacuum and reader code as several
actors over in-memory stores, one store call at a time in an order (and with
faults) drawn from a seed, and checks SPEC 8's invariants and every read
after each step (see ``testing/sim``). Examples::

    python -m testing.simulate --seeds 2000            # seeds 0..1999
    python -m testing.simulate --seeds 500 --start 10000
    python -m testing.simulate --seed 1234             # replay one seed, print its trace

Exit status 1 if any seed failed; each failure prints its trace and the
command that replays it.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections import Counter
from typing import Sequence

from testing.sim import SimConfig, SimFailure, run_seed

__all__ = ["main"]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m testing.simulate",
        description="Deterministic simulation tester for the llog protocol (FoundationDB/VOPR style): "
                    "seeded schedules of real writers, compactors, a fencer, a vacuum and readers over "
                    "in-memory stores, with crashes, lost replies, store errors and time jumps; "
                    "invariants are checked after every step.",
    )
    which = p.add_mutually_exclusive_group()
    which.add_argument("--seed", type=int, help="run (replay) this one seed and print its trace")
    which.add_argument("--seeds", type=int, default=100, help="how many seeds to run (default 100)")
    p.add_argument("--start", type=int, default=0, help="first seed of --seeds (default 0)")
    p.add_argument("--steps", type=int, default=None,
                   help="end each run after this many steps, as if every actor crashed, and check the "
                        "state left (default: run until the actors finish)")
    p.add_argument("--scale", type=float, default=1.0, help="multiply the operations per actor (default 1)")
    p.add_argument("--fail-fast", action="store_true", help="stop at the first failing seed")
    p.add_argument("--progress-s", type=float, default=5.0, help="seconds between progress lines (default 5)")
    p.add_argument("--trace", type=int, default=40, help="steps of trace to show on failure (default 40)")
    p.add_argument("--log-level", default="CRITICAL", help="level for the library's own logging")
    args = p.parse_args(argv)
    if args.seeds is not None and args.seeds < 1:
        p.error("--seeds must be >= 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("server").setLevel(args.log_level.upper())
    config = SimConfig(stop_after=args.steps, scale=args.scale, trace_len=args.trace)
    if args.seed is not None:
        return _replay(args.seed, config)
    return _many(range(args.start, args.start + args.seeds), config, args)


def _replay(seed: int, config: SimConfig) -> int:
    started = time.perf_counter()
    try:
        r = run_seed(seed, config)
    except SimFailure as failure:
        print(failure)
        return 1
    print(f"seed {seed} passed ({r.shape}): {r.steps} steps, {r.acked} appends acknowledged, "
          f"{r.failed} failed, {r.unknown} unknown; faults {dict(sorted(r.faults.items()))}; "
          f"{r.sim_ms / 1000:.1f} s simulated in {time.perf_counter() - started:.2f} s; order hash {r.order_hash}")
    return 0


def _many(seeds: range, config: SimConfig, args: argparse.Namespace) -> int:
    started = last = time.perf_counter()
    steps = done = acked = failed = unknown = 0
    faults: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    retention: Counter[str] = Counter()
    idempotence: Counter[str] = Counter()
    orders: set[str] = set()
    handoffs: set[tuple[str, str]] = set()
    failures: list[SimFailure] = []
    for seed in seeds:
        try:
            r = run_seed(seed, config)
        except SimFailure as failure:
            failures.append(failure)
            print(failure if len(failures) <= 3 else f"seed {seed} FAILED: {failure.reason.splitlines()[0]}",
                  flush=True)
            done += 1
            if args.fail_fast:
                break
            continue
        done += 1
        steps += r.steps
        faults += r.faults
        errors += r.errors
        retention += r.retention
        idempotence += r.idempotence
        orders.add(r.order_hash)
        handoffs |= r.handoffs
        acked, failed, unknown = acked + r.acked, failed + r.failed, unknown + r.unknown
        now = time.perf_counter()
        if now - last >= args.progress_s:
            last = now
            print(f"[sim] {done}/{len(seeds)} seeds, {done / (now - started):.1f} seeds/s, {steps} steps, "
                  f"{len(failures)} failed", flush=True)
    elapsed = time.perf_counter() - started
    print(f"{done} seeds ({seeds.start}..{seeds.start + done - 1}) in {elapsed:.1f} s: "
          f"{done / elapsed:.1f} schedules/s, {steps} steps ({steps / elapsed:.0f} steps/s)")
    print(f"appends: {acked} acknowledged, {failed} failed definitely, {unknown} unknown")
    print("  not acknowledged, by error: " + ", ".join(f"{k} {v}" for k, v in errors.most_common()))
    print("faults injected: " + (", ".join(f"{k} {v}" for k, v in sorted(faults.items())) or "none"))
    print(f"retention: {retention['passes']} passes moved a log start {retention['advances']} times; "
          f"{retention['deletions']} topic deletions and re-creations; "
          f"{retention['records_deletions']} DeleteRecords calls")
    print(f"idempotent producers: {idempotence['batches']} attempts, {idempotence['duplicates']} answered as "
          f"duplicates with their first offsets, {idempotence['fenced_zombies']} batches of a superseded epoch "
          "refused as fenced")
    print(f"distinct orders of protocol steps: {len(orders)} of {done - len(failures)} passing runs; "
          f"distinct handoffs (a step, then another actor's step): {len(handoffs)}")
    if failures:
        print(f"FAILED seeds ({len(failures)}): {' '.join(str(f.seed) for f in failures[:50])}")
        return 1
    print("all seeds passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
