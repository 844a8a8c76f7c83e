"""Oxia keys, S3 keys and the validation of the names that go into them.

Every key of one log lives under a root prefix (``LLOG_ROOT_PREFIX``, default
``llog``), so one bucket and one Oxia namespace can hold several logs::

    {root}/{topic}/partitions/{partition}/meta/control
    {root}/{topic}/partitions/{partition}/meta/compaction-cursor
    {root}/{topic}/partitions/{partition}/meta/compaction
    {root}/{topic}/partitions/{partition}/meta/compactor-claim
    {root}/{topic}/partitions/{partition}/index/{end_offset:020d}
    {root}/__llog/topics/{topic}
    {root}/__llog/producer-ids                       the next producer id
    {root}/__llog/producers/{quoted name}            a named producer's id and epoch
    {root}/__llog/groups/{quoted group}/offsets/{topic}:{partition}   a committed offset
    {root}/__llog/groups/{quoted group}/generation   the group's generation (a coordinator's)
    {root}/__llog/brokers/{node_id:010d}             a live Kafka listener (ephemeral)
    {root}/__llog/users/{quoted name}                a Kafka user's SCRAM credentials

    S3: {root}/wal-shared/{uuid}
        {root}/{topic}/partitions/{partition}/data/compacted/{uuid}
        {root}/{topic}/partitions/{partition}/data/wal/{uuid}        (legacy, read only)

Sort order (SPEC 3.3): Oxia compares keys segment by segment on ``/``, and at
each level a key with no further ``/`` sorts before every key that has one;
:func:`oxia_sort_key` is that order, for the in-memory stores. The index
offsets are zero-padded to 20 digits so that within ``.../index/`` the
segment order is the numeric order. ``[index/, index/~)`` therefore covers
exactly one partition's index and nothing deeper, and because both ends share
the root's first segment such a range can never reach ``__oxia/...``.

Names are validated before any key is built: a topic is 1-249 characters of
``[A-Za-z0-9._-]`` and not ``.`` or ``..``, so no topic can add a path segment
or escape its subtree in Oxia, S3 or a cache directory.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import quote, unquote
from functools import cached_property, lru_cache
from typing import Callable

from .._errors import ConfigError, InvalidRequest

__all__ = [
    "RESERVED_SEGMENT",
    "TOPICS_PARTITION_KEY",
    "PRODUCERS_PARTITION_KEY",
    "BROKERS_PARTITION_KEY",
    "validate_producer_name",
    "validate_group",
    "is_valid",
    "OFFSET_DIGITS",
    "TopicPartition",
    "PartitionKeys",
    "LogLayout",
    "validate_topic",
    "validate_partition",
    "validate_root_prefix",
    "format_offset",
    "parse_s3_uri",
    "oxia_sort_key",
]

OFFSET_DIGITS = 20
MAX_TOPIC_LENGTH = 249
RESERVED_SEGMENT = "__llog"
"""Not a topic name: ``{root}/__llog/`` holds llog's own records (the topic catalogue)."""
TOPICS_PARTITION_KEY = "__llog/topics"
"""Every topic record on one shard, so the catalogue lists in one range scan."""
BROKERS_PARTITION_KEY = "__llog/brokers"
"""The live Kafka listeners, on one shard (one range scan lists them)."""
PRODUCERS_PARTITION_KEY = "__llog/producers"
"""The producer id counter and the named producers, on one shard."""
USERS_PARTITION_KEY = "__llog/users"
"""The Kafka listener's SCRAM users, on one shard (one range scan lists them)."""
MAX_USER_LENGTH = 249
MAX_PRODUCER_NAME_LENGTH = 249
MAX_GROUP_LENGTH = 249
_TOPIC_RE = re.compile(r"[A-Za-z0-9._-]{1,249}")
_SEGMENT_RE = re.compile(r"[A-Za-z0-9._-]+")
# Oxia keeps its own records under __oxia/; a root there would collide.
_RESERVED_ROOT = "__oxia"


