"""The classic consumer-group protocol's state machine, on the group's coordinator.

FindCoordinator names one live listener per group (``nodes.py``); that
listener keeps the group's membership in memory, as Kafka's coordinator
does, and answers every other listener's NOT_COORDINATOR. Losing the
coordinator loses the membership: the members find the next one and rejoin
(a rebalance, as in Kafka). What must survive is in Oxia: the committed
offsets, and the generation with its members (``GroupOffsets.set_generation``),
which a new coordinator continues from, so a commit of a member of an older
generation is refused even across coordinators.

States (Kafka's): ``Empty`` -> ``PreparingRebalance`` (members join; the
first join of an empty group waits ``initial_delay_ms`` more for others, as
``group.initial.rebalance.delay.ms``) -> ``CompletingRebalance`` (a new
generation: every member got its JoinGroup answer, the leader with every
member's subscription; they SyncGroup) -> ``Stable`` (the leader's
assignment handed out). A join, a leave or a member whose session expired
(no heartbeat for its ``session_timeout_ms``) starts a rebalance; a member
that does not rejoin within the rebalance timeout is dropped from it.

JoinGroup from v4 on first answers MEMBER_ID_REQUIRED with a member id the
client joins again with (KIP-394).

Static membership (KIP-345): a member that joins with a ``group.instance.id``
gets its member id at once, and the group remembers which member id holds the
instance id. The same instance joining again without a member id (a restart
within the session timeout) takes over the old member's place under a new
member id. When the group is stable and the rejoin leaves the group's
protocol as it is (Kafka's rule: the subscription may differ, as the owned
partitions in it do), there is no rebalance: it gets the generation and, at
SyncGroup, its assignment; else the join goes on into a rebalance. The leader too (KIP-814): from JoinGroup
v9 it is told it leads, with every member's subscription and
``skip_assignment`` (it checks its metadata without assigning); before v9 the
answer names the old leader id, so the client acts as a follower, as Kafka
answers it. The old member id is then fenced: its requests naming the
instance id answer FENCED_INSTANCE_ID. A static member leaves by its instance
id or when its session expires; closing a static consumer sends no LeaveGroup,
so a restart does not move its partitions. JoinGroup and SyncGroup wait for the
rebalance (on the handler thread, woken by the condition variable); a
reaper thread expires sessions and ends rebalances that time out. A group
with no members may be deleted (DeleteGroups), and offsets of topics no
member subscribes to (OffsetDelete, ``subscriptions.py``).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field, replace
from typing import Callable

from .._errors import StaleGeneration, VersionConflict
from .._groups.offsets import GroupOffsets
from .._metrics import LlogMetrics
from .._protocol.keys import TopicPartition
from .._runtime import REAL_RUNTIME, Runtime
from .errors import Code
from .nodes import Nodes
from .subscriptions import EVERY_TOPIC, subscribed_topics

__all__ = ["GroupCoordinator", "JoinResult", "Member", "EMPTY", "PREPARING", "COMPLETING", "STABLE", "DEAD"]

log = logging.getLogger(__name__)

EMPTY, PREPARING, COMPLETING, STABLE, DEAD = "Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"
_TICK_S = 0.1


@dataclass
class Member:
    member_id: str
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    group_instance_id: str | None = None
    assignment: bytes = b""
    last_seen: float = 0.0
    awaiting_join: bool = False


@dataclass(frozen=True)
class JoinResult:
    error: int
    member_id: str = ""
    generation: int = -1
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str = ""
    members: tuple[Member, ...] = ()
    """Every member with its subscription: the leader's answer only."""
    skip_assignment: bool = False
    """The leader rejoined a stable group (KIP-814): the assignment stands, it need not assign."""


@dataclass
class _Group:
    name: str
    generation: int
    state: str = EMPTY
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    pending: dict[str, float] = field(default_factory=dict)
    """Member ids handed out with MEMBER_ID_REQUIRED, until when they may join."""
    deadline: float = 0.0
    initial: bool = False
    started: float = 0.0
    results: dict[str, JoinResult] = field(default_factory=dict)
    static: dict[str, str] = field(default_factory=dict)
    """Static members: group.instance.id -> the member id that holds it."""


