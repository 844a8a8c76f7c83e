"""Checks after every step: invariants on the raw stores, and reads.

After each step (every actor parked) the checker

- runs the SPEC 8 structural checks (``testing/invariants.py``) on every log
  the step wrote to, against the previous view of the same log;
- judges the history (``testing/history.py``): each new acknowledgement and
  each record a reader actor read goes to a ``Tracker`` (one value per
  offset, forever; a value must come from an append to that log that was not
  a definite failure; an acknowledged offset must hold its payload);
- reads through a *second* ``LeaderlessLogReader`` over the raw stores (no
  scheduling points, no faults): a sampled ``read_offset`` per written log
  per step (an acknowledged offset, or the first offset of an index entry,
  where boundary bugs live), and a full scan of one log every
  ``scan_every`` writing steps, rotating through ``iter_from``,
  ``iter_runs``, ``read_range`` and ``scan_batches``; a scan is checked for
  order and, as a read pass, against the whole history.

:meth:`Checker.final` repeats everything exhaustively once the run is over:
every acknowledged offset, every scan flavour of every log, all of them
checked together against the history (lost, duplicated, partial and torn
appends, reads that disagree).
"""

from __future__ import annotations

import random

from server._config import OxiaConfig, S3Config
from server._errors import OffsetOutOfRange, PartitionNotInitialized
from server._storage.metastore import InMemoryMetadataStore
from server._storage.objectstore import InMemoryObjectStore
from server.leaderless_log_reader import LeaderlessLogReader

from ..history import ReadPass, Tracker, Violation, check, check_order, check_spans
from ..invariants import LogView, Snapshotter, check_log, describe, object_uris
from ._history import History
from ._pools import inline_pools

__all__ = ["Checker", "CheckFailed"]

TP = tuple[str, int]
SCANS = ("iter_from", "iter_runs", "read_range", "scan_batches")


class CheckFailed(Exception):
    """The run broke an invariant; the message lists what."""


