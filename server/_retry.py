"""Capped, jittered exponential backoff as an immutable value.

``Backoff.next()`` returns a new Backoff one attempt further on; the caller
sleeps ``delay_s`` of the *returned* value. ``exhausted`` turns true once the
attempt budget or the elapsed-time budget is spent, so a loop reads::

    backoff = Backoff(runtime=runtime)
    while True:
        try:
            return attempt()
        except VersionConflict:
            backoff = backoff.next()
            if backoff.exhausted:
                raise ConcurrencyConflict(...)
            backoff.sleep()

Full jitter (a uniform draw in [0, cap]) spreads contending writers apart,
which matters more than the exact mean when many brokers CAS one key.

The clock (``started_at``, the elapsed-time budget, ``sleep``) and the
jitter come from ``runtime`` (:mod:`server._runtime`); ``started_at`` is
read from its clock when the Backoff is made, unless given.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ._runtime import REAL_RUNTIME, Runtime

__all__ = ["Backoff"]


@dataclass(frozen=True)
class Backoff:
    initial_ms: float = 2.0
    max_ms: float = 250.0
    multiplier: float = 2.0
    max_attempts: int = 200
    max_elapsed_ms: float = 30_000.0
    attempt: int = 0
    delay_s: float = 0.0
    started_at: float | None = None
    """``runtime.clock.monotonic()`` when the backoff began (filled in when None)."""
    runtime: Runtime = field(default=REAL_RUNTIME, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.started_at is None:
            object.__setattr__(self, "started_at", self.runtime.clock.monotonic())

    def next(self) -> Backoff:
        attempt = self.attempt + 1
        cap_ms = min(self.max_ms, self.initial_ms * self.multiplier ** (attempt - 1))
        return replace(self, attempt=attempt, delay_s=self.runtime.rng.uniform(0, cap_ms) / 1000.0)

    @property
    def exhausted(self) -> bool:
        started_at = self.started_at if self.started_at is not None else self.runtime.clock.monotonic()
        elapsed_ms = (self.runtime.clock.monotonic() - started_at) * 1000.0
        return self.attempt >= self.max_attempts or elapsed_ms >= self.max_elapsed_ms

    def sleep(self) -> None:
        if self.delay_s > 0:
            self.runtime.clock.sleep(self.delay_s)
