"""SPEC 8.1 / 8.2 as code: structural checks of one log's raw metadata.

:func:`snapshot` reads the in-memory metadata store directly (no scheduling
point, no fault) and decodes every log's control record, cursor, compaction
record and index; :func:`check_log` returns the invariants a view breaks,
given the previous view of the same log (for "never decreases"). These run
after every step that wrote something, so they must stay cheap: values are
decoded once per version.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from server._protocol.records import (
    CompactionCursor,
    CompactionRecord,
    CompactionState,
    ControlRecord,
    EntryType,
    IndexEntry,
    LogState,
)
from server._storage.metastore import InMemoryMetadataStore

__all__ = ["Entry", "LogView", "Snapshotter", "check_log", "describe"]

TP = tuple[str, int]


@dataclass(frozen=True)
class Entry:
    start: int
    end: int
    compacted: bool
    data_key: str


@dataclass
class LogView:
    """One log's metadata at one moment."""

    control: ControlRecord | None = None
    cursor: int | None = None
    compaction: CompactionRecord | None = None
    entries: list[Entry] = field(default_factory=list)
    """Sorted by end offset (index key order)."""

    @property
    def counter(self) -> int:
        return 0 if self.control is None else self.control.sequence_counter


class Snapshotter:
    """Decodes the raw store into per-log views, caching decodes by version
    (the in-memory store's versions are unique across all keys)."""

    def __init__(self, meta: InMemoryMetadataStore, root: str) -> None:
        self._meta = meta
        self._root = root
        self._decoded: dict[int, object] = {}

    def _decode(self, version: int, raw: bytes, decoder):
        hit = self._decoded.get(version)
        if hit is None:
            hit = self._decoded[version] = decoder(raw)
        return hit

    def views(self) -> dict[TP, LogView]:
        with self._meta._lock:  # the fake has no snapshot API; see the report
            data = list(self._meta._data.items())
        views: dict[TP, LogView] = {}
        for key, (value, version) in data:
            parts = key.split("/")
            if len(parts) != 6 or parts[0] != self._root or parts[2] != "partitions":
                continue
            tp = (parts[1], int(parts[3]))
            view = views.get(tp)
            if view is None:
                view = views[tp] = LogView()
            kind, name = parts[4], parts[5]
            if kind == "index":
                e = self._decode(version, value, IndexEntry.decode)
                end = int(name)
                view.entries.append(Entry(end - e.msg_count + 1, end, e.type == EntryType.COMPACTED, e.data_key))
            elif name == "control":
                view.control = self._decode(version, value, ControlRecord.decode)
            elif name == "compaction-cursor":
                view.cursor = self._decode(version, value, CompactionCursor.decode).offset
            elif name == "compaction":
                view.compaction = self._decode(version, value, CompactionRecord.decode)
        for view in views.values():
            view.entries.sort(key=lambda e: e.end)
        return views


def describe(tp: TP, v: LogView) -> str:
    """One line of a log's metadata, for failure reports."""
    c = v.control
    if c is None:
        return f"{tp[0]}:{tp[1]}: not initialized"
    p = c.pending
    rec = v.compaction
    parts = [
        f"{tp[0]}:{tp[1]}: {c.log_state} counter {c.sequence_counter}, cursor {v.cursor}",
        "pending " + ("none" if p is None else f"[{p.start_offset}, {p.end_offset}]"),
        "compaction " + ("none" if rec is None else f"{rec.state} [{rec.start_offset}, {rec.end_offset}]"),
        "index " + " ".join(f"[{e.start}-{e.end} {'C' if e.compacted else 'W'}]" for e in v.entries),
    ]
    return "; ".join(parts)


def _covered(intervals: list[tuple[int, int]], lo: int, hi: int) -> int | None:
    """The first offset in [lo, hi] no interval covers, or None."""
    nxt = lo
    for s, e in sorted(intervals):
        if s > nxt:
            break
        nxt = max(nxt, e + 1)
        if nxt > hi:
            return None
    return nxt if nxt <= hi else None


