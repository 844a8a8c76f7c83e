"""Simulated time and identifiers: the only clock and uuid source a run sees.

The protocol reads the clock for three decisions that matter (the 60 s blob
age rule of SPEC 7.0, the vacuum grace period, backoff deadlines) and draws
uuids for object names and append/compaction ids. Real time and real uuids
would make two runs of one seed differ, so the simulator swaps in these
objects (see ``_patches``): time moves only when the scheduler ticks, when an
actor sleeps, or when a fault jumps it; uuids come from a seeded generator.
"""

from __future__ import annotations

import random
import uuid as _uuid

__all__ = ["SimClock", "SimTimeModule", "SimUuidModule", "EPOCH_MS"]

EPOCH_MS = 1_800_000_000_000
"""Wall-clock ms at simulated time zero (an arbitrary fixed instant)."""


class SimClock:
    """Milliseconds since the run began; advanced only by the simulator."""

    def __init__(self) -> None:
        self.elapsed_ms = 0.0

    def advance(self, ms: float) -> None:
        if ms > 0:
            self.elapsed_ms += ms

    def advance_to(self, elapsed_ms: float) -> None:
        self.elapsed_ms = max(self.elapsed_ms, elapsed_ms)

    def now_ms(self) -> int:
        """Wall-clock ms (what ``int(time.time() * 1000)`` returns in a run)."""
        return EPOCH_MS + int(self.elapsed_ms)


class SimTimeModule:
    """Stands in for the ``time`` module inside the protocol modules.

    ``sleep`` is a scheduling point: the calling actor parks until the
    simulated clock reaches its wake time, and other actors run meanwhile.
    """

    def __init__(self, clock: SimClock, sleep) -> None:
        self._clock = clock
        self._sleep = sleep

    def time(self) -> float:
        return (EPOCH_MS + self._clock.elapsed_ms) / 1000.0

    def monotonic(self) -> float:
        return self._clock.elapsed_ms / 1000.0

    perf_counter = monotonic

    def sleep(self, seconds: float) -> None:
        self._sleep(seconds)


class SimUuidModule:
    """Stands in for the ``uuid`` module: ``uuid4()`` from a seeded stream."""

    UUID = _uuid.UUID

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng

    def uuid4(self) -> _uuid.UUID:
        return _uuid.UUID(int=self._rng.getrandbits(128), version=4)
