"""Checks after every step: invariants on the raw stores, and reads.

After each step (every actor parked) the checker

- runs the SPEC 8 structural checks (``_invariants``) on every log the step
  wrote to, and checks that the high watermark and cursor never went back;
- judges the history: each new acknowledgement and each record a reader
  actor read must agree with every value seen before at that offset (one
  value per offset, forever), must belong to an append that was not a
  definite failure, and an acknowledged offset must hold its payload;
- reads through a *second* ``LeaderlessLogReader`` over the raw stores (no
  scheduling points, no faults): a sampled ``read_offset`` per written log
  per step (an acknowledged offset, or the first offset of an index entry,
  where boundary bugs live), and a full scan of one log every
  ``scan_every`` writing steps, rotating through ``iter_from``,
  ``iter_runs``, ``read_range`` and ``scan_batches``.

:meth:`Checker.final` repeats everything exhaustively once the run is over:
every acknowledged offset, every scan flavour of every log, and duplicates.
"""

from __future__ import annotations

import random
from collections import Counter

from server._config import OxiaConfig, S3Config
from server._errors import PartitionNotInitialized
from server._storage.metastore import InMemoryMetadataStore
from server._storage.objectstore import InMemoryObjectStore
from server.leaderless_log_reader import LeaderlessLogReader

from ._history import FAILED, History
from ._invariants import LogView, Snapshotter, check_log, describe
from ._pools import inline_pools

__all__ = ["Checker", "Violation"]

TP = tuple[str, int]
SCANS = ("iter_from", "iter_runs", "read_range", "scan_batches")


class Violation(Exception):
    """The run broke an invariant; the message lists what."""


