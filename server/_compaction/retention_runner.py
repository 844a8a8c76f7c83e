"""The compactor service's retention (SPEC 7.10) and topic removal (7.11): a pass every interval.

A pass reads each topic's record from the catalogue once (its
``retention.ms`` and ``retention.bytes``; a log with no topic record, a
library user's, keeps everything), the control records and cursors of its
logs 16 to an Oxia request with their stored bytes (``StoredSizes``, kept
between passes: an index is read again only past what can have changed),
and applies :func:`~server._compaction.retention.retain` to each.
A failed log is logged and left for the next pass. The gauges say, per
log, where its start is and what it holds. The same pass removes deleted
topics (``topic_removal.py``) and exports each consumer group's lag per log
(``consumer_group_lag``).
"""

from __future__ import annotations

import logging
import threading
from typing import Callable, Sequence

from .._catalogue.catalogue import TopicCatalogue
from .._catalogue.topic_config import TopicConfig
from .._errors import LlogError
from .._groups.offsets import GroupOffsets, describe
from .._log.stored import StoredHead, StoredSizes
from .._protocol.keys import LogLayout, TopicPartition
from .._storage.metastore import MetadataStore
from .._metrics import LlogMetrics
from .._runtime import REAL_RUNTIME, RandomSource, Runtime
from .periodic import PeriodicPass
from .retention import RetentionOutcome, RetentionResult, retain
from .topic_removal import remove_deleted_topics

__all__ = ["RetentionRunner"]

log = logging.getLogger(__name__)


class RetentionRunner(PeriodicPass):
    """``run_once()`` on demand, or every ``interval_ms`` on ``llog-compactor-retention`` (0: on demand only)."""

    def __init__(
        self, meta: MetadataStore, layout: LogLayout, partitions: Callable[[], Sequence[TopicPartition]],
        interval_ms: int, stop: threading.Event, rng: RandomSource, metrics: LlogMetrics,
        runtime: Runtime = REAL_RUNTIME, grace_ms: int = 150_000,
    ) -> None:
        self._meta = meta
        self._layout = layout
        self._catalogue = TopicCatalogue(meta, layout, runtime=runtime)
        self._groups = GroupOffsets(meta, layout, runtime=runtime)
        self._partitions = partitions
        self._sizes = StoredSizes(meta)
        super().__init__("llog-compactor-retention", interval_ms, stop, rng)
        self._metrics = metrics
        self._runtime = runtime
        self._grace_ms = grace_ms
        """Vacuum's grace: a deleted topic's logs are retired this long after the delete."""

    def _export_lag(self) -> None:
        """``consumer_group_lag`` of every group's committed offsets (the pass already scans Oxia)."""
        for group in self._groups.groups():
            try:
                rows = describe(self._groups, group)
            except LlogError as exc:
                log.warning("consumer group %s: lag not read: %s", group, exc)
                continue
            for r in rows:
                self._metrics.set_gauge("consumer_group_lag", r.lag, group=group, topic=r.tp.topic,
                                        partition=str(r.tp.partition))

    def _failed(self, tp: TopicPartition, exc: LlogError) -> None:
        """A log this pass leaves for the next."""
        log.warning("retention of %s failed: %s", tp, exc)
        self._metrics.inc("retention_errors_total")

    def _logs(self) -> list[tuple[TopicPartition, TopicConfig, StoredHead | None]]:
        """Every known log of a topic with a record, with its config and head; a log whose reads
        failed is logged and left for the next pass."""
        configs: dict[str, TopicConfig | None] = {}
        logs: list[tuple[TopicPartition, TopicConfig]] = []
        for tp in self._partitions():
            try:
                if tp.topic not in configs:
                    record = self._catalogue.get(tp.topic)
                    configs[tp.topic] = None if record is None else record.config
            except LlogError as exc:
                self._failed(tp, exc)
                continue
            config = configs[tp.topic]
            if config is not None:
                logs.append((tp, config))
        try:
            heads = self._sizes.heads([self._layout.keys(tp) for tp, _ in logs])
        except LlogError:  # one log at a time, so a log that fails is the only one left out
            out = []
            for tp, config in logs:
                try:
                    out.append((tp, config, self._sizes.heads([self._layout.keys(tp)])[0]))
                except LlogError as exc:
                    self._failed(tp, exc)
            return out
        return [(tp, config, head) for (tp, config), head in zip(logs, heads)]

    def run_once(self) -> list[RetentionResult]:
        """One pass over every known log; never raises."""
        started = self._runtime.clock.perf_counter()
        try:
            return self._pass()
        finally:
            self._metrics.observe("retention_pass_seconds", self._runtime.clock.perf_counter() - started)

    def _pass(self) -> list[RetentionResult]:
        results: list[RetentionResult] = []
        for tp, config, head in self._logs():
            try:
                result = retain(self._meta, self._layout.keys(tp), config, head, runtime=self._runtime,
                                metrics=self._metrics)
            except LlogError as exc:
                self._failed(tp, exc)
                continue
            results.append(result)
            if result.outcome is RetentionOutcome.MISSING:
                continue
            self._metrics.set_gauge("log_start_offset", result.log_start_offset, topic=tp.topic,
                                    partition=str(tp.partition))
            self._metrics.set_gauge("log_retained_bytes", result.retained_bytes, topic=tp.topic,
                                    partition=str(tp.partition))
            if result.outcome is RetentionOutcome.ADVANCED:
                log.info("retention: %s starts at %d (was %d), %d bytes let go", tp, result.log_start_offset,
                         result.previous_log_start, result.dropped_bytes)
        self._metrics.inc("retention_passes_total")
        self._export_lag()
        try:
            remove_deleted_topics(self._meta, self._layout, self._catalogue, self._grace_ms,
                                  runtime=self._runtime, metrics=self._metrics)
        except LlogError as exc:
            log.warning("removing deleted topics failed: %s", exc)
            self._metrics.inc("retention_errors_total")
        return results
