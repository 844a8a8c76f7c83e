"""Idempotent producers: the per-log state and the check a batch passes (SPEC 4.1, 7.12).

A producer id and epoch come from ``InitProducerId`` (``_log/producer_ids.py``);
each batch a producer sends carries them with its ``baseSequence`` in its
RecordBatch v2 header (:func:`producer_batch_of`). Sequences count records,
from 0 per (producer, log, epoch), and wrap after ``2**31 - 1`` as Kafka's do.

The state of a log lives in ``meta/control`` next to the offset counter, so
the offset reservation (SPEC 7.3 C3) checks and records a batch in the same
conditional write: there is no moment where a batch is checked but not yet
recorded, whoever writes. Layout (absent when empty)::

    "producers": {"<producer_id>": "<epoch> <last_ms> <first_seq>:<last_seq>:<first_offset> ...", ...}

- ``epoch``: the producer's latest epoch in this log;
- ``last_ms``: when a batch of it was last recorded (its idle expiry);
- then its last :data:`MAX_BATCHES` batches in this log, oldest first
  (clients keep at most 5 requests in flight, so a retry is one of them),
  e.g. ``"0 1760000000020 0:1:1 2:2:7"``.

One string per producer, not a JSON object: every append rewrites the
record and many reads decode it, and a string is copied by the JSON codec,
not parsed; an entry is parsed only when its producer is looked at
(:class:`ProducerStates`), so a record of 24 producers encodes and decodes
about as fast as one without. The check (:func:`check`), as Kafka's
``ProducerAppendInfo``:

- an epoch below the state's: fenced (a newer instance took over);
- a new epoch: appended when it starts at sequence 0;
- a batch equal to a remembered one (same first and last sequence): a
  duplicate, answered with the offsets it got the first time;
- the next sequence (``last + 1``): appended;
- wholly at or below the last sequence otherwise: a duplicate too old to
  have its offsets remembered (Kafka's ``DUPLICATE_SEQUENCE_NUMBER``);
- anything else: out of order (a gap, or a batch straddling the last one);
- a producer the log has no state for is appended at sequence 0 only, and
  refused as out of order otherwise (Kafka's ``UNKNOWN_PRODUCER_ID`` before
  KIP-360). Kafka 2.5+ appends it at any sequence, trusting that the state
  expired; but then a first batch that failed while the next one was
  appended leaves a gap, and its retry would be answered "duplicate"
  without being stored. A producer forgotten here (idle past the expiry, or
  beyond the bound: :func:`prune`) re-initializes, as Kafka clients do on
  that error, and its new epoch starts at 0.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import Enum
from functools import cached_property
from typing import Iterable, Iterator, Mapping

from .._errors import CorruptBatch

__all__ = [
    "MAX_BATCHES",
    "NO_PRODUCER_ID",
    "SEQUENCE_MODULUS",
    "ProducerBatch",
    "ProducerEntry",
    "ProducerStates",
    "NO_PRODUCERS",
    "Verdict",
    "Check",
    "check",
    "record",
    "prune",
    "producer_batch_of",
]

MAX_BATCHES = 5
"""Batches remembered per producer and log (Kafka's ``NUM_BATCHES_TO_RETAIN``)."""
NO_PRODUCER_ID = -1
"""A batch header's ``producerId`` when the batch is not idempotent."""
SEQUENCE_MODULUS = 1 << 31
"""Sequences are int32 counters that wrap to 0 after ``2**31 - 1``."""
MAX_EPOCH = (1 << 15) - 1
_PRODUCER_FIELDS = struct.Struct(">qhi")  # producerId, producerEpoch, baseSequence at byte 43 of a batch
_RECORDS_COUNT = struct.Struct(">i")  # at byte 57


def _seq_add(seq: int, n: int) -> int:
    return (seq + n) % SEQUENCE_MODULUS


@dataclass(frozen=True, slots=True)
class ProducerBatch:
    """What identifies one idempotent batch: its producer, epoch and sequences."""

    producer_id: int
    epoch: int
    first_seq: int
    count: int
    """Records in the batch (each takes one sequence)."""

    @property
    def last_seq(self) -> int:
        return _seq_add(self.first_seq, self.count - 1)


def producer_batch_of(data: bytes | memoryview, pos: int = 0) -> ProducerBatch | None:
    """The idempotence fields of the (checked) batch at ``pos``; None when it has no producer id."""
    producer_id, epoch, first_seq = _PRODUCER_FIELDS.unpack_from(data, pos + 43)
    if producer_id == NO_PRODUCER_ID:
        return None
    return ProducerBatch(producer_id, epoch, first_seq, _RECORDS_COUNT.unpack_from(data, pos + 57)[0])


@dataclass(frozen=True)
class ProducerEntry:
    """One producer's state in one log."""

    epoch: int
    last_ms: int
    batches: tuple[tuple[int, int, int], ...]
    """``(first_seq, last_seq, first_offset)`` of its last batches, oldest first."""

    @property
    def last_seq(self) -> int:
        return self.batches[-1][1]

    @cached_property
    def text(self) -> str:
        """The stored form (module docstring)."""
        return " ".join((str(self.epoch), str(self.last_ms), *(f"{f}:{la}:{o}" for f, la, o in self.batches)))

    @classmethod
    def from_text(cls, text: str) -> ProducerEntry:
        """Raises ValueError on a malformed entry."""
        epoch, last_ms, *refs = text.split(" ")
        batches = tuple(tuple(int(x) for x in ref.split(":")) for ref in refs)
        if not batches or any(len(b) != 3 for b in batches):
            raise ValueError(f"a producer entry holds one or more first:last:offset batches, got {text!r}")
        entry = cls(int(epoch), int(last_ms), batches)  # type: ignore[arg-type]
        entry.__dict__["text"] = text
        return entry


class ProducerStates(Mapping[int, ProducerEntry]):
    """The producers' state of one log, by producer id: entries stay in their
    stored text until one is looked at (module docstring). Immutable."""

    __slots__ = ("_text", "_entries", "_oldest")

    def __init__(self, text: Mapping[int, str] | None = None, entries: Mapping[int, ProducerEntry] | None = None):
        self._text: dict[int, str] = dict(text or {})
        self._entries: dict[int, ProducerEntry] = dict(entries or {})
        self._oldest: int | None = None
        """The smallest ``last_ms`` once computed (appends only raise an entry's)."""
        for pid, e in self._entries.items():
            self._text.setdefault(pid, e.text)

    def __getitem__(self, pid: int) -> ProducerEntry:
        entry = self._entries.get(pid)
        if entry is None:
            text = self._text[pid]
            try:
                entry = ProducerEntry.from_text(text)
            except ValueError as exc:
                raise CorruptBatch(f"unreadable producer {pid} in meta/control: {exc}") from None
            self._entries[pid] = entry
        return entry

    def __iter__(self) -> Iterator[int]:
        return iter(self._text)

    def __len__(self) -> int:
        return len(self._text)

    def __contains__(self, pid: object) -> bool:
        return pid in self._text

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ProducerStates):
            return self._text == other._text
        return isinstance(other, Mapping) and dict(self.items()) == dict(other.items())

    def __hash__(self) -> int:
        return hash(frozenset(self._text.items()))

    def __repr__(self) -> str:
        return f"ProducerStates({self._text!r})"

    def last_ms(self, pid: int) -> int:
        """When producer ``pid`` last appended here, without decoding its batches."""
        entry = self._entries.get(pid)
        if entry is not None:
            return entry.last_ms
        try:
            return int(self._text[pid].split(" ", 2)[1])
        except (IndexError, ValueError):
            raise CorruptBatch(f"unreadable producer {pid} in meta/control: {self._text[pid]!r}") from None

    def oldest_ms(self) -> int:
        """The smallest ``last_ms`` of the producers (computed once per value)."""
        if self._oldest is None:
            self._oldest = min((self.last_ms(pid) for pid in self._text), default=0)
        return self._oldest

    def updated(self, entries: Mapping[int, ProducerEntry]) -> ProducerStates:
        """These states with ``entries`` set (the others kept as they are stored)."""
        out = ProducerStates.__new__(ProducerStates)
        out._text, out._entries = dict(self._text), dict(self._entries)
        for pid, e in entries.items():
            out._text[pid] = e.text
            out._entries[pid] = e
        # Recording a batch only moves its producer's last_ms up: the old oldest is a lower bound.
        out._oldest = self._oldest if all(pid in self._text for pid in entries) else None
        return out

    def only(self, pids: Iterable[int]) -> ProducerStates:
        keep = set(pids)
        return ProducerStates({p: t for p, t in self._text.items() if p in keep},
                              {p: e for p, e in self._entries.items() if p in keep})

    def to_json(self) -> dict[str, str]:
        return {str(pid): text for pid, text in self._text.items()}

    @classmethod
    def from_json(cls, doc: object) -> ProducerStates:
        """Raises TypeError/ValueError on a wrong shape (the record decoder reports it)."""
        if doc is None:
            return NO_PRODUCERS
        if not isinstance(doc, dict) or not all(isinstance(t, str) for t in doc.values()):
            raise TypeError("producers must be an object of strings")
        return cls({int(pid): text for pid, text in doc.items()})


