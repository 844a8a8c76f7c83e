"""The chaos nemesis's choices, against a fake cluster (no processes).

What the integration test cannot show cheaply: every enabled fault kind
happens whatever the seed, once-per-run faults land inside the run and in
order, the same seed gives the same faults, a pause is always undone (even
when the run stops during it), faults never overlap, and the progress
windows count acknowledgements where they were answered.
"""

from __future__ import annotations

import random
import threading
import time
from types import SimpleNamespace

import pytest

from testing.chaos import ChaosOptions, acknowledged_by_window, fault_plan, options_from_args, parse_args
from testing.history import FAILED, OK, ProducedBatch
from testing._chaos_nemesis import PAUSE_S, FaultPlan, Nemesis, fault_turns, one_shot_times


class FakeCluster:
    """Records the nemesis's calls; 'down' and 'paused' say what is faulted right now."""

    def __init__(self) -> None:
        self.brokers = [SimpleNamespace(name=f"broker-{i}") for i in (1, 2, 3)]
        self.compactors = [SimpleNamespace(name="compactor"), SimpleNamespace(name="compactor-2")]
        self.calls: list[str] = []
        self.down: set[str] = set()
        self.paused: set[str] = set()
        self.overlaps = 0

    def _off(self, name: str) -> None:
        if self.down or self.paused:
            self.overlaps += 1
        self.down.add(name)
        self.calls.append(f"kill {name}")

    def _on(self, name: str) -> None:
        self.down.discard(name)
        self.calls.append(f"start {name}")

    def kill_broker(self, i: int) -> None: self._off(self.brokers[i].name)
    def start_broker(self, i: int) -> None: self._on(self.brokers[i].name)
    def kill_compactor(self, i: int) -> None: self._off(self.compactors[i].name)
    def start_compactor(self, i: int) -> None: self._on(self.compactors[i].name)
    def kill_oxia(self) -> None: self._off("oxia")
    def start_oxia(self) -> None: self._on("oxia")
    def kill_s3(self) -> None: self._off("s3")
    def start_s3(self) -> None: self._on("s3")
    def oxia_node_victim(self, rng: random.Random) -> tuple[int, tuple[int, ...]]: return rng.randrange(1, 3), (0,)
    def kill_oxia_node(self, i: int) -> None: self._off(f"oxia-server-{i}")
    def start_oxia_node(self, i: int) -> None: self._on(f"oxia-server-{i}")

    def pausable(self) -> list[str]:
        return ["broker-1", "compactor", "oxia", "s3"]

    def pause(self, name: str) -> None:
        if self.down or self.paused:
            self.overlaps += 1
        self.paused.add(name)
        self.calls.append(f"pause {name}")

    def resume(self, name: str) -> None:
        self.paused.discard(name)
        self.calls.append(f"resume {name}")


def _run_nemesis(plan: FaultPlan, seed: int, seconds: float = 1.2) -> tuple[FakeCluster, Nemesis]:
    cluster = FakeCluster()
    stop = threading.Event()
    nemesis = Nemesis(cluster, stop, seconds=seconds, plan=plan, seed=seed, interval_s=(0.005, 0.01),
                      down_s=(0.0, 0.002), pause_s=(0.001, 0.004),
                      one_shot_down_s={k: (0.0, 0.002) for k in ("oxia", "s3", "oxia-node")})
    nemesis.start()
    time.sleep(seconds)  # the nemesis runs for the run's length; nothing to wait for but time
    stop.set()
    nemesis.join(5)
    assert not nemesis.is_alive()
    return cluster, nemesis


def test_the_turns_cover_every_recurring_kind_and_pauses_only_when_asked():
    assert set(fault_turns(FaultPlan())) == {"broker", "compactor"}
    turns = fault_turns(FaultPlan(pause=True))
    assert set(turns) == {"broker", "compactor", "pause"}
    assert turns.count("broker") == 2 * turns.count("compactor")


@pytest.mark.parametrize("seed", range(20))
def test_one_shots_fall_in_the_middle_of_the_run_in_order_and_apart(seed):
    kinds = ["oxia", "s3", "oxia-node"]
    times = one_shot_times(kinds, 30.0, random.Random(seed))
    assert sorted(k for _, k in times) == sorted(kinds)
    at = [t for t, _ in times]
    assert at == sorted(at)
    assert 0.2 * 30 <= at[0] and at[-1] <= 0.6 * 30
    assert all(b - a >= 0.8 for a, b in zip(at, at[1:]))  # a slice of 4 s each, 0.1-0.6 into it


