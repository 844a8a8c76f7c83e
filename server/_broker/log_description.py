"""Describing a partition's log through a broker: what it stores, and who writes it.

Kafka's DescribeLogDirs (``kafka-log-dirs``, the topic sizes of Kafka UIs)
asks a broker for the size of the logs it holds; DescribeProducers
(``kafka-transactions describe-producers``) for the idempotent producers of a
partition. Both are read from Oxia for a partition of a live topic
(``BrokerTopics.live_partition``: an unknown topic or a partition past its
count is UnknownTopic): the size as retention counts it (``_log.stored``),
the producers from ``meta/control`` (SPEC 7.12). A partition whose log is not
initialized yet stores nothing and has no producers.
"""

from __future__ import annotations

from typing import Any, Sequence

from .._log.stored import StoredSizes
from .._protocol.keys import LogLayout
from .._protocol.producer_state import NO_PRODUCERS, ProducerStates
from .._protocol.records import ControlRecord
from .._storage.metastore import MetadataStore

__all__ = ["LogDescriptions"]


class LogDescriptions:
    """``stored_bytes`` of many topic-partitions and ``producers`` of one, over the broker's stores and topic checks."""

    def __init__(self, meta: MetadataStore, layout: LogLayout, topics: Any, location: str) -> None:
        """``topics``: ``BrokerTopics``; ``location``: where the logs are stored (``s3://bucket/root``)."""
        self._meta, self._layout, self._topics = meta, layout, topics
        self._sizes = StoredSizes(meta)
        self.location = location

    def stored_bytes(self, partitions: Sequence[tuple[str, int]]) -> list[int]:
        """Bytes each ``(topic, partition)``'s log stores from its start on, in order
        (``StoredSizes``); UnknownTopic when one is not a partition of a live topic."""
        return self._sizes.sizes([self._layout.keys(self._topics.live_partition(t, p)) for t, p in partitions])

    def producers(self, topic: str, partition: int) -> ProducerStates:
        """The idempotent producers the partition's log keeps state for, by producer id."""
        keys = self._layout.keys(self._topics.live_partition(topic, partition))
        rec = self._meta.get(keys.control, keys.partition_key)
        return NO_PRODUCERS if rec is None else ControlRecord.decode(rec.value).producers

