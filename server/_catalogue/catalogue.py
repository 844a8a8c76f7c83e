"""``TopicCatalogue``: create, describe, list, alter, add partitions and delete topics (SPEC 4.8).

Every change is one conditional write of the topic's record, so two admins
racing on one topic never both win: a create is a put that expects the key
absent, an alter or a partition increase a put that expects the version read
(re-read and retried on a conflict). A delete turns the record ``DELETING``
at once, which makes the topic invisible to produce and consume; the
compactor service retires its logs and, once vacuum has deleted their
data, removes the record (SPEC 7.11); a create of the name is refused until
the record is gone, and then revives the retired logs, whose offsets go on
past everything the deleted topic held.

Partitions of a new topic (or new partitions) are initialized through
``initialize`` (the writer's ``initialize_partition``) when one is given; one
left uninitialized by a crash is initialized by its first append.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Mapping

from .._errors import ConcurrencyConflict, TopicAlreadyExists, UnknownTopic, VersionConflict
from .._protocol.http_json import InvalidField
from .._protocol.keys import TOPICS_PARTITION_KEY, LogLayout, TopicPartition, validate_topic
from .._runtime import REAL_RUNTIME, Runtime
from .._storage.metastore import EXPECT_ABSENT, MetadataStore
from .record import TopicRecord, TopicState
from .topic_config import TopicDefaults

__all__ = ["TopicCatalogue", "MAX_PARTITIONS"]

MAX_PARTITIONS = 100_000
_CAS_ATTEMPTS = 20

Initializer = Callable[[TopicPartition], object]


class TopicCatalogue:
    """The topics of one root. Thread-safe (every method is a few store calls)."""

    def __init__(
        self,
        meta: MetadataStore,
        layout: LogLayout,
        *,
        defaults: TopicDefaults | None = None,
        initialize: Initializer | None = None,
        revive: Initializer | None = None,
        runtime: Runtime = REAL_RUNTIME,
    ) -> None:
        """``initialize``: initializes a new log (the writer's ``initialize_partition``);
        ``revive``: revives a log a deleted topic of the name left retired (SPEC 7.11,
        ``server._log.retire.revive_log``)."""
        self._meta = meta
        self.layout = layout
        self.defaults = defaults or TopicDefaults()
        self._initialize = initialize
        self._revive = revive
        self.runtime = runtime

    # -- reading -----------------------------------------------------------------------------------
    def get(self, name: str, *, include_deleting: bool = False) -> TopicRecord | None:
        """The topic's record; None if it does not exist (or is being deleted, unless asked)."""
        rec = self._meta.get(self.layout.topic_record(name), TOPICS_PARTITION_KEY)
        if rec is None:
            return None
        topic = TopicRecord.decode(rec.value)
        return topic if include_deleting or topic.state is TopicState.ACTIVE else None

    def describe(self, name: str) -> TopicRecord:
        """The topic's record; UnknownTopic if there is no such (live) topic."""
        topic = self.get(name)
        if topic is None:
            raise UnknownTopic(f"unknown topic {name!r}", topic=name)
        return topic

    def list(self, *, include_deleting: bool = False) -> list[TopicRecord]:
        """Every topic, by name."""
        prefix = self.layout.topics_prefix
        out = []
        for rec in self._meta.range_scan(prefix, prefix + "~", TOPICS_PARTITION_KEY):
            if self.layout.parse_topic_key(rec.key) is None:
                continue  # a CEILING-style neighbour of another prefix, or a malformed key
            topic = TopicRecord.decode(rec.value)
            if include_deleting or topic.state is TopicState.ACTIVE:
                out.append(topic)
        return sorted(out, key=lambda t: t.name)

    def initialized_partitions(self, name: str) -> list[int]:
        """The partitions of ``name`` that have a ``meta/control`` key (one listing over every shard):
        what a log written without the catalogue has."""
        head = f"{self.layout.root}/{validate_topic(name)}/partitions/"
        out = []
        for key in self._meta.list_keys(head, head + "~/", partition_key=None):
            parts = key[len(head):].split("/")
            if len(parts) == 3 and parts[1:] == ["meta", "control"] and parts[0].isascii() and parts[0].isdigit():
                out.append(int(parts[0]))
        return out

    def check_partition(self, name: str, partition: int) -> TopicRecord:
        """The topic's record if ``partition`` is one of its partitions, else UnknownTopic naming the count."""
        topic = self.describe(name)
        if not 0 <= partition < topic.partitions:
            raise UnknownTopic(f"topic {name!r} has {topic.partitions} partition"
                               f"{'s' if topic.partitions != 1 else ''} (0-{topic.partitions - 1}), "
                               f"not partition {partition}", topic=name, partition=partition)
        return topic

    # -- changing ------------------------------------------------------------------------------------
    def create(self, name: str, partitions: int | None = None,
               config: Mapping[str, Any] | None = None) -> TopicRecord:
        """Create ``name`` with ``partitions`` (the default count when None) and
        ``config`` (Kafka's keys, over the defaults). TopicAlreadyExists if it exists
        or is still being deleted."""
        validate_topic(name)
        count = self.defaults.partitions if partitions is None else _check_count(partitions, "partitions")
        topic = TopicRecord(
            name=name, topic_id=str(self.runtime.ids.uuid4()), partitions=count,
            created_at_ms=self.runtime.clock.now_ms(), config=self.defaults.config.altered(config or {}),
        )
        try:
            self._meta.put(self.layout.topic_record(name), topic.encode(), TOPICS_PARTITION_KEY,
                           expected_version=EXPECT_ABSENT)
        except VersionConflict:
            existing = self.get(name, include_deleting=True)
            if existing is not None and existing.state is TopicState.DELETING:
                raise TopicAlreadyExists(f"topic {name!r} is still being deleted; create it again once it is gone",
                                         topic=name) from None
            raise TopicAlreadyExists(f"topic {name!r} already exists", topic=name) from None
        self._init_partitions(name, range(count))
        return topic

    def alter_config(self, name: str, changes: Mapping[str, Any]) -> TopicRecord:
        """Apply ``changes`` (Kafka key -> value; None restores the default) to the topic's config."""
        if not changes:
            raise InvalidField("config: give at least one key to change", "config", topic=name)
        return self._update(name, lambda t: replace(t, config=t.config.altered(changes)))

    def add_partitions(self, name: str, total: int) -> TopicRecord:
        """Grow the topic to ``total`` partitions (Kafka's CreatePartitions: counts only grow)."""
        _check_count(total, "partitions")

        def grow(t: TopicRecord) -> TopicRecord:
            if total <= t.partitions:
                raise InvalidField(f"partitions: topic {name!r} has {t.partitions}; a new count must be larger, "
                                   f"got {total}", "partitions", topic=name)
            return replace(t, partitions=total)

        before = self.describe(name).partitions
        topic = self._update(name, grow)
        self._init_partitions(name, range(before, topic.partitions))
        return topic

    def delete(self, name: str) -> TopicRecord:
        """Mark the topic ``DELETING``: from now on produce and consume answer UnknownTopic;
        its partitions and then its record are removed in the background."""
        now = self.runtime.clock.now_ms()
        return self._update(name, lambda t: replace(t, state=TopicState.DELETING, deleted_at_ms=now))

    def forget(self, topic: TopicRecord) -> bool:
        """Remove a ``DELETING`` topic's record once its partitions are gone (the name can be created
        again). False if the record is not that deletion any more."""
        key = self.layout.topic_record(topic.name)
        rec = self._meta.get(key, TOPICS_PARTITION_KEY)
        if rec is None:
            return False
        current = TopicRecord.decode(rec.value)
        if current.topic_id != topic.topic_id or current.state is not TopicState.DELETING:
            return False
        try:
            return self._meta.delete(key, TOPICS_PARTITION_KEY, expected_version=rec.version)
        except VersionConflict:
            return False

    # -- internals -------------------------------------------------------------------------------------
    def _update(self, name: str, change: Callable[[TopicRecord], TopicRecord]) -> TopicRecord:
        key = self.layout.topic_record(name)
        for _ in range(_CAS_ATTEMPTS):
            rec = self._meta.get(key, TOPICS_PARTITION_KEY)
            topic = None if rec is None else TopicRecord.decode(rec.value)
            if topic is None or topic.state is not TopicState.ACTIVE:
                raise UnknownTopic(f"unknown topic {name!r}", topic=name)
            updated = change(topic)
            try:
                self._meta.put(key, updated.encode(), TOPICS_PARTITION_KEY, expected_version=rec.version)
            except VersionConflict:
                continue
            return updated
        raise ConcurrencyConflict(f"topic {name!r} kept changing under {_CAS_ATTEMPTS} attempts", topic=name)

    def _init_partitions(self, name: str, partitions: range) -> None:
        """Initialize the topic's new logs, and revive those a deleted topic of the name
        left retired (SPEC 7.11): their offsets go on past everything the old topic held."""
        for p in partitions:
            tp = TopicPartition(name, p)
            if self._initialize is not None:
                self._initialize(tp)
            if self._revive is not None:
                self._revive(tp)


def _check_count(value: object, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_PARTITIONS:
        raise InvalidField(f"{field} must be an integer 1..{MAX_PARTITIONS}, got {value!r}", field)
    return value


