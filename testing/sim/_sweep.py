"""Many seeds on every core: worker processes run chunks of seeds (each seed
is as deterministic in a worker as alone), the parent collects the verdicts."""

from __future__ import annotations

import logging
import multiprocessing
import os
from dataclasses import dataclass, field

from ._run import SimConfig, SimFailure, run_seed

__all__ = ["SweepResult", "sweep"]

_CHUNK = 25


@dataclass
class SweepResult:
    seeds: int = 0
    steps: int = 0
    failures: list[tuple[int, str]] = field(default_factory=list)
    """``(seed, the failure's text with its trace)``, by seed."""


def _chunk(bounds: tuple[int, int, SimConfig]) -> SweepResult:
    start, stop, config = bounds
    logging.getLogger("server").setLevel(logging.CRITICAL)  # injected faults log by the thousand
    out = SweepResult()
    for seed in range(start, stop):
        out.seeds += 1
        try:
            out.steps += run_seed(seed, config).steps
        except SimFailure as failure:
            out.failures.append((seed, str(failure)))
    return out


def sweep(seeds: range, config: SimConfig | None = None, jobs: int | None = None) -> SweepResult:
    """Run ``seeds`` on ``jobs`` processes (default: one per core)."""
    config = config or SimConfig()
    jobs = max(1, jobs or os.cpu_count() or 1)
    chunks = [(s, min(s + _CHUNK, seeds.stop), config) for s in range(seeds.start, seeds.stop, _CHUNK)]
    total = SweepResult()
    if jobs == 1:
        parts = map(_chunk, chunks)
    else:
        pool = multiprocessing.get_context("spawn").Pool(jobs)
        parts = pool.imap_unordered(_chunk, chunks)
    try:
        for part in parts:
            total.seeds += part.seeds
            total.steps += part.steps
            total.failures.extend(part.failures)
    finally:
        if jobs > 1:
            pool.close()
            pool.join()
    total.failures.sort()
    return total