def test_the_whole_oxia_restart_gives_way_to_a_node_loss_on_a_cluster():
    assert fault_plan(ChaosOptions(oxia_node_loss=True)).one_shots() == ["oxia-node"]
    assert fault_plan(ChaosOptions()).one_shots() == ["oxia"]
    assert fault_plan(ChaosOptions(faults=False)).one_shots() == []


def test_every_fault_happens_once_or_often_and_never_overlaps():
    plan = FaultPlan(oxia_restart=False, pause=True, minio_restart=True, oxia_node_loss=True)
    cluster, nemesis = _run_nemesis(plan, seed=7)
    assert nemesis.kills["broker"] >= 2 and nemesis.kills["compactor"] >= 1 and nemesis.kills["pause"] >= 2
    assert nemesis.kills["s3"] == 1 and nemesis.kills["oxia-node"] == 1 and nemesis.kills["oxia"] == 0
    assert {c.split()[1] for c in cluster.calls if c.startswith("kill compactor")} == {"compactor", "compactor-2"}
    assert cluster.overlaps == 0
    one_shots = [i for i, c in enumerate(cluster.calls) if c in ("kill s3", "kill oxia-server-1", "kill oxia-server-2")]
    assert all(b - a > 2 for a, b in zip(one_shots, one_shots[1:]))  # a turn (kill + start) in between
    assert not cluster.down and not cluster.paused
    assert not nemesis.restart_failures


def test_the_same_seed_gives_the_same_faults():
    # Once-per-run faults come at a time of the run, so they interleave with the turns by the clock.
    plan = FaultPlan(oxia_restart=False, pause=True)
    a, _ = _run_nemesis(plan, seed=3, seconds=0.3)
    b, _ = _run_nemesis(plan, seed=3, seconds=0.3)
    n = min(len(a.calls), len(b.calls))
    assert n >= 10 and a.calls[:n] == b.calls[:n]


def test_a_pause_is_undone_when_the_run_stops_during_it():
    cluster = FakeCluster()
    stop = threading.Event()
    nemesis = Nemesis(cluster, stop, seconds=60, plan=FaultPlan(oxia_restart=False, pause=True), seed=1,
                      interval_s=(0.0, 0.0), down_s=(0.0, 0.0), pause_s=(30.0, 30.0))
    nemesis.start()
    deadline = time.monotonic() + 5
    while not cluster.paused and time.monotonic() < deadline:
        time.sleep(0.001)  # polling the fake for the first pause
    assert cluster.paused
    stop.set()
    nemesis.join(5)
    assert not nemesis.is_alive() and not cluster.paused
    assert cluster.calls[-1].startswith("resume")


def test_the_default_pauses_outlast_the_services_oxia_session():
    from devstack._stack import DEFAULT_SESSION_TIMEOUT_MS

    assert PAUSE_S[0] <= 1.0 and PAUSE_S[1] * 1000 > DEFAULT_SESSION_TIMEOUT_MS


def test_all_turns_every_mode_on_and_each_flag_one():
    every = options_from_args(parse_args(["--all"]), seed=1)
    assert every.pause and every.minio_restart and every.oxia_node_loss and every.compactors == 2
    assert every.delete_records
    plain = options_from_args(parse_args([]), seed=1)
    assert not (plain.pause or plain.minio_restart or plain.oxia_node_loss or plain.delete_records)
    assert plain.compactors == 1
    assert options_from_args(parse_args(["--delete-records"]), seed=1).delete_records
    assert options_from_args(parse_args(["--two-compactors"]), seed=1).compactors == 2
    assert options_from_args(parse_args(["--pause"]), seed=1).pause


def _batch(i: int, outcome: str, answered_s: float | None) -> ProducedBatch:
    return ProducedBatch(f"b{i}", "t", 0, (b"x",), outcome, 1 if outcome == OK else None, answered_s=answered_s)


def test_progress_windows_count_acknowledgements_where_they_were_answered():
    batches = [_batch(0, OK, 0.5), _batch(1, OK, 9.9), _batch(2, FAILED, 3.0), _batch(3, OK, 12.0),
               _batch(4, OK, None)]
    assert acknowledged_by_window(batches, 10.0) == [1, 0, 0, 1]  # 12.0 is after the run (a probe)
    assert acknowledged_by_window([], 10.0) == [0, 0, 0, 0]
