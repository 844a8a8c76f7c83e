"""What a writer knows about its own last pending append per log (SPEC 7.3).

After a writer's index create (C4) succeeds, its pending append is
materialized for good: an index key is only ever deleted under a COMPACTED
entry that covers it. The writer leaves that pending in ``meta/control`` and
its next reservation replaces it without touching the index again. It only
has to remember which pending that was, and whether its C4 *created* the
key: such a create may have been a late materialization (SPEC 7.2) until
something shows the pending was still in the control record after it.
"""

from __future__ import annotations

import logging
import threading
from typing import NamedTuple

from .._errors import LlogError
from .._metrics import LlogMetrics
from .._protocol.keys import PartitionKeys, TopicPartition
from .._protocol.records import ControlRecord, PendingAppend
from .._storage.metastore import MetadataStore
from . import recovery

__all__ = ["OwnPending", "OwnPendings"]

log = logging.getLogger(__name__)


class OwnPending(NamedTuple):
    """The writer's last append to a log, once its index create (C4) succeeded."""

    pending: PendingAppend
    """The pending append our reservation wrote: known to be materialized."""
    created_version: int | None
    """The version of the index key our C4 *created*, until something shows
    the create was not a late materialization (SPEC 7.2); None once it is
    known not to be, or when C4 found the key already there."""


class OwnPendings:
    """Per log, the writer's own materialized pending. Thread-safe."""

    def __init__(self, metrics: LlogMetrics) -> None:
        self._metrics = metrics
        self._lock = threading.Lock()
        self._by_tp: dict[TopicPartition, OwnPending] = {}

    def get(self, tp: TopicPartition) -> OwnPending | None:
        with self._lock:
            return self._by_tp.get(tp)

    def items(self) -> list[tuple[TopicPartition, OwnPending]]:
        with self._lock:
            return list(self._by_tp.items())

    def remember(self, tp: TopicPartition, pending: PendingAppend, created_version: int | None) -> None:
        with self._lock:
            self._by_tp[tp] = OwnPending(pending, created_version)

    def drop(self, tp: TopicPartition) -> None:
        with self._lock:
            self._by_tp.pop(tp, None)

    def is_materialized(self, tp: TopicPartition, pending: PendingAppend) -> bool:
        """True if ``pending`` is our last append to ``tp`` and its C4 succeeded."""
        own = self.get(tp)
        return own is not None and own.pending.append_id == pending.append_id

    def settle(self, store: MetadataStore, keys: PartitionKeys, control: ControlRecord) -> None:
        """Learn from a fresh control read whether our last C4 could have been
        a late materialization: not if the control still holds that pending
        (while a pending is in the control record no compaction deletes its
        key, SPEC 7.7 K1). If another process replaced it, run the clean-up
        check of 7.2 on the key our C4 created (the C5-conflict rule of 7.3,
        deferred to this moment)."""
        tp = keys.tp
        with self._lock:
            own = self._by_tp.get(tp)
            if own is None:
                return
            if control.pending is not None and control.pending.append_id == own.pending.append_id:
                if own.created_version is not None:
                    self._by_tp[tp] = own._replace(created_version=None)
                return
            del self._by_tp[tp]
        if own.created_version is None:
            return
        try:
            if recovery.drop_if_redundant(store, keys, own.pending, own.created_version):
                self._metrics.inc("writer_redundant_entries_dropped_total")
        except LlogError as exc:  # vacuum deletes redundant entries too (SPEC 7.9)
            log.warning("clean-up check of %s..%s of %s failed: %s",
                        own.pending.start_offset, own.pending.end_offset, tp, exc)
