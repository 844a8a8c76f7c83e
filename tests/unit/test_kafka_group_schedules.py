"""Random schedules of the classic group protocol against the coordinator: members join,
sync, heartbeat, commit, leave, go silent (their session expires) and come back, static
members restart (and their old member id, a zombie, tries to commit), while
the coordinator is lost and a new one takes over from Oxia; with ``deletions`` an admin
deletes the group whenever it has no members, and members that left try to commit into
it afterwards (ghosts). Each schedule is checked:

- generations only grow, across coordinators too (the new one continues Oxia's), and
  start again only after a deletion; one is stored again only when a static member
  rejoined under a new member id in its place;
- the group is deleted only while it has no members, and no member of a generation before
  a deletion commits after it;
- the members of one generation that synced hold disjoint partitions (the leader's
  assignment reached each member as it was given);
- every commit the coordinator and Oxia accepted came from a member of the generation
  Oxia held at that moment, for a partition that member was assigned in it;
- a member that synced fetches its partitions' committed offsets as another broker (not
  the coordinator) answers an OffsetFetch, from Oxia: it finds every commit acknowledged
  before it asked (it resumes where the previous owner stopped);
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
from server._kafka.nodes import Node, Nodes
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
        self.ownership: _Ownership | None = None
        self.pair: list[GroupCoordinator] = []
        self.stop = threading.Event()
        self.generations_seen: list[int] = []
        self.synced: list[tuple[int, str, str, frozenset[int]]] = []
        """(generation, member id, member or instance id, partitions) of each sync"""
        self.commits: list[tuple[str, str, int, int, int]] = []
        """(member id, member or instance id, generation, partition, stored generation at the commit)"""
        self.deletions = 0
        self.deletes = False
        self.ghosts = 0
        """Commits tried by members that left before a deletion (all must be refused)."""
        self.violations: list[str] = []
        self.leader_restarts = {True: 0, False: 0}
        """Static leaders that restarted into the same generation (no rebalance), by JoinGroup v9 or not."""
        self.flips = False
        self.acked: dict[int, int] = {}
        """partition -> the number of the last commit acknowledged on it (since the last deletion)"""
        self.commit_numbers = 0
        self.fetches = 0
        self.any_broker = GroupOffsets(self.meta, self.layout)
        """What another listener's OffsetFetch reads (it answers from Oxia, not the coordinator)."""
        self._init_log()

    def _new_coordinator(self, nodes: object | None = None) -> GroupCoordinator:
        return GroupCoordinator(self.offsets, nodes or self.nodes, initial_delay_ms=200, clock=self.clock)

    def _init_log(self) -> None:
        from server._log.initialize import initialize_log  # a log to commit offsets in
        for p in range(PARTITIONS):
            initialize_log(self.meta, self.layout.keys(TopicPartition(TOPIC, p)))

    def failover(self) -> None:
        with self.lock:
            if self.ownership is not None:
                return  # the pair stays: flips model its changes
            old, self.coordinator = self.coordinator, self._new_coordinator()
        old.close()

    def current(self) -> GroupCoordinator:
        with self.lock:
            return self.coordinator

    def flip(self) -> None:
        """Ownership moves to another live coordinator and, at the next flip, back: the
        rendezvous answer changing while the listeners' node lists converge. The one that
        lost the group stays up, with whatever it knew of it."""
        with self.lock:
            if self.ownership is None:
                self.ownership = _Ownership()
                self.standby = self._new_coordinator(_NodesView(self.ownership, 1))
                self.coordinator.close()  # the single-node coordinator gives way to the pair
                self.coordinator = self._new_coordinator(_NodesView(self.ownership, 0))
                self.pair = [self.coordinator, self.standby]
            self.ownership.owner = 1 - self.ownership.owner
            self.coordinator = self.pair[self.ownership.owner]

    def delete(self) -> None:
        """The admin's DeleteGroups, counted under the world's lock with its outcome, so a
        ghost that sees the count knows the deletion is done."""
        with self.lock:
            c = self.coordinator
            members = len(c.describe(GROUP)[3])
            code = c.delete(GROUP)
            if code == Code.NONE:
                self.deletions += 1
                self.acked.clear()
                if members:
                    self.violations.append(f"a group of {members} members was deleted")

    def close(self) -> None:
        with self.lock:
            for c in ([self.coordinator] if self.ownership is None else self.pair):
                c.close()