def validate_topic(topic: object) -> str:
    """Return ``topic`` if it is a valid topic name, else raise InvalidRequest."""
    if not isinstance(topic, str):
        raise InvalidRequest(f"topic must be a string, got {type(topic).__name__}")
    if not _TOPIC_RE.fullmatch(topic) or topic in (".", "..", RESERVED_SEGMENT):
        raise InvalidRequest(
            f"invalid topic {topic!r}: use 1-{MAX_TOPIC_LENGTH} characters of "
            f"A-Z a-z 0-9 . _ - (not '.', '..' or {RESERVED_SEGMENT!r})"
        )
    return topic


def _printable_name(value: object, what: str, limit: int) -> str:
    """``value`` if it is 1-``limit`` characters, none of them a control character."""
    if not isinstance(value, str):
        raise InvalidRequest(f"{what} must be a string, got {type(value).__name__}")
    if not 1 <= len(value) <= limit or any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise InvalidRequest(f"invalid {what} {value!r}: use 1-{limit} printable characters")
    return value


def is_valid(validate: Callable[[object], object], name: object) -> bool:
    """Whether ``validate`` (``validate_topic``, ``validate_group`` ...) accepts ``name``."""
    try:
        validate(name)
        return True
    except InvalidRequest:
        return False


def validate_producer_name(name: object) -> str:
    """Return ``name`` if it can name a producer (Kafka's ``transactional.id``)."""
    return _printable_name(name, "producer name", MAX_PRODUCER_NAME_LENGTH)


def validate_group(group: object) -> str:
    """Return ``group`` if it can name a consumer group (Kafka's ``group.id``)."""
    return _printable_name(group, "group", MAX_GROUP_LENGTH)


def validate_partition(partition: object, topic: str | None = None) -> int:
    """Return ``partition`` if it is a non-negative int (not a bool)."""
    if isinstance(partition, bool) or not isinstance(partition, int):
        raise InvalidRequest(
            f"partition must be a non-negative integer, got {partition!r}", topic=topic
        )
    if partition < 0:
        raise InvalidRequest(
            f"partition must be a non-negative integer, got {partition}", topic=topic
        )
    return partition


def validate_root_prefix(root: object) -> str:
    """Return ``root`` if every ``/``-separated segment is a safe name."""
    if not isinstance(root, str) or not root:
        raise ConfigError("LLOG_ROOT_PREFIX must be a non-empty string")
    segments = root.split("/")
    for seg in segments:
        if not _SEGMENT_RE.fullmatch(seg) or seg in (".", ".."):
            raise ConfigError(
                f"invalid LLOG_ROOT_PREFIX {root!r}: segments must be "
                "A-Z a-z 0-9 . _ - with no empty, '.' or '..' segment"
            )
    if segments[0].startswith(_RESERVED_ROOT):
        raise ConfigError(f"invalid LLOG_ROOT_PREFIX {root!r}: __oxia is reserved by Oxia")
    return root


def format_offset(offset: int) -> str:
    """Zero-pad an offset to the 20 digits the index keys use."""
    return f"{offset:0{OFFSET_DIGITS}d}"


def oxia_sort_key(key: str) -> tuple[tuple[int, str], ...]:
    """The sort key of Oxia's key order (its ``CompareWithSlash``, SPEC 3.3).

    Every segment but the last becomes ``(1, segment)`` and the last
    ``(0, segment)``. Tuples compare element by element, so the segments are
    compared in turn, and at the first level where one key ends and the other
    goes deeper the ``0`` puts the key that ends first. Python compares
    strings by code point, which is the order of their UTF-8 bytes, Oxia's.
    """
    segments = key.split("/")
    return (*((1, s) for s in segments[:-1]), (0, segments[-1]))


def parse_s3_uri(uri: str) -> tuple[str, str]:
    """Split ``s3://bucket/key`` into ``(bucket, key)``."""
    if not isinstance(uri, str) or not uri.startswith("s3://"):
        raise InvalidRequest(f"not an s3:// URI: {uri!r}")
    bucket, sep, key = uri[5:].partition("/")
    if not bucket or not sep or not key:
        raise InvalidRequest(f"not an s3://bucket/key URI: {uri!r}")
    return bucket, key


