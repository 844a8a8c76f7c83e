"""The group APIs: JoinGroup, SyncGroup, Heartbeat, LeaveGroup (``coordinator.py``),
OffsetCommit and OffsetFetch (``GroupOffsets`` in Oxia), DescribeGroups and ListGroups,
DeleteGroups and OffsetDelete (the coordinator checks the group's members first).

Committed offsets are Kafka's on the wire and llog's in Oxia (``llog_offset``
of the next offset to consume), so the same group read through ``/groups``,
``llog-admin groups`` or a Kafka client says the same thing. A member's commit
is checked against the coordinator's generation, then written conditionally
on the generation in Oxia as well (StaleGeneration -> ILLEGAL_GENERATION).
A group that committed nothing fetches -1 for every partition, as from Kafka.
OffsetFetch is answered by any broker, coordinator or not: the offsets are
Oxia's, and librdkafka leaves the partitions of a NOT_COORDINATOR answer
unstarted until the next rebalance (confluentinc/librdkafka#5586). A
storage failure there is COORDINATOR_LOAD_IN_PROGRESS, which every client
retries.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from kafka.protocol.admin import DeleteGroupsResponse, DescribeGroupsResponse, ListGroupsResponse
from kafka.protocol.consumer import (
    HeartbeatResponse, JoinGroupResponse, LeaveGroupResponse, OffsetCommitResponse, OffsetDeleteResponse,
    OffsetFetchResponse, SyncGroupResponse,
)

from .._errors import LlogError, UnknownGroup
from .._protocol.http_json import InvalidField
from .._protocol.kafka_batch import kafka_offset, llog_offset
from .._protocol.keys import TopicPartition, is_valid, validate_group, validate_topic
from .errors import Code, error_code

if TYPE_CHECKING:
    from .codec import KafkaRequest
    from .service import KafkaService

__all__ = ["HANDLERS"]

log = logging.getLogger(__name__)


def _bad_group(group: str) -> bool:
    return not is_valid(validate_group, group)


def join_group(svc: KafkaService, req: KafkaRequest) -> Any:
    b, v = req.body, req.version
    R = JoinGroupResponse[v]
    if _bad_group(b.group_id):
        return R(error_code=Code.INVALID_GROUP_ID, generation_id=-1, protocol_name=None, leader="",
                 member_id=b.member_id, members=[])
    result = svc.coordinator.join(
        b.group_id, b.member_id, client_id=req.client_id or "", client_host="",
        session_timeout_ms=b.session_timeout_ms,
        rebalance_timeout_ms=b.rebalance_timeout_ms if v >= 1 else b.session_timeout_ms,
        protocol_type=b.protocol_type, protocols=[(p.name, bytes(p.metadata)) for p in b.protocols],
        require_member_id=v >= 4, group_instance_id=b.group_instance_id if v >= 5 else None,
        skip_assignment=v >= 9)
    members = [R.JoinGroupResponseMember(member_id=m.member_id, group_instance_id=m.group_instance_id,
                                         metadata=dict(m.protocols)[result.protocol]) for m in result.members]
    return R(throttle_time_ms=0, error_code=result.error, generation_id=result.generation,
             protocol_type=result.protocol_type, protocol_name=result.protocol if v >= 7 else (result.protocol or ""),
             leader=result.leader, skip_assignment=result.skip_assignment, member_id=result.member_id, members=members)


def sync_group(svc: KafkaService, req: KafkaRequest) -> Any:
    b, v = req.body, req.version
    code, ptype, proto, assignment = svc.coordinator.sync(
        b.group_id, b.member_id, b.generation_id, {a.member_id: bytes(a.assignment) for a in b.assignments},
        b.group_instance_id if v >= 3 else None)
    return SyncGroupResponse[v](throttle_time_ms=0, error_code=code, protocol_type=ptype, protocol_name=proto,
                                assignment=assignment)


def heartbeat(svc: KafkaService, req: KafkaRequest) -> Any:
    b = req.body
    code = svc.coordinator.heartbeat(b.group_id, b.member_id, b.generation_id,
                                     b.group_instance_id if req.version >= 3 else None)
    return HeartbeatResponse[req.version](throttle_time_ms=0, error_code=code)


def leave_group(svc: KafkaService, req: KafkaRequest) -> Any:
    b, v = req.body, req.version
    R = LeaveGroupResponse[v]
    if v < 3:
        (code,) = svc.coordinator.leave(b.group_id, [(b.member_id, None)])
        return R(throttle_time_ms=0, error_code=code)
    codes = svc.coordinator.leave(b.group_id, [(m.member_id, m.group_instance_id) for m in b.members])
    top = Code.NOT_COORDINATOR if codes and all(c == Code.NOT_COORDINATOR for c in codes) else Code.NONE
    return R(throttle_time_ms=0, error_code=top, members=[
        R.MemberResponse(member_id=m.member_id, group_instance_id=m.group_instance_id, error_code=c)
        for m, c in zip(b.members, codes)] if top == Code.NONE else [])


def offset_commit(svc: KafkaService, req: KafkaRequest) -> Any:
    b, v = req.body, req.version
    R = OffsetCommitResponse
    generation = b.generation_id_or_member_epoch if v >= 1 else -1
    member = b.member_id if v >= 1 else ""
    wanted = [(t.name, p.partition_index, p.committed_offset, p.committed_metadata or "")
              for t in b.topics for p in t.partitions]
    codes = _commit(svc, b.group_id, member, generation, wanted, b.group_instance_id if v >= 7 else None)
    by_topic: dict[str, list[Any]] = {}
    for (topic, partition, _, _), code in zip(wanted, codes):
        by_topic.setdefault(topic, []).append(
            R.OffsetCommitResponseTopic.OffsetCommitResponsePartition(partition_index=partition, error_code=code))
    return R[v](throttle_time_ms=0, topics=[R.OffsetCommitResponseTopic(name=n, partitions=ps)
                                           for n, ps in by_topic.items()])


def _commit(svc: KafkaService, group: str, member: str, generation: int,
            wanted: list[tuple[str, int, int, str]], instance_id: str | None = None) -> list[int]:
    if _bad_group(group):
        return [Code.INVALID_GROUP_ID] * len(wanted)
    code = svc.coordinator.check_commit(group, member, generation, instance_id)
    offsets = svc.parts.group_offsets
    if code == Code.NONE and offsets is None:
        code = Code.COORDINATOR_NOT_AVAILABLE
    if code != Code.NONE:
        return [code] * len(wanted)
    codes: list[int | None] = [
        Code.UNKNOWN_TOPIC_OR_PARTITION if not is_valid(validate_topic, t) or p < 0 else Code.OFFSET_OUT_OF_RANGE if o < 0
        else None for t, p, o, _ in wanted]
    todo = [i for i, c in enumerate(codes) if c is None]
    items = [(TopicPartition(wanted[i][0], wanted[i][1]), llog_offset(wanted[i][2]), wanted[i][3]) for i in todo]
    conditional = dict(generation=generation, member=member) if member else {}
    try:
        if items:
            offsets.commit(group, items, **conditional)
        for i in todo:
            codes[i] = Code.NONE
    except LlogError:
        for i, item in zip(todo, items):  # one refused offset must not refuse the others: find which
            try:
                offsets.commit(group, [item], **conditional)
                codes[i] = Code.NONE
            except LlogError as exc:
                codes[i] = _commit_error(exc)
    return [int(c) for c in codes]  # type: ignore[arg-type]


def _commit_error(exc: LlogError) -> int:
    if isinstance(exc, InvalidField):  # past the high watermark, or below 0
        return Code.OFFSET_OUT_OF_RANGE
    return error_code(exc)


def offset_fetch(svc: KafkaService, req: KafkaRequest) -> Any:
    b, v = req.body, req.version
    R = OffsetFetchResponse
    if v >= 8:
        groups = []
        for g in b.groups:
            wanted = None if g.topics is None else [(t.name, list(t.partition_indexes)) for t in g.topics]
            code, topics = _fetch(svc, g.group_id, wanted)
            T = R.OffsetFetchResponseGroup.OffsetFetchResponseTopics
            groups.append(R.OffsetFetchResponseGroup(group_id=g.group_id, error_code=code, topics=[
                T(name=name, partitions=[T.OffsetFetchResponsePartitions(
                    partition_index=p, committed_offset=o, committed_leader_epoch=-1, metadata=m, error_code=0)
                    for p, o, m in parts]) for name, parts in topics]))
        return R[v](throttle_time_ms=0, groups=groups)
    wanted = None if b.topics is None else [(t.name, list(t.partition_indexes)) for t in b.topics]
    code, topics = _fetch(svc, b.group_id, wanted)
    T = R.OffsetFetchResponseTopic
    return R[v](throttle_time_ms=0, error_code=code, topics=[
        T(name=name, partitions=[T.OffsetFetchResponsePartition(
            partition_index=p, committed_offset=o, committed_leader_epoch=-1, metadata=m, error_code=0)
            for p, o, m in parts]) for name, parts in topics])


def _fetch(svc: KafkaService, group: str, wanted: list[tuple[str, list[int]]] | None
           ) -> tuple[int, list[tuple[str, list[tuple[int, int, str]]]]]:
    """``(group error, [(topic, [(partition, Kafka offset or -1, metadata)])])``."""
    if _bad_group(group):
        return Code.INVALID_GROUP_ID, []
    # Any broker answers: committed offsets are in Oxia, where every commit is before its answer.
    # NOT_COORDINATOR here would leave librdkafka's partitions unstarted (confluentinc/librdkafka#5586).
    offsets = svc.parts.group_offsets
    try:
        committed = offsets.fetch_bounded(group) if offsets is not None else {}
    except UnknownGroup:
        committed = {}
    except LlogError as exc:  # retriable: Kafka's "offsets not loaded yet", which every client retries
        return (Code.COORDINATOR_LOAD_IN_PROGRESS if exc.retriable else error_code(exc)), []
    if wanted is None:
        topics: dict[str, list[int]] = {}
        for tp in committed:
            topics.setdefault(tp.topic, []).append(tp.partition)
        wanted = sorted(topics.items())
    by_pair = {(tp.topic, tp.partition): c for tp, c in committed.items()}
    out = []
    for topic, partitions in wanted:
        rows = []
        for p in partitions:
            c = by_pair.get((topic, p))
            rows.append((p, -1, "") if c is None else (p, kafka_offset(c.offset), c.metadata))
        out.append((topic, rows))
    return Code.NONE, out


def describe_groups(svc: KafkaService, req: KafkaRequest) -> Any:
    R = DescribeGroupsResponse
    G = R.DescribedGroup
    out = []
    for group in req.body.groups:
        if _bad_group(group):
            out.append(G(error_code=Code.INVALID_GROUP_ID, group_id=group, group_state="", protocol_type="",
                         protocol_data="", members=[]))
            continue
        if not svc.coordinator.owns(group):
            out.append(G(error_code=Code.NOT_COORDINATOR, group_id=group, group_state="", protocol_type="",
                         protocol_data="", members=[]))
            continue
        state, ptype, proto, members = svc.coordinator.describe(group)
        if state == "Dead" and svc.parts.group_offsets is not None and svc.parts.group_offsets.exists(group):
            state = "Empty"
        out.append(G(error_code=0, group_id=group, group_state=state, protocol_type=ptype, protocol_data=proto,
                     members=[G.DescribedGroupMember(
                         member_id=m.member_id, group_instance_id=m.group_instance_id, client_id=m.client_id,
                         client_host=m.client_host, member_metadata=dict(m.protocols).get(proto, b""),
                         member_assignment=m.assignment) for m in members]))
    return R[req.version](throttle_time_ms=0, groups=out)


def list_groups(svc: KafkaService, req: KafkaRequest) -> Any:
    """The groups this listener coordinates: with members here, or with offsets in Oxia."""
    R = ListGroupsResponse
    v = req.version
    states = set(req.body.states_filter or ()) if v >= 4 else set()
    known = svc.coordinator.known()
    stored = svc.parts.group_offsets.groups() if svc.parts.group_offsets is not None else []
    for name in stored:
        if name not in known and svc.coordinator.owns(name):
            known[name] = ("Empty", "consumer")
    listed = [R.ListedGroup(group_id=n, protocol_type=ptype, group_state=state, group_type="classic")
              for n, (state, ptype) in sorted(known.items()) if not states or state in states]
    return R[v](throttle_time_ms=0, error_code=0, groups=listed)


def delete_groups(svc: KafkaService, req: KafkaRequest) -> Any:
    R = DeleteGroupsResponse
    results = []
    for group in req.body.groups_names:
        try:
            code = Code.INVALID_GROUP_ID if _bad_group(group) else svc.coordinator.delete(group)
        except LlogError as exc:
            code = error_code(exc)
        results.append(R.DeletableGroupResult(group_id=group, error_code=code))
    return R[req.version](throttle_time_ms=0, results=results)


def offset_delete(svc: KafkaService, req: KafkaRequest) -> Any:
    b, R = req.body, OffsetDeleteResponse
    wanted = [(t.name, p.partition_index) for t in b.topics for p in t.partitions]
    valid = [is_valid(validate_topic, t) and p >= 0 for t, p in wanted]
    try:
        top, codes = (Code.INVALID_GROUP_ID, []) if _bad_group(b.group_id) else svc.coordinator.delete_offsets(
            b.group_id, [TopicPartition(t, p) for (t, p), ok in zip(wanted, valid) if ok])
    except LlogError as exc:
        top, codes = error_code(exc), []
    if top != Code.NONE:
        return R[req.version](error_code=top, throttle_time_ms=0, topics=[])
    left = iter(codes)
    by_topic: dict[str, list[Any]] = {}
    T = R.OffsetDeleteResponseTopic
    for (topic, partition), ok in zip(wanted, valid):
        code = next(left) if ok else Code.UNKNOWN_TOPIC_OR_PARTITION
        by_topic.setdefault(topic, []).append(T.OffsetDeleteResponsePartition(partition_index=partition,
                                                                               error_code=code))
    return R[req.version](error_code=Code.NONE, throttle_time_ms=0,
                          topics=[T(name=n, partitions=ps) for n, ps in by_topic.items()])


HANDLERS = {
    11: join_group, 14: sync_group, 12: heartbeat, 13: leave_group, 8: offset_commit, 9: offset_fetch,
    15: describe_groups, 16: list_groups, 42: delete_groups, 47: offset_delete,
}
