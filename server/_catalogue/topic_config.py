"""A topic's config, by Kafka's names, and the defaults a new topic gets.

Values are validated where they enter (HTTP, the console script, the
library), and an error names the config key: ``retention.ms must be an
integer >= -1, got 'soon'``. ``-1`` means unlimited, as in Kafka.

Five keys take effect: ``retention.ms``, ``retention.bytes``,
``message.timestamp.type``, ``max.message.bytes`` and ``cleanup.policy``
(``delete``; ``compact`` keeps every record: llog has no key compaction, so
a compacted topic's readers see every version of a key, as Kafka's do
before its cleaner runs, and retention lets nothing go; ``compact,delete``
retains as ``delete``). Kafka's other topic configs (:data:`KEPT_KEYS`:
segments, replicas, flushes, the cleaner's tuning) are accepted and kept
as given, so the scripts, Kafka Streams and Connect that set them work, and
act on nothing: S3 holds the bytes, the WAL has no segments. A key Kafka
does not know is refused, so a typo is not taken silently.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any, Mapping

from .._protocol.http_json import InvalidField
from .._settings import check_settings, from_env, setting

__all__ = ["TopicConfig", "TopicDefaults", "CREATE_TIME", "LOG_APPEND_TIME", "KNOWN_KEYS", "KEPT_KEYS"]

CREATE_TIME = "CreateTime"
LOG_APPEND_TIME = "LogAppendTime"
_TIMESTAMP_TYPES = (CREATE_TIME, LOG_APPEND_TIME)
_POLICIES = {"delete": "delete", "compact": "compact", "compact,delete": "compact,delete",
             "delete,compact": "compact,delete"}
"""``cleanup.policy`` as written (Kafka takes a list, in either order) -> as kept."""
_INT_MAX = 2**31 - 1
_LONG_MAX = 2**63 - 1


@dataclass(frozen=True)
class TopicConfig:
    """One topic's config. ``to_kafka`` / ``from_kafka`` use Kafka's key names."""

    retention_ms: int = 7 * 24 * 3600 * 1000
    """Compacted ranges whose newest record is older than this are dropped; -1 keeps them."""
    retention_bytes: int = -1
    """A partition keeps dropping its oldest compacted ranges while it holds more; -1: no limit."""
    message_timestamp_type: str = CREATE_TIME
    """``CreateTime`` keeps the producer's timestamps; ``LogAppendTime`` sets the broker's."""
    max_message_bytes: int = 1_048_588
    """The largest batch (Kafka) or record (HTTP) a produce may carry."""
    cleanup_policy: str = "delete"
    """``delete``: retention applies; ``compact``: every record is kept (no key compaction)."""
    kept: tuple[tuple[str, str], ...] = ()
    """Kafka's other topic configs set on the topic (:data:`KEPT_KEYS`), sorted: kept, not applied."""

    def __post_init__(self) -> None:
        for name, low, high in (("retention_ms", -1, _LONG_MAX), ("retention_bytes", -1, _LONG_MAX),
                                ("max_message_bytes", 0, _INT_MAX)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise InvalidField(f"{_KEY[name]} must be an integer {low}..{high}, got {value!r}",
                                   f"config.{_KEY[name]}")
        if self.message_timestamp_type not in _TIMESTAMP_TYPES:
            raise InvalidField(f"message.timestamp.type must be one of {', '.join(_TIMESTAMP_TYPES)}, "
                               f"got {self.message_timestamp_type!r}", "config.message.timestamp.type")
        if self.cleanup_policy not in _POLICIES.values():
            raise InvalidField(f"cleanup.policy must be delete, compact or compact,delete, got "
                               f"{self.cleanup_policy!r}", "config.cleanup.policy")

    @property
    def retains(self) -> bool:
        """Whether retention lets records go (``cleanup.policy`` includes ``delete``)."""
        return "delete" in self.cleanup_policy

    def to_kafka(self) -> dict[str, str]:
        """``{"retention.ms": "604800000", ...}``: Kafka's names, values as strings; the kept keys last."""
        return {**{_KEY[f.name]: str(getattr(self, f.name)) for f in fields(self) if f.name in _KEY},
                **dict(self.kept)}

    def altered(self, changes: Mapping[str, Any]) -> TopicConfig:
        """This config with ``changes`` (Kafka key -> value, str or int) applied and checked;
        a value of None restores the key's default."""
        updates: dict[str, Any] = {}
        kept = dict(self.kept)
        for key, value in changes.items():
            name = _FIELD.get(key) if isinstance(key, str) else None
            if name is None and key in KEPT_KEYS:
                if value is None:
                    kept.pop(key, None)
                else:
                    kept[key] = _kept_value(key, value)
                continue
            if name is None:
                raise InvalidField(f"unknown topic config {key!r}: llog applies {', '.join(KNOWN_KEYS)} and keeps "
                                   "Kafka's other topic configs without acting on them", f"config.{key}")
            updates[name] = getattr(TopicConfig, name) if value is None else _parse(key, name, value)
        return replace(self, **updates, kept=tuple(sorted(kept.items())))

    @classmethod
    def from_kafka(cls, doc: Mapping[str, Any], base: TopicConfig | None = None) -> TopicConfig:
        return (base or cls()).altered(doc)


def _parse(key: str, name: str, value: Any) -> Any:
    if name == "cleanup_policy":
        text = value.replace(" ", "").lower() if isinstance(value, str) else value
        return _POLICIES.get(text, value)  # anything else is refused by the check
    if name == "message_timestamp_type":
        return value
    if isinstance(value, bool):
        raise InvalidField(f"{key} must be an integer, got {value!r}", f"config.{key}")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    raise InvalidField(f"{key} must be an integer, got {value!r}", f"config.{key}")


def _kept_value(key: str, value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int)) or not str(value).strip():
        raise InvalidField(f"{key} must be a string or an integer, got {value!r}", f"config.{key}")
    return str(value).strip()