class Checker:
    def __init__(self, meta: InMemoryMetadataStore, objects: InMemoryObjectStore, history: History,
                 oxia: OxiaConfig, s3: S3Config, tps: list[TP], rng: random.Random, *,
                 scan_every: int = 8) -> None:
        self._objects = objects
        self._bucket = s3.bucket
        self._history = history
        self._tps = tps
        self._rng = rng
        self._scan_every = scan_every
        self._snap = Snapshotter(meta, oxia.root_prefix)
        self._tracker = Tracker(history.attempts_of)
        self.reader = inline_pools(LeaderlessLogReader(oxia, s3, metadata_store=meta, object_store=objects))
        self._prev: dict[TP, LogView] = {}
        self._dirty: set[TP] = set()
        self._objects_dirty = True
        self._object_uris: set[str] = set()
        self._writes = 0
        self._scan_turn = 0
        self.reads = 0

    # -- fed by the store wrappers -------------------------------------------------
    def note_meta_write(self, key: str) -> None:
        parts = key.split("/")
        if len(parts) >= 4 and parts[2] == "partitions":
            self._dirty.add((parts[1], int(parts[3])))

    def note_object_write(self, key: str) -> None:
        self._objects_dirty = True
        self._dirty.update(self._tps)  # a deleted object can break any log's references

    # -- per step ------------------------------------------------------------------
    def after_step(self) -> None:
        bad: list[str] = []
        h = self._history
        if h.violations:
            bad += h.violations
            h.violations = []
        for attempt in h.new_acks:
            bad += self._lines(self._tracker.acknowledged(attempt))
        h.new_acks = []
        for actor, tp, offset, payload in h.reads:
            bad += self._lines(self._tracker.observe(tp, offset, payload, actor))
        h.reads = []
        if self._dirty:
            self._writes += 1
            views = self._snap.views()
            objects = self._uris()
            for tp in sorted(self._dirty):
                view = views.get(tp, LogView())
                bad += check_log(tp, view, self._prev.get(tp), objects)
                self._prev[tp] = view
                if not bad:
                    self._sample_read(bad, tp, view)
            self._dirty = set()
            if not bad and self._writes % self._scan_every == 0:
                tp = self._tps[self._scan_turn % len(self._tps)]
                read = self._scan(bad, tp, SCANS[(self._scan_turn // len(self._tps)) % len(SCANS)])
                if read is not None:
                    bad += self._lines(check([a for a in h.attempts if a.tp == tp], [read]).violations)
                self._scan_turn += 1
        if bad:
            self._fail(bad)

    def final(self) -> None:
        """Everything, exhaustively: every acknowledged offset, every scan, and
        all of them together against the history."""
        bad: list[str] = []
        views = self._snap.views()
        objects = self._uris()
        for tp in self._tps:
            bad += check_log(tp, views.get(tp, LogView()), self._prev.get(tp), objects)
        point: dict[TP, dict[int, bytes]] = {}
        scans: dict[str, dict[TP, dict[int, bytes]]] = {}
        starts: dict[str, dict[TP, int]] = {}
        for tp in self._tps:
            point[tp] = {}
            for offset in sorted(set(self._history.acked_offsets.get(tp, ()))):
                self._read(bad, tp, offset, point[tp])
            for flavour in SCANS:
                read = self._scan(bad, tp, flavour)
                if read is not None:
                    scans.setdefault(flavour, {}).update(read.records)
                    starts.setdefault(flavour, {}).update(read.log_start)
        passes = [ReadPass(flavour, records, log_start=starts[flavour]) for flavour, records in scans.items()]
        passes.append(ReadPass("read_offset", point, complete=False))
        bad += self._lines(check(self._history.attempts, passes).violations)
        if bad:
            self._fail(bad)

    # -- helpers ---------------------------------------------------------------------
    @staticmethod
    def _lines(violations: tuple[Violation, ...] | list[Violation]) -> list[str]:
        return [v.describe() for v in violations]

    def _fail(self, bad: list[str]) -> None:
        """Raise with the problems and the metadata of every log they name."""
        views = self._snap.views()
        named = [tp for tp in self._tps
                 if any(f"{tp[0]}:{tp[1]}:" in line or f"{tp[0]}:{tp[1]}@" in line for line in bad)]
        raise CheckFailed("\n".join(bad + ["state now: " + describe(tp, views.get(tp, LogView())) for tp in named]))

    def _uris(self) -> set[str]:
        if self._objects_dirty:
            self._object_uris = object_uris(self._objects, self._bucket)
            self._objects_dirty = False
        return self._object_uris

    def _sample_read(self, bad: list[str], tp: TP, view: LogView) -> None:
        acked = self._history.acked_offsets.get(tp)
        if view.entries and (not acked or self._rng.random() < 0.5):
            offset = self._rng.choice(view.entries).start
        elif acked:
            offset = self._rng.choice(acked)
        else:
            return
        self._read(bad, tp, offset)

    def _read(self, bad: list[str], tp: TP, offset: int, into: dict[int, bytes] | None = None) -> None:
        self.reads += 1
        try:
            rec = self.reader.read_offset(tp[0], tp[1], offset)
        except OffsetOutOfRange as exc:
            if exc.log_start_offset is None or offset >= exc.log_start_offset:
                bad.append(Violation("unreadable", tp[0], tp[1], offset, None,
                                     f"read_offset({offset}) raised {exc}").describe())
            return  # below the log start: retention let it go
        except Exception as exc:  # noqa: BLE001 - any error reading an acknowledged offset is a finding
            bad.append(Violation("unreadable", tp[0], tp[1], offset, None,
                                 f"read_offset({offset}) raised {type(exc).__name__}: {exc}").describe())
            return
        bad += self._lines(self._tracker.observe(tp, offset, rec.payload, "checker read_offset"))
        if into is not None:
            into[offset] = rec.payload

    def _scan(self, bad: list[str], tp: TP, flavour: str) -> ReadPass | None:
        """Read the whole log one way; check its order and every record. The
        records as a read pass, or None if the scan failed."""
        topic, partition = tp
        r = self.reader
        self.reads += 1
        try:
            control = r.control(topic, partition)
            hw, first = control.high_watermark, control.log_start_offset
            if flavour == "iter_from":
                got = [(x.offset, x.payload) for x in r.iter_from(topic, partition, first)]
            elif flavour == "iter_runs":
                got = [(o, run.records[o - run.base_offset].value)
                       for run in r.iter_runs(topic, partition, first) for o in range(run.first, run.last + 1)]
            elif flavour == "read_range":
                got = [(x.offset, x.payload) for x in r.read_range(topic, partition, first, hw)] if hw >= first else []
            else:
                batches = r.scan_batches(topic, partition, first, hw) if hw >= first else ()
                spans = [(b.start_offset, b.end_offset) for b in batches]
                bad += self._lines(check_spans(flavour, tp, spans, hw, first))
                return None
        except PartitionNotInitialized:
            if self._history.acked_offsets.get(tp):
                bad.append(Violation("lost", topic, partition, None, None,
                                     f"{flavour}: the log vanished after acknowledged appends").describe())
            return None
        except Exception as exc:  # noqa: BLE001 - any error of a full scan is a finding
            bad.append(Violation("unreadable", topic, partition, 1, None,
                                 f"{flavour} from the log start raised {type(exc).__name__}: {exc}",
                                 (flavour,)).describe())
            return None
        bad += self._lines(check_order(flavour, tp, [o for o, _ in got], hw, first))
        for offset, payload in got:
            bad += self._lines(self._tracker.observe(tp, offset, payload, flavour))
        return ReadPass(flavour, {tp: dict(got)}, log_start={tp: first})
