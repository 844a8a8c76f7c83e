"""Random schedules of the classic group protocol against the coordinator: members join,
sync, heartbeat, commit, leave, go silent (their session expires) and come back, while
the coordinator is lost and a new one takes over from Oxia. Each schedule is checked:

- generations only grow, across coordinators too (the new one continues Oxia's);
- the members of one generation that synced hold disjoint partitions (the leader's
  assignment reached each member as it was given);
- every commit the coordinator and Oxia accepted came from a member of the generation
  Oxia held at that moment, for a partition that member was assigned in it;
- in the end every live member is stable in one generation that covers every partition.

The clock is the test's (a driver thread moves it); members are threads, as the
listener's handler pool runs their requests."""

from __future__ import annotations

import random
import threading
import time

import pytest

from server._errors import LlogError
from server._groups.offsets import GroupOffsets
from server._kafka.coordinator import STABLE, GroupCoordinator
from server._kafka.errors import Code
from server._kafka.nodes import Nodes
from server._protocol.keys import LogLayout, TopicPartition
from server._storage.metastore import InMemoryMetadataStore
from tests.unit.test_kafka_coordinator import Clock

PARTITIONS = 6
GROUP = "g"
TOPIC = "orders"


class World:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.meta = InMemoryMetadataStore()
        self.layout = LogLayout("llog")
        self.offsets = _RecordingOffsets(self.meta, self.layout)
        self.nodes = Nodes(self.meta, self.layout, broker_id="b", host="h", port=1)
        self.nodes.register()
        self.clock = Clock()
        self.lock = threading.Lock()
        self.coordinator = self._new_coordinator()
        self.stop = threading.Event()
        self.generations_seen: list[int] = []
        self.synced: dict[int, dict[str, frozenset[int]]] = {}
        self.commits: list[tuple[str, int, int, int]] = []
        """(member, generation, partition, stored generation at the commit)"""
        self.violations: list[str] = []
        self._init_log()

    def _new_coordinator(self) -> GroupCoordinator:
        return GroupCoordinator(self.offsets, self.nodes, initial_delay_ms=200, clock=self.clock)

    def _init_log(self) -> None:
        from server._log.initialize import initialize_log  # a log to commit offsets in
        for p in range(PARTITIONS):
            initialize_log(self.meta, self.layout.keys(TopicPartition(TOPIC, p)))

    def failover(self) -> None:
        with self.lock:
            old, self.coordinator = self.coordinator, self._new_coordinator()
        old.close()

    def current(self) -> GroupCoordinator:
        with self.lock:
            return self.coordinator


