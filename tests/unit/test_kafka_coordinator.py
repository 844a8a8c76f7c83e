"""The classic group protocol's state machine (``server/_kafka/coordinator.py``):
joins, generations, sync, heartbeats, leaves, session expiry, commits' checks, and
the generation carried over from Oxia. Members are threads, as the handler pool's
requests are; the clock is the test's, so expiry is decided, not waited for."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from server._errors import StaleGeneration
from server._groups.offsets import GroupOffsets
from server._kafka.coordinator import COMPLETING, EMPTY, PREPARING, STABLE, GroupCoordinator
from server._kafka.errors import Code
from server._kafka.nodes import Node, Nodes
from server._protocol.keys import LogLayout, TopicPartition
from server._protocol.records import ControlRecord, LogState
from server._storage.metastore import InMemoryMetadataStore

PROTOCOLS = [("range", b"sub")]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0
        self.lock = threading.Lock()

    def __call__(self) -> float:
        with self.lock:
            return self.now

    def advance(self, seconds: float) -> None:
        with self.lock:
            self.now += seconds


@pytest.fixture
def world():
    meta = InMemoryMetadataStore()
    layout = LogLayout("llog")
    nodes = Nodes(meta, layout, broker_id="b1", host="h", port=1)
    nodes.register()
    clock = Clock()
    coordinator = GroupCoordinator(GroupOffsets(meta, layout), nodes, initial_delay_ms=500, clock=clock)
    pool = ThreadPoolExecutor(8)
    yield coordinator, clock, pool, GroupOffsets(meta, layout), nodes
    coordinator.close()
    pool.shutdown()


def _join(c: GroupCoordinator, member: str = "", *, v4: bool = True, session_ms: int = 10_000,
          rebalance_ms: int = 10_000, protocols=PROTOCOLS, protocol_type: str = "consumer"):
    return c.join("g", member, client_id="c", client_host="", session_timeout_ms=session_ms,
                  rebalance_timeout_ms=rebalance_ms, protocol_type=protocol_type, protocols=protocols,
                  require_member_id=v4)


def _form(c: GroupCoordinator, clock: Clock, pool: ThreadPoolExecutor, n: int, **kw) -> list:
    """``n`` members joining an empty group together: the initial delay (on the test's clock)
    lets every one in before the first generation."""
    ids = [_member_id(c) for _ in range(n)]
    futures = [pool.submit(_join, c, m, **kw) for m in ids]
    assert _wait_for(lambda: len(c.describe("g")[3]) == n)
    clock.advance(1)
    return [f.result(10) for f in futures]


def _member_id(c: GroupCoordinator) -> str:
    first = _join(c)
    assert first.error == Code.MEMBER_ID_REQUIRED and first.member_id
    return first.member_id


def test_one_member_joins_syncs_and_is_stable(world):
    c, _, _, offsets, _ = world
    (joined,) = _form(c, world[1], world[2], 1)
    mid = joined.member_id
    assert (joined.error, joined.generation, joined.leader, joined.protocol) == (0, 1, mid, "range")
    assert [m.member_id for m in joined.members] == [mid]  # the leader sees the subscriptions
    assert c.sync("g", mid, 1, {mid: b"assignment"}) == (0, "consumer", "range", b"assignment")
    assert c.describe("g")[0] == STABLE
    assert c.heartbeat("g", mid, 1) == Code.NONE
    assert offsets.generation("g") == 1


def test_a_second_member_makes_a_rebalance_that_both_complete(world):
    c, clock, pool, _, _ = world
    (first,) = _form(c, clock, pool, 1)
    a = first.member_id
    assert c.sync("g", a, 1, {a: b"all"})[0] == 0
    b = _member_id(c)
    b_join = pool.submit(_join, c, b)
    # a learns of the rebalance from its heartbeat and joins again
    assert _wait_for(lambda: c.heartbeat("g", a, 1) == Code.REBALANCE_IN_PROGRESS)
    a_join = _join(c, a)
    b_result = b_join.result(10)
    assert a_join.generation == b_result.generation == 2
    assert a_join.leader == a and len(a_join.members) == 2 and b_result.members == ()
    b_sync = pool.submit(c.sync, "g", b, 2, {})
    assert c.sync("g", a, 2, {a: b"half-a", b: b"half-b"})[3] == b"half-a"
    assert b_sync.result(10)[3] == b"half-b"


def _wait_for(condition, timeout: float = 10.0) -> bool:
    done = threading.Event()
    deadline = threading.Timer(timeout, done.set)
    deadline.start()
    try:
        while not done.is_set():
            if condition():
                return True
            done.wait(0.02)
        return False
    finally:
        deadline.cancel()


def test_a_member_whose_session_expires_is_removed_and_the_group_rebalances(world):
    c, clock, pool, _, _ = world
    results = _form(c, clock, pool, 2, session_ms=6000)
    a, b = (r.member_id for r in results)
    leader = results[0].leader
    other = b if leader == a else a
    other_sync = pool.submit(c.sync, "g", other, 1, {})
    assert c.sync("g", leader, 1, {a: b"1", b: b"2"})[0] == 0
    assert other_sync.result(10)[0] == 0  # its last sign of life
    clock.advance(5)
    assert c.heartbeat("g", leader, 1) == Code.NONE  # the leader keeps its session; the other does not
    clock.advance(2)
    assert _wait_for(lambda: c.describe("g")[0] == PREPARING)
    assert c.heartbeat("g", other, 1) == Code.UNKNOWN_MEMBER_ID
    again = _join(c, leader)
    assert (again.generation, [m.member_id for m in again.members]) == (2, [leader])


def test_leaving_rebalances_the_rest_and_the_last_leave_empties_the_group(world):
    c, clock, pool, _, _ = world
    a, b = (r.member_id for r in _form(c, clock, pool, 2))
    assert c.leave("g", [(b, None), ("nobody", None)]) == [Code.NONE, Code.UNKNOWN_MEMBER_ID]
    assert c.describe("g")[0] == PREPARING
    assert _join(c, a).generation == 2
    assert c.leave("g", [(a, None)]) == [Code.NONE]
    assert c.describe("g")[0] == EMPTY


def test_commits_are_checked_against_member_and_generation(world):
    c, clock, pool, _, _ = world
    assert c.check_commit("g", "", -1) == Code.NONE  # no members: a simple commit is fine
    (joined,) = _form(c, clock, pool, 1)
    mid = joined.member_id
    assert c.describe("g")[0] == COMPLETING
    assert c.check_commit("g", "", -1) == Code.UNKNOWN_MEMBER_ID  # the group has members now
    assert c.check_commit("g", mid, 0) == Code.ILLEGAL_GENERATION
    assert c.check_commit("g", "stranger", 1) == Code.UNKNOWN_MEMBER_ID
    assert c.check_commit("g", mid, 1) == Code.NONE


def test_unknown_members_inconsistent_protocols_and_bad_timeouts_are_refused(world):
    c, clock, pool, _, _ = world
    assert _join(c, "made-up").error == Code.UNKNOWN_MEMBER_ID
    assert _join(c, session_ms=0).error == Code.INVALID_SESSION_TIMEOUT
    _form(c, clock, pool, 1)
    other = _member_id(c)
    assert _join(c, other, protocols=[("sticky", b"")]).error == Code.INCONSISTENT_GROUP_PROTOCOL


def test_a_join_before_v4_gets_its_member_id_at_once(world):
    c, clock, pool, _, _ = world
    future = pool.submit(_join, c, v4=False)
    assert _wait_for(lambda: len(c.describe("g")[3]) == 1)
    clock.advance(1)
    joined = future.result(10)
    assert joined.error == 0 and joined.member_id and joined.generation == 1


def test_a_new_coordinator_continues_the_generation_stored_in_oxia(world):
    c, _, _, offsets, nodes = world
    offsets.set_generation("g", 41, ["old-member"])
    fresh = GroupCoordinator(offsets, nodes, initial_delay_ms=0)
    try:
        mid = fresh.join("g", "", client_id="c", client_host="", session_timeout_ms=10_000,
                         rebalance_timeout_ms=10_000, protocol_type="consumer", protocols=PROTOCOLS,
                         require_member_id=False)
        assert mid.generation == 42
    finally:
        fresh.close()


def test_a_group_another_node_coordinates_is_not_coordinator_here(world):
    c, _, _, _, nodes = world
    nodes._live = (nodes.me, Node(nodes.me.node_id + 1, "h2", 2, "b2"))
    theirs = next(g for g in (f"group-{i}" for i in range(100)) if nodes.coordinator(g) != nodes.me)
    assert c.join(theirs, "", client_id="c", client_host="", session_timeout_ms=10_000,
                  rebalance_timeout_ms=10_000, protocol_type="consumer", protocols=PROTOCOLS,
                  require_member_id=True).error == Code.NOT_COORDINATOR
    assert c.heartbeat(theirs, "m", 1) == Code.NOT_COORDINATOR
    assert c.check_commit(theirs, "", -1) == Code.NOT_COORDINATOR


def _static_join(c: GroupCoordinator, iid: str, member: str = "", session_ms: int = 10_000, protocols=PROTOCOLS):
    return c.join("g", member, client_id="c", client_host="", session_timeout_ms=session_ms,
                  rebalance_timeout_ms=10_000, protocol_type="consumer", protocols=protocols,
                  require_member_id=True, group_instance_id=iid)


def _form_static(world, iids: list[str], **kw) -> dict[str, object]:
    """Static members joining an empty group together (no MEMBER_ID_REQUIRED round), then synced."""
    c, clock, pool = world[0], world[1], world[2]
    futures = {iid: pool.submit(_static_join, c, iid, **kw) for iid in iids}
    assert _wait_for(lambda: len(c.describe("g")[3]) == len(iids))
    clock.advance(1)
    joined = {iid: f.result(10) for iid, f in futures.items()}
    leader = next(j for j in joined.values() if j.members)
    plan = {j.member_id: f"for-{iid}".encode() for iid, j in joined.items()}
    syncs = {iid: pool.submit(c.sync, "g", j.member_id, j.generation, plan if j is leader else {}, iid)
             for iid, j in joined.items()}
    assert all(s.result(10)[0] == Code.NONE for s in syncs.values())
    return joined


def test_a_static_member_restarting_takes_its_place_back_without_a_rebalance(world):
    c, _, _, offsets, _ = world
    joined = _form_static(world, ["a", "b"])
    assert all(j.error == Code.NONE and j.generation == 1 for j in joined.values())
    follower = next(iid for iid, j in joined.items() if j.member_id != j.leader)
    old = joined[follower].member_id
    again = _static_join(c, follower)  # a restart: no member id, the same instance id
    assert (again.error, again.generation, again.leader) == (Code.NONE, 1, joined[follower].leader)
    assert again.member_id != old and not again.members
    assert c.describe("g")[0] == STABLE
    assert c.sync("g", again.member_id, 1, {}, follower) == (0, "consumer", "range", f"for-{follower}".encode())
    # The old member id is fenced by its instance id, and gone without it.
    assert c.heartbeat("g", old, 1, follower) == Code.FENCED_INSTANCE_ID
    assert c.heartbeat("g", old, 1) == Code.UNKNOWN_MEMBER_ID
    assert _static_join(c, follower, old).error == Code.FENCED_INSTANCE_ID
    assert c.heartbeat("g", again.member_id, 1, follower) == Code.NONE
    # The new member id commits in the same generation, in Oxia too.
    assert c.check_commit("g", again.member_id, 1, follower) == Code.NONE
    tp = TopicPartition("t", 0)
    keys = offsets.layout.keys(tp)
    offsets._meta.put(keys.control, ControlRecord(LogState.OPEN, 5).encode(), keys.partition_key)
    offsets.commit("g", [(tp, 3, "")], generation=1, member=again.member_id)
    with pytest.raises(StaleGeneration):
        offsets.commit("g", [(tp, 4, "")], generation=1, member=old)


@pytest.mark.parametrize("v9", [True, False])
def test_a_static_leader_restarting_keeps_the_assignment_without_a_rebalance(world, v9):
    """KIP-814: from JoinGroup v9 the rejoined leader is told it leads, with every member and
    ``skip_assignment``; before v9 it is answered the old leader id, so it acts as a follower."""
    c = world[0]
    joined = _form_static(world, ["a", "b"])
    leader_iid, follower_iid = sorted(joined, key=lambda iid: joined[iid].member_id != joined[iid].leader)
    old = joined[leader_iid].member_id
    again = c.join("g", "", client_id="c", client_host="", session_timeout_ms=10_000, rebalance_timeout_ms=10_000,
                   protocol_type="consumer", protocols=[("range", b"owned partitions")],
                   require_member_id=True, group_instance_id=leader_iid, skip_assignment=v9)
    assert (again.error, again.generation) == (Code.NONE, 1) and again.member_id != old
    if v9:
        assert again.leader == again.member_id and again.skip_assignment
        assert {m.member_id for m in again.members} == {again.member_id, joined[follower_iid].member_id}
    else:
        assert (again.leader, again.members, again.skip_assignment) == (old, (), False)
    assert c.describe("g")[0] == STABLE
    assert c.heartbeat("g", joined[follower_iid].member_id, 1, follower_iid) == Code.NONE  # no rebalance
    # Its SyncGroup (no assignments: it skipped the assignor, or thinks it follows) gets its own back.
    assert c.sync("g", again.member_id, 1, {}, leader_iid)[3] == f"for-{leader_iid}".encode()
    assert c.sync("g", joined[follower_iid].member_id, 1, {}, follower_iid)[3] == f"for-{follower_iid}".encode()
    assert c.heartbeat("g", old, 1, leader_iid) == Code.FENCED_INSTANCE_ID
    # It is the leader of the next generation, whichever answer it had.
    pending = world[2].submit(_static_join, c, "c")
    assert _wait_for(lambda: c.describe("g")[0] == PREPARING)
    rejoin = [world[2].submit(_static_join, c, iid, j) for iid, j in
              ((leader_iid, again.member_id), (follower_iid, joined[follower_iid].member_id))]
    results = [f.result(10) for f in (pending, *rejoin)]
    assert {r.generation for r in results} == {2} and {r.leader for r in results} == {again.member_id}


def test_a_static_member_changing_the_group_s_protocol_rebalances(world):
    """A new subscription alone does not (Kafka's rule, tested above); a rejoin that changes
    which protocol the group would select does."""
    c = world[0]
    both = [("range", b""), ("roundrobin", b"")]
    joined = _form_static(world, ["a", "b"], protocols=both)
    leader_iid = next(iid for iid, j in joined.items() if j.member_id == j.leader)
    assert c.describe("g")[2] == "range"
    pending = world[2].submit(_static_join, c, leader_iid, protocols=both[::-1])
    assert _wait_for(lambda: c.describe("g")[0] == PREPARING)
    world[1].advance(11)  # the other member does not rejoin within the rebalance timeout
    result = pending.result(10)
    assert (result.error, result.generation, result.protocol) == (Code.NONE, 2, "roundrobin")
    assert result.member_id == result.leader


def test_a_static_member_leaves_by_instance_id_and_a_stale_member_id_is_fenced(world):
    c = world[0]
    joined = _form_static(world, ["a", "b"])
    assert c.leave("g", [("someone-else", "a")]) == [Code.FENCED_INSTANCE_ID]
    assert c.leave("g", [("", "a")]) == [Code.NONE]
    assert c.leave("g", [("", "a")]) == [Code.UNKNOWN_MEMBER_ID]
    assert [m.member_id for m in c.describe("g")[3]] == [joined["b"].member_id]
    assert c.describe("g")[0] == PREPARING  # a static member leaving is a rebalance, as in Kafka


def test_a_static_member_whose_session_expired_joins_as_new(world):
    c, clock = world[0], world[1]
    joined = _form_static(world, ["a"], session_ms=2_000)
    clock.advance(3)
    assert _wait_for(lambda: not c.describe("g")[3])  # expired: the group is empty
    fresh = world[2].submit(_static_join, c, "a")
    assert _wait_for(lambda: len(c.describe("g")[3]) == 1)
    clock.advance(1)
    result = fresh.result(10)
    assert result.error == Code.NONE and result.generation == 2 and result.member_id != joined["a"].member_id


def _logs(offsets: GroupOffsets, *tps: TopicPartition) -> None:
    for tp in tps:
        keys = offsets.layout.keys(tp)
        offsets._meta.put(keys.control, ControlRecord(LogState.OPEN, 10).encode(), keys.partition_key)


def test_delete_group_refuses_a_group_with_members_then_forgets_it_in_oxia(world):
    c, clock, pool, offsets, _ = world
    a, b = TopicPartition("a", 0), TopicPartition("b", 0)
    _logs(offsets, a, b)
    (joined,) = _form(c, clock, pool, 1)
    mid = joined.member_id
    assert c.sync("g", mid, 1, {mid: b""})[0] == Code.NONE
    offsets.commit("g", [(a, 3, "m"), (b, 4, "")], generation=1, member=mid)
    assert c.delete("g") == Code.NON_EMPTY_GROUP
    assert set(offsets.fetch("g")) == {a, b} and offsets.generation("g") == 1
    assert c.leave("g", [(mid, None)]) == [Code.NONE]
    assert c.delete("g") == Code.NONE
    assert offsets.fetch("g") == {} and offsets.generation("g") == 0 and not offsets.exists("g")
    assert "g" not in offsets.groups() and c.describe("g")[0] == "Dead"
    assert c.delete("g") == Code.GROUP_ID_NOT_FOUND
    with pytest.raises(StaleGeneration):  # a member of the deleted group's generation commits no more
        offsets.commit("g", [(a, 5, "")], generation=1, member=mid)
    (again,) = _form(c, clock, pool, 1)  # formed again from generation 1, by a new member id
    assert (again.error, again.generation) == (Code.NONE, 1) and again.member_id != mid
    offsets.commit("g", [(a, 6, "")])  # an unconditional commit (an HTTP consumer) makes a group too
    c.leave("g", [(again.member_id, None)])
    assert c.delete("g") == Code.NONE and not offsets.exists("g")


def _subscription(*topics: str) -> bytes:
    from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription

    return ConsumerProtocolSubscription(topics=list(topics), user_data=None).encode(version=0)


def test_offset_delete_spares_the_topics_an_active_member_subscribes_to(world):
    c, clock, pool, offsets, _ = world
    a, a1, b = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)
    _logs(offsets, a, a1, b)
    assert c.delete_offsets("g", [a]) == (Code.GROUP_ID_NOT_FOUND, [])
    offsets.commit("g", [(a, 2, ""), (a1, 2, ""), (b, 2, "")])
    (joined,) = _form(c, clock, pool, 1, protocols=[("range", _subscription("a"))])
    assert c.delete_offsets("g", [a, b]) == (Code.NONE, [Code.GROUP_SUBSCRIBED_TO_TOPIC, Code.NONE])
    assert set(offsets.fetch("g")) == {a, a1}
    c.leave("g", [(joined.member_id, None)])
    assert c.delete_offsets("g", [a, TopicPartition("never", 0)]) == (Code.NONE, [Code.NONE, Code.NONE])
    assert set(offsets.fetch("g")) == {a1}


@pytest.mark.parametrize("protocol_type, protocols, want", [
    ("consumer", PROTOCOLS, (Code.NONE, [Code.GROUP_SUBSCRIBED_TO_TOPIC])),  # unreadable: every topic counts
    ("connect", [("range", _subscription("a"))], (Code.NON_EMPTY_GROUP, [])),  # not a consumer group
])
def test_offset_delete_deletes_nothing_it_cannot_tell_is_unused(world, protocol_type, protocols, want):
    c, clock, pool, offsets, _ = world
    b = TopicPartition("b", 0)
    _logs(offsets, b)
    offsets.commit("g", [(b, 2, "")])
    (joined,) = _form(c, clock, pool, 1, protocols=protocols, protocol_type=protocol_type)
    assert joined.error == Code.NONE
    assert c.delete_offsets("g", [b]) == want
    assert set(offsets.fetch("g")) == {b}