NO_PRODUCERS = ProducerStates()


class Verdict(str, Enum):
    APPEND = "append"
    DUPLICATE = "duplicate"
    """Stored already; ``Check.first_offset`` is where."""
    OLD_DUPLICATE = "old_duplicate"
    """Stored already, longer ago than the remembered batches: no offsets."""
    OUT_OF_ORDER = "out_of_order"
    FENCED = "fenced"


@dataclass(frozen=True, slots=True)
class Check:
    verdict: Verdict
    first_offset: int | None = None
    reason: str = ""


_APPEND = Check(Verdict.APPEND)


def check(entry: ProducerEntry | None, batch: ProducerBatch) -> Check:
    """What the log does with ``batch`` given its producer's ``entry`` (module docstring)."""
    if entry is None:
        if batch.first_seq == 0:
            return _APPEND
        return Check(Verdict.OUT_OF_ORDER, reason=f"producer {batch.producer_id} has no state in this partition "
                                                  f"(never written, or forgotten after its idle expiry): its first "
                                                  f"batch here must have sequence 0, not {batch.first_seq}; "
                                                  "re-initialize the producer")
    if batch.epoch < entry.epoch:
        return Check(Verdict.FENCED, reason=f"producer {batch.producer_id} epoch {batch.epoch} is older than "
                                            f"the log's {entry.epoch}: a newer instance took over")
    if batch.epoch > entry.epoch:
        if batch.first_seq == 0:
            return _APPEND
        return Check(Verdict.OUT_OF_ORDER, reason=f"producer {batch.producer_id} epoch {batch.epoch} is new "
                                                  f"here and must start at sequence 0, not {batch.first_seq}")
    last = entry.last_seq
    if batch.first_seq == _seq_add(last, 1):  # the common case first: a remembered batch starts at or below last
        return _APPEND
    for first_seq, last_seq, first_offset in entry.batches:
        if first_seq == batch.first_seq and last_seq == batch.last_seq:
            return Check(Verdict.DUPLICATE, first_offset)
    if batch.first_seq <= batch.last_seq <= last:
        return Check(Verdict.OLD_DUPLICATE)
    return Check(Verdict.OUT_OF_ORDER, reason=f"producer {batch.producer_id} sent sequence {batch.first_seq}; "
                                              f"the log expects {_seq_add(last, 1)}")


