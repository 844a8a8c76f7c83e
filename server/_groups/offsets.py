"""Committed offsets of consumer groups, in Oxia (SPEC 4.10).

``{root}/__llog/groups/{group}/offsets/{topic}:{partition}`` holds
``{"offset": N, "metadata": "...", "committed_at_ms": T}``: the next offset
the group consumes in that log (Kafka's committed offset, in llog's offsets:
the first record is 1), with the consumer's metadata string. Every record of
a group is on one shard (partition key ``__llog/groups/{group}``), so a
group's offsets are one range scan and a commit of several partitions is
one batch of puts.

A commit may be conditional on the group's generation and member
(``{root}/__llog/groups/{group}/generation``: ``{"generation": G,
"members": [...]}``), which a group coordinator writes on each rebalance
(the Kafka listener's); without one it is unconditional, what an HTTP
consumer does. A commit beyond a log's high watermark + 1 is refused; a
fetch answers an offset below the log's start with the start (retention let
the records go, SPEC 7.10).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

from .._errors import CorruptBatch, InvalidRequest, StaleGeneration, UnknownGroup, UnknownTopic
from .._protocol.http_json import InvalidField
from .._protocol.keys import LogLayout, TopicPartition, validate_group
from .._protocol.records import ControlRecord, dumps, loads
from .._runtime import REAL_RUNTIME, Runtime
from .._storage.metastore import EXPECT_ABSENT, MetadataStore, Record

__all__ = ["CommittedOffset", "GroupOffsets", "GroupLag", "describe", "MAX_METADATA_LENGTH"]

MAX_METADATA_LENGTH = 4096
"""Kafka's ``offset.metadata.max.bytes`` default."""


@dataclass(frozen=True)
class CommittedOffset:
    """A group's position in one log."""

    offset: int
    """The next offset to consume (llog's: the first record is 1)."""
    metadata: str = ""
    committed_at_ms: int = 0

    def encode(self) -> bytes:
        return dumps({"offset": self.offset, "metadata": self.metadata, "committed_at_ms": self.committed_at_ms})

    @classmethod
    def decode(cls, raw: bytes) -> CommittedOffset:
        doc = loads(raw, "committed offset")
        try:
            return cls(int(doc["offset"]), str(doc.get("metadata", "")), int(doc.get("committed_at_ms", 0)))
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptBatch(f"unreadable committed offset: {exc!r}") from exc


