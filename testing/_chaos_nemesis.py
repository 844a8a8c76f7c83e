"""The chaos test's nemesis: which faults, when, and their undoing.

Every few seconds (``interval_s``) the nemesis takes its next turn from a
fixed cycle (``fault_turns``), so every enabled kind happens whatever the
seed: SIGKILL a random broker, SIGKILL a random compactor service, and with
``pause`` SIGSTOP a random broker, compactor, Oxia server or the S3 server
for 0.5-8 s (longer than the Oxia session of the services, so a paused
compactor loses its claims and wakes up as a zombie) and SIGCONT it.

Faults that hit the whole system happen once per run, at times
``one_shot_times`` spreads over 20-60 % of it: restart the standalone Oxia
(``oxia_restart``), SIGKILL the S3 server and start it on its port and data
(``minio_restart``), SIGKILL one server of a 3-server Oxia cluster (the
shard leader if it is not the server clients bootstrap from) and start it
again some seconds later (``oxia_node_loss``).

The nemesis always undoes its fault before its next turn (a paused process
is continued even if the run stops during the pause), so faults never
overlap; ``ChaosCluster.heal()`` restarts what a failed restart left down.
"""

from __future__ import annotations

import itertools
import logging
import random
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

__all__ = ["FaultPlan", "Nemesis", "NemesisEvent", "fault_turns", "one_shot_times", "ONE_SHOT_DOWN_S", "PAUSE_S"]

log = logging.getLogger(__name__)

PAUSE_S = (0.5, 8.0)
"""How long a SIGSTOP lasts; the upper end is past the services' Oxia session (5 s)."""
ONE_SHOT_DOWN_S = {"oxia": (1.0, 3.0), "s3": (1.0, 3.0), "oxia-node": (3.0, 6.0)}
"""How long each once-per-run fault keeps its process down."""


@dataclass(frozen=True)
class FaultPlan:
    """Which faults a run injects (SIGKILLs of brokers and compactors always)."""

    oxia_restart: bool = True
    """SIGKILL the standalone Oxia once and start it again."""
    pause: bool = False
    """SIGSTOP/SIGCONT brokers, compactors, Oxia and the S3 server."""
    minio_restart: bool = False
    """SIGKILL the S3 server once and start it again on its port and data."""
    oxia_node_loss: bool = False
    """SIGKILL one server of the Oxia cluster once and start it again later."""

    def one_shots(self) -> list[str]:
        return [kind for kind, on in (("oxia", self.oxia_restart), ("s3", self.minio_restart),
                                      ("oxia-node", self.oxia_node_loss)) if on]


@dataclass(frozen=True)
class NemesisEvent:
    at_s: float
    what: str


def fault_turns(plan: FaultPlan) -> list[str]:
    """One cycle of the recurring faults: brokers twice as often as compactors, pauses in between."""
    turns = ["broker", "compactor", "broker"]
    if plan.pause:
        turns = [t for kill in turns for t in (kill, "pause")]
    return turns


def one_shot_times(kinds: Sequence[str], seconds: float, rng: random.Random) -> list[tuple[float, str]]:
    """When each once-per-run fault happens: in order, each in its own slice of 20-60 % of the run.

    Early enough that a long pause before it cannot push it past the end.
    """
    if not kinds:
        return []
    start, width = 0.2 * seconds, 0.4 * seconds / len(kinds)
    order = list(kinds)
    rng.shuffle(order)
    return [(start + width * (i + rng.uniform(0.1, 0.6)), kind) for i, kind in enumerate(order)]