class GroupCoordinator:
    """The groups this listener coordinates (module docstring). Thread-safe."""

    def __init__(self, offsets: GroupOffsets | None, nodes: Nodes, *, runtime: Runtime = REAL_RUNTIME,
                 metrics: LlogMetrics | None = None, initial_delay_ms: int = 3_000,
                 clock: Callable[[], float] | None = None) -> None:
        self._offsets = offsets
        self._nodes = nodes
        self._runtime = runtime
        self._metrics = metrics
        self._initial_delay_s = initial_delay_ms / 1000
        self._clock = clock or runtime.clock.monotonic
        self._groups: dict[str, _Group] = {}
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._reaper = threading.Thread(target=self._reap_loop, name="llog-kafka-groups", daemon=True)
        self._reaper.start()

    def close(self) -> None:
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        self._reaper.join(5)

    # -- ownership -------------------------------------------------------------------------------
    def owns(self, group: str) -> bool:
        """Whether this listener coordinates ``group`` now. One that no longer does forgets the
        group: the members follow FindCoordinator elsewhere, and if the group comes back (node
        lists converging can flip the answer) it starts again from Oxia, never from stale members."""
        mine = self._nodes.coordinator(group).node_id == self._nodes.me.node_id
        if not mine and group in self._groups:
            with self._cond:
                g = self._groups.pop(group, None)
                if g is not None:
                    g.state = DEAD
                    log.info("group %s: coordinated by another listener now: its members here are dropped", group)
                    self._cond.notify_all()
        return mine

    def _group(self, name: str) -> _Group:
        g = self._groups.get(name)
        if g is None:
            start = self._offsets.generation(name) if self._offsets is not None else 0
            g = self._groups[name] = _Group(name, start)
        return g

    # -- JoinGroup -------------------------------------------------------------------------------
    def join(self, group: str, member_id: str, *, client_id: str, client_host: str, session_timeout_ms: int,
             rebalance_timeout_ms: int, protocol_type: str, protocols: list[tuple[str, bytes]],
             require_member_id: bool, group_instance_id: str | None = None,
             skip_assignment: bool = False) -> JoinResult:
        """``skip_assignment``: the client understands it (JoinGroup v9+), so a static
        leader's restart keeps its leadership without a rebalance (KIP-814)."""
        if not self.owns(group):
            return JoinResult(Code.NOT_COORDINATOR, member_id)
        if not 1 <= session_timeout_ms <= 30 * 60_000:
            return JoinResult(Code.INVALID_SESSION_TIMEOUT, member_id)
        with self._cond:
            g = self._group(group)
            now = self._clock()
            if g.members and (protocol_type != g.protocol_type or not self._common(g, protocols)):
                return JoinResult(Code.INCONSISTENT_GROUP_PROTOCOL, member_id)
            iid = group_instance_id
            if iid is not None and member_id and g.static.get(iid, member_id) != member_id:
                return JoinResult(Code.FENCED_INSTANCE_ID, member_id)
            if not member_id:
                member_id = f"{iid or client_id or 'member'}-{self._runtime.ids.uuid4()}"
                if iid is not None and iid in g.static:
                    rejoined = self._replace_static(g, iid, member_id, protocols, now, skip_assignment)
                    if rejoined is not None:
                        return rejoined
                elif require_member_id and iid is None:
                    g.pending[member_id] = now + session_timeout_ms / 1000
                    return JoinResult(Code.MEMBER_ID_REQUIRED, member_id)
            elif member_id not in g.members and member_id not in g.pending:
                return JoinResult(Code.UNKNOWN_MEMBER_ID, member_id)
            g.pending.pop(member_id, None)
            new = member_id not in g.members
            m = g.members.get(member_id) or Member(member_id, client_id, client_host, session_timeout_ms,
                                                   rebalance_timeout_ms, protocol_type, protocols, group_instance_id)
            m.session_timeout_ms, m.rebalance_timeout_ms = session_timeout_ms, rebalance_timeout_ms
            m.protocols, m.last_seen, m.awaiting_join = protocols, now, True
            g.members[member_id] = m
            if iid is not None:
                g.static[iid], m.group_instance_id = member_id, iid
            g.protocol_type = protocol_type
            if g.state != PREPARING:
                self._prepare(g, now)
            elif g.initial and new:  # a new member extends the initial delay, within the rebalance timeout
                g.deadline = min(now + self._initial_delay_s, g.started + rebalance_timeout_ms / 1000)
            self._cond.notify_all()
            while True:
                result = g.results.pop(member_id, None)
                if result is not None:
                    return result
                if g.state == DEAD:
                    return JoinResult(Code.NOT_COORDINATOR, member_id)
                if g.members.get(member_id) is not m or self._stop.is_set():
                    replaced = m.member_id != member_id  # its instance id rejoined under a new member id
                    return JoinResult(Code.FENCED_INSTANCE_ID if replaced else Code.UNKNOWN_MEMBER_ID, member_id)
                self._complete_if_ready(g, self._clock())
                if member_id not in g.results:
                    self._cond.wait(_TICK_S)

    def _replace_static(self, g: _Group, iid: str, member_id: str, protocols: list[tuple[str, bytes]],
                        now: float, skip_assignment: bool) -> JoinResult | None:
        """A static member joining again: its old member moves to ``member_id``. The answer
        when no rebalance is needed; None when the join goes on (a rebalance)."""
        old_id = g.static[iid]
        g.static[iid] = member_id
        m = g.members.pop(old_id, None)
        if m is None:
            return None
        g.results.pop(old_id, None)
        m.member_id, m.last_seen = member_id, now
        g.members[member_id] = m
        was_leader = g.leader == old_id
        if was_leader:
            g.leader = member_id
        m.protocols = protocols
        if g.state != STABLE or self._select_protocol(g) != g.protocol:
            log.info("group %s: static member %s rejoined as %s (was %s): rebalancing", g.name, iid, member_id, old_id)
            return None  # Kafka's rule: only a change of the group's protocol rebalances
        if not self._store_generation(g, same_generation=True):  # the new member id commits in it
            return None
        self._cond.notify_all()
        answer, role = JoinResult(Code.NONE, member_id, g.generation, g.protocol_type, g.protocol, g.leader), ""
        if was_leader and skip_assignment:
            answer = replace(answer, members=tuple(g.members.values()), skip_assignment=True)
            role = " as its leader, skipping the assignor"
        elif was_leader:
            answer = replace(answer, leader=old_id)  # not its own id: the client acts as a follower
            role = " as its leader, answered as a follower"
        log.info("group %s: static member %s rejoined as %s (was %s) in generation %d%s", g.name, iid, member_id,
                 old_id, g.generation, role)
        return answer

    def _remove(self, g: _Group, member_id: str) -> Member | None:
        m = g.members.pop(member_id, None)
        if m is not None and m.group_instance_id is not None and g.static.get(m.group_instance_id) == member_id:
            del g.static[m.group_instance_id]
        return m

    @staticmethod
    def _common(g: _Group, protocols: list[tuple[str, bytes]]) -> bool:
        names = {n for n, _ in protocols}
        return all(names & {n for n, _ in m.protocols} for m in g.members.values())

    @staticmethod
    def _select_protocol(g: _Group) -> str | None:
        """The leader's first protocol that every member supports."""
        members = g.members.values()
        return next((n for n, _ in g.members[g.leader].protocols if all(n in dict(m.protocols) for m in members)),
                    None) if g.leader in g.members else None

    def _prepare(self, g: _Group, now: float) -> None:
        """Start a rebalance: every member must join again."""
        g.initial = g.state == EMPTY
        g.state, g.started = PREPARING, now
        longest = max((m.rebalance_timeout_ms for m in g.members.values()), default=0) / 1000
        g.deadline = now + (min(self._initial_delay_s, longest) if g.initial else longest)
        for m in g.members.values():
            m.assignment = b""

    def _complete_if_ready(self, g: _Group, now: float) -> None:
        if g.state != PREPARING:
            return
        all_in = all(m.awaiting_join for m in g.members.values())
        if now < g.deadline and (g.initial or not all_in):
            return
        for mid in [mid for mid, m in g.members.items() if not m.awaiting_join]:
            self._remove(g, mid)  # did not rejoin in time
        g.generation += 1
        if not g.members:
            g.state, g.leader, g.protocol = EMPTY, None, None
            self._cond.notify_all()
            return
        members = list(g.members.values())
        if g.leader not in g.members:
            g.leader = members[0].member_id
        g.protocol = self._select_protocol(g)
        if not self._store_generation(g):
            # Another coordinator formed a later generation meanwhile: the members (still
            # joining) get the one after it, at the next tick.
            g.generation = max(g.generation, self._stored_generation(g.name))
            return
        g.state = COMPLETING
        for m in members:
            m.awaiting_join = False
            g.results[m.member_id] = JoinResult(
                Code.NONE, m.member_id, g.generation, g.protocol_type, g.protocol, g.leader,
                tuple(members) if m.member_id == g.leader else ())
        log.info("group %s: generation %d with %d members, leader %s", g.name, g.generation, len(members), g.leader)
        self._cond.notify_all()

    def _store_generation(self, g: _Group, same_generation: bool = False) -> bool:
        """False when Oxia refused the generation (another coordinator stored a later one, or
        wrote at the same moment)."""
        if self._offsets is None:
            return True
        try:
            self._offsets.set_generation(g.name, g.generation, list(g.members), same_generation=same_generation)
        except (StaleGeneration, VersionConflict) as exc:
            log.info("group %s: generation %d not stored: %s", g.name, g.generation, exc)
            return False
        except Exception:  # commits then fail StaleGeneration and the members rejoin: never silent loss
            log.warning("group %s: could not store generation %d", g.name, g.generation, exc_info=True)
        return True

    def _stored_generation(self, group: str) -> int:
        try:
            return self._offsets.generation(group) if self._offsets is not None else 0
        except Exception:  # Oxia unreachable: the next completion tries again
            return 0

    # -- SyncGroup, Heartbeat, LeaveGroup --------------------------------------------------------
    def _member(self, group: str, member_id: str, generation: int,
                instance_id: str | None = None) -> tuple[int, _Group | None, Member | None]:
        if not self.owns(group):
            return Code.NOT_COORDINATOR, None, None
        g = self._groups.get(group)
        if g is not None and instance_id is not None and g.static.get(instance_id, member_id) != member_id:
            return Code.FENCED_INSTANCE_ID, g, None
        m = None if g is None else g.members.get(member_id)
        if g is None or m is None:
            return Code.UNKNOWN_MEMBER_ID, g, None
        m.last_seen = self._clock()
        if generation != g.generation:
            return Code.ILLEGAL_GENERATION, g, m
        return Code.NONE, g, m

    def sync(self, group: str, member_id: str, generation: int, assignments: dict[str, bytes],
             instance_id: str | None = None) -> tuple[int, str | None, str | None, bytes]:
        """``(error, protocol type, protocol, this member's assignment)``."""
        with self._cond:
            code, g, m = self._member(group, member_id, generation, instance_id)
            if code != Code.NONE or g is None or m is None:
                return code, None, None, b""
            if g.state == PREPARING:
                return Code.REBALANCE_IN_PROGRESS, None, None, b""
            if g.state == COMPLETING and member_id == g.leader:
                for mid, member in g.members.items():
                    member.assignment = assignments.get(mid, b"")
                g.state = STABLE
                log.info("group %s: generation %d stable; assignment bytes per member: %s", g.name, g.generation,
                         {mid: len(member.assignment) for mid, member in g.members.items()})
                self._cond.notify_all()
            deadline = self._clock() + m.session_timeout_ms / 1000
            while g.state == COMPLETING and g.generation == generation and not self._stop.is_set():
                if self._clock() >= deadline:
                    break
                self._cond.wait(_TICK_S)
            if g.state != STABLE or g.generation != generation or g.members.get(member_id) is not m:
                return Code.REBALANCE_IN_PROGRESS, None, None, b""
            return Code.NONE, g.protocol_type, g.protocol, m.assignment

    def heartbeat(self, group: str, member_id: str, generation: int, instance_id: str | None = None) -> int:
        with self._cond:
            code, g, _ = self._member(group, member_id, generation, instance_id)
            if code == Code.NONE and g is not None and g.state == PREPARING:
                return Code.REBALANCE_IN_PROGRESS
            return code

    def leave(self, group: str, members: list[tuple[str, str | None]]) -> list[int]:
        """One error code per ``(member id, instance id)``: a static member leaves by its
        instance id (the member id may be empty; another one is FENCED_INSTANCE_ID);
        UNKNOWN_MEMBER_ID for one not in the group."""
        if not self.owns(group):
            return [Code.NOT_COORDINATOR] * len(members)
        with self._cond:
            g = self._groups.get(group)
            codes = []
            for mid, iid in members:
                if g is not None and iid is not None:
                    holder = g.static.get(iid)
                    if holder is not None and mid and mid != holder:
                        codes.append(Code.FENCED_INSTANCE_ID)
                        continue
                    mid = holder or mid
                if g is None or self._remove(g, mid) is None:
                    codes.append(Code.UNKNOWN_MEMBER_ID)
                    continue
                codes.append(Code.NONE)
                log.info("group %s: member %s left", group, mid)
            if g is not None and Code.NONE in codes:
                self._rebalance_after_loss(g)
            return codes

    def _rebalance_after_loss(self, g: _Group) -> None:
        if g.members:
            if g.state != PREPARING:
                self._prepare(g, self._clock())
        else:
            g.state, g.leader, g.protocol = EMPTY, None, None
        self._cond.notify_all()

    # -- commits and views -----------------------------------------------------------------------
    def check_commit(self, group: str, member_id: str, generation: int, instance_id: str | None = None) -> int:
        """Whether a member may commit now: a commit without member and generation is accepted
        only while the group has no members (a consumer of ``assign``, an admin tool)."""
        if not self.owns(group):
            return Code.NOT_COORDINATOR
        with self._cond:
            if generation < 0 and not member_id:
                g = self._groups.get(group)
                return Code.NONE if g is None or not g.members else Code.UNKNOWN_MEMBER_ID
            code, g, _ = self._member(group, member_id, generation, instance_id)
            if code == Code.NONE and g is not None and g.state == PREPARING:
                return Code.REBALANCE_IN_PROGRESS
            return code

    def delete(self, group: str) -> int:
        """DeleteGroups: forget a group with no members, here and in Oxia (``delete_group``);
        NON_EMPTY_GROUP while it has members, GROUP_ID_NOT_FOUND when nothing is known of it."""
        if not self.owns(group):
            return Code.NOT_COORDINATOR
        with self._cond:  # held through the Oxia delete: no member joins the group meanwhile
            g = self._groups.get(group)
            if g is not None and g.members:
                return Code.NON_EMPTY_GROUP
            stored = self._offsets is not None and self._offsets.delete_group(group)
            if self._groups.pop(group, None) is None and not stored:
                return Code.GROUP_ID_NOT_FOUND
            log.info("group %s: deleted", group)
            return Code.NONE

    def delete_offsets(self, group: str, tps: list[TopicPartition]) -> tuple[int, list[int]]:
        """OffsetDelete: ``(group error, one code per partition)``. A topic an active member
        subscribes to is GROUP_SUBSCRIBED_TO_TOPIC (every topic, when that cannot be told);
        the others' committed offsets are deleted, as Kafka's coordinator does."""
        if not self.owns(group):
            return Code.NOT_COORDINATOR, []
        with self._cond:
            g = self._groups.get(group)
            active = g is not None and bool(g.members)
            if active and g.protocol_type != "consumer":
                return Code.NON_EMPTY_GROUP, []
            if not active and (self._offsets is None or not self._offsets.exists(group)):
                return Code.GROUP_ID_NOT_FOUND, []
            topics = subscribed_topics(g.protocol, (m.protocols for m in g.members.values())) if active else frozenset()
            codes = [Code.GROUP_SUBSCRIBED_TO_TOPIC if topics is EVERY_TOPIC or tp.topic in topics else Code.NONE
                     for tp in tps]
            if self._offsets is not None:
                self._offsets.delete_offsets(group, [tp for tp, c in zip(tps, codes) if c == Code.NONE])
            return Code.NONE, [int(c) for c in codes]

    def describe(self, group: str) -> tuple[str, str, str, list[Member]]:
        """``(state, protocol type, protocol, members)``; ``Dead`` for a group not known here."""
        with self._cond:
            g = self._groups.get(group)
            if g is None:
                return DEAD, "", "", []
            return g.state, g.protocol_type or "", g.protocol or "", list(g.members.values())

    def known(self) -> dict[str, tuple[str, str]]:
        """Groups with members here: name -> (state, protocol type)."""
        with self._cond:
            return {n: (g.state, g.protocol_type or "") for n, g in self._groups.items() if g.members}

    # -- sessions -------------------------------------------------------------------------------
    def _reap_loop(self) -> None:
        while not self._stop.wait(_TICK_S):
            with self._cond:
                now = self._clock()
                for g in list(self._groups.values()):
                    if self.owns(g.name):
                        self._reap(g, now)

    def _reap(self, g: _Group, now: float) -> None:
        for mid in [mid for mid, until in g.pending.items() if until < now]:
            del g.pending[mid]
        expired = [mid for mid, m in g.members.items()
                   if not (g.state == PREPARING and m.awaiting_join)
                   and now - m.last_seen > m.session_timeout_ms / 1000]
        for mid in expired:
            self._remove(g, mid)
            log.info("group %s: member %s's session expired", g.name, mid)
        if expired:
            self._rebalance_after_loss(g)
        self._complete_if_ready(g, now)
