"""Discovery: the logs initialized under one root (SPEC 7.8, 3.3).

A pass lists ``[{root}/, {root}/~/)`` on every shard (no partition key) and
keeps the canonical ``.../meta/control`` keys (``LogLayout.parse_control_key``:
a nested root, another root or a non-canonical partition number never
match). The service hands what it finds to the scheduler, which only ever
adds logs.
"""

from __future__ import annotations

import logging
from typing import Callable, Sequence

from .._errors import LlogError
from .._protocol.keys import LogLayout, TopicPartition
from .._storage.metastore import MetadataStore
from .._metrics import LlogMetrics
from .._runtime import REAL_RUNTIME, Runtime

__all__ = ["Discovery"]

log = logging.getLogger(__name__)

AddLogs = Callable[[set[TopicPartition]], Sequence[TopicPartition]]
"""Adds the logs found to the service's set and returns the ones that are new."""


class Discovery:
    """Discovery passes over one metadata store, with their metrics."""

    def __init__(
        self, meta: MetadataStore, layout: LogLayout, metrics: LlogMetrics, *, runtime: Runtime = REAL_RUNTIME,
    ) -> None:
        self._meta = meta
        self._clock = runtime.clock
        self._layout = layout
        self._metrics = metrics
        self.last_pass_ms: int | None = None
        """Wall-clock time of the last successful pass (``/health``)."""

    def list_logs(self) -> set[TopicPartition]:
        """Every initialized log under the root. Raises ``LlogError`` (and counts it)."""
        root = self._layout.root
        try:
            keys = self._meta.list_keys(f"{root}/", f"{root}/~/", partition_key=None)
        except LlogError:
            self._metrics.inc("compactor_discovery_passes_total", outcome="error")
            raise
        return {tp for tp in map(self._layout.parse_control_key, keys) if tp is not None}

    def run(self, add_logs: AddLogs) -> Sequence[TopicPartition]:
        """One pass: list the logs, hand them to ``add_logs``; return the new ones."""
        found = self.list_logs()
        new = add_logs(found)
        self.last_pass_ms = self._clock.now_ms()
        self._metrics.inc("compactor_discovery_passes_total", outcome="ok")
        self._metrics.inc("compactor_partitions_discovered_total", len(new))
        self._metrics.set_gauge("compactor_discovery_last_found", len(found))
        self._metrics.set_gauge("compactor_discovery_last_pass_timestamp_seconds", self.last_pass_ms / 1000)
        if new:
            log.info("discovery found %d new logs: %s", len(new), ", ".join(sorted(map(str, new))[:20]))
        return new
