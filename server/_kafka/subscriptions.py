"""Which topics a consumer group's members subscribe to (OffsetDelete's check).

A member of a ``consumer`` group sends a ``ConsumerProtocolSubscription`` as
its protocol metadata (topics first in every version; decoded by
kafka-python's class generated from Kafka's schema). Kafka refuses to delete
a committed offset of a topic an active member subscribes to
(GROUP_SUBSCRIBED_TO_TOPIC), and when it cannot tell (no protocol chosen
yet, a subscription it cannot read) it counts every topic as subscribed:
an offset a running consumer may still commit is never deleted under it.
"""

from __future__ import annotations

from typing import Iterable

from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription

__all__ = ["EVERY_TOPIC", "subscribed_topics"]

EVERY_TOPIC = None
"""What :func:`subscribed_topics` answers when it cannot tell."""


def subscribed_topics(protocol: str | None, members: Iterable[list[tuple[str, bytes]]]) -> frozenset[str] | None:
    """The union of the members' subscribed topics under the group's chosen ``protocol``
    (each member's ``(protocol name, metadata)`` list); ``EVERY_TOPIC`` when unknown."""
    topics: set[str] = set()
    for protocols in members:
        metadata = dict(protocols).get(protocol) if protocol is not None else None
        if metadata is None:
            return EVERY_TOPIC
        try:
            topics.update(ConsumerProtocolSubscription.decode(bytes(metadata)).topics)
        except Exception:  # noqa: BLE001 - any undecodable subscription means "cannot tell"
            return EVERY_TOPIC
    return frozenset(topics)