class Checker:
    def __init__(self, meta: InMemoryMetadataStore, objects: InMemoryObjectStore, history: History,
                 oxia: OxiaConfig, s3: S3Config, tps: list[TP], rng: random.Random, *,
                 scan_every: int = 8) -> None:
        self._objects = objects
        self._history = history
        self._tps = tps
        self._rng = rng
        self._scan_every = scan_every
        self._snap = Snapshotter(meta, oxia.root_prefix)
        self.reader = inline_pools(LeaderlessLogReader(oxia, s3, metadata_store=meta, object_store=objects))
        self._prev: dict[TP, LogView] = {}
        self._first_seen: dict[TP, dict[int, bytes]] = {tp: {} for tp in tps}
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
            for i, payload in enumerate(attempt.payloads):
                self._saw(bad, attempt.tp, attempt.start_offset + i, payload, f"ack of append {attempt.id}")
            h.acked.setdefault(attempt.tp, {}).update(
                (attempt.start_offset + i, p) for i, p in enumerate(attempt.payloads))
            h.acked_offsets.setdefault(attempt.tp, []).extend(range(attempt.start_offset, attempt.end_offset + 1))
        h.new_acks = []
        for actor, tp, offset, payload in h.reads:
            self._saw(bad, tp, offset, payload, f"read by {actor}")
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
                self._scan(bad, tp, SCANS[(self._scan_turn // len(self._tps)) % len(SCANS)])
                self._scan_turn += 1
        if bad:
            self._fail(bad)

    def final(self) -> None:
        """Everything, exhaustively: every acknowledged offset, every scan."""
        bad: list[str] = []
        views = self._snap.views()
        objects = self._uris()
        for tp in self._tps:
            bad += check_log(tp, views.get(tp, LogView()), self._prev.get(tp), objects)
        for tp in self._tps:
            for offset in sorted(self._history.acked.get(tp, {})):
                self._read(bad, tp, offset)
            for flavour in SCANS:
                self._scan(bad, tp, flavour)
        if bad:
            self._fail(bad)

    # -- helpers ---------------------------------------------------------------------
    def _fail(self, bad: list[str]) -> None:
        """Raise with the problems and the metadata of every log they name
        (index entries as [start-end C|W]: COMPACTED or WAL)."""
        views = self._snap.views()
        named = [tp for tp in self._tps if any(f"{tp[0]}:{tp[1]}:" in line for line in bad)]
        raise Violation("\n".join(bad + ["state now: " + describe(tp, views.get(tp, LogView())) for tp in named]))

    def _uris(self) -> set[str]:
        if self._objects_dirty:
            self._object_uris = {f"s3://{b}/{k}" for (b, k) in list(self._objects.objects)}
            self._objects_dirty = False
        return self._object_uris

    def _saw(self, bad: list[str], tp: TP, offset: int, payload: bytes, how: str) -> None:
        """One value observed at ``offset``: it must be the only value ever
        seen there, and it must come from an append that may be in the log."""
        name = f"{tp[0]}:{tp[1]}"
        seen = self._first_seen[tp].setdefault(offset, payload)
        if seen != payload:
            bad.append(f"{name}: offset {offset} held {seen!r}, now {payload!r} ({how})")
        acked = self._history.acked.get(tp, {}).get(offset)
        if acked is not None and acked != payload:
            bad.append(f"{name}: offset {offset} was acknowledged as {acked!r} but holds {payload!r} ({how})")
        attempts = self._history.by_payload.get(payload)
        if not attempts:
            bad.append(f"{name}: offset {offset} holds {payload!r}, which nobody appended ({how})")
        elif all(a.status == FAILED for a in attempts):
            bad.append(f"{name}: offset {offset} holds {payload!r} of an append that failed definitely: "
                       f"{attempts[0].error} ({how})")
        elif attempts[0].tp != tp:
            bad.append(f"{name}: offset {offset} holds {payload!r}, appended to {attempts[0].tp} ({how})")

    def _sample_read(self, bad: list[str], tp: TP, view: LogView) -> None:
        acked = self._history.acked_offsets.get(tp)
        if view.entries and (not acked or self._rng.random() < 0.5):
            offset = self._rng.choice(view.entries).start
        elif acked:
            offset = self._rng.choice(acked)
        else:
            return
        self._read(bad, tp, offset)

    def _read(self, bad: list[str], tp: TP, offset: int) -> None:
        self.reads += 1
        try:
            rec = self.reader.read_offset(tp[0], tp[1], offset)
        except Exception as exc:  # noqa: BLE001 - any error reading an acknowledged offset is a finding
            bad.append(f"{tp[0]}:{tp[1]}: read_offset({offset}) raised {type(exc).__name__}: {exc}")
            return
        self._saw(bad, tp, offset, rec.payload, "checker read_offset")

    def _scan(self, bad: list[str], tp: TP, flavour: str) -> None:
        """Read the whole log one way; check every record and duplicates."""
        topic, partition = tp
        r = self.reader
        self.reads += 1
        try:
            hw = r.high_watermark(topic, partition)
            if flavour == "iter_from":
                got = [(x.offset, x.payload) for x in r.iter_from(topic, partition, 1)]
            elif flavour == "iter_runs":
                got = [(o, run.records[o - run.base_offset])
                       for run in r.iter_runs(topic, partition, 1) for o in range(run.first, run.last + 1)]
            elif flavour == "read_range":
                got = [(x.offset, x.payload) for x in r.read_range(topic, partition, 1, hw)] if hw else []
            else:
                nxt = 1
                for batch in (r.scan_batches(topic, partition, 1, hw) if hw else ()):
                    if batch.start_offset > nxt or batch.end_offset < nxt:
                        bad.append(f"{topic}:{partition}: scan_batches gave [{batch.start_offset}, "
                                   f"{batch.end_offset}] when offset {nxt} was next")
                        return
                    nxt = batch.end_offset + 1
                if nxt <= hw:
                    bad.append(f"{topic}:{partition}: scan_batches stopped at {nxt}, high watermark {hw}")
                return
        except PartitionNotInitialized:
            if self._history.acked.get(tp):
                bad.append(f"{topic}:{partition}: {flavour}: the log vanished after acknowledged appends")
            return
        except Exception as exc:  # noqa: BLE001 - any error of a full scan is a finding
            bad.append(f"{topic}:{partition}: {flavour} from 1 raised {type(exc).__name__}: {exc}")
            return
        if [o for o, _ in got] != list(range(1, len(got) + 1)) or (got and got[-1][0] < hw):
            bad.append(f"{topic}:{partition}: {flavour} from 1 returned offsets "
                       f"{[o for o, _ in got][:5]}... ({len(got)} records, high watermark {hw})")
        for offset, payload in got:
            self._saw(bad, tp, offset, payload, flavour)
        for payload, n in Counter(p for _, p in got).items():
            if n > 1 and n > self._history.may_hold(payload):
                bad.append(f"{topic}:{partition}: {payload!r} appears {n} times but was appended "
                           f"{self._history.may_hold(payload)} times without a definite failure")
