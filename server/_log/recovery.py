"""Recovery of pending appends (SPEC 7.2): materialize someone's index entry.

A pending append in ``meta/control`` is committed (SPEC 7.3 step C3); whoever
finds it (the next writer, a fence, the compactor) makes sure its index entry
exists: a GET of its key first (in steady state the entry is there, because
the writer leaves its materialized pending in place, and a read is cheaper
than a write), a create-if-absent only if it is missing, and that entry is
deleted again if a compaction already covers it (late materialization, SPEC
8.2 O3). The writer and the compactor share these functions; callers reach
them through the module (``recovery.create_index_entry``) so a test can
replace one in one place.
"""

from __future__ import annotations

import logging
from enum import Enum

from .._errors import VersionConflict
from .._protocol.keys import PartitionKeys
from .._protocol.records import (
    CompactionCursor,
    CompactionRecord,
    CompactionState,
    ControlRecord,
    EntryType,
    PendingAppend,
)
from .._storage.metastore import EXPECT_ABSENT, MetadataStore
from .index import covering_entry

__all__ = ["Landed", "reservation_landed", "materialize_pending", "create_index_entry", "drop_if_redundant"]

log = logging.getLogger(__name__)


def materialize_pending(store: MetadataStore, keys: PartitionKeys, pending: PendingAppend) -> bool:
    """Create the index entry of someone's pending append if it is missing
    (SPEC 7.2), as a recoverer: a writer, fence or compactor that found it.

    Returns True if this call created the entry and it stays. The GET first
    is 7.2 step 1's "exists" answer without a write: any entry at the
    pending's end key covers its whole range (its own WAL entry, or a
    COMPACTED entry ending there), and a key that existed is only ever
    deleted once a COMPACTED entry covers it. Create-if-absent is safe
    because a pending append is always the partition's newest: if its end
    key exists it is either this very entry or a compaction ending there. A
    recoverer may have stalled while the append was materialized, replaced
    and compacted past; then its put re-created a redundant key inside a
    compacted range, which :func:`drop_if_redundant` deletes again. (The
    append's own writer uses :func:`create_index_entry` and checks later,
    see ``OwnPendings.settle`` in ``own.py``.)
    """
    if store.get(keys.index(pending.end_offset), keys.partition_key) is not None:
        return False
    version = create_index_entry(store, keys, pending)
    if version is None:
        return False
    return not drop_if_redundant(store, keys, pending, version)


def create_index_entry(store: MetadataStore, keys: PartitionKeys, pending: PendingAppend) -> int | None:
    """Put the pending append's WAL entry if absent (7.2 step 1): the new
    version if this call created it, None if the key existed."""
    try:
        return store.put(
            keys.index(pending.end_offset), pending.index_entry().encode(), keys.partition_key,
            expected_version=EXPECT_ABSENT,
        )
    except VersionConflict:
        return None


def drop_if_redundant(store: MetadataStore, keys: PartitionKeys, pending: PendingAppend, version: int) -> bool:
    """Delete the index entry this process just created for ``pending`` if a
    compaction already covers its offsets (SPEC 7.2, late materialization).

    Only a compaction's K8 (or vacuum, below the cursor) deletes index keys,
    so a create that succeeded after the append was materialized and cleared
    re-created a key a COMPACTED entry covers. That compaction is either still
    running past K8 (its record is DELETING_OLD or UPDATING_CURSOR and spans
    the entry) or finished (the cursor is past the entry); the record is read
    before the cursor so one of the two is seen. A race lost here leaves a
    redundant entry, which reads pass over and vacuum removes (SPEC 8.2 O3).
    Returns True if the entry was deleted.
    """
    rec = store.get(keys.compaction, keys.partition_key)
    covered = False
    if rec is not None:
        record = CompactionRecord.decode(rec.value)
        covered = (
            record.state in (CompactionState.DELETING_OLD, CompactionState.UPDATING_CURSOR)
            and record.start_offset <= pending.start_offset
            and pending.end_offset < record.end_offset
        )
    if not covered:
        cursor = store.get(keys.compaction_cursor, keys.partition_key)
        covered = cursor is not None and CompactionCursor.decode(cursor.value).offset > pending.end_offset
    if not covered:
        return False
    try:
        store.delete(keys.index(pending.end_offset), keys.partition_key, expected_version=version)
    except VersionConflict:
        return False
    log.info(
        "deleted the redundant index entry %s..%s of %s that a late materialization re-created",
        pending.start_offset, pending.end_offset, keys.tp,
    )
    return True


class Landed(Enum):
    """What a lost reply to a reserve CAS turned out to mean."""

    YES = "yes"
    NO = "no"
    UNKNOWN = "unknown"


def reservation_landed(store: MetadataStore, keys: PartitionKeys, pending: PendingAppend,
                       control: ControlRecord) -> Landed:
    """Whether the reservation of ``pending``, whose reply was lost, landed
    (SPEC 7.3 C3, unknown outcome), from ``control`` read after it. Raises
    the store's errors (the caller answers UNKNOWN)."""
    if control.pending is not None and control.pending.append_id == pending.append_id:
        return Landed.YES
    if control.sequence_counter <= pending.end_offset:
        return Landed.NO  # had ours landed, the counter would be past our end forever
    # Someone reserved past our end. The entry holding our end offset tells:
    # ours (materialized by whoever took over), another append's WAL entry
    # (so ours never landed), or a COMPACTED range (cannot tell).
    covering = covering_entry(store, keys, pending.end_offset)
    if covering is None or covering[1].type != EntryType.WAL:
        return Landed.UNKNOWN
    entry_end, entry = covering
    ours = (entry_end == pending.end_offset and entry.data_key == pending.data_key
            and entry.byte_offset == pending.byte_offset)
    return Landed.YES if ours else Landed.NO