class _RecordingOffsets(GroupOffsets):
    """Every generation a coordinator stores, in order."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.stored: list[int] = []
        self._record = threading.Lock()

    def set_generation(self, group, generation, members) -> None:
        with self._record:
            super().set_generation(group, generation, members)
            self.stored.append(generation)


def _assign(members: list[str]) -> dict[str, bytes]:
    ordered = sorted(members)
    return {m: bytes(p for p in range(PARTITIONS) if p % len(ordered) == i) for i, m in enumerate(ordered)}


def _member(world: World, index: int, seed: int) -> None:
    rng = random.Random(seed)
    member, generation, owned = "", -1, frozenset()
    while not world.stop.is_set():
        c = world.current()
        if generation < 0:
            joined = c.join(GROUP, member, client_id=f"m{index}", client_host="", session_timeout_ms=3000,
                            rebalance_timeout_ms=3000, protocol_type="consumer", protocols=[("range", b"")],
                            require_member_id=True)
            if joined.error == Code.MEMBER_ID_REQUIRED:
                member = joined.member_id
                continue
            if joined.error != Code.NONE:
                member = "" if joined.error == Code.UNKNOWN_MEMBER_ID else member
                continue
            generation = joined.generation
            world.generations_seen.append(generation)
            plan = _assign([m.member_id for m in joined.members]) if joined.members else {}
            code, _, _, assignment = c.sync(GROUP, member, generation, plan)
            if code != Code.NONE:
                generation = -1
                continue
            owned = frozenset(assignment)
            with world.lock:
                world.synced.setdefault(generation, {})[member] = owned
            continue
        action = rng.random()
        if action < 0.02:  # leave
            c.leave(GROUP, [member])
            member, generation = "", -1
        elif action < 0.04:  # go silent past the session timeout, then rejoin with the same id
            world.clock.advance(4)
            generation = -1
        elif action < 0.5 and owned:
            partition = rng.choice(sorted(owned))
            if c.check_commit(GROUP, member, generation) == Code.NONE:
                try:
                    world.offsets.commit(GROUP, [(TopicPartition(TOPIC, partition), 1, "")], generation=generation,
                                         member=member)
                except LlogError:
                    continue
                with world.lock:
                    world.commits.append((member, generation, partition, world.offsets.generation(GROUP)))
        else:
            code = c.heartbeat(GROUP, member, generation)
            if code != Code.NONE:
                generation = -1
        world.stop.wait(0.002)


def _drive(world: World, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        world.clock.advance(0.05)
        if world.rng.random() < 0.01:
            world.failover()
        time.sleep(0.01)  # the schedule's pace: members act between clock steps


def _check(world: World) -> None:
    stored = world.offsets.stored
    assert stored == sorted(set(stored)), f"generations stored out of order or twice: {stored}"
    for generation, members in world.synced.items():
        held = [p for parts in members.values() for p in parts]
        assert len(held) == len(set(held)), f"generation {generation}: overlapping assignments {members}"
    for member, generation, partition, stored in world.commits:
        assert generation == stored, f"{member} committed in generation {generation} while Oxia held {stored}"
        assert partition in world.synced[generation][member], f"{member} committed {partition} not its own"


@pytest.mark.parametrize("seed", range(3))
def test_random_schedules_keep_generations_assignments_and_commits_consistent(seed):
    world = World(seed)
    members = [threading.Thread(target=_member, args=(world, i, seed * 100 + i), daemon=True) for i in range(4)]
    for t in members:
        t.start()
    try:
        _drive(world, 2.0)
    finally:
        world.stop.set()
        world.current().close()  # members waiting in a join or a sync return
        for t in members:
            t.join(10)
    _check(world)
    assert world.commits, "the schedule committed nothing"
    assert len(set(world.generations_seen)) >= 2, "the schedule made no rebalance"


def test_the_last_generation_covers_every_partition_once_members_are_calm():
    world = World(7)
    coordinator = world.current()
    threads = [threading.Thread(target=_settle, args=(world, i), daemon=True) for i in range(3)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 20
    while coordinator.describe(GROUP)[0] != STABLE or len(coordinator.describe(GROUP)[3]) < 3:
        world.clock.advance(0.05)
        assert time.monotonic() < deadline, coordinator.describe(GROUP)
        time.sleep(0.01)
    world.stop.set()
    coordinator.close()
    for t in threads:
        t.join(10)
    last = max(world.synced)
    assert sorted(p for parts in world.synced[last].values() for p in parts) == list(range(PARTITIONS))


def _settle(world: World, index: int) -> None:
    member = ""
    while not world.stop.is_set():
        c = world.current()
        joined = c.join(GROUP, member, client_id=f"m{index}", client_host="", session_timeout_ms=30_000,
                        rebalance_timeout_ms=30_000, protocol_type="consumer", protocols=[("range", b"")],
                        require_member_id=True)
        member = joined.member_id
        if joined.error != Code.NONE:
            continue
        plan = _assign([m.member_id for m in joined.members]) if joined.members else {}
        code, _, _, assignment = c.sync(GROUP, member, joined.generation, plan)
        if code == Code.NONE:
            with world.lock:
                world.synced.setdefault(joined.generation, {})[member] = frozenset(assignment)
            while not world.stop.is_set() and c.heartbeat(GROUP, member, joined.generation) == Code.NONE:
                world.stop.wait(0.01)
