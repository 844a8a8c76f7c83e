"""Removing deleted topics in the background (SPEC 7.11).

A deleted topic's record is ``DELETING`` from the moment of the delete
(``deleted_at_ms``); produce and consume answer "unknown topic" at once. A
pass of the compactor service then, for each such topic:

1. one grace period ``G`` after the delete (every append or compaction that
   began before it has finished or given up by then: SPEC 7.0), retires each
   of its logs (``server/_log/retire.py``): fenced, the start at the
   counter, the cursor moved there; vacuum then deletes every index entry
   and object of the log a grace period after the retirement;
2. once every log is retired and holds no index entry any more, removes the
   record, and the name can be created again (its logs are revived, their
   offsets going on past everything the old topic held).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from .._groups.offsets import GroupOffsets
from .._catalogue.catalogue import TopicCatalogue
from .._catalogue.record import TopicRecord, TopicState
from .._log.retire import retire_log
from .._protocol.keys import LogLayout, TopicPartition
from .._storage.metastore import MetadataStore
from .._metrics import LlogMetrics
from .._runtime import REAL_RUNTIME, Runtime

__all__ = ["TopicRemoval", "remove_deleted_topics"]


log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TopicRemoval:
    topic: str
    retired: int
    """Logs retired (of the topic's count)."""
    partitions: int
    forgotten: bool
    """The record is gone: the name can be created again."""


def remove_deleted_topics(
    meta: MetadataStore, layout: LogLayout, catalogue: TopicCatalogue, grace_ms: int, *,
    runtime: Runtime = REAL_RUNTIME, metrics: LlogMetrics | None = None,
) -> list[TopicRemoval]:
    """One pass over every ``DELETING`` topic (see the module docstring)."""
    now = runtime.clock.now_ms()
    out = []
    for topic in catalogue.list(include_deleting=True):
        if topic.state is not TopicState.DELETING or now - (topic.deleted_at_ms or 0) < grace_ms:
            continue
        out.append(_remove(meta, layout, catalogue, topic, now))
        if metrics is not None and out[-1].forgotten:
            metrics.inc("topics_removed_total")
    return out


def _remove(meta: MetadataStore, layout: LogLayout, catalogue: TopicCatalogue, topic: TopicRecord,
            now: int) -> TopicRemoval:
    retired = 0
    empty = True
    for p in range(topic.partitions):
        keys = layout.keys(TopicPartition(topic.name, p))
        if meta.get(keys.control, keys.partition_key) is None:
            retired += 1  # never initialized: nothing to remove
            continue
        if retire_log(meta, keys, now):
            retired += 1
        if next(iter(meta.range_scan(keys.index_prefix, keys.index_end, keys.partition_key)), None) is not None:
            empty = False  # vacuum has not deleted its entries yet
    if retired == topic.partitions:
        GroupOffsets(meta, layout).delete_topic(topic.name)  # the groups' positions in it go with it
    forgotten = retired == topic.partitions and empty and catalogue.forget(topic)
    if forgotten:
        log.info("topic %s removed: %d logs retired and emptied; the name can be created again",
                 topic.name, topic.partitions)
    return TopicRemoval(topic.name, retired, topic.partitions, forgotten)
