"""Which log the compactor service runs next, and when: scheduling state without threads.

``Scheduler`` keeps one :class:`LogState` per known log (the seed targets,
then whatever discovery adds; logs are never removed) and decides:

- ``take_due()``: the logs that are due (not running, next-eligible time
  reached), shuffled, at most one per free worker; they are marked running,
  so there is never more than one task per log and no queue of stale
  decisions;
- ``finish(tp, outcome)``: the log's next-eligible time after its task
  (``delay_s``): now after a run that resumed, or compacted and left offsets
  behind (it hit its per-run limit: keep going); idle sleep + U(0, idle
  jitter) after nothing (more) to do, busy, a lost race or a log not
  initialized yet; error sleep + U(0, error jitter) after an error;
- ``wait_s()``: how long the scheduler thread may sleep before something can
  be due (at most a second);
- ``take_discovery()``: whether a discovery pass is due.

Time comes from the runtime's monotonic clock (seconds) and jitter from its
random source (``server._runtime``), or from an explicit ``clock``/``rng``,
so unit tests drive every decision without threads or sleeps. Not
thread-safe: the service calls it holding its condition.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Iterable

from .._protocol.keys import TopicPartition
from .._runtime import REAL_RUNTIME, RandomSource, Runtime
from .config import CompactorServiceConfig
from .tasks import TaskOutcome

__all__ = ["LogState", "Scheduler", "MAX_WAIT_S"]

MAX_WAIT_S = 1.0
"""The scheduler thread wakes at least this often (to notice a stop, say)."""
_MIN_WAIT_S = 0.001


@dataclass
class LogState:
    """Scheduling bookkeeping for one log."""

    next_eligible: float = 0.0
    """Clock time (seconds) from which the log may run again."""
    running: bool = False
    last_outcome: TaskOutcome | None = None
    lag_offsets: int | None = None
    """Offsets left uncompacted after the last run that returned."""
    source: str = "target"
    """``target`` (seed target) or ``discovered``."""


class Scheduler:
    """Per-log next-eligible times and the free-worker count of one service."""

    def __init__(
        self,
        config: CompactorServiceConfig,
        *,
        clock: Callable[[], float] | None = None,
        rng: RandomSource | None = None,
        runtime: Runtime = REAL_RUNTIME,
    ) -> None:
        self._config = config
        self._clock = clock or runtime.clock.monotonic
        self._rng = rng or runtime.rng
        self._logs: dict[TopicPartition, LogState] = {tp: LogState() for tp in config.targets}
        self._in_flight = 0
        self._next_discovery = 0.0

    # -- reading the state ------------------------------------------------------------
    @property
    def in_flight(self) -> int:
        """Tasks handed out by ``take_due`` and not finished yet."""
        return self._in_flight

    def known(self) -> list[TopicPartition]:
        return sorted(self._logs)

    def running(self) -> list[TopicPartition]:
        return sorted(tp for tp, st in self._logs.items() if st.running)

    def discovered_count(self) -> int:
        return sum(1 for st in self._logs.values() if st.source == "discovered")

    def states(self) -> dict[TopicPartition, LogState]:
        """A copy of every log's state, sorted by log."""
        return {tp: dataclasses.replace(st) for tp, st in sorted(self._logs.items())}

    # -- changing it ----------------------------------------------------------------------
    def add_discovered(self, found: Iterable[TopicPartition]) -> list[TopicPartition]:
        """Add the logs of ``found`` not known yet, due at once; return them."""
        now = self._clock()
        new = [tp for tp in found if tp not in self._logs]
        for tp in new:
            self._logs[tp] = LogState(next_eligible=now, source="discovered")
        return new

    def take_discovery(self) -> bool:
        """True when a discovery pass is due (then the next one is an interval away)."""
        interval_ms = self._config.discovery_interval_ms
        now = self._clock()
        if interval_ms <= 0 or now < self._next_discovery:
            return False
        self._next_discovery = now + interval_ms / 1000
        return True

    def take_due(self) -> list[TopicPartition]:
        """The due logs, shuffled, one per free worker; each is now running."""
        free = self._config.workers - self._in_flight
        if free <= 0:
            return []
        now = self._clock()
        due = [tp for tp, st in self._logs.items() if not st.running and st.next_eligible <= now]
        self._rng.shuffle(due)
        for tp in due[:free]:
            self._logs[tp].running = True
            self._in_flight += 1
        return due[:free]

    def record(self, tp: TopicPartition, outcome: TaskOutcome, lag_offsets: int | None = None) -> None:
        """Note how a task on ``tp`` ended (``lag_offsets`` None: unknown, keep the last)."""
        st = self._logs.setdefault(tp, LogState())
        st.last_outcome = outcome
        if lag_offsets is not None:
            st.lag_offsets = lag_offsets

    def finish(self, tp: TopicPartition, outcome: TaskOutcome) -> None:
        """A task ``take_due`` handed out is done: schedule the log's next run."""
        st = self._logs[tp]
        st.running = False
        st.next_eligible = self._clock() + self.delay_s(outcome, st.lag_offsets)
        self._in_flight -= 1

    # -- decisions ------------------------------------------------------------------------------
    def delay_s(self, outcome: TaskOutcome, lag_offsets: int | None) -> float:
        """The pause before a log's next run after a task that ended with ``outcome``."""
        c = self._config
        if outcome == TaskOutcome.RESUMED or (outcome == TaskOutcome.COMPACTED and (lag_offsets or 0) > 0):
            return 0.0
        if outcome == TaskOutcome.ERROR:
            return (c.error_sleep_ms + self._rng.uniform(0, c.error_jitter_ms)) / 1000
        return (c.idle_sleep_ms + self._rng.uniform(0, c.idle_jitter_ms)) / 1000

    def wait_s(self) -> float:
        """How long the scheduler thread may sleep before something can be due."""
        now = self._clock()
        wake = now + MAX_WAIT_S
        if self._config.discovery_interval_ms > 0:
            wake = min(wake, self._next_discovery)
        if self._in_flight < self._config.workers:
            waiting = [st.next_eligible for st in self._logs.values() if not st.running]
            if waiting:
                wake = min(wake, min(waiting))
        return max(_MIN_WAIT_S, wake - now)