class _Ownership:
    owner = 0


class _NodesView:
    """What a coordinator asks of ``Nodes``: itself, and the group's coordinator (the current owner)."""

    def __init__(self, ownership: _Ownership, index: int) -> None:
        self._ownership = ownership
        self.me = Node(index, "h", 1)

    def coordinator(self, group: str) -> Node:
        return Node(self._ownership.owner, "h", 1)


DELETED = -1
"""What ``_RecordingOffsets.stored`` holds where the group was deleted."""


class _RecordingOffsets(GroupOffsets):
    """Every generation a coordinator stores, in order, and every deletion (``DELETED``)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.stored: list[int] = []
        self.memberships: list[frozenset[str]] = []
        self._record = threading.Lock()

    def set_generation(self, group, generation, members, **kw) -> None:
        with self._record:
            super().set_generation(group, generation, members, **kw)
            self.stored.append(generation)
            self.memberships.append(frozenset(members))

    def delete_group(self, group) -> bool:
        with self._record:
            deleted = super().delete_group(group)
            if deleted:
                self.stored.append(DELETED)
                self.memberships.append(frozenset())
            return deleted


def _assign(members: list[str]) -> dict[str, bytes]:
    ordered = sorted(members)
    return {m: bytes(p for p in range(PARTITIONS) if p % len(ordered) == i) for i, m in enumerate(ordered)}


def _member(world: World, index: int, seed: int) -> None:
    """Even members are static (``group.instance.id``): they also restart, rejoining with no
    member id, after which their old member id (a zombie) must not commit. Some speak
    JoinGroup v9 (a restarted static leader is told to skip the assignor, KIP-814), some not."""
    rng = random.Random(seed)
    iid = f"i{index}" if index % 2 == 0 else None
    v9 = rng.random() < 0.5
    member, generation, owned, leading = "", -1, frozenset(), False
    zombie: tuple[str, int] | None = None
    ghost: tuple[str, int, int] | None = None
    """(member id, generation, deletions) of this member's last leave, when deletions are on."""
    while not world.stop.is_set():
        if ghost is not None and world.deletions > ghost[2]:
            _ghost_commits(world, *ghost[:2])
            ghost = None
        c = world.current()
        if generation < 0:
            joined = c.join(GROUP, member, client_id=f"m{index}", client_host="", session_timeout_ms=3000,
                            rebalance_timeout_ms=3000, protocol_type="consumer", protocols=[("range", b"")],
                            require_member_id=True, group_instance_id=iid, skip_assignment=v9)
            if joined.error == Code.MEMBER_ID_REQUIRED:
                member = joined.member_id
                continue
            if joined.error != Code.NONE:
                _fenced(world, joined.error, member, iid)
                member = "" if joined.error in (Code.UNKNOWN_MEMBER_ID, Code.FENCED_INSTANCE_ID) else member
                continue
            member, generation = joined.member_id, joined.generation
            world.generations_seen.append(generation)
            if zombie is not None:
                if leading and zombie[1] == generation:
                    with world.lock:
                        world.leader_restarts[v9] += 1
                _zombie_commits(world, c, iid, *zombie)
                zombie = None
            leading = joined.leader == member or joined.skip_assignment
            assigns = joined.members and not joined.skip_assignment
            plan = _assign([m.member_id for m in joined.members]) if assigns else {}
            code, _, _, assignment = c.sync(GROUP, member, generation, plan, iid)
            _fenced(world, code, member, iid)
            if code != Code.NONE:
                generation = -1
                continue
            owned = frozenset(assignment)
            with world.lock:
                world.synced.append((generation, member, iid or member, owned))
            _resume(world, owned)
            continue
        action = rng.random()
        if action < (0.1 if world.deletes else 0.02):  # leave
            c.leave(GROUP, [(member, iid)])
            if world.deletes:  # and stay away a while, so the group may be empty and deleted
                ghost = (member, generation, world.deletions)
                world.stop.wait(rng.uniform(0.05, 0.2))
            member, generation = "", -1
        elif action < 0.04:  # go silent past the session timeout, then rejoin with the same id
            world.clock.advance(4)
            generation = -1
        elif action < 0.06 and iid is not None:  # restart: the same instance id, no member id
            zombie = (member, generation)
            member, generation = "", -1
        elif action < 0.5 and owned:
            partition = rng.choice(sorted(owned))
            if c.check_commit(GROUP, member, generation, iid) == Code.NONE:
                with world.lock:
                    world.commit_numbers += 1
                    number = world.commit_numbers
                try:
                    world.offsets.commit(GROUP, [(TopicPartition(TOPIC, partition), 1, str(number))],
                                         generation=generation, member=member)
                except LlogError:
                    continue
                with world.lock:
                    world.commits.append((member, iid or member, generation, partition,
                                          world.offsets.generation(GROUP)))
                    world.acked[partition] = number
        else:
            code = c.heartbeat(GROUP, member, generation, iid)
            _fenced(world, code, member, iid)
            if code != Code.NONE:
                generation = -1
        world.stop.wait(0.002)


