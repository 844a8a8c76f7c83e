"""SPEC 8 as code: the invariants of a log's metadata (8.1) and the overlaps allowed (8.2).

One implementation for every harness: the simulator checks every log it
wrote to after each step, the unit tests check the logs they leave in the
in-memory stores, and the integration tests the logs they leave in Oxia and
S3. Metadata is read through the ``MetadataStore`` Protocol, so the fake and
the Oxia adapter are read alike:

- :class:`Snapshotter` -- every log under a root in one ``range_scan``,
  decoding each value once per version (the simulator snapshots after every
  step, so this must stay cheap);
- :func:`read_log` -- one log: its three ``meta/`` gets and its index scan
  (:func:`read_index`).

A :class:`LogView` is then judged by

- :func:`check_log` -- SPEC 8.1 and 8.2, given the previous view of the same
  log for the rules over time ("never decreases") and the object store's key
  set (:func:`object_uris`) for the references;
- :func:`check_index` -- the 8.2 overlap rules that hold for any index scan,
  even one that races writers and compactors;
- :func:`check_settled` -- a quiet log (8.2) whose appends are all
  materialized: what a test leaves once nothing is in flight.

Each finding is a line that starts with the log's ``topic:partition`` and
ends with the rule's SPEC number in brackets. Invariant 8.1.6 (every entry
covering an offset yields the same bytes) is about record bytes, not
metadata: the reads of ``testing/history.py`` check it.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Callable, Iterable

from server._protocol.keys import PartitionKeys
from server._protocol.records import (
    CompactionCursor,
    CompactionRecord,
    CompactionState,
    ControlRecord,
    EntryType,
    IndexEntry,
    LogState,
)
from server._storage.metastore import MetadataStore
from server._storage.objectstore import ObjectStore

__all__ = [
    "Entry",
    "LogView",
    "Snapshotter",
    "read_log",
    "read_index",
    "object_uris",
    "check_log",
    "check_index",
    "check_settled",
    "describe",
    "assert_log",
]

TP = tuple[str, int]


@dataclass(frozen=True)
class Entry:
    """One index entry: the offsets ``[start, end]`` it covers."""

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

    @property
    def log_start(self) -> int:
        return 1 if self.control is None else self.control.log_start_offset


def _entry(end: int, e: IndexEntry) -> Entry:
    return Entry(end - e.msg_count + 1, end, e.type == EntryType.COMPACTED, e.data_key)


_DECODERS: dict[str, Callable[[bytes], object]] = {
    "control": ControlRecord.decode,
    "compaction-cursor": lambda raw: CompactionCursor.decode(raw).offset,
    "compaction": CompactionRecord.decode,
}
_FIELDS = {"control": "control", "compaction-cursor": "cursor", "compaction": "compaction"}


class Snapshotter:
    """Every log under ``root`` from one ``range_scan`` of the root, with each
    value decoded once per (key, version)."""

    def __init__(self, meta: MetadataStore, root: str) -> None:
        self._meta = meta
        self._head = root + "/"
        self._end = root + "/~/"  # deep enough to bound every topic (SPEC 3.3, discovery)
        self._decoded: dict[str, tuple[int, TP | None, str | None, object]] = {}

    def views(self) -> dict[TP, LogView]:
        views: dict[TP, LogView] = {}
        decoded = self._decoded
        for rec in self._meta.range_scan(self._head, self._end, None):
            hit = decoded.get(rec.key)
            if hit is None or hit[0] != rec.version:
                hit = decoded[rec.key] = (rec.version, *self._parse(rec.key, rec.value))
            _, tp, attr, value = hit
            if tp is None:
                continue
            view = views.get(tp)
            if view is None:
                view = views[tp] = LogView()
            if attr is None:
                view.entries.append(value)  # the scan returns a log's index keys in end offset order
            else:
                setattr(view, attr, value)
        return views

    def _parse(self, key: str, raw: bytes) -> tuple[TP | None, str | None, object]:
        """(log, LogView attribute or None for an index entry, decoded value);
        (None, None, None) for a key that is not part of a view."""
        parts = key[len(self._head):].split("/")
        if len(parts) != 5 or parts[1] != "partitions" or not parts[2].isdigit():
            return None, None, None
        tp, kind, name = (parts[0], int(parts[2])), parts[3], parts[4]
        if kind == "index" and name.isdigit():
            return tp, None, _entry(int(name), IndexEntry.decode(raw))
        if kind == "meta" and name in _DECODERS:
            return tp, _FIELDS[name], _DECODERS[name](raw)
        return None, None, None


def read_log(meta: MetadataStore, keys: PartitionKeys) -> LogView:
    """One log's view: three gets and an index scan (not one atomic read:
    use it on a log nothing writes to, or judge it with :func:`check_index`)."""
    pk = keys.partition_key
    view = LogView()
    for name, key in (("control", keys.control), ("compaction-cursor", keys.compaction_cursor),
                      ("compaction", keys.compaction)):
        rec = meta.get(key, pk)
        if rec is not None:
            setattr(view, _FIELDS[name], _DECODERS[name](rec.value))
    view.entries = read_index(meta, keys)
    return view


def read_index(meta: MetadataStore, keys: PartitionKeys) -> list[Entry]:
    """One log's index entries, in key order (one range scan)."""
    entries = []
    for rec in meta.range_scan(keys.index_prefix, keys.index_end, keys.partition_key):
        end = keys.index_offset(rec.key)
        if end is not None:
            entries.append(_entry(end, IndexEntry.decode(rec.value)))
    return entries


