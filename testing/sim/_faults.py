"""Which fault, if any, the simulator injects at a scheduling point.

Faults are drawn from the run's seeded generator, so a seed always injects
the same faults at the same steps. Kinds:

- ``crash``: the actor dies *before* the store call (``SimCrash`` in its
  thread); its object is abandoned and a fresh one takes over later;
- ``crash_after``: the call is applied, then the actor dies;
- ``lost_reply``: a metadata put/delete is applied but the caller gets
  ``MetadataStoreError`` (the outcome is unknown to it);
- ``meta_error`` / ``obj_error``: the call fails without being applied;
- ``time_jump``: simulated time leaps forward (past the 60 s blob age rule,
  or past the vacuum grace period), chosen per step, not per actor;
- ``pause``: one actor is starved for a number of steps, the stall that
  opens most race windows; ``stall``: the same for the actor that just
  wrote metadata (a process pausing right after a commit point).
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass

__all__ = ["FaultRates", "FaultPlan", "MUTATING_META_OPS"]

MUTATING_META_OPS = frozenset({"meta.put", "meta.delete", "meta.delete_range"})

_BY_OP: dict[str, tuple[str, ...]] = {
    "meta.put": ("crash", "crash_after", "lost_reply", "lost_reply", "meta_error"),
    "meta.delete": ("crash", "crash_after", "lost_reply", "meta_error"),
    "meta.delete_range": ("crash", "crash_after", "lost_reply", "meta_error"),
    "meta.get": ("crash", "meta_error"),
    "meta.ceiling": ("crash", "meta_error"),
    "meta.range_scan": ("crash", "meta_error"),
    "meta.list_keys": ("crash", "meta_error"),
    "obj.put": ("crash", "crash_after", "obj_error"),
    "obj.get": ("crash", "obj_error"),
    "obj.list": ("crash", "obj_error"),
    "obj.delete_many": ("crash", "crash_after", "obj_error"),
    "sleep": ("crash",),
}


@dataclass(frozen=True)
class FaultRates:
    """Per-step probabilities. ``op_fault`` applies to store calls and sleeps."""

    op_fault: float = 0.03
    time_jump: float = 0.004
    pause: float = 0.03
    pause_after_write: float = 0.08
    """Chance that an actor which just wrote metadata is then starved: a
    process stalling right after a commit point opens the widest races."""
    max_crashes: int = 4
    """Crashes per run: enough to hit every crash point over many seeds
    without turning every run into recovery only."""


class FaultPlan:
    """Draws faults for one run and counts them by kind."""

    def __init__(self, rng: random.Random, rates: FaultRates) -> None:
        self._rng = rng
        self.rates = rates
        self.counts: Counter[str] = Counter()

    def for_op(self, op: str) -> str | None:
        kinds = _BY_OP.get(op)
        if not kinds or self._rng.random() >= self.rates.op_fault:
            return None
        kind = self._rng.choice(kinds)
        if kind.startswith("crash"):
            if self.counts["crash"] + self.counts["crash_after"] >= self.rates.max_crashes:
                return None
        self.counts[kind] += 1
        return kind

    def time_jump_ms(self) -> int:
        """0, or a forward jump: past the 60 s age rule or past an hour."""
        if self._rng.random() >= self.rates.time_jump:
            return 0
        return self._rng.choice((2_000, 61_000, 61_000, 3_700_000))

    def pause_steps(self) -> int:
        if self._rng.random() >= self.rates.pause:
            return 0
        return self._rng.randint(5, 80)

    def pause_after_write_steps(self, op: str) -> int:
        if op not in MUTATING_META_OPS or self._rng.random() >= self.rates.pause_after_write:
            return 0
        return self._rng.randint(10, 150)