@dataclass(frozen=True, order=True)
class TopicPartition:
    """One log: a topic and a partition number."""

    topic: str
    """Topic name, validated by :func:`validate_topic`."""
    partition: int
    """Partition number, >= 0."""

    def __post_init__(self) -> None:
        validate_topic(self.topic)
        validate_partition(self.partition, self.topic)

    def __str__(self) -> str:
        return f"{self.topic}:{self.partition}"

    @classmethod
    def parse(cls, text: str) -> TopicPartition:
        """Parse ``topic:partition`` (as in ``LLOG_COMPACTOR_TARGETS``)."""
        topic, sep, part = text.strip().rpartition(":")
        if not sep or not (part.isascii() and part.isdigit()):
            raise InvalidRequest(f"expected 'topic:partition', got {text!r}")
        return cls(topic, int(part))


@dataclass(frozen=True)
class PartitionKeys:
    """All Oxia and S3 keys of one topic-partition under one root."""

    root: str
    tp: TopicPartition

    @cached_property
    def base(self) -> str:
        return f"{self.root}/{self.tp.topic}/partitions/{self.tp.partition}"

    @cached_property
    def partition_key(self) -> str:
        """Oxia shard routing key: every record of the partition on one shard."""
        return f"{self.tp.topic}:{self.tp.partition}"

    @cached_property
    def control(self) -> str:
        return f"{self.base}/meta/control"

    @cached_property
    def compaction_cursor(self) -> str:
        return f"{self.base}/meta/compaction-cursor"

    @cached_property
    def compaction(self) -> str:
        return f"{self.base}/meta/compaction"

    @cached_property
    def compactor_claim(self) -> str:
        return f"{self.base}/meta/compactor-claim"

    @cached_property
    def index_prefix(self) -> str:
        return f"{self.base}/index/"

    @cached_property
    def index_end(self) -> str:
        """Exclusive end of the index range: '~' sorts after every digit."""
        return f"{self.base}/index/~"

    def index(self, end_offset: int) -> str:
        return self.index_prefix + format_offset(end_offset)

    def index_offset(self, key: str) -> int | None:
        """The end offset named by ``key`` if it is one of *this* partition's
        index keys, else None (a CEILING get may return any later key)."""
        if not key.startswith(self.index_prefix):
            return None
        digits = key[len(self.index_prefix):]
        if len(digits) != OFFSET_DIGITS or not (digits.isascii() and digits.isdigit()):
            return None
        return int(digits)

    def compacted_object(self, blob_id: str) -> str:
        return f"{self.base}/data/compacted/{blob_id}"

    def legacy_wal_object(self, blob_id: str) -> str:
        return f"{self.base}/data/wal/{blob_id}"


@lru_cache(maxsize=1 << 14, typed=True)  # typed: True is not partition 1
def _partition_keys(root: str, topic: str, partition: int) -> PartitionKeys:
    """One PartitionKeys per partition, kept: a fetch at the tail of 64 partitions asks for
    each one's keys several times, and building them validates the names and formats each key."""
    return PartitionKeys(root, TopicPartition(topic, partition))