def record(entry: ProducerEntry | None, batch: ProducerBatch, first_offset: int, now_ms: int) -> ProducerEntry:
    """``entry`` after ``batch`` was appended at ``first_offset``."""
    ref = (batch.first_seq, batch.last_seq, first_offset)
    tail = f"{ref[0]}:{ref[1]}:{first_offset}"
    if entry is None or entry.epoch != batch.epoch:
        new = ProducerEntry(batch.epoch, now_ms, (ref,))
        new.__dict__["text"] = f"{batch.epoch} {now_ms} {tail}"
        return new
    last_ms = max(now_ms, entry.last_ms)
    new = ProducerEntry(batch.epoch, last_ms, (*entry.batches[1 - MAX_BATCHES:], ref))
    # The stored form from the old one's, without formatting every batch again (every append does this).
    kept = entry.text.split(" ", 3 if len(entry.batches) >= MAX_BATCHES else 2)[-1]
    new.__dict__["text"] = f"{batch.epoch} {last_ms} {kept} {tail}"
    return new


def prune(producers: ProducerStates, now_ms: int, expiry_ms: int, max_producers: int) -> ProducerStates:
    """``producers`` without those idle longer than ``expiry_ms``, and then
    without the longest idle beyond ``max_producers``: the record stays small
    (a producer forgotten here must start again at sequence 0)."""
    if len(producers) <= max_producers and now_ms - producers.oldest_ms() <= expiry_ms:
        return producers  # the common case: nothing to forget, no entry looked at
    idle = {pid: producers.last_ms(pid) for pid in producers}
    kept = [pid for pid, last in idle.items() if now_ms - last <= expiry_ms]
    if len(kept) > max_producers:
        kept = sorted(kept, key=lambda pid: (idle[pid], pid))[-max_producers:]
    return producers if len(kept) == len(idle) else producers.only(kept)