def object_uris(store: ObjectStore, bucket: str, prefix: str = "") -> set[str]:
    """The ``s3://bucket/key`` URI of every object under ``prefix`` (what index
    entries, pendings and compaction records name)."""
    return {f"s3://{bucket}/{o.key}" for o in store.list(bucket, prefix)}


def describe(tp: TP, v: LogView) -> str:
    """One line of a log's metadata, for failure reports (index entries as
    ``[start-end C|W]``: COMPACTED or WAL)."""
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


def _uncovered(intervals: Iterable[tuple[int, int]], lo: int, hi: int) -> int | None:
    """The first offset in [lo, hi] no interval covers, or None."""
    nxt = lo
    for s, e in sorted(intervals):
        if s > nxt:
            break
        nxt = max(nxt, e + 1)
        if nxt > hi:
            return None
    return nxt if nxt <= hi else None


def check_log(tp: TP, v: LogView, prev: LogView | None = None, objects: set[str] | None = None) -> list[str]:
    """Everything SPEC 8 says about one view of a log: what it breaks.

    ``prev`` (the last view of the same log) enables the rules over time;
    ``objects`` (:func:`object_uris`) the reference rules. A view read while
    the log changes (:func:`read_log` under load) may break rules spuriously.
    """
    name = f"{tp[0]}:{tp[1]}"
    if v.control is None:
        bad = []
        if prev is not None and prev.control is not None:
            bad.append(f"{name}: meta/control disappeared")
        if v.entries or v.compaction is not None:
            bad.append(f"{name}: index entries or a compaction exist without meta/control (7.1)")
        return bad
    split = _split(v.entries)
    bad = _over_time(name, v, prev) + _pending(name, v, prev) + _coverage(name, v) + _cursor(name, v)
    bad += _log_start(name, v, prev)
    bad += _disjoint(name, split) + _overlaps_allowed(name, v, split) + _compaction(name, v)
    if objects is not None:
        bad += _references(name, v, split, objects)
    return bad


def _over_time(name: str, v: LogView, prev: LogView | None) -> list[str]:
    """8.1.2: ``S`` never decreases. 8.1.3: ``S`` stays while FENCED. 8.1.7:
    the cursor never decreases. 7.1: a log has a cursor from its start."""
    bad = []
    if v.cursor is None:
        bad.append(f"{name}: meta/control exists without a compaction cursor (7.1)")
    if prev is None or prev.control is None:
        return bad
    S = v.counter
    if S < prev.counter:
        bad.append(f"{name}: sequence_counter went back {prev.counter} -> {S} [8.1.2]")
    if prev.control.log_state == LogState.FENCED and v.control.log_state == LogState.FENCED and S != prev.counter:
        bad.append(f"{name}: sequence_counter moved {prev.counter} -> {S} while FENCED [8.1.3]")
    if prev.cursor is not None and v.cursor is not None and v.cursor < prev.cursor:
        bad.append(f"{name}: cursor went back {prev.cursor} -> {v.cursor} [8.1.7]")
    return bad


def _pending(name: str, v: LogView, prev: LogView | None) -> list[str]:
    """8.1.8: a pending ends at ``S - 1``; its end key exists or no entry
    covers any of its offsets; once its end key existed, it keeps existing
    while the same pending stays. 7.6: a fence clears the pending."""
    c, S = v.control, v.counter
    p = c.pending
    if p is None:
        return []
    bad = []
    if c.log_state == LogState.FENCED:
        bad.append(f"{name}: FENCED with a pending append (a fence clears it, 7.6)")
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
    return bad


