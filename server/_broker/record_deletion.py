"""Deleting records through a broker: Kafka's DeleteRecords (SPEC 7.13).

A partition of a live topic (``BrokerTopics.live_partition``: an unknown topic
or a partition past its count is UnknownTopic) gets its log start moved by
``_log.log_start.delete_records``. This broker's consume service learns the new
start at once, so a fetch through it below the start is refused from the
answer on; another broker refuses it once it reads the control record again
(``LLOG_BROKER_LOG_START_REFRESH_MS``), as after retention.
"""

from __future__ import annotations

from typing import Any

from .._log.log_start import DeleteRecordsResult, delete_records
from .._protocol.keys import LogLayout
from .._runtime import Runtime
from .._storage.metastore import MetadataStore

__all__ = ["RecordDeletion"]


class RecordDeletion:
    """``delete(topic, partition, before)`` over the broker's stores and topic checks."""

    def __init__(self, meta: MetadataStore, layout: LogLayout, topics: Any, runtime: Runtime,
                 consume: Any = None) -> None:
        """``topics``: ``BrokerTopics``; ``consume``: the broker's consume service, if it has one."""
        self._meta, self._layout, self._topics, self._runtime = meta, layout, topics, runtime
        self._consume = consume

    def delete(self, topic: str, partition: int, before: int | None) -> DeleteRecordsResult:
        """Records below llog offset ``before`` (None: all there are now) made unreadable; an unknown
        topic or partition (a negative one too) is UnknownTopic."""
        tp = self._topics.live_partition(topic, partition)
        result = delete_records(self._meta, self._layout.keys(tp), before, runtime=self._runtime)
        if self._consume is not None:
            self._consume.saw_log_start(tp, result.log_start_offset)
        return result
