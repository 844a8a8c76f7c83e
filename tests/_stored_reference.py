"""What a log stores, from one whole read of its index: the reference ``StoredSizes`` (which
reads only past what changed) and retention's walk (which stops early) are checked against.

The rule of ``server/_log/stored.py`` written out again on purpose, so the two do not agree
by sharing code: every entry ending at or above the log start counts its stored bytes (a WAL
slice its ``byte_length``, a COMPACTED entry its ``size_bytes``), except a WAL entry ending
below the compaction cursor (a redundant copy of a compacted range)."""

from __future__ import annotations

from dataclasses import dataclass

from server._protocol.keys import PartitionKeys
from server._protocol.records import CompactionCursor, ControlRecord, EntryType, IndexEntry
from server._storage.metastore import MetadataStore


@dataclass(frozen=True)
class StoredLog:
    control: ControlRecord
    cursor: int
    total_bytes: int
    compacted: tuple[tuple[int, int, IndexEntry], ...]
    """The COMPACTED entries from the start below the cursor, in offset order: ``(first, end, entry)``."""


def read_stored(meta: MetadataStore, keys: PartitionKeys) -> StoredLog | None:
    """The log of ``keys`` as stored now; None when it is not initialized."""
    rec = meta.get(keys.control, keys.partition_key)
    if rec is None:
        return None
    control = ControlRecord.decode(rec.value)
    start = control.log_start_offset
    got = meta.get(keys.compaction_cursor, keys.partition_key)
    cursor = 1 if got is None else CompactionCursor.decode(got.value).offset
    compacted: list[tuple[int, int, IndexEntry]] = []
    total = 0
    for row in meta.range_scan(keys.index(start), keys.index_end, keys.partition_key):
        end = keys.index_offset(row.key)
        if end is None or end < start:
            continue
        entry = IndexEntry.decode(row.value)
        if entry.type == EntryType.WAL and end < cursor:
            continue
        total += (entry.size_bytes if entry.type == EntryType.COMPACTED else entry.byte_length) or 0
        if entry.type == EntryType.COMPACTED and end < cursor:
            compacted.append((entry.start_offset(end), end, entry))
    return StoredLog(control, cursor, total, tuple(compacted))
