"""What a log stores from its start on: its index read as retention reads it (SPEC 7.10 R1-R2).

One read of ``meta/control`` (the log start ``L``, and the version a
conditional write needs), one of the compaction cursor ``c``, and one range
scan of the index from ``L``. Every entry ending at or above ``L`` counts its
stored bytes (a WAL slice its ``byte_length``, a COMPACTED entry its
``size_bytes``), except a WAL entry ending below ``c``: that range is
compacted, and its bytes are counted in the COMPACTED entry that covers it
(the redundant entries of SPEC 8.2). The first entry may start below ``L``
(DeleteRecords puts ``L`` anywhere, 7.13); it counts whole, as a Kafka
segment holding the log start does.

Retention decides from this what may go; DescribeLogDirs reports the total
as a partition's size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from .._protocol.keys import PartitionKeys
from .._protocol.records import CompactionCursor, ControlRecord, EntryType, IndexEntry
from .._storage.metastore import MetadataStore, Record

__all__ = ["StoredLog", "entry_bytes", "read_stored", "read_stored_many"]


def entry_bytes(entry: IndexEntry) -> int:
    """The stored bytes an index entry stands for (0 when its entry does not say)."""
    if entry.type == EntryType.COMPACTED:
        return entry.size_bytes or 0
    return entry.byte_length or 0


@dataclass(frozen=True)
class StoredLog:
    control: ControlRecord
    version: int
    """``meta/control``'s version, for a write conditional on it."""
    cursor: int
    """The compaction cursor (1 when absent)."""
    total_bytes: int
    """Stored bytes from the entry holding the log start on."""
    compacted: tuple[tuple[int, int, IndexEntry], ...]
    """The COMPACTED entries ending below the cursor, in offset order: ``(first, end, entry)``."""


def read_stored(meta: MetadataStore, keys: PartitionKeys) -> StoredLog | None:
    """The log of ``keys`` as stored now (module docstring); None when it is not initialized."""
    rec = meta.get(keys.control, keys.partition_key)
    if rec is None:
        return None
    return _scan(meta, keys, rec, meta.get(keys.compaction_cursor, keys.partition_key))


def read_stored_many(meta: MetadataStore, keys: Sequence[PartitionKeys]) -> list[StoredLog | None]:
    """``read_stored`` of each log, in order, with every control record and cursor read in one
    ``get_many`` (one Oxia request instead of two per log; a log's two reads keep their order), then
    each index scanned: what sizing many logs at once (DescribeLogDirs) costs."""
    items = [item for k in keys for item in ((k.control, k.partition_key), (k.compaction_cursor, k.partition_key))]
    got = meta.get_many(items) if items else []
    return [None if got[2 * i] is None else _scan(meta, k, got[2 * i], got[2 * i + 1]) for i, k in enumerate(keys)]


def _scan(meta: MetadataStore, keys: PartitionKeys, rec: Record, cursor_rec: Record | None) -> StoredLog:
    control = ControlRecord.decode(rec.value)
    start = control.log_start_offset
    cursor = 1 if cursor_rec is None else CompactionCursor.decode(cursor_rec.value).offset
    compacted: list[tuple[int, int, IndexEntry]] = []
    total = 0
    for row in meta.range_scan(keys.index(start), keys.index_end, keys.partition_key):
        end = keys.index_offset(row.key)
        if end is None or end < start:
            continue
        entry = IndexEntry.decode(row.value)
        if entry.type == EntryType.WAL and end < cursor:
            continue  # a redundant entry inside a compacted range (SPEC 8.2): its bytes are counted there
        total += entry_bytes(entry)
        if entry.type == EntryType.COMPACTED and end < cursor:
            compacted.append((entry.start_offset(end), end, entry))
    return StoredLog(control, rec.version, cursor, total, tuple(compacted))
