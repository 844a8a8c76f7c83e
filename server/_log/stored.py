"""What a log stores from its start on, as retention weighs it (SPEC 7.10 R1-R2).

From ``meta/control`` (the log start ``L``, and the version a conditional
write needs), the compaction cursor ``c`` and the index from ``L``: every
entry ending at or above ``L`` counts its stored bytes (a WAL slice its
``byte_length``, a COMPACTED entry its ``size_bytes``), except a WAL entry
ending below ``c``: that range is compacted, and its bytes are counted in
the COMPACTED entry that covers it (the redundant entries of SPEC 8.2). The first entry may start below ``L``
(DeleteRecords puts ``L`` anywhere, 7.13); it counts whole, as a Kafka
segment holding the log start does.

DescribeLogDirs reports the total as a partition's size and retention weighs
it (``StoredSizes``: many logs at once, each index read again only past what
can have changed, so a pass over logs holding a week of data does not read
every index whole).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Iterator, Sequence

from .._protocol.keys import PartitionKeys
from .._protocol.records import CompactionCursor, ControlRecord, EntryType, IndexEntry
from .._storage.metastore import MetadataStore, Record

__all__ = ["StoredHead", "StoredSizes", "compacted_from", "entry_bytes"]


def entry_bytes(entry: IndexEntry) -> int:
    """The stored bytes an index entry stands for (0 when its entry does not say)."""
    if entry.type == EntryType.COMPACTED:
        return entry.size_bytes or 0
    return entry.byte_length or 0


WINDOW = 8
"""``compacted_from``'s first range scan spans this many times the first entry's offsets."""


def compacted_from(meta: MetadataStore, keys: PartitionKeys, start: int, cursor: int
                   ) -> Iterator[tuple[int, int, IndexEntry]]:
    """The COMPACTED entries ending at or above ``start`` and below ``cursor``, in offset order,
    as ``(first, end, entry)``, read as they are asked for: the first with one CEILING get, the
    rest in range scans whose span of offsets starts at ``WINDOW`` times the first entry's and
    grows fourfold. A range scan hands over its rows in batches of up to a thousand, each
    decoded whole by the client; so a caller that stops after ``k`` entries reads about ``k``
    rows, not the index, in a few requests."""
    if cursor <= start:
        return
    rec = meta.ceiling(keys.index(start), keys.partition_key)
    end = None if rec is None else keys.index_offset(rec.key)  # not this log's index: no entry from start
    if rec is None or end is None or end >= cursor:
        return
    entry = IndexEntry.decode(rec.value)
    if entry.type == EntryType.COMPACTED:
        yield entry.start_offset(end), end, entry
    low, span = end + 1, max(1, entry.msg_count) * WINDOW
    while low < cursor:
        high = min(cursor, low + span)
        for row in meta.range_scan(keys.index(low), keys.index(high), keys.partition_key):
            end = keys.index_offset(row.key)
            if end is None or not low <= end < high:
                continue
            entry = IndexEntry.decode(row.value)
            if entry.type == EntryType.COMPACTED:
                yield entry.start_offset(end), end, entry
        low, span = high, span * 4


@dataclass(frozen=True)
class _Sized:
    """What ``StoredSizes`` keeps of a log it sized."""

    stamp: tuple[int, int]
    """The control record's version and the cursor's (-1: none) when it was sized."""
    start: int
    cursor: int
    settled: int
    """The counted bytes of the entries ending below ``cursor``."""
    scanned_to: int
    """The index was read up to this offset."""
    total: int


@dataclass(frozen=True)
class StoredHead:
    """A log's control record, compaction cursor and stored bytes, without its index."""

    control: ControlRecord
    version: int
    """``meta/control``'s version, for a write conditional on it."""
    cursor: int
    """The compaction cursor (1 when absent)."""
    total_bytes: int
    """Stored bytes from the entry holding the log start on."""