def _log_start(name: str, v: LogView, prev: LogView | None) -> list[str]:
    """8.1.10: ``1 <= L <= S``; ``L`` never decreases; it moved with a time.
    (Retention keeps ``L <= c``; a deleted topic's log has ``L = S``: SPEC 7.11.)"""
    L = v.log_start
    bad = []
    if not 1 <= L <= v.counter:
        bad.append(f"{name}: log start {L} outside [1, counter {v.counter}] [8.1.10]")
    if L > 1 and v.control.log_start_at_ms is None:
        bad.append(f"{name}: log start {L} without log_start_at_ms [8.1.10]")
    if prev is not None and prev.control is not None and L < prev.log_start:
        bad.append(f"{name}: log start went back {prev.log_start} -> {L} [8.1.10]")
    return bad


def _coverage(name: str, v: LogView) -> list[str]:
    """8.1.5: no entry covers an offset outside ``[1, S - 1]``. 8.1.4: every
    offset in ``[L, S - 1]`` (``L`` the log start) is covered by an entry or by
    the pending; below ``L`` entries may be gone (SPEC 7.10)."""
    S, p = v.counter, v.control.pending
    bad = [f"{name}: entry [{e.start}, {e.end}] outside [1, {S - 1}] [8.1.5]"
           for e in v.entries if e.start < 1 or e.end >= S]
    intervals = [(e.start, e.end) for e in v.entries]
    if p is not None:
        intervals.append((p.start_offset, p.end_offset))
    gap = _uncovered(intervals, v.log_start, S - 1)
    if gap is not None:
        bad.append(f"{name}: offset {gap} below the counter {S} is covered by nothing [8.1.4]")
    return bad


def _cursor(name: str, v: LogView) -> list[str]:
    """8.1.7: ``1 <= c <= S``; every offset below ``c`` is COMPACTED; ``c`` is
    the first offset of an entry or of the pending, or ``S``."""
    cur, S, p = v.cursor, v.counter, v.control.pending
    if cur is None:
        return []
    bad = []
    if not 1 <= cur <= S:
        bad.append(f"{name}: cursor {cur} outside [1, {S}] [8.1.7]")
    gap = _uncovered([(e.start, e.end) for e in v.entries if e.compacted], v.log_start, cur - 1)
    if gap is not None:
        bad.append(f"{name}: offset {gap} below the cursor {cur} is not COMPACTED [8.1.7]")
    if cur != S and not any(e.start == cur for e in v.entries) and not (p is not None and p.start_offset == cur):
        bad.append(f"{name}: cursor {cur} is not the start of an entry, of pending, or the counter [8.1.7]")
    return bad


@dataclass(frozen=True)
class _Split:
    """A log's entries by type, each sorted by start offset."""

    compacted: list[Entry]
    wal: list[Entry]
    starts: list[int]
    """The COMPACTED start offsets, for bisection."""

    def container(self, w: Entry) -> tuple[Entry | None, bool]:
        """The COMPACTED entry WAL entry ``w`` overlaps (if any), and whether
        ``w`` lies inside it."""
        i = bisect.bisect_right(self.starts, w.end) - 1
        if i < 0 or self.compacted[i].end < w.start:
            return None, True
        k = self.compacted[i]
        inside = k.start <= w.start and w.end <= k.end and not (i > 0 and self.compacted[i - 1].end >= w.start)
        return k, inside


def _split(entries: Iterable[Entry]) -> _Split:
    compacted = sorted((e for e in entries if e.compacted), key=lambda e: e.start)
    wal = sorted((e for e in entries if not e.compacted), key=lambda e: e.start)
    return _Split(compacted, wal, [e.start for e in compacted])


def check_index(name: str, entries: Iterable[Entry]) -> list[str]:
    """8.2 (and 8.1.1): two COMPACTED entries never overlap, nor two WAL
    entries (an offset belongs to one append), and a WAL entry overlapping a
    COMPACTED one lies inside it. Entries only ever cover whole appends, so
    these hold for any index scan, even one racing writers and compactors."""
    return _disjoint(name, _split(entries))


def _disjoint(name: str, split: _Split) -> list[str]:
    compacted, wal = split.compacted, split.wal
    bad = []
    for kind, run in ((EntryType.COMPACTED, compacted), (EntryType.WAL, wal)):
        for a, b in zip(run, run[1:]):
            if b.start <= a.end:
                bad.append(f"{name}: {kind} entries [{a.start}, {a.end}] and [{b.start}, {b.end}] overlap [8.2]")
    for w in wal:
        k, inside = split.container(w)
        if not inside:
            bad.append(f"{name}: WAL entry [{w.start}, {w.end}] partly overlaps COMPACTED [{k.start}, {k.end}] [8.2]")
    return bad