def _resume(world: World, owned: frozenset[int]) -> None:
    """The OffsetFetch of a member that just synced, answered as any listener answers it:
    each of its partitions holds the last commit acknowledged before it asked (a commit's
    number is its metadata). A deletion meanwhile may take them all: nothing is checked then."""
    with world.lock:
        floor, deletions = {p: world.acked[p] for p in owned if p in world.acked}, world.deletions
    try:
        committed = world.any_broker.fetch_bounded(GROUP, TOPIC)
    except LlogError:  # UnknownGroup: nothing committed since the last deletion
        committed = {}
    with world.lock:
        if world.deletions != deletions:
            return
        world.fetches += 1
        for p, number in floor.items():
            got = committed.get(TopicPartition(TOPIC, p))
            if got is None or int(got.metadata) < number:
                world.violations.append(f"partition {p}: fetched commit {got and got.metadata} after commit "
                                        f"{number} was acknowledged")


def _fenced(world: World, code: int, member: str, iid: str | None) -> None:
    """A static member is only fenced under an id it no longer holds: FENCED_INSTANCE_ID is
    fatal to librdkafka and the Java client, so answering it to the current holder kills it."""
    if code == Code.FENCED_INSTANCE_ID and member:
        with world.lock:
            world.violations.append(f"{iid} fenced under its current member id {member}")


def _zombie_commits(world: World, c: GroupCoordinator, iid: str | None, old: str, generation: int) -> None:
    """The member id a static member held before it rejoined commits as a zombie would: the
    coordinator must fence it, or Oxia refuse it."""
    if not old or c.check_commit(GROUP, old, generation, iid) != Code.NONE:
        return
    _refused_in_oxia(world, old, generation, f"{old} ({iid}) committed after its instance rejoined")


def _ghost_commits(world: World, member: str, generation: int) -> None:
    """A member that left before the group was deleted commits with its old generation, as a
    request through a coordinator that missed the deletion would: Oxia must refuse it."""
    with world.lock:
        world.ghosts += 1
    _refused_in_oxia(world, member, generation, f"{member} of generation {generation} committed after the group "
                                                "was deleted")


def _refused_in_oxia(world: World, member: str, generation: int, violation: str) -> None:
    """A commit conditional on ``member`` and ``generation`` that Oxia must refuse; ``violation`` if not."""
    try:
        world.offsets.commit(GROUP, [(TopicPartition(TOPIC, 0), 1, "")], generation=generation, member=member)
    except LlogError:
        return
    with world.lock:
        world.violations.append(violation)


