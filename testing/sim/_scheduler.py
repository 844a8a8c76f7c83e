"""The baton: many actor threads, one runs at a time, a seeded choice of which.

Each actor runs in its own thread, but only between two scheduling points:
every store call (and every sleep) first calls :meth:`Scheduler.point`,
which parks the thread and hands control back to the scheduler. The
scheduler, in the main thread, draws from the seeded generator which parked
actor continues and which fault (``_faults``) it meets there, then waits
until that actor parks again. With one thread running at a time and every
choice drawn from one seed, a run is a pure function of its seed.

Handoff uses one lock per actor (``go``) plus one for the scheduler
(``_back``), which is cheaper than a shared condition that wakes everyone.
"""

from __future__ import annotations

import hashlib
import random
import threading
from collections import deque
from dataclasses import dataclass
from typing import Callable

from ._clock import SimClock
from ._faults import FaultPlan

__all__ = ["SimCrash", "SimStop", "Step", "Scheduler", "StepLimit"]


HANG_S = 60.0
"""Real seconds an actor may run between two scheduling points before the
run is declared hung (a lock or a thread the simulator does not control)."""


class SimCrash(BaseException):
    """Raised in an actor's thread at a scheduling point: the process died.

    A BaseException so that the library's ``except Exception`` handlers do
    not swallow it, exactly as they would not survive a SIGKILL."""


class SimStop(BaseException):
    """Raised in an actor's thread when the run is over: unwind and exit."""


class StepLimit(Exception):
    """The run hit its step budget with actors still live (a livelock?)."""


@dataclass(frozen=True)
class Step:
    """One scheduling decision, as the trace shows it."""

    n: int
    actor: str
    op: str
    key: str
    fault: str
    at_ms: int

    def line(self) -> str:
        fault = f"  !! {self.fault}" if self.fault else ""
        return f"{self.n:5d} t={self.at_ms / 1000:9.3f}s {self.actor:<12} {self.op:<18} {self.key}{fault}"


def key_kind(key: str) -> str:
    """A key's role, for counting distinct orders of protocol steps."""
    for marker, kind in (
        ("/meta/control", "control"), ("/meta/compaction-cursor", "cursor"), ("/meta/compaction", "compaction"),
        ("/meta/compactor-claim", "claim"), ("/index/", "index"), ("wal-shared/", "wal-blob"),
        ("/data/compacted/", "compacted-blob"),
    ):
        if marker in key:
            return kind
    return key.split(" ", 1)[0] if key else ""


class _Actor:
    def __init__(self, name: str, kind: str, weight: int) -> None:
        self.name = name
        self.kind = kind
        self.weight = weight
        self.go = threading.Lock()
        self.go.acquire()
        self.thread: threading.Thread | None = None
        self.op = "start"
        self.key = ""
        self.fault: str | None = None
        self.wake_at_ms = 0.0
        self.paused_until = 0
        self.kill = False
        self.done = False
        self.error: BaseException | None = None
        self.last_step = 0


