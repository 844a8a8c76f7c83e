"""The one seam for time, ids and randomness: :class:`Runtime`.

Every clock read, sleep, id and random draw of the log (``_log/``), the
compactor service (``_compaction/``) and :class:`~server._retry.Backoff` goes
through a ``Runtime`` handed to the constructor (``runtime=``, keyword,
:data:`REAL_RUNTIME` when not given), never through ``time``, ``uuid`` or
``random`` directly; ``tests/unit/test_runtime_seam.py`` checks it on the
source. The top-level constructors (writer, reader, producer, compactor,
vacuum, compactor service) pass their runtime down to whatever they build, so
one value decides all of it, as TigerBeetle's VOPR hands every component its
``Time`` and PRNG and FoundationDB swaps its whole clock object. The
deterministic simulator (``testing/sim``) passes a runtime whose clock only
moves when the simulator says so, whose ``sleep`` is a scheduling point and
whose ids and draws come from seeded streams, so a seed replays exactly.

The contract:

- ``clock.now_ms()``: wall-clock milliseconds since the Unix epoch, an int
  (``created_at_ms``, the SPEC 7.0 ``D`` check, vacuum's object ages, claim
  and health timestamps). It may jump; never use it for a duration.
- ``clock.monotonic()``: seconds that never go back (deadlines, schedules,
  elapsed-time budgets).
- ``clock.perf_counter()``: seconds at the best resolution, for durations
  reported as metrics only (it decides nothing).
- ``clock.sleep(seconds)``: block the calling thread (a backoff). Waiting on
  a ``threading.Condition``/``Event`` with a timeout is a wait for another
  thread, not a sleep, and stays real; a deadline such a wait runs to is
  still computed from ``clock.monotonic()``.
- ``ids.uuid4()``: a fresh random (version 4) UUID (object names, append and
  compaction ids).
- ``rng.uniform(a, b)`` / ``rng.shuffle(items)``: jitter and the order of
  equally due work; safe to call from several threads.

A ``Runtime`` is a frozen value: what varies is inside its parts (the
clock's time, the streams' positions), never which parts it has.
"""

from __future__ import annotations

import random
import time
import uuid
from dataclasses import dataclass
from typing import Any, MutableSequence, Protocol

__all__ = ["Clock", "IdSource", "RandomSource", "Runtime", "SystemClock", "SystemIds", "REAL_RUNTIME"]


class Clock(Protocol):
    """Time as the protocol code sees it (units in the method docs)."""

    def now_ms(self) -> int:
        """Wall-clock milliseconds since the Unix epoch."""
        ...

    def monotonic(self) -> float:
        """Seconds from an arbitrary start; never goes back."""
        ...

    def perf_counter(self) -> float:
        """Seconds at the best resolution, for measured durations."""
        ...

    def sleep(self, seconds: float) -> None:
        """Block the calling thread for ``seconds``."""
        ...


class IdSource(Protocol):
    """Where unique names come from."""

    def uuid4(self) -> uuid.UUID:
        """A fresh random (version 4) UUID."""
        ...


class RandomSource(Protocol):
    """The random draws the code makes (a subset of ``random.Random``)."""

    def uniform(self, a: float, b: float) -> float:
        """A float in ``[a, b]``."""
        ...

    def shuffle(self, x: MutableSequence[Any]) -> None:
        """Shuffle ``x`` in place."""
        ...


class SystemClock:
    """The machine's clocks (``time``)."""

    def now_ms(self) -> int:
        return int(time.time() * 1000)

    def monotonic(self) -> float:
        return time.monotonic()

    def perf_counter(self) -> float:
        return time.perf_counter()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


class SystemIds:
    """Random UUIDs from the operating system (``uuid.uuid4``)."""

    def uuid4(self) -> uuid.UUID:
        return uuid.uuid4()


@dataclass(frozen=True)
class Runtime:
    """The clock, id source and random source one component (and everything
    it builds) uses; see the module docstring for the contract."""

    clock: Clock
    ids: IdSource
    rng: RandomSource


REAL_RUNTIME = Runtime(clock=SystemClock(), ids=SystemIds(), rng=random)
"""The machine's clocks, OS-random UUIDs and the ``random`` module's shared
generator (reseeded in a forked child, so forked workers draw different
jitter)."""
