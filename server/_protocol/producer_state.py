"""Idempotent producers: the per-log state and the check a batch passes (SPEC 4.1, 7.12).

A producer id and epoch come from ``InitProducerId`` (``_log/producer_ids.py``);
each batch a producer sends carries them with its ``baseSequence`` in its
RecordBatch v2 header (:func:`producer_batch_of`). Sequences count records,
from 0 per (producer, log, epoch), and wrap after ``2**31 - 1`` as Kafka's do.

The state of a log lives in ``meta/control`` next to the offset counter, so
the offset reservation (SPEC 7.3 C3) checks and records a batch in the same
conditional write: there is no moment where a batch is checked but not yet
recorded, whoever writes. Layout (absent when empty)::

    "producers": {
      "<producer_id>": {
        "epoch":   <int>,        the producer's latest epoch in this log
        "last_ms": <int>,        when a batch of it was last recorded (expiry)
        "batches": [[first_seq, last_seq, first_offset], ...]
      }
    }

``batches`` are the producer's last :data:`MAX_BATCHES` batches in this log,
oldest first (clients keep at most 5 requests in flight, so a retry is one
of them). The check (:func:`check`), as Kafka's ``ProducerAppendInfo``:

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
from typing import Any, Mapping

__all__ = [
    "MAX_BATCHES",
    "NO_PRODUCER_ID",
    "SEQUENCE_MODULUS",
    "ProducerBatch",
    "ProducerEntry",
    "Verdict",
    "Check",
    "check",
    "record",
    "prune",
    "producer_batch_of",
    "encode_producers",
    "decode_producers",
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


@dataclass(frozen=True, slots=True)
class ProducerEntry:
    """One producer's state in one log."""

    epoch: int
    last_ms: int
    batches: tuple[tuple[int, int, int], ...]
    """``(first_seq, last_seq, first_offset)`` of its last batches, oldest first."""

    @property
    def last_seq(self) -> int:
        return self.batches[-1][1]

    def to_json(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "last_ms": self.last_ms, "batches": [list(b) for b in self.batches]}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> ProducerEntry:
        batches = tuple((int(f), int(la), int(o)) for f, la, o in doc["batches"])
        if not batches:
            raise ValueError("a producer entry holds at least one batch")
        return cls(int(doc["epoch"]), int(doc["last_ms"]), batches)


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
    for first_seq, last_seq, first_offset in entry.batches:
        if first_seq == batch.first_seq and last_seq == batch.last_seq:
            return Check(Verdict.DUPLICATE, first_offset)
    last = entry.last_seq
    if batch.first_seq == _seq_add(last, 1):
        return _APPEND
    if batch.first_seq <= batch.last_seq <= last:
        return Check(Verdict.OLD_DUPLICATE)
    return Check(Verdict.OUT_OF_ORDER, reason=f"producer {batch.producer_id} sent sequence {batch.first_seq}; "
                                              f"the log expects {_seq_add(last, 1)}")


def record(entry: ProducerEntry | None, batch: ProducerBatch, first_offset: int, now_ms: int) -> ProducerEntry:
    """``entry`` after ``batch`` was appended at ``first_offset``."""
    ref = (batch.first_seq, batch.last_seq, first_offset)
    if entry is None or entry.epoch != batch.epoch:
        return ProducerEntry(batch.epoch, now_ms, (ref,))
    return ProducerEntry(batch.epoch, max(now_ms, entry.last_ms), (*entry.batches[1 - MAX_BATCHES:], ref))


def prune(producers: Mapping[int, ProducerEntry], now_ms: int, expiry_ms: int,
          max_producers: int) -> dict[int, ProducerEntry]:
    """``producers`` without those idle longer than ``expiry_ms``, and then
    without the longest idle beyond ``max_producers``: the record stays small
    (a producer forgotten here is appended at any sequence again)."""
    kept = {pid: e for pid, e in producers.items() if now_ms - e.last_ms <= expiry_ms}
    if len(kept) > max_producers:
        newest = sorted(kept.items(), key=lambda item: (item[1].last_ms, item[0]))[-max_producers:]
        kept = dict(sorted(newest))
    return kept


def encode_producers(producers: Mapping[int, ProducerEntry]) -> dict[str, Any]:
    return {str(pid): e.to_json() for pid, e in producers.items()}


def decode_producers(doc: object) -> dict[int, ProducerEntry]:
    """Raises ValueError/TypeError/KeyError on a wrong shape (the record decoder reports it)."""
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise TypeError("producers must be an object")
    return {int(pid): ProducerEntry.from_json(e) for pid, e in doc.items()}
