"""The compactor service's scheduling decisions (``server/_compaction/scheduler.py``).

A fake clock and a controlled ``random.Random`` drive the ``Scheduler``
directly: no threads, no sleeps, no wall-clock windows. The threads that
call it are exercised in test_compactor_service.py.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from server._compaction.config import CompactorServiceConfig, VacuumConfig
from server._compaction.scheduler import MAX_WAIT_S, Scheduler
from server._compaction.tasks import TaskOutcome
from server._protocol.keys import TopicPartition

A = TopicPartition("orders", 0)
B = TopicPartition("orders", 1)
C = TopicPartition("orders", 2)

IDLE_S, IDLE_JITTER_S = 1.0, 0.5
ERROR_S, ERROR_JITTER_S = 5.0, 2.0


class FakeClock:
    """A monotonic clock in seconds that moves only when told."""

    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class Edge(random.Random):
    """Jitter always at one edge of its range (``top``: the maximum); shuffles keep the order."""

    def __init__(self, top: bool) -> None:
        super().__init__(0)
        self.top = top

    def uniform(self, a: float, b: float) -> float:
        return b if self.top else a

    def shuffle(self, x) -> None:  # noqa: ANN001 - random.Random's signature
        pass


def config(**kw) -> CompactorServiceConfig:
    base = CompactorServiceConfig(
        compactor_id="me", port=0, targets=(A, B), workers=2, discovery_interval_ms=0,
        idle_sleep_ms=int(IDLE_S * 1000), idle_jitter_ms=int(IDLE_JITTER_S * 1000),
        error_sleep_ms=int(ERROR_S * 1000), error_jitter_ms=int(ERROR_JITTER_S * 1000),
        vacuum=VacuumConfig(interval_ms=0),
    )
    return replace(base, **kw)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def scheduler(clock: FakeClock, rng: random.Random | None = None, **kw) -> Scheduler:
    return Scheduler(config(**kw), clock=clock, rng=rng or Edge(top=False))


def run(s: Scheduler, tp: TopicPartition, outcome: TaskOutcome, lag: int | None = None) -> None:
    """One whole task on ``tp``, as a worker reports it."""
    s.record(tp, outcome, lag)
    s.finish(tp, outcome)


# -- handing out work ------------------------------------------------------------------------------


def test_seed_targets_are_due_at_once(clock):
    s = scheduler(clock)
    assert s.known() == [A, B]
    assert s.take_due() == [A, B]
    assert s.running() == [A, B] and s.in_flight == 2


def test_no_more_tasks_than_workers(clock):
    s = scheduler(clock, targets=(A, B, C), workers=2)
    assert s.take_due() == [A, B]
    assert s.take_due() == []
    run(s, A, TaskOutcome.NOTHING_TO_DO)
    assert s.in_flight == 1
    assert s.take_due() == [C]
    assert s.take_due() == []


def test_never_two_tasks_for_one_log_even_with_spare_workers(clock):
    s = scheduler(clock, targets=(A,), workers=4)
    assert s.take_due() == [A]
    clock.advance(3600)
    assert s.take_due() == []
    run(s, A, TaskOutcome.RESUMED)
    assert s.take_due() == [A]


def test_due_logs_are_shuffled_with_the_injected_rng(clock):
    tps = tuple(TopicPartition("t", i) for i in range(20))

    def order(seed: int) -> list[TopicPartition]:
        return scheduler(clock, random.Random(seed), targets=tps, workers=20).take_due()

    assert len({tuple(order(seed)) for seed in range(5)}) > 1
    assert order(3) == order(3) and sorted(order(3)) == sorted(tps)


# -- the delay after each outcome --------------------------------------------------------------------


@pytest.mark.parametrize("outcome", [TaskOutcome.RESUMED, TaskOutcome.COMPACTED])
def test_a_run_that_left_offsets_behind_goes_again_at_once(clock, outcome):
    s = scheduler(clock, targets=(A,))
    s.take_due()
    run(s, A, outcome, lag=7)
    assert s.take_due() == [A]


def test_resumed_goes_again_at_once_even_when_caught_up(clock):
    s = scheduler(clock, targets=(A,))
    s.take_due()
    run(s, A, TaskOutcome.RESUMED, lag=0)
    assert s.take_due() == [A]


@pytest.mark.parametrize("outcome", [
    TaskOutcome.COMPACTED, TaskOutcome.NOTHING_TO_DO, TaskOutcome.BUSY, TaskOutcome.CONFLICT,
    TaskOutcome.ABANDONED, TaskOutcome.NOT_INITIALIZED,
])
@pytest.mark.parametrize("top", [False, True])
def test_caught_up_busy_or_lost_race_waits_the_idle_sleep_plus_jitter(clock, outcome, top):
    s = scheduler(clock, Edge(top), targets=(A,))
    s.take_due()
    run(s, A, outcome, lag=0)
    wait = IDLE_S + (IDLE_JITTER_S if top else 0.0)
    clock.advance(wait - 0.001)
    assert s.take_due() == []
    clock.advance(0.001)
    assert s.take_due() == [A]


@pytest.mark.parametrize("top", [False, True])
def test_errors_back_off_with_the_error_sleep_plus_jitter(clock, top):
    s = scheduler(clock, Edge(top), targets=(A,))
    s.take_due()
    run(s, A, TaskOutcome.ERROR)
    wait = ERROR_S + (ERROR_JITTER_S if top else 0.0)
    clock.advance(wait - 0.001)
    assert s.take_due() == []
    clock.advance(0.001)
    assert s.take_due() == [A]


def test_delay_s_for_every_outcome(clock):
    s = scheduler(clock, Edge(top=True))
    assert s.delay_s(TaskOutcome.RESUMED, None) == 0.0
    assert s.delay_s(TaskOutcome.COMPACTED, 1) == 0.0
    assert s.delay_s(TaskOutcome.COMPACTED, 0) == IDLE_S + IDLE_JITTER_S
    assert s.delay_s(TaskOutcome.COMPACTED, None) == IDLE_S + IDLE_JITTER_S
    assert s.delay_s(TaskOutcome.BUSY, None) == IDLE_S + IDLE_JITTER_S
    assert s.delay_s(TaskOutcome.ERROR, 5) == ERROR_S + ERROR_JITTER_S
    assert s.delay_s("nothing_to_do", 0) == IDLE_S + IDLE_JITTER_S  # the plain values work too


def test_jitter_spreads_within_its_range(clock):
    s = scheduler(clock, random.Random(7))
    idle = [s.delay_s(TaskOutcome.NOTHING_TO_DO, 0) for _ in range(200)]
    errors = [s.delay_s(TaskOutcome.ERROR, 0) for _ in range(200)]
    assert IDLE_S <= min(idle) and max(idle) <= IDLE_S + IDLE_JITTER_S and len(set(idle)) > 100
    assert ERROR_S <= min(errors) and max(errors) <= ERROR_S + ERROR_JITTER_S


def test_idle_sleep_is_per_log_not_global(clock):
    """A log with nothing to do sleeps; a log with work keeps the one worker busy."""
    s = scheduler(clock, random.Random(1), workers=1)
    handed, b_done_at = [], None
    for _ in range(30):
        (tp,) = s.take_due()
        handed.append(tp)
        if tp == A:
            run(s, A, TaskOutcome.COMPACTED, lag=100)
        else:
            run(s, B, TaskOutcome.NOTHING_TO_DO, lag=0)
            b_done_at = clock.now
        clock.advance(0.01)
    assert handed.count(B) == 1 and handed.count(A) == 29
    assert b_done_at + IDLE_S <= s.states()[B].next_eligible <= b_done_at + IDLE_S + IDLE_JITTER_S


def test_one_erroring_log_does_not_hold_up_the_others(clock):
    s = scheduler(clock, workers=2)
    s.take_due()
    run(s, A, TaskOutcome.ERROR)
    run(s, B, TaskOutcome.NOTHING_TO_DO)
    handed = []
    for _ in range(4):  # 4 idle sleeps: B runs each time, A is still backing off
        clock.advance(IDLE_S)
        due = s.take_due()
        handed += due
        for tp in due:
            run(s, tp, TaskOutcome.NOTHING_TO_DO)
    assert handed == [B] * 4
    clock.advance(ERROR_S)
    assert A in s.take_due()


# -- how long the scheduler thread may sleep --------------------------------------------------------------


def test_wait_is_at_most_a_second(clock):
    s = scheduler(clock, targets=())
    assert s.wait_s() == MAX_WAIT_S == 1.0


def test_wait_until_the_next_log_is_due(clock):
    s = scheduler(clock, targets=(A,), idle_sleep_ms=300, idle_jitter_ms=0)
    s.take_due()
    run(s, A, TaskOutcome.NOTHING_TO_DO)
    assert s.wait_s() == pytest.approx(0.3)
    clock.advance(0.2)
    assert s.wait_s() == pytest.approx(0.1)


def test_wait_never_zero_when_something_is_due(clock):
    s = scheduler(clock, targets=(A,))
    assert s.wait_s() == 0.001  # due, but the thread dispatches first: never a busy loop


def test_wait_ignores_due_logs_while_every_worker_is_busy(clock):
    s = scheduler(clock, targets=(A, B, C), workers=2)
    s.take_due()
    assert s.wait_s() == MAX_WAIT_S  # C is due, but only a finishing worker can take it


def test_wait_until_the_next_discovery(clock):
    s = scheduler(clock, targets=(), discovery_interval_ms=400)
    assert s.take_discovery()
    assert s.wait_s() == pytest.approx(0.4)


# -- discovery ----------------------------------------------------------------------------------------------


def test_discovery_is_due_at_start_then_every_interval(clock):
    s = scheduler(clock, discovery_interval_ms=30_000)
    assert s.take_discovery()
    assert not s.take_discovery()
    clock.advance(29.999)
    assert not s.take_discovery()
    clock.advance(0.001)
    assert s.take_discovery()
    assert not s.take_discovery()


def test_discovery_disabled_by_interval_zero(clock):
    s = scheduler(clock, discovery_interval_ms=0)
    clock.advance(1e9)
    assert not s.take_discovery()


def test_discovered_logs_are_added_once_and_due_at_once(clock):
    s = scheduler(clock, targets=(A,), workers=4)
    assert s.add_discovered({A, B, C}) in ([B, C], [C, B])
    assert s.add_discovered({B, C}) == []
    assert s.known() == [A, B, C] and s.discovered_count() == 2
    assert sorted(s.take_due()) == [A, B, C]
    states = s.states()
    assert [st.source for st in states.values()] == ["target", "discovered", "discovered"]


# -- what the service reports -----------------------------------------------------------------------------


def test_record_keeps_the_last_outcome_and_lag(clock):
    s = scheduler(clock)
    s.record(A, TaskOutcome.COMPACTED, 12)
    s.record(A, TaskOutcome.BUSY)  # no run, no new lag
    st = s.states()[A]
    assert (st.last_outcome, st.lag_offsets, st.running) == (TaskOutcome.BUSY, 12, False)


def test_record_of_a_log_not_known_adds_it(clock):
    """``attempt()`` may be called on any log (``run_pass``, tests)."""
    s = scheduler(clock, targets=())
    s.record(C, TaskOutcome.NOT_INITIALIZED)
    assert s.known() == [C] and s.take_due() == [C]


def test_states_are_copies(clock):
    s = scheduler(clock)
    s.states()[A].running = True
    assert s.running() == []


# -- outcomes ---------------------------------------------------------------------------------------------


def test_every_compaction_outcome_is_a_task_outcome_with_the_same_value():
    from server.leaderless_log_compactor import CompactionOutcome

    for outcome in CompactionOutcome:
        assert TaskOutcome(outcome.value).value == outcome.value
    assert {o.value for o in TaskOutcome} - {o.value for o in CompactionOutcome} == {
        "busy", "not_initialized", "error",
    }