class GroupOffsets:
    """Commit, fetch and list consumer groups' offsets (module docstring)."""

    def __init__(self, meta: MetadataStore, layout: LogLayout, *, runtime: Runtime = REAL_RUNTIME) -> None:
        self._meta = meta
        self.layout = layout
        self._runtime = runtime

    def commit(self, group: str, offsets: Sequence[tuple[TopicPartition, int, str]], *,
               generation: int | None = None, member: str | None = None) -> None:
        """Store ``(log, next offset, metadata)`` for each log; conditional on the
        group's ``generation`` and ``member`` when given (StaleGeneration)."""
        validate_group(group)
        if not offsets:
            raise InvalidRequest("commit at least one offset")
        for tp, offset, metadata in offsets:
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < 1:
                raise InvalidRequest(f"offset of {tp} must be an integer >= 1 (the next offset to consume), "
                                     f"got {offset!r}", topic=tp.topic, partition=tp.partition)
            if not isinstance(metadata, str) or len(metadata.encode("utf-8")) > MAX_METADATA_LENGTH:
                raise InvalidRequest(f"metadata of {tp} must be a string of at most {MAX_METADATA_LENGTH} bytes",
                                     topic=tp.topic, partition=tp.partition)
        for i, (tp, offset, _) in enumerate(offsets):
            _, high_watermark = self.log_bounds(tp)
            if offset > high_watermark + 1:
                raise InvalidField(f"offsets[{i}].offset {offset} of {tp} is past its high watermark "
                                   f"{high_watermark} + 1: a group cannot have consumed what is not written",
                                   f"offsets[{i}].offset", topic=tp.topic, partition=tp.partition)
        if generation is not None or member is not None:
            self._check_generation(group, generation, member)
        now = self._runtime.clock.now_ms()
        pk = self.layout.group_partition_key(group)
        for tp, offset, metadata in offsets:
            self._meta.put(self.layout.group_offset_key(group, tp), CommittedOffset(offset, metadata, now).encode(), pk)

    def log_bounds(self, tp: TopicPartition) -> tuple[int, int]:
        """``(log start, high watermark)`` of a log (UnknownTopic when it was never written)."""
        keys = self.layout.keys(tp)
        rec = self._meta.get(keys.control, keys.partition_key)
        if rec is None:
            raise UnknownTopic(f"{tp} was never written", topic=tp.topic, partition=tp.partition)
        control = ControlRecord.decode(rec.value)
        return control.log_start_offset, control.high_watermark

    def fetch_bounded(self, group: str, topic: str | None = None) -> dict[TopicPartition, CommittedOffset]:
        """:meth:`fetch`, with an offset below its log's start answered as the start
        (retention let those records go, SPEC 7.10). UnknownGroup when the group has
        committed nothing."""
        out = {}
        for tp, c in self.fetch(group, topic).items():
            try:
                start, _ = self.log_bounds(tp)
            except UnknownTopic:
                continue  # its topic is gone; the offset goes with it
            out[tp] = c if c.offset >= start else CommittedOffset(start, c.metadata, c.committed_at_ms)
        if not out and not self.exists(group):
            raise UnknownGroup(f"group {group!r} has committed no offset")
        return out

    def fetch(self, group: str, topic: str | None = None) -> dict[TopicPartition, CommittedOffset]:
        """The group's committed offsets as stored (of ``topic``'s logs only, when given)."""
        base = self.layout.group_base(group) + "offsets/"
        lo, hi = (base, base + "~") if topic is None else (f"{base}{topic}:", f"{base}{topic}:~")
        out: dict[TopicPartition, CommittedOffset] = {}
        for rec in self._meta.range_scan(lo, hi, self.layout.group_partition_key(group)):
            name = rec.key[len(base):]
            t, sep, p = name.rpartition(":")
            if not sep or not p.isdigit():
                continue
            out[TopicPartition(t, int(p))] = CommittedOffset.decode(rec.value)
        return dict(sorted(out.items()))

    def groups(self) -> list[str]:
        """Every group with a committed offset or a generation."""
        prefix = self.layout.groups_prefix
        names = {self.layout.parse_group_key(k) for k in self._meta.list_keys(prefix, prefix + "~/")}
        return sorted(n for n in names if n)

    def exists(self, group: str) -> bool:
        base = self.layout.group_base(group)
        return bool(self._meta.list_keys(base, base + "~/", self.layout.group_partition_key(group)))

    def set_generation(self, group: str, generation: int, members: Iterable[str], *,
                       same_generation: bool = False) -> None:
        """What a group coordinator writes on each rebalance: later conditional commits check it.

        Generations only move forward: StaleGeneration when Oxia holds a later one, or this one
        already (``same_generation``: a static member's new member id in its generation), so a
        coordinator that lost the group to another cannot move it back (a conditional put: a
        concurrent writer is VersionConflict)."""
        key, pk = self.layout.group_generation_key(group), self.layout.group_partition_key(group)
        rec = self._meta.get(key, pk)
        stored = self._generation_of(rec)
        if rec is not None and (stored > generation or (stored == generation and not same_generation)):
            raise StaleGeneration(f"group {group!r} is at generation {stored}; {generation} is stale: another "
                                  "coordinator formed it")
        self._meta.put(key, dumps({"generation": generation, "members": sorted(members)}), pk,
                       expected_version=EXPECT_ABSENT if rec is None else rec.version)

    def generation(self, group: str) -> int:
        """The group's last generation a coordinator wrote (0: none), so a new coordinator continues it."""
        return self._generation_of(
            self._meta.get(self.layout.group_generation_key(group), self.layout.group_partition_key(group)))

    @staticmethod
    def _generation_of(rec: Record | None) -> int:
        if rec is None:
            return 0
        doc = loads(rec.value, "group generation")
        gen = doc.get("generation") if isinstance(doc, dict) else None
        return gen if isinstance(gen, int) else 0

    def delete_group(self, group: str) -> bool:
        """Forget the group: its committed offsets and its generation, one range delete
        (DeleteGroups; the coordinator checks it has no members). Whether it had any.

        Without a generation a member's conditional commit is refused (StaleGeneration)
        until a coordinator forms the group again, from generation 1."""
        validate_group(group)
        if not self.exists(group):
            return False
        base = self.layout.group_base(group)
        self._meta.delete_range(base, base + "~/", self.layout.group_partition_key(group))
        return True

    def delete_offsets(self, group: str, tps: Iterable[TopicPartition]) -> None:
        """Forget the group's committed offsets of ``tps`` (OffsetDelete); one never committed is no error."""
        validate_group(group)
        pk = self.layout.group_partition_key(group)
        for tp in tps:
            self._meta.delete(self.layout.group_offset_key(group, tp), pk)

    def delete_topic(self, topic: str) -> int:
        """Forget every group's offsets of ``topic`` (the topic is gone); how many went."""
        gone = 0
        for group in self.groups():
            base = self.layout.group_base(group) + "offsets/"
            pk = self.layout.group_partition_key(group)
            for key in self._meta.list_keys(f"{base}{topic}:", f"{base}{topic}:~", pk):
                self._meta.delete(key, pk)
                gone += 1
        return gone

    def _check_generation(self, group: str, generation: int | None, member: str | None) -> None:
        rec = self._meta.get(self.layout.group_generation_key(group), self.layout.group_partition_key(group))
        if rec is None:
            raise StaleGeneration(f"group {group!r} has no generation: no coordinator formed it; commit without "
                                  "generation and member, or rejoin the group")
        doc = loads(rec.value, "group generation")
        if generation is not None and generation != doc.get("generation"):
            raise StaleGeneration(f"group {group!r} is at generation {doc.get('generation')}, not {generation}: "
                                  "a rebalance happened; rejoin the group")
        if member is not None and member not in doc.get("members", ()):
            raise StaleGeneration(f"{member!r} is not a member of group {group!r}'s generation "
                                  f"{doc.get('generation')}; rejoin the group", field="member_id")


@dataclass(frozen=True)
class GroupLag:
    """A group's position in one log beside the log's bounds."""

    tp: TopicPartition
    committed: CommittedOffset
    log_start_offset: int
    high_watermark: int

    @property
    def lag(self) -> int:
        """Records written and not yet consumed by the group (Kafka's consumer lag)."""
        return max(0, self.high_watermark - max(self.committed.offset, self.log_start_offset) + 1)


def describe(offsets: GroupOffsets, group: str) -> list[GroupLag]:
    """Each log the group committed in, with its start, high watermark and the group's lag."""
    out = []
    for tp, c in offsets.fetch(group).items():
        try:
            start, hw = offsets.log_bounds(tp)
        except UnknownTopic:
            continue
        out.append(GroupLag(tp, c, start, hw))
    if not out and not offsets.exists(group):
        raise UnknownGroup(f"group {group!r} has committed no offset")
    return out
