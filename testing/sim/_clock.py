"""Simulated time and identifiers: the run's :class:`~server._runtime.Runtime`.

The protocol reads the clock for three decisions that matter (the SPEC 7.0
blob age rule ``D``, the vacuum grace period, backoff deadlines) and draws
uuids for object names and append/compaction ids. Real time and real uuids
would make two runs of one seed differ, so every actor is built with the
runtime :func:`sim_runtime` makes: time moves only when the scheduler ticks,
when an actor sleeps, or when a fault jumps it; uuids and ``Backoff``'s
jitter come from seeded streams.
"""

from __future__ import annotations

import random
import uuid as _uuid
from typing import Callable

from server._runtime import Runtime

__all__ = ["SimClock", "SimTime", "SimIds", "sim_runtime", "EPOCH_MS"]

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


class SimTime:
    """The :class:`~server._runtime.Clock` the protocol code sees in a run.

    ``sleep`` is a scheduling point: the calling actor parks until the
    simulated clock reaches its wake time, and other actors run meanwhile.
    """

    def __init__(self, clock: SimClock, sleep: Callable[[float], None]) -> None:
        self._clock = clock
        self._sleep = sleep

    def now_ms(self) -> int:
        return self._clock.now_ms()

    def monotonic(self) -> float:
        return self._clock.elapsed_ms / 1000.0

    perf_counter = monotonic

    def sleep(self, seconds: float) -> None:
        self._sleep(seconds)


class SimIds:
    """``uuid4()`` from a seeded stream."""

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng

    def uuid4(self) -> _uuid.UUID:
        return _uuid.UUID(int=self._rng.getrandbits(128), version=4)


def sim_runtime(seed: int, clock: SimClock, sleep: Callable[[float], None]) -> Runtime:
    """The runtime of one run: ``clock`` (slept on through ``sleep``), uuids
    and jitter from streams of ``seed``."""
    return Runtime(
        clock=SimTime(clock, sleep),
        ids=SimIds(random.Random(f"{seed}:uuid")),
        rng=random.Random(f"{seed}:jitter"),
    )
