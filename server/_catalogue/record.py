"""``{root}/__llog/topics/{name}``: one topic's catalogue record (SPEC 4.8).

Compact JSON, keys in this order::

    {"name": "orders", "topic_id": "<uuid>", "partitions": 12, "created_at_ms": 1760000000000,
     "state": "ACTIVE", "config": {"retention.ms": "604800000", ...}}

``state`` is ``ACTIVE`` or ``DELETING`` (deleted: invisible to produce and
consume, its partitions being removed); a ``DELETING`` record also has
``deleted_at_ms``. ``topic_id`` is new for every creation of a name, so
anything that remembers a topic can tell a re-created one from the old.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from .._errors import CorruptBatch, InvalidRequest
from .._protocol.records import dumps, loads
from .topic_config import TopicConfig

__all__ = ["TopicState", "TopicRecord"]


class TopicState(StrEnum):
    ACTIVE = "ACTIVE"
    DELETING = "DELETING"


@dataclass(frozen=True)
class TopicRecord:
    name: str
    topic_id: str
    partitions: int
    created_at_ms: int
    config: TopicConfig
    state: TopicState = TopicState.ACTIVE
    deleted_at_ms: int | None = None

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "name": self.name,
            "topic_id": self.topic_id,
            "partitions": self.partitions,
            "created_at_ms": self.created_at_ms,
            "state": self.state,
            "config": self.config.to_kafka(),
        }
        if self.deleted_at_ms is not None:
            doc["deleted_at_ms"] = self.deleted_at_ms
        return doc

    def encode(self) -> bytes:
        return dumps(self.to_json())

    @classmethod
    def decode(cls, raw: bytes) -> TopicRecord:
        doc = loads(raw, "topic")
        try:
            deleted = doc.get("deleted_at_ms")
            return cls(
                name=str(doc["name"]),
                topic_id=str(doc["topic_id"]),
                partitions=int(doc["partitions"]),
                created_at_ms=int(doc["created_at_ms"]),
                config=TopicConfig.from_kafka(doc.get("config") or {}),
                state=TopicState(doc["state"]),
                deleted_at_ms=None if deleted is None else int(deleted),
            )
        except (KeyError, TypeError, ValueError, InvalidRequest) as exc:
            raise CorruptBatch(f"unreadable topic record: {exc}") from exc