class Nemesis(threading.Thread):
    """Injects faults into a ``ChaosCluster`` until ``stop`` is set."""

    def __init__(self, cluster: Any, stop: threading.Event, *, seconds: float, plan: FaultPlan, seed: int,
                 interval_s: tuple[float, float] = (2.0, 4.0), down_s: tuple[float, float] = (0.2, 2.0),
                 pause_s: tuple[float, float] = PAUSE_S,
                 one_shot_down_s: Mapping[str, tuple[float, float]] = ONE_SHOT_DOWN_S,
                 t0: float | None = None) -> None:
        super().__init__(name="chaos-nemesis", daemon=True)
        self._cluster = cluster
        self._halt = stop
        self._rng = random.Random(seed)
        self._seconds = seconds
        self._plan = plan
        self._interval_s = interval_s
        self._down_s = down_s
        self._pause_s = pause_s
        self._one_shot_down_s = dict(one_shot_down_s)
        # The run's clock (``History.t0``), so event times line up with batch times.
        self._t0 = time.monotonic() if t0 is None else t0
        self.kills: Counter[str] = Counter()
        self.restart_failures: Counter[str] = Counter()
        self.events: list[NemesisEvent] = []

    def _note(self, what: str) -> None:
        self.events.append(NemesisEvent(round(time.monotonic() - self._t0, 2), what))
        log.info("nemesis: %s", what)

    def run(self) -> None:
        rng = self._rng
        pending = one_shot_times(self._plan.one_shots(), self._seconds, rng)
        turns = itertools.cycle(fault_turns(self._plan))
        last_was_one_shot = False
        while not self._halt.wait(rng.uniform(*self._interval_s)):
            try:
                # A due one-shot goes first, but never two in a row: the turns are not starved.
                if pending and not last_was_one_shot and time.monotonic() - self._t0 >= pending[0][0]:
                    last_was_one_shot = True
                    self._one_shot(pending.pop(0)[1])
                else:
                    last_was_one_shot = False
                    self._turn(next(turns))
            except Exception as exc:  # noqa: BLE001 - a failed restart is retried by heal()
                self._note(f"restart failed: {exc}")

    def _turn(self, kind: str) -> None:
        c, rng = self._cluster, self._rng
        if kind == "broker":
            i = rng.randrange(len(c.brokers))
            self._fault("broker", c.brokers[i].name, lambda: c.kill_broker(i), lambda: c.start_broker(i),
                        self._down_s)
        elif kind == "compactor":
            i = rng.randrange(len(c.compactors))
            self._fault("compactor", c.compactors[i].name, lambda: c.kill_compactor(i),
                        lambda: c.start_compactor(i), self._down_s)
        else:
            self._pause(rng.choice(c.pausable()))

    def _one_shot(self, kind: str) -> None:
        c, down_s = self._cluster, self._one_shot_down_s[kind]
        if kind == "oxia":
            self._fault("oxia", "oxia", c.kill_oxia, c.start_oxia, down_s)
        elif kind == "s3":
            self._fault("s3", "s3", c.kill_s3, c.start_s3, down_s)
        else:
            i, shards = c.oxia_node_victim(self._rng)
            if shards:
                self.kills["oxia-node-leader"] += 1
            self._note(f"oxia-server-{i} leads {'shard ' + ','.join(map(str, shards)) if shards else 'no shard'}")
            self._fault("oxia-node", f"oxia-server-{i}", lambda: c.kill_oxia_node(i), lambda: c.start_oxia_node(i),
                        down_s)

    def _pause(self, name: str) -> None:
        """SIGSTOP ``name``, wait, SIGCONT it, even if the run stops meanwhile."""
        pause_s = self._rng.uniform(*self._pause_s)
        self._cluster.pause(name)
        self.kills["pause"] += 1
        self._note(f"SIGSTOP {name} for {pause_s:.1f}s")
        try:
            self._halt.wait(pause_s)
        finally:
            self._cluster.resume(name)
            self._note(f"SIGCONT {name}")

    def _fault(self, kind: str, name: str, kill: Callable[[], None], start: Callable[[], None],
               down_s: tuple[float, float]) -> None:
        """SIGKILL, stay down for a moment (part of the fault), start again and wait until healthy."""
        kill()
        self.kills[kind] += 1
        self._note(f"SIGKILL {name}")
        self._halt.wait(self._rng.uniform(*down_s))
        started = time.monotonic()
        try:
            start()
        except Exception:
            self.restart_failures[name] += 1
            raise
        self._note(f"{name} back in {time.monotonic() - started:.1f}s")
