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

from concurrent.futures import ThreadPoolExecutor
from typing import Any, Sequence

from .._log.stored import read_stored_many
from .._protocol.keys import LogLayout
from .._protocol.producer_state import NO_PRODUCERS, ProducerStates
from .._protocol.records import ControlRecord
from .._storage.metastore import MetadataStore

__all__ = ["LogDescriptions"]

_CHUNK = 16
_SCANS = 8


class LogDescriptions:
    """``stored_bytes`` of a topic's partitions and ``producers`` of one, over the broker's stores and topic checks."""

    def __init__(self, meta: MetadataStore, layout: LogLayout, topics: Any, location: str) -> None:
        """``topics``: ``BrokerTopics``; ``location``: where the logs are stored (``s3://bucket/root``)."""
        self._meta, self._layout, self._topics = meta, layout, topics
        self.location = location

    def stored_bytes(self, topic: str, partitions: Sequence[int]) -> list[int]:
        """Bytes each partition's log stores from its start on, in order (their control records and
        cursors read in one Oxia request); UnknownTopic when one is not a partition of a live topic."""
        keys = [self._layout.keys(self._topics.live_partition(topic, p)) for p in partitions]
        chunks = [keys[i:i + _CHUNK] for i in range(0, len(keys), _CHUNK)]
        if len(chunks) <= 1:
            read = [read_stored_many(self._meta, chunk) for chunk in chunks]
        else:
            with ThreadPoolExecutor(min(len(chunks), _SCANS), thread_name_prefix="llog-log-dirs") as pool:
                read = list(pool.map(lambda chunk: read_stored_many(self._meta, chunk), chunks))
        return [0 if stored is None else stored.total_bytes for chunk in read for stored in chunk]

    def producers(self, topic: str, partition: int) -> ProducerStates:
        """The idempotent producers the partition's log keeps state for, by producer id."""
        keys = self._layout.keys(self._topics.live_partition(topic, partition))
        rec = self._meta.get(keys.control, keys.partition_key)
        return NO_PRODUCERS if rec is None else ControlRecord.decode(rec.value).producers