def check_log(tp: TP, v: LogView, prev: LogView | None, objects: set[str]) -> list[str]:
    """The invariants ``v`` breaks (SPEC 8.1 numbers in brackets)."""
    name = f"{tp[0]}:{tp[1]}"
    bad: list[str] = []
    c, S = v.control, v.counter
    if c is None:
        if prev is not None and prev.control is not None:
            bad.append(f"{name}: meta/control disappeared")
        if v.entries or v.compaction is not None:
            bad.append(f"{name}: index entries or a compaction exist without meta/control")
        return bad
    if v.cursor is None:
        bad.append(f"{name}: meta/control exists without a compaction cursor (7.1)")
    if prev is not None and prev.control is not None:
        if S < prev.counter:
            bad.append(f"{name}: sequence_counter went back {prev.counter} -> {S} [8.1.2]")
        if prev.control.log_state == LogState.FENCED and c.log_state == LogState.FENCED and S != prev.counter:
            bad.append(f"{name}: sequence_counter moved {prev.counter} -> {S} while FENCED [8.1.3]")
        if prev.cursor is not None and v.cursor is not None and v.cursor < prev.cursor:
            bad.append(f"{name}: cursor went back {prev.cursor} -> {v.cursor} [8.1.7]")
    p = c.pending
    if c.log_state == LogState.FENCED and p is not None:
        bad.append(f"{name}: FENCED with a pending append (a fence clears it, 7.6)")
    if p is not None:
        if p.end_offset != S - 1 or p.end_offset - p.start_offset + 1 != p.msg_count or p.start_offset < 1:
            bad.append(f"{name}: pending [{p.start_offset}, {p.end_offset}] x{p.msg_count} with counter {S} [8.1.8]")
        if not any(e.end == p.end_offset for e in v.entries) and any(
            e.start <= p.end_offset and e.end >= p.start_offset for e in v.entries
        ):
            bad.append(f"{name}: entries cover part of pending [{p.start_offset}, {p.end_offset}] "
                       f"without its own entry [8.1.8]")
        pp = None if prev is None or prev.control is None else prev.control.pending
        if (pp is not None and pp.append_id == p.append_id and any(e.end == p.end_offset for e in prev.entries)
                and not any(e.end == p.end_offset for e in v.entries)):
            bad.append(f"{name}: the index key of the materialized pending [{p.start_offset}, {p.end_offset}] "
                       f"was deleted while it is still pending [8.1.8]")
    for e in v.entries:
        if e.start < 1 or e.end >= S:
            bad.append(f"{name}: entry [{e.start}, {e.end}] outside [1, {S - 1}] [8.1.5]")
    intervals = [(e.start, e.end) for e in v.entries]
    if p is not None:
        intervals.append((p.start_offset, p.end_offset))
    gap = _covered(intervals, 1, S - 1)
    if gap is not None:
        bad.append(f"{name}: offset {gap} below the counter {S} is covered by nothing [8.1.4]")
    cur = v.cursor
    rec = v.compaction
    if cur is not None:
        if not 1 <= cur <= S:
            bad.append(f"{name}: cursor {cur} outside [1, {S}] [8.1.7]")
        gap = _covered([(e.start, e.end) for e in v.entries if e.compacted], 1, cur - 1)
        if gap is not None:
            bad.append(f"{name}: offset {gap} below the cursor {cur} is not COMPACTED [8.1.7]")
        if cur != S and not any(e.start == cur for e in v.entries) and not (p is not None and p.start_offset == cur):
            bad.append(f"{name}: cursor {cur} is not the start of an entry, of pending, or the counter [8.1.7]")
    # Overlaps (8.2): COMPACTED entries are disjoint, WAL entries are disjoint,
    # and a WAL entry overlapping a COMPACTED one lies inside it (O1-O3).
    compacted = sorted((e for e in v.entries if e.compacted), key=lambda e: e.start)
    wal = sorted((e for e in v.entries if not e.compacted), key=lambda e: e.start)
    for kind, run in (("COMPACTED", compacted), ("WAL", wal)):
        for a, b in zip(run, run[1:]):
            if b.start <= a.end:
                bad.append(f"{name}: {kind} entries [{a.start}, {a.end}] and [{b.start}, {b.end}] overlap [8.2]")
    starts = [e.start for e in compacted]
    for w in wal:
        i = bisect.bisect_right(starts, w.end) - 1
        if i < 0 or compacted[i].end < w.start:
            continue
        k = compacted[i]
        if not (k.start <= w.start and w.end <= k.end) or (i > 0 and compacted[i - 1].end >= w.start):
            bad.append(f"{name}: WAL entry [{w.start}, {w.end}] partly overlaps COMPACTED [{k.start}, {k.end}] [8.2]")
        elif not (rec is not None and rec.data_key == k.data_key) and not (cur is not None and w.end < cur):
            bad.append(f"{name}: WAL entry [{w.start}, {w.end}] inside COMPACTED [{k.start}, {k.end}] with no "
                       f"compaction in flight and not below the cursor {cur} [8.2 O1-O3]")
    for k in compacted:
        if cur is not None and k.start >= cur and not (rec is not None and rec.data_key == k.data_key):
            bad.append(f"{name}: COMPACTED [{k.start}, {k.end}] at/above the cursor {cur} without its "
                       f"meta/compaction [8.2]")
    if rec is not None and cur is not None:
        if rec.state == CompactionState.DELETING_OLD and cur != rec.start_offset:
            bad.append(f"{name}: DELETING_OLD [{rec.start_offset}, {rec.end_offset}] with cursor {cur} [8.1.9]")
        if rec.state == CompactionState.UPDATING_CURSOR and cur not in (rec.start_offset, rec.end_offset + 1):
            bad.append(f"{name}: UPDATING_CURSOR [{rec.start_offset}, {rec.end_offset}] with cursor {cur} [8.1.9]")
        if rec.state == CompactionState.WRITING_COMPACTED_INDEX and cur != rec.start_offset and any(
            e.data_key == rec.data_key for e in v.entries
        ):
            bad.append(f"{name}: stale compaction [{rec.start_offset}, {rec.end_offset}] changed the index [8.1.9]")
    # Every reference names an existing object, except a redundant WAL entry
    # (O3): vacuum may take its object once the entry it duplicates is gone.
    for e in v.entries:
        if e.data_key in objects:
            continue
        if not e.compacted and ((cur is not None and e.end < cur)
                                or any(k.start <= e.start and e.end <= k.end for k in compacted)):
            continue
        bad.append(f"{name}: entry [{e.start}, {e.end}] names a deleted object {e.data_key}")
    if p is not None and p.data_key not in objects:
        bad.append(f"{name}: pending names a deleted object {p.data_key}")
    if rec is not None and rec.data_key not in objects:
        bad.append(f"{name}: meta/compaction ({rec.state}) names a deleted object {rec.data_key}")
    return bad