@dataclass(frozen=True)
class LogLayout:
    """Key layout of one log (one root prefix) in one bucket."""

    root: str = "llog"

    def __post_init__(self) -> None:
        validate_root_prefix(self.root)

    def partition(self, topic: str, partition: int) -> PartitionKeys:
        return _partition_keys(self.root, topic, partition)

    def keys(self, tp: TopicPartition) -> PartitionKeys:
        return _partition_keys(self.root, tp.topic, tp.partition)

    @property
    def topics_prefix(self) -> str:
        """Every topic record (SPEC 4.8) is this plus the topic's name."""
        return f"{self.root}/{RESERVED_SEGMENT}/topics/"

    def topic_record(self, name: str) -> str:
        return self.topics_prefix + validate_topic(name)

    def parse_topic_key(self, key: str) -> str | None:
        """The topic a catalogue key names, or None for any other key."""
        if not key.startswith(self.topics_prefix):
            return None
        name = key[len(self.topics_prefix):]
        try:
            return validate_topic(name)
        except InvalidRequest:
            return None

    @property
    def producer_ids_key(self) -> str:
        return f"{self.root}/{RESERVED_SEGMENT}/producer-ids"

    def producer_name_key(self, name: str) -> str:
        """A named producer's record; the name is percent-quoted, so it is one segment."""
        return f"{self.root}/{RESERVED_SEGMENT}/producers/{quote(validate_producer_name(name), safe='')}"

    @property
    def groups_prefix(self) -> str:
        return f"{self.root}/{RESERVED_SEGMENT}/groups/"

    def group_base(self, group: str) -> str:
        """Every key of a group starts with this (its name percent-quoted: one segment)."""
        return f"{self.groups_prefix}{quote(validate_group(group), safe='')}/"

    @staticmethod
    def group_partition_key(group: str) -> str:
        """A group's records on one shard, so its offsets list in one range scan."""
        return f"__llog/groups/{quote(group, safe='')}"

    def group_offset_key(self, group: str, tp: TopicPartition) -> str:
        """One segment per offset (``:`` is in no topic name), so a group's offsets are one range."""
        return f"{self.group_base(group)}offsets/{tp.topic}:{tp.partition}"

    @property
    def users_prefix(self) -> str:
        return f"{self.root}/{RESERVED_SEGMENT}/users/"

    def user_key(self, name: str) -> str:
        """A user's record; the name is percent-quoted, so it is one segment (1-249 characters, printable)."""
        if not 0 < len(name) <= MAX_USER_LENGTH or not name.isprintable():
            raise InvalidRequest(f"a user name is 1-{MAX_USER_LENGTH} printable characters, got {name[:60]!r}")
        return f"{self.users_prefix}{quote(name, safe='').replace('~', '%7E')}"  # every segment below "~"

    def parse_user_key(self, key: str) -> str | None:
        """The user a key under :attr:`users_prefix` names, or None."""
        if not key.startswith(self.users_prefix) or "/" in key[len(self.users_prefix):]:
            return None
        return unquote(key[len(self.users_prefix):]) or None

    @property
    def brokers_prefix(self) -> str:
        return f"{self.root}/{RESERVED_SEGMENT}/brokers/"

    def broker_key(self, node_id: int) -> str:
        """Zero-padded, so the listing is in node id order."""
        return f"{self.brokers_prefix}{node_id:010d}"

    def group_generation_key(self, group: str) -> str:
        return f"{self.group_base(group)}generation"

    def parse_group_key(self, key: str) -> str | None:
        """The group a key under :attr:`groups_prefix` belongs to, or None."""
        if not key.startswith(self.groups_prefix):
            return None
        quoted = key[len(self.groups_prefix):].split("/", 1)[0]
        return unquote(quoted) if quoted else None

    def shared_wal_object(self, blob_id: str) -> str:
        return f"{self.root}/wal-shared/{blob_id}"

    @property
    def shared_wal_prefix(self) -> str:
        return f"{self.root}/wal-shared/"

    @property
    def object_prefix(self) -> str:
        """Every S3 object of this log starts with this."""
        return f"{self.root}/"

    def parse_control_key(self, key: str) -> TopicPartition | None:
        """The topic-partition of a ``.../meta/control`` key under this root."""
        head = self.root + "/"
        if not key.startswith(head) or not key.endswith("/meta/control"):
            return None
        parts = key[len(head):].split("/")
        if (
            len(parts) != 5
            or parts[1] != "partitions"
            or not (parts[2].isascii() and parts[2].isdigit())
            or str(int(parts[2])) != parts[2]
        ):
            return None
        try:
            return TopicPartition(parts[0], int(parts[2]))
        except InvalidRequest:
            return None
