"""Capped, jittered exponential backoff as an immutable value.

``Backoff.next()`` returns a new Backoff one attempt further on; the caller
sleeps ``delay_s`` of the *returned* value. ``exhausted`` turns true once the
attempt budget or the elapsed-time budget is spent, so a loop reads::

    backoff = Backoff()
    while True:
        try:
            return attempt()
        except VersionConflict:
            backoff = backoff.next()
            if backoff.exhausted:
                raise ConcurrencyConflict(...)
            time.sleep(backoff.delay_s)

Full jitter (a uniform draw in [0, cap]) spreads contending writers apart,
which matters more than the exact mean when many brokers CAS one key.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field, replace

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
    started_at: float = field(default_factory=time.monotonic)

    def next(self) -> Backoff:
        attempt = self.attempt + 1
        cap_ms = min(self.max_ms, self.initial_ms * self.multiplier ** (attempt - 1))
        return replace(self, attempt=attempt, delay_s=random.uniform(0, cap_ms) / 1000.0)

    @property
    def exhausted(self) -> bool:
        elapsed_ms = (time.monotonic() - self.started_at) * 1000.0
        return self.attempt >= self.max_attempts or elapsed_ms >= self.max_elapsed_ms

    def sleep(self) -> None:
        if self.delay_s > 0:
            time.sleep(self.delay_s)
