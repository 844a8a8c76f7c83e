"""Retire and revive a log: what deleting a topic and creating its name again do to each partition (SPEC 7.11).

**Retire** (a deleted topic, one grace period after its delete): one
conditional write of ``meta/control`` fences the log and moves its start to
the counter ``S``: nothing can be appended and nothing is readable. A
pending append is materialized first and cleared, as a fence does (7.6).
Compaction goes on below the start as it would (its cursor is its own), and
vacuum deletes every index entry below ``min(start, cursor)`` and then
their objects a grace period later (7.9), so the log empties as compaction
catches up with it. The control record and the cursor stay: they remember
``S``.

**Revive** (the name created again): a retired log (FENCED, start = ``S``)
is set OPEN. Its offsets go on from ``S``: everything the old topic held
lies below the start, so the new topic shows none of it, and a stalled
writer of the old topic that creates an index entry late (7.2) creates it
below the start, where no reader looks and vacuum deletes it.
"""

from __future__ import annotations

from dataclasses import replace

from .._errors import VersionConflict
from .._protocol.keys import PartitionKeys
from .._protocol.producer_state import NO_PRODUCERS
from .._protocol.records import ControlRecord, LogState
from .._storage.metastore import MetadataStore
from . import recovery

__all__ = ["is_retired", "retire_log", "revive_log"]

_ATTEMPTS = 20


def is_retired(control: ControlRecord) -> bool:
    """FENCED with its start at the counter: a deleted topic's log."""
    return control.fenced and control.log_start_offset == control.sequence_counter


def retire_log(meta: MetadataStore, keys: PartitionKeys, now_ms: int) -> bool:
    """Fence the log with its start at its counter; True once it is retired (False: not initialized)."""
    for _ in range(_ATTEMPTS):
        rec = meta.get(keys.control, keys.partition_key)
        if rec is None:
            return False
        control = ControlRecord.decode(rec.value)
        if is_retired(control):
            return True
        if control.pending is not None:
            recovery.materialize_pending(meta, keys, control.pending)
        # The topic's producers go with it: a batch sent to the name created
        # again is no duplicate of one the old topic held.
        retired = replace(control, log_state=LogState.FENCED, pending=None, producers=NO_PRODUCERS,
                          log_start_offset=control.sequence_counter, log_start_at_ms=now_ms)
        try:
            meta.put(keys.control, retired.encode(), keys.partition_key, expected_version=rec.version)
            return True
        except VersionConflict:
            continue
    return False


def revive_log(meta: MetadataStore, keys: PartitionKeys) -> bool:
    """Set a retired log OPEN again (its offsets go on from its start); True if it was retired."""
    for _ in range(_ATTEMPTS):
        rec = meta.get(keys.control, keys.partition_key)
        if rec is None:
            return False
        control = ControlRecord.decode(rec.value)
        if not is_retired(control):
            return False
        try:
            meta.put(keys.control, replace(control, log_state=LogState.OPEN).encode(), keys.partition_key,
                     expected_version=rec.version)
            return True
        except VersionConflict:
            continue
    return False