def _overlaps_allowed(name: str, v: LogView, split: _Split) -> list[str]:
    """8.2 O1-O3: a WAL entry inside a COMPACTED one needs that compaction in
    flight or an end below the cursor; a COMPACTED entry at or above the
    cursor needs its ``meta/compaction`` record."""
    cur, rec = v.cursor, v.compaction
    bad = []
    for w in split.wal:
        k, inside = split.container(w)
        if (k is not None and inside and not (rec is not None and rec.data_key == k.data_key)
                and not (cur is not None and w.end < cur)):
            bad.append(f"{name}: WAL entry [{w.start}, {w.end}] inside COMPACTED [{k.start}, {k.end}] with no "
                       f"compaction in flight and not below the cursor {cur} [8.2 O1-O3]")
    for k in split.compacted:
        if cur is not None and k.start >= cur and not (rec is not None and rec.data_key == k.data_key):
            bad.append(f"{name}: COMPACTED [{k.start}, {k.end}] at/above the cursor {cur} without its "
                       f"meta/compaction [8.2]")
    return bad


def _compaction(name: str, v: LogView) -> list[str]:
    """8.1.9: in DELETING_OLD ``c`` is the record's start; in UPDATING_CURSOR
    its start or ``end + 1``; a WRITING_COMPACTED_INDEX record whose start is
    not ``c`` is stale and changed no index key."""
    rec, cur = v.compaction, v.cursor
    if rec is None or cur is None:
        return []
    span = f"[{rec.start_offset}, {rec.end_offset}]"
    if rec.state == CompactionState.DELETING_OLD and cur != rec.start_offset:
        return [f"{name}: DELETING_OLD {span} with cursor {cur} [8.1.9]"]
    if rec.state == CompactionState.UPDATING_CURSOR and cur not in (rec.start_offset, rec.end_offset + 1):
        return [f"{name}: UPDATING_CURSOR {span} with cursor {cur} [8.1.9]"]
    if rec.state == CompactionState.WRITING_COMPACTED_INDEX and cur != rec.start_offset and any(
        e.data_key == rec.data_key for e in v.entries
    ):
        return [f"{name}: stale compaction {span} changed the index [8.1.9]"]
    return []


def _references(name: str, v: LogView, split: _Split, objects: set[str]) -> list[str]:
    """7.0 / 7.9: every entry, the pending and the compaction record name an
    existing object, except a redundant WAL entry (8.2 O3): vacuum may take
    its object once the entry it duplicates is gone."""
    cur, rec, p = v.cursor, v.compaction, v.control.pending
    compacted = split.compacted
    bad = []
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


def check_settled(tp: TP, v: LogView) -> list[str]:
    """A quiet log (8.2: no ``meta/compaction``, no redundant entries) with
    every append materialized: the entries tile ``[L, S - 1]`` in order (``L``
    the log start; entries wholly below it may linger until vacuum), COMPACTED
    below the cursor and WAL from it."""
    name = f"{tp[0]}:{tp[1]}"
    if v.control is None:
        return [f"{name}: not initialized"]
    bad = []
    if v.compaction is not None:
        bad.append(f"{name}: a compaction is in flight: {v.compaction.state} [8.2 quiet]")
    expected = 1
    for e in v.entries:
        if e.end < v.log_start:
            expected = e.end + 1  # let go by retention, not yet vacuumed
            continue
        if expected < v.log_start <= e.start:
            expected = v.log_start  # vacuumed below the log start
        if e.start != expected:
            bad.append(f"{name}: gap or overlap at [{e.start}, {e.end}] (expected {expected}) [8.2 quiet]")
        expected = e.end + 1
        cur = v.cursor
        if cur is not None and (e.end >= cur if e.compacted else e.start < cur):
            kind = EntryType.COMPACTED if e.compacted else EntryType.WAL
            bad.append(f"{name}: {kind} [{e.start}, {e.end}] on the wrong side "
                       f"of the cursor {cur} [8.2 quiet]")
    if expected != v.counter:
        bad.append(f"{name}: the index ends at {expected - 1}, the counter is {v.counter} "
                   f"(an append not materialized) [8.2 quiet]")
    return bad


def assert_log(meta: MetadataStore, keys: PartitionKeys, objects: set[str] | None = None, *,
               settled: bool = False) -> LogView:
    """Read one log and raise AssertionError (with its metadata) if it breaks
    SPEC 8 (and, with ``settled``, :func:`check_settled`); return the view."""
    tp = (keys.tp.topic, keys.tp.partition)
    view = read_log(meta, keys)
    bad = check_log(tp, view, None, objects) + (check_settled(tp, view) if settled else [])
    assert not bad, "\n".join([*bad, "state: " + describe(tp, view)])
    return view