_KEY = {
    "retention_ms": "retention.ms",
    "retention_bytes": "retention.bytes",
    "message_timestamp_type": "message.timestamp.type",
    "max_message_bytes": "max.message.bytes",
    "cleanup_policy": "cleanup.policy",
}
_FIELD = {v: k for k, v in _KEY.items()}
KNOWN_KEYS = tuple(_KEY.values())
"""The topic configs llog applies."""
KEPT_KEYS = frozenset((
    "compression.type", "compression.gzip.level", "compression.lz4.level", "compression.zstd.level",
    "delete.retention.ms", "file.delete.delay.ms", "flush.messages", "flush.ms",
    "follower.replication.throttled.replicas", "leader.replication.throttled.replicas", "index.interval.bytes",
    "local.retention.bytes", "local.retention.ms", "max.compaction.lag.ms", "min.compaction.lag.ms",
    "min.cleanable.dirty.ratio", "message.downconversion.enable", "message.format.version",
    "message.timestamp.after.max.ms", "message.timestamp.before.max.ms", "message.timestamp.difference.max.ms",
    "min.insync.replicas", "preallocate", "remote.log.copy.disable", "remote.log.delete.on.disable",
    "remote.storage.enable", "segment.bytes", "segment.index.bytes", "segment.jitter.ms", "segment.ms",
    "unclean.leader.election.enable",
))
"""Kafka 4.1's other topic configs (and three of 3.x): accepted and kept, not applied (module docstring)."""


@dataclass(frozen=True)
class TopicDefaults:
    """What a topic gets when its creator does not say (``LLOG_TOPIC_DEFAULT_*``), and auto-creation."""

    partitions: int = setting("Partitions of a topic created without a count (Kafka's num.partitions).",
                              env="LLOG_TOPIC_DEFAULT_PARTITIONS", default=1, min=1, max=100_000)
    retention_ms: int = setting("retention.ms of a new topic; -1 keeps records forever.",
                                env="LLOG_TOPIC_DEFAULT_RETENTION_MS", default=TopicConfig.retention_ms, min=-1)
    retention_bytes: int = setting("retention.bytes of a new topic (per partition); -1: no limit.",
                                   env="LLOG_TOPIC_DEFAULT_RETENTION_BYTES", default=-1, min=-1)
    message_timestamp_type: str = setting("message.timestamp.type of a new topic.",
                                          env="LLOG_TOPIC_DEFAULT_TIMESTAMP_TYPE", default=CREATE_TIME,
                                          choices=_TIMESTAMP_TYPES)
    max_message_bytes: int = setting("max.message.bytes of a new topic.", env="LLOG_TOPIC_DEFAULT_MAX_MESSAGE_BYTES",
                                     default=TopicConfig.max_message_bytes, min=0, max=_INT_MAX)
    auto_create: bool = setting("Create a topic on the first produce to it (Kafka's auto.create.topics.enable); "
                                "0 answers an unknown topic with an error.",
                                env="LLOG_AUTO_CREATE_TOPICS", default=True)

    def __post_init__(self) -> None:
        check_settings(self)

    @property
    def config(self) -> TopicConfig:
        return TopicConfig(self.retention_ms, self.retention_bytes, self.message_timestamp_type,
                           self.max_message_bytes)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> TopicDefaults:
        return from_env(cls, env)