class StoredSizes:
    """The stored bytes of many logs at once (DescribeLogDirs), each index read again only from
    where its log can have changed.

    Control records and cursors are read ``CHUNK`` logs to an Oxia request (``get_many``; a
    log's two reads keep their order), up to ``THREADS`` chunks at a time. A log whose control
    record and cursor kept their versions since it was last sized keeps its size. One whose
    cursor kept its version and start stayed has only appended: its index is read past what
    was read before. One whose cursor moved and start stayed is read from the old cursor on:
    compaction writes only at or above the cursor, and vacuum deletes only entries ending
    below the start or WAL entries below the cursor, none counted, so what was counted below
    the old cursor stands. One whose start moved is read from the start. So a COMPACTED entry
    counts from when its compaction moves the cursor (a fresh read counts it, and the WAL
    entries it covers, in the moment between). At most ``KEPT`` logs are kept, least recently
    used going first."""

    CHUNK = 16
    THREADS = 8
    KEPT = 65_536

    def __init__(self, meta: MetadataStore) -> None:
        self._meta = meta
        self._lock = threading.Lock()
        self._kept: OrderedDict[str, _Sized] = OrderedDict()

    def sizes(self, keys: Sequence[PartitionKeys]) -> list[int]:
        """Each log's ``total_bytes`` (0 when it is not initialized), in order."""
        return [0 if got is None else got[1].total for got in self._read(keys)]

    def heads(self, keys: Sequence[PartitionKeys]) -> list[StoredHead | None]:
        """Each log's :class:`StoredHead` (None when it is not initialized), in order."""
        return [None if got is None else StoredHead(ControlRecord.decode(got[0].value), got[0].version,
                                                    got[1].cursor, got[1].total)
                for got in self._read(keys)]

    def _read(self, keys: Sequence[PartitionKeys]) -> list[tuple[Record, _Sized] | None]:
        chunks = [keys[i:i + self.CHUNK] for i in range(0, len(keys), self.CHUNK)]
        if len(chunks) <= 1:
            return [got for chunk in chunks for got in self._chunk(chunk)]
        with ThreadPoolExecutor(min(len(chunks), self.THREADS), thread_name_prefix="llog-stored") as pool:
            return [got for sized in pool.map(self._chunk, chunks) for got in sized]

    def _chunk(self, keys: Sequence[PartitionKeys]) -> list[tuple[Record, _Sized] | None]:
        """Each log's control record as read now and what is kept of it (sized again if it changed)."""
        got = self._meta.get_many([item for k in keys for item in (
            (k.control, k.partition_key), (k.compaction_cursor, k.partition_key))])
        out: list[tuple[Record, _Sized] | None] = []
        for i, k in enumerate(keys):
            rec, cursor_rec = got[2 * i], got[2 * i + 1]
            if rec is None:
                out.append(None)
                continue
            stamp = (rec.version, -1 if cursor_rec is None else cursor_rec.version)
            with self._lock:
                kept = self._kept.get(k.control)
            if kept is None or kept.stamp != stamp:
                kept = self._size(k, stamp, ControlRecord.decode(rec.value).log_start_offset,
                                  1 if cursor_rec is None else CompactionCursor.decode(cursor_rec.value).offset, kept)
            with self._lock:
                self._kept[k.control] = kept
                self._kept.move_to_end(k.control)
                while len(self._kept) > self.KEPT:
                    self._kept.popitem(last=False)
            out.append((rec, kept))
        return out

    def _size(self, keys: PartitionKeys, stamp: tuple[int, int], start: int, cursor: int,
              kept: _Sized | None) -> _Sized:
        settled, total, scan_from = 0, 0, start
        if kept is not None and kept.start == start:
            if kept.stamp[1] == stamp[1]:  # appends only
                settled, total, scan_from = kept.settled, kept.total, max(start, kept.scanned_to + 1)
            elif kept.cursor <= cursor and kept.cursor > start:  # compaction too: recount from the old cursor
                settled, total, scan_from = kept.settled, kept.settled, kept.cursor
        scanned_to = scan_from - 1
        for row in self._meta.range_scan(keys.index(scan_from), keys.index_end, keys.partition_key):
            end = keys.index_offset(row.key)
            if end is None or end < scan_from:
                continue
            scanned_to = max(scanned_to, end)
            entry = IndexEntry.decode(row.value)
            if _counted(entry, end, cursor):
                total += entry_bytes(entry)
                if end < cursor:
                    settled += entry_bytes(entry)
        return _Sized(stamp, start, cursor, settled, scanned_to, total)


def _counted(entry: IndexEntry, end: int, cursor: int) -> bool:
    """Whether an entry ending at or above the log start counts (module docstring): all but a
    redundant WAL entry inside a compacted range (SPEC 8.2), whose bytes its COMPACTED entry counts."""
    return not (entry.type == EntryType.WAL and end < cursor)

