"""A wall clock a test moves, and a runtime built on it."""

from __future__ import annotations

from server._runtime import REAL_RUNTIME, Runtime


class StepClock:
    """A clock the test moves (``now``); ``sleep`` moves it too."""

    def __init__(self, now_ms: int) -> None:
        self.now = now_ms

    def now_ms(self) -> int:
        return self.now

    def monotonic(self) -> float:
        return self.now / 1000

    def perf_counter(self) -> float:
        return self.now / 1000

    def sleep(self, seconds: float) -> None:
        self.now += int(seconds * 1000)


def stepped_runtime(clock: StepClock) -> Runtime:
    """The machine's ids and jitter with ``clock``'s time."""
    return Runtime(clock=clock, ids=REAL_RUNTIME.ids, rng=REAL_RUNTIME.rng)
