"""A pass every interval on a thread of its own, as the compactor service's vacuum and retention run.

The first pass starts at a random point of the first interval, so a fleet
started together does not act in lockstep; each later one an interval after
the last one ended. The thread stops when the service's ``stop`` event is set.
"""

from __future__ import annotations

import threading

from .._runtime import RandomSource

__all__ = ["PeriodicPass"]


class PeriodicPass:
    """``run_once()`` every ``interval_ms`` on thread ``name`` once started (0: on demand only)."""

    def __init__(self, name: str, interval_ms: int, stop: threading.Event, rng: RandomSource) -> None:
        self._name = name
        self._interval_s = interval_ms / 1000
        self._stop = stop
        self._rng = rng
        self.thread: threading.Thread | None = None
        """The timer thread; None until started, or when the interval is 0."""

    def run_once(self) -> object:
        raise NotImplementedError

    def start(self) -> None:
        if self._interval_s <= 0 or self.thread is not None:
            return
        self.thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
        self.thread.start()

    def join(self, timeout_s: float) -> None:
        if self.thread is not None:
            self.thread.join(timeout=timeout_s)

    def _loop(self) -> None:
        first: float | None = self._interval_s * self._rng.uniform(0.5, 1.0)
        while not self._stop.wait(first if first is not None else self._interval_s):
            first = None
            self.run_once()