def _drive(world: World, seconds: float, cap_s: float = 30.0) -> None:
    """Move the clock and roll the world's faults for ``seconds``; with deletions on, go on (up
    to ``cap_s``) until the admin has deleted the group once: it must find it empty."""
    start = time.monotonic()
    while time.monotonic() - start < seconds or (world.deletes and not world.deletions
                                                  and time.monotonic() - start < cap_s):
        world.clock.advance(0.05)
        roll = world.rng.random()
        if roll < 0.01:
            world.failover()
        elif roll < 0.02 and world.flips:
            world.flip()
        elif roll < 0.1 and world.deletes:
            world.delete()
        time.sleep(0.01)  # the schedule's pace: members act between clock steps


def _check(world: World) -> None:
    stored, kept = world.offsets.stored, world.offsets.memberships
    epoch_of: dict[tuple[str, int], int] = {}
    """(member id, generation) -> how many deletions came before that generation was stored"""
    epoch = 0
    for i, generation in enumerate(stored):
        if generation == DELETED:
            epoch += 1
            continue
        if i > 0 and stored[i - 1] != DELETED:
            assert generation >= stored[i - 1], f"generations stored out of order: {stored}"
            if generation == stored[i - 1]:  # only a static member's new member id, in its old place
                assert len(kept[i]) == len(kept[i - 1]) and len(kept[i] ^ kept[i - 1]) == 2, \
                    f"generation {generation} stored twice with other members: {kept[i - 1]} then {kept[i]}"
        epoch_of.update(((m, generation), epoch) for m in kept[i])
    synced: dict[tuple[int, int], dict[str, frozenset[int]]] = {}
    for generation, member, key, owned in world.synced:
        synced.setdefault((epoch_of[(member, generation)], generation), {})[key] = owned
    for generation, members in synced.items():
        held = [p for parts in members.values() for p in parts]
        assert len(held) == len(set(held)), f"generation {generation}: overlapping assignments {members}"
    assert not world.violations, world.violations
    for member, key, generation, partition, at in world.commits:
        assert generation == at, f"{key} committed in generation {generation} while Oxia held {at}"
        owned = synced[(epoch_of[(member, generation)], generation)][key]
        assert partition in owned, f"{key} committed {partition} not its own"


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("flips, deletes", [(False, False), (True, False), (False, True), (True, True)],
                         ids=["failovers", "ownership-flips", "deletions", "flips-and-deletions"])
def test_random_schedules_keep_generations_assignments_and_commits_consistent(seed, flips, deletes):
    world = World(seed)
    world.flips, world.deletes = flips, deletes
    members = [threading.Thread(target=_member, args=(world, i, seed * 100 + i), daemon=True) for i in range(4)]
    for t in members:
        t.start()
    try:
        _drive(world, 2.0)
    finally:
        world.stop.set()
        world.close()  # members waiting in a join or a sync return
        for t in members:
            t.join(10)
    _check(world)
    print(f"seed {seed}: static leader restarts without a rebalance: {world.leader_restarts}; "
          f"deletions {world.deletions}, ghost commits refused {world.ghosts}")
    assert world.commits, "the schedule committed nothing"
    assert world.fetches, "no member fetched its offsets after a sync"
    assert len(set(world.generations_seen)) >= 2, "the schedule made no rebalance"
    assert world.deletions or not deletes, "the schedule deleted no group"


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
    last = max(g for g, _, _, _ in world.synced)
    assert sorted(p for g, _, _, parts in world.synced if g == last for p in parts) == list(range(PARTITIONS))


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
                world.synced.append((joined.generation, member, member, frozenset(assignment)))
            while not world.stop.is_set() and c.heartbeat(GROUP, member, joined.generation) == Code.NONE:
                world.stop.wait(0.01)