class Scheduler:
    """Runs actor threads one step at a time in a seeded order."""

    def __init__(self, rng: random.Random, clock: SimClock, faults: FaultPlan, *,
                 trace_len: int = 40, tick_ms: float = 1.0) -> None:
        self._rng = rng
        self.clock = clock
        self.faults = faults
        self._tick_ms = tick_ms
        self._back = threading.Lock()
        self._back.acquire()
        self._local = threading.local()
        self._actors: list[_Actor] = []
        self.steps = 0
        self.trace: deque[Step] = deque(maxlen=trace_len)
        self._hash = hashlib.blake2b(digest_size=8)
        self.max_jump_ms: Callable[[], float] = lambda: float("inf")
        """Set by the run: how far time may jump without breaking the
        protocol's timing assumption for operations in flight."""
        self.last_step: Step | None = None
        self.handoffs: set[tuple[str, str]] = set()
        """Distinct (step, next step) pairs where control passed to another
        actor: a coverage figure that, unlike whole-run hashes, saturates."""
        self._last_actor: _Actor | None = None
        self._last_move = ""

    # -- actor side ------------------------------------------------------------
    def current(self) -> _Actor | None:
        return getattr(self._local, "actor", None)

    def point(self, op: str, key: str = "") -> str | None:
        """Park the calling actor; return the fault chosen for this call.

        Raises SimCrash for a ``crash`` fault and SimStop once the run is
        over. A call from a thread that is not an actor (the checker) passes
        straight through."""
        actor = self.current()
        if actor is None:
            return None
        if actor.kill:
            raise SimStop()
        actor.op, actor.key = op, key
        self._back.release()
        actor.go.acquire()
        if actor.kill:
            raise SimStop()
        fault, actor.fault = actor.fault, None
        if fault == "crash":
            raise SimCrash(f"{actor.name} crashed before {op} {key}")
        return fault

    def sleep(self, seconds: float) -> None:
        """``time.sleep`` inside a run: park until the clock reaches the wake time."""
        actor = self.current()
        if actor is None:
            self.clock.advance(seconds * 1000.0)
            return
        actor.wake_at_ms = self.clock.elapsed_ms + seconds * 1000.0
        self.point("sleep", f"{seconds * 1000:.0f}ms")

    # -- scheduler side ----------------------------------------------------------
    def spawn(self, name: str, kind: str, body: Callable[[], None]) -> None:
        actor = _Actor(name, kind, self._rng.randint(1, 8))

        def main() -> None:
            self._local.actor = actor
            actor.go.acquire()
            try:
                if not actor.kill:
                    body()
            except SimStop:
                pass
            except BaseException as exc:  # noqa: BLE001 - reported by the run as a failure
                actor.error = exc
            finally:
                actor.done = True
                self._back.release()

        actor.thread = threading.Thread(target=main, name=f"sim-{name}", daemon=True)
        self._actors.append(actor)
        actor.thread.start()

    @property
    def order_hash(self) -> str:
        """Hash of the run's sequence of (actor kind, op, key kind)."""
        return self._hash.hexdigest()

    def whereabouts(self) -> list[str]:
        """Where each actor is parked: the call it waits to make, and the
        step it last ran (a stalled actor's last step may predate the trace)."""
        return [f"{a.name:<12} {'done' if a.done else f'before {a.op} {a.key}'} (last ran at step {a.last_step})"
                for a in self._actors]

    def failed_actor(self) -> _Actor | None:
        return next((a for a in self._actors if a.error is not None), None)

    def run(self, max_steps: int, after_step: Callable[[Step], None], stop_after: int | None = None) -> None:
        """Step until every actor is done; ``after_step`` runs between steps
        (every actor parked) and may raise to end the run. ``stop_after``
        ends the run early, as if every live actor crashed at once."""
        rng = self._rng
        while True:
            live = [a for a in self._actors if not a.done]
            if not live or (stop_after is not None and self.steps >= stop_after):
                return
            if self.steps >= max_steps:
                raise StepLimit(f"{len(live)} actors still running after {max_steps} steps: "
                                + ", ".join(f"{a.name} at {a.op} {a.key}" for a in live))
            now = self.clock.elapsed_ms
            ready = [a for a in live if a.wake_at_ms <= now]
            if not ready:
                self.clock.advance_to(min(a.wake_at_ms for a in live))
                continue
            awake = [a for a in ready if a.paused_until <= self.steps] or ready
            actor = awake[0] if len(awake) == 1 else rng.choices(awake, [a.weight for a in awake])[0]
            op_fault = self.faults.for_op(actor.op)
            notes = [op_fault] if op_fault else []
            jump = self.faults.time_jump_ms()
            if jump:
                jump = int(max(0.0, min(jump, self.max_jump_ms())))
                if jump:
                    self.faults.counts["time_jump"] += 1
                    self.clock.advance(jump)
                    notes.append(f"time_jump+{jump}ms")
            pause = self.faults.pause_steps()
            if pause and len(live) > 1:
                victim = rng.choice(live)
                victim.paused_until = self.steps + pause
                self.faults.counts["pause"] += 1
                notes.append(f"pause {victim.name} {pause} steps")
            stall = self.faults.pause_after_write_steps(actor.op)
            if stall:
                notes.append(f"then stalls {stall} steps")
            self.steps += 1
            step = Step(self.steps, actor.name, actor.op, actor.key, " ".join(notes), int(self.clock.elapsed_ms))
            self.trace.append(step)
            self.last_step = step
            move = f"{actor.kind}|{actor.op}|{key_kind(actor.key)}"
            self._hash.update(move.encode() + b";")
            if actor is not self._last_actor:
                self.handoffs.add((self._last_move, move))
            self._last_actor, self._last_move = actor, move
            actor.fault = op_fault
            actor.last_step = self.steps
            self._hand_over(actor)
            if stall and not actor.done:
                actor.paused_until = self.steps + stall
                self.faults.counts["stall"] += 1
            self.clock.advance(self._tick_ms)
            after_step(step)

    def _hand_over(self, actor: _Actor) -> None:
        """Let ``actor`` run to its next scheduling point (or its end)."""
        actor.go.release()
        if not self._back.acquire(timeout=HANG_S):
            raise StepLimit(f"{actor.name} did not reach a scheduling point within {HANG_S} s of real "
                            f"time after {actor.op} {actor.key}: blocked outside the simulator?")

    def stop_all(self) -> None:
        """Unwind every live actor thread (SimStop at its next point) and join them."""
        for actor in self._actors:
            if not actor.done:
                actor.kill = True
                self._hand_over(actor)
        for actor in self._actors:
            if actor.thread is not None:
                actor.thread.join(timeout=5)
