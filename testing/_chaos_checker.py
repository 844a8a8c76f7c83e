"""The chaos test's checker: a pure function over a produce history and reads.

Modelled on Jepsen's Kafka checker. The history is every produce batch the
test sent (one ``topic_partitions`` item of one ``POST /produce``) with its
outcome:

- ``ok``: acknowledged with offsets (``start_offset`` .. ``start_offset + n - 1``);
- ``failed``: definitely not written (an ``ok: false`` with an error type
  other than ``OutcomeUnknown``, a 4xx/503 before anything was attempted,
  or no connection at all);
- ``unknown``: the reply was lost (reset, timeout, 504, 500) or said
  ``OutcomeUnknown``: the batch may be in the log once, or not at all.

A read pass is one complete read of every partition from offset 1 after the
faults stopped (the library's ``iter_from``, or a broker's ``/consume``),
as offset -> bytes plus the offsets the pass could not read (with the error);
or an incomplete one (``complete=False``): what a consumer saw while
following the log during the faults. Whatever an incomplete read returned
must be in the complete reads at the same offset, whatever the batch's
outcome (a value once read cannot vanish).
Every payload the test sends is unique, so a value in the log names the
batch and the position in it that produced it.

Violation kinds (``KINDS`` has the one-line descriptions):

    lost            an acknowledged record is not in a read that covered its offset
    ack_unreadable  an acknowledged record's offset could not be read
    wrong_offset    an acknowledged record is in the log, but not at the offset its ack named
    ack_overlap     two acknowledgements named the same offset
    duplicate       a record of a batch appears at more than one offset
    failed_present  a record of a definitely failed batch is in the log
    partial         a failed or unknown batch is in the log only in part
    torn            a failed or unknown batch is in the log whole, but not contiguous and in order
    unexpected      a value the test never sent
    unreadable      offsets up to the high watermark that a read could not return
    divergent       two reads returned different values at one offset
    read_mismatch   one read returned an offset that a complete read (without an error there) did not

Batch kinds are reported once per batch (the ``sources`` of a violation say
which reads showed it); ``unreadable`` once per contiguous range per read.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Iterable, Mapping, NamedTuple, Sequence

__all__ = [
    "KINDS",
    "OK",
    "FAILED",
    "UNKNOWN",
    "OUTCOMES",
    "ProducedBatch",
    "ReadPass",
    "Violation",
    "CheckResult",
    "check",
]

OK = "ok"
FAILED = "failed"
UNKNOWN = "unknown"
OUTCOMES = (OK, FAILED, UNKNOWN)

KINDS: dict[str, str] = {
    "lost": "an acknowledged record is not in a read that covered its offset",
    "ack_unreadable": "an acknowledged record's offset could not be read",
    "wrong_offset": "an acknowledged record is in the log, but not at the offset its ack named",
    "ack_overlap": "two acknowledgements named the same offset",
    "duplicate": "a record of a batch appears at more than one offset",
    "failed_present": "a record of a definitely failed batch is in the log",
    "partial": "a failed or unknown batch is in the log only in part",
    "torn": "a failed or unknown batch is in the log whole, but not contiguous and in order",
    "unexpected": "a value the test never sent",
    "unreadable": "offsets up to the high watermark that a read could not return",
    "divergent": "two reads returned different values at one offset",
    "read_mismatch": "one read returned an offset that a complete read (without an error there) did not",
}

TP = tuple[str, int]


@dataclass(frozen=True)
class ProducedBatch:
    """One ``topic_partitions`` item of one produce request, with its outcome."""

    batch_id: str
    """Unique in the history, e.g. ``p3-17-0`` (thread 3, request 17, item 0)."""
    topic: str
    partition: int
    payloads: tuple[bytes, ...]
    outcome: str
    """``ok``, ``failed`` or ``unknown``."""
    start_offset: int | None = None
    """First offset the acknowledgement named (``ok`` only)."""
    detail: str = ""
    """How the outcome was decided (status, error type), for reports."""
    sent_s: float | None = None
    """When the request was sent, seconds into the run (to line violations up with faults)."""
    answered_s: float | None = None
    """When its outcome was known, seconds into the run."""

    def __post_init__(self) -> None:
        if self.outcome not in OUTCOMES:
            raise ValueError(f"outcome must be one of {OUTCOMES}, got {self.outcome!r}")
        if (self.outcome == OK) != (self.start_offset is not None):
            raise ValueError(f"batch {self.batch_id}: start_offset is required for, and only for, ok batches")

    @property
    def tp(self) -> TP:
        return (self.topic, self.partition)

    @property
    def when(self) -> str:
        """`` (sent at 7.1s, answered at 7.3s)`` when the times are known."""
        if self.sent_s is None or self.answered_s is None:
            return ""
        return f" (sent at {self.sent_s:.1f}s, answered at {self.answered_s:.1f}s)"


@dataclass(frozen=True)
class ReadPass:
    """One complete read of the partitions after the faults stopped."""

    source: str
    """Who read, e.g. ``library`` or ``consume@broker-2``."""
    records: Mapping[TP, Mapping[int, bytes]]
    """Per partition: offset -> value, everything the read returned."""
    errors: Mapping[TP, Mapping[int, str]] = field(default_factory=dict)
    """Per partition: offset -> error, offsets the read could not return."""
    complete: bool = True
    """False for a read that followed the log while it was written (and
    faulted): it may have stopped anywhere and skipped what failed, so only
    what it did return is checked (values never sent, duplicates, failed
    batches, wrong offsets, and agreement with the complete reads)."""


class Violation(NamedTuple):
    kind: str
    """One of ``KINDS``."""
    topic: str
    partition: int
    offset: int | None
    """The first offset concerned, when there is one."""
    batch_id: str | None
    detail: str
    sources: tuple[str, ...] = ()
    """The reads that showed it (empty for history-only checks)."""

    def describe(self) -> str:
        where = f"{self.topic}:{self.partition}" + (f"@{self.offset}" if self.offset is not None else "")
        batch = f" batch {self.batch_id}" if self.batch_id else ""
        seen = f" [{', '.join(self.sources)}]" if self.sources else ""
        return f"{self.kind}: {where}{batch}: {self.detail}{seen}"


@dataclass(frozen=True)
class CheckResult:
    violations: tuple[Violation, ...]
    batches: Mapping[str, int]
    """Batches per outcome."""
    records: Mapping[str, int]
    """Records per outcome."""
    unknown_present: int
    """Unknown-outcome batches found in the log (whole, once)."""
    unknown_absent: int
    reads: Mapping[str, int]
    """Records returned per read pass."""

    @property
    def ok(self) -> bool:
        return not self.violations

    def by_kind(self) -> dict[str, int]:
        return dict(Counter(v.kind for v in self.violations))

    def examples(self, per_kind: int = 3) -> dict[str, list[str]]:
        out: dict[str, list[str]] = defaultdict(list)
        for v in self.violations:
            if len(out[v.kind]) < per_kind:
                out[v.kind].append(v.describe())
        return dict(out)


class _Collector:
    """Violations keyed so the same finding from several reads is reported once."""

    def __init__(self) -> None:
        self._found: dict[tuple, Violation] = {}

    def add(self, key: tuple, violation: Violation, source: str | None = None) -> None:
        seen = self._found.get(key)
        if seen is None:
            self._found[key] = violation._replace(sources=(source,) if source else ())
        elif source and source not in seen.sources:
            self._found[key] = seen._replace(sources=(*seen.sources, source))

    def all(self) -> tuple[Violation, ...]:
        return tuple(self._found.values())


def _ranges(offsets: Iterable[int]) -> list[tuple[int, int]]:
    """Sorted offsets as inclusive runs: [1, 2, 3, 7] -> [(1, 3), (7, 7)]."""
    runs: list[tuple[int, int]] = []
    for o in sorted(offsets):
        if runs and o == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], o)
        else:
            runs.append((o, o))
    return runs


def check(batches: Sequence[ProducedBatch], reads: Sequence[ReadPass]) -> CheckResult:
    """Check the history against the reads; every violation found, none twice."""
    found = _Collector()
    sent: dict[tuple[TP, bytes], tuple[ProducedBatch, int]] = {}
    for b in batches:
        for i, value in enumerate(b.payloads):
            key = (b.tp, value)
            if key in sent:
                raise ValueError(f"payload {value!r} sent twice (batches {sent[key][0].batch_id}, {b.batch_id})")
            sent[key] = (b, i)

    _check_acks(batches, found)
    for read in reads:
        _check_read(batches, sent, read, found)
    _compare_reads(reads, found)

    unknown_present = unknown_absent = 0
    if reads:
        where = _locate(reads[0])
        for b in batches:
            if b.outcome == UNKNOWN:
                if any(where.get((b.tp, v)) for v in b.payloads):
                    unknown_present += 1
                else:
                    unknown_absent += 1
    return CheckResult(
        violations=found.all(),
        batches=dict(Counter(b.outcome for b in batches)),
        records={o: sum(len(b.payloads) for b in batches if b.outcome == o) for o in OUTCOMES},
        unknown_present=unknown_present,
        unknown_absent=unknown_absent,
        reads={r.source: sum(len(m) for m in r.records.values()) for r in reads},
    )


def _locate(read: ReadPass) -> dict[tuple[TP, bytes], list[int]]:
    """(partition, value) -> the offsets the read returned it at, ascending."""
    where: dict[tuple[TP, bytes], list[int]] = defaultdict(list)
    for tp, records in read.records.items():
        for offset in sorted(records):
            where[(tp, records[offset])].append(offset)
    return where


def _check_acks(batches: Sequence[ProducedBatch], found: _Collector) -> None:
    owner: dict[tuple[TP, int], ProducedBatch] = {}
    for b in batches:
        if b.outcome != OK:
            continue
        assert b.start_offset is not None
        for i in range(len(b.payloads)):
            key = (b.tp, b.start_offset + i)
            other = owner.get(key)
            if other is not None:
                found.add(
                    ("ack_overlap", b.batch_id),
                    Violation("ack_overlap", b.topic, b.partition, key[1], b.batch_id,
                              f"offset {key[1]} was also acknowledged to batch {other.batch_id}{b.when}"),
                )
                break
            owner[key] = b


def _check_read(
    batches: Sequence[ProducedBatch],
    sent: Mapping[tuple[TP, bytes], tuple[ProducedBatch, int]],
    read: ReadPass,
    found: _Collector,
) -> None:
    src = read.source
    where = _locate(read)
    for tp, records in read.records.items():
        for offset, value in records.items():
            if (tp, value) not in sent:
                found.add(
                    ("unexpected", tp, offset),
                    Violation("unexpected", tp[0], tp[1], offset, None, f"value {value[:60]!r} was never sent"),
                    src,
                )
    for tp, errors in read.errors.items():
        for first, last in _ranges(errors):
            found.add(
                ("unreadable", src, tp, first),
                Violation("unreadable", tp[0], tp[1], first, None,
                          f"offsets {first}..{last} ({last - first + 1}): {errors[first]}"),
                src,
            )

    for b in batches:
        records = read.records.get(b.tp, {})
        errors = read.errors.get(b.tp, {})
        offsets = [where.get((b.tp, v), []) for v in b.payloads]
        for i, at in enumerate(offsets):
            if len(at) > 1:
                found.add(
                    ("duplicate", b.batch_id),
                    Violation("duplicate", b.topic, b.partition, at[0], b.batch_id,
                              f"{b.outcome} batch: record {i} {b.payloads[i]!r} is at offsets {at}{b.when}"),
                    src,
                )
                break
        if b.outcome == OK:
            _check_acknowledged(b, offsets, records, errors, src, found, read.complete)
            continue
        present = [i for i, at in enumerate(offsets) if at]
        if not present:
            continue
        if b.outcome == FAILED:
            found.add(
                ("failed_present", b.batch_id),
                Violation("failed_present", b.topic, b.partition, offsets[present[0]][0], b.batch_id,
                          f"{len(present)} of {len(b.payloads)} records of a batch that failed "
                          f"({b.detail}) are in the log{b.when}"),
                src,
            )
        if not read.complete:
            continue
        if len(present) < len(b.payloads):
            # Where the missing records would be if the batch were whole; if
            # the read could not return those offsets, "unreadable" covers it.
            base = offsets[present[0]][0] - present[0]
            missing = [i for i, at in enumerate(offsets) if not at and base + i not in errors]
            if missing:
                found.add(
                    ("partial", b.batch_id),
                    Violation("partial", b.topic, b.partition, offsets[present[0]][0], b.batch_id,
                              f"{b.outcome} batch: {len(present)} of {len(b.payloads)} records present, "
                              f"records {missing[:5]} missing{b.when}"),
                    src,
                )
        elif all(len(at) == 1 for at in offsets):
            first = offsets[0][0]
            if [at[0] for at in offsets] != list(range(first, first + len(offsets))):
                found.add(
                    ("torn", b.batch_id),
                    Violation("torn", b.topic, b.partition, first, b.batch_id,
                              f"{b.outcome} batch at offsets {[at[0] for at in offsets][:10]}{b.when}"),
                    src,
                )


def _check_acknowledged(
    b: ProducedBatch,
    offsets: list[list[int]],
    records: Mapping[int, bytes],
    errors: Mapping[int, str],
    src: str,
    found: _Collector,
    complete: bool,
) -> None:
    assert b.start_offset is not None
    for i, at in enumerate(offsets):
        want = b.start_offset + i
        if want in at:
            continue
        if not complete and not at:
            continue  # a read that followed the log need not have reached it
        if at:
            found.add(
                ("wrong_offset", b.batch_id),
                Violation("wrong_offset", b.topic, b.partition, want, b.batch_id,
                          f"record {i} {b.payloads[i]!r} acknowledged at {want} is at {at}{b.when}"),
                src,
            )
        elif want in errors:
            found.add(
                ("ack_unreadable", b.batch_id),
                Violation("ack_unreadable", b.topic, b.partition, want, b.batch_id,
                          f"record {i} acknowledged at {want}{b.when} could not be read: {errors[want]}"),
                src,
            )
        else:
            there = records.get(want)
            found.add(
                ("lost", b.batch_id),
                Violation("lost", b.topic, b.partition, want, b.batch_id,
                          f"record {i} {b.payloads[i]!r} acknowledged at {want} is not in the log "
                          + ("(the read ended before it)" if there is None else f"(offset {want} holds {there[:40]!r})")
                          + b.when),
                src,
            )
        return  # one violation per batch and read is enough


def _compare_reads(reads: Sequence[ReadPass], found: _Collector) -> None:
    for a_i, a in enumerate(reads):
        for b in reads[a_i + 1 :]:
            tps = set(a.records) | set(b.records)
            for tp in sorted(tps):
                ra, rb = a.records.get(tp, {}), b.records.get(tp, {})
                ea, eb = a.errors.get(tp, {}), b.errors.get(tp, {})
                missing: dict[str, list[int]] = {b.source: [], a.source: []}
                for offset in sorted(set(ra) | set(rb)):
                    va, vb = ra.get(offset), rb.get(offset)
                    if va is not None and vb is not None:
                        if va != vb:
                            found.add(
                                ("divergent", tp, offset),
                                Violation("divergent", tp[0], tp[1], offset, None,
                                          f"{a.source} read {va[:40]!r}, {b.source} read {vb[:40]!r}"),
                                a.source,
                            )
                    elif va is None and offset not in ea and a.complete:
                        missing[a.source].append(offset)
                    elif vb is None and offset not in eb and b.complete:
                        missing[b.source].append(offset)
                for lacking, offs in missing.items():
                    other = a.source if lacking == b.source else b.source
                    for first, last in _ranges(offs):
                        found.add(
                            ("read_mismatch", lacking, other, tp, first),
                            Violation("read_mismatch", tp[0], tp[1], first, None,
                                      f"{other} returned offsets {first}..{last}, {lacking} did not"),
                            lacking,
                        )
