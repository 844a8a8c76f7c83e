"""Produce histories and their checker, in the spirit of Jepsen's Kafka checker.

A history is every produce attempt with its outcome, and every read. Both
harnesses record one: the simulator (``testing/sim``: one attempt per group
of an ``append_shared`` call) and the chaos run (``testing/chaos.py``: one
per ``topic_partitions`` item of a ``POST /produce``). The outcomes:

- ``ok``: acknowledged with offsets (``start_offset`` .. ``start_offset + n - 1``);
- ``failed``: definitely not written (an error other than ``OutcomeUnknown``,
  a refusal before anything was attempted, no connection at all);
- ``unknown``: the answer was lost or said ``OutcomeUnknown``, or the writer
  crashed: the batch may be in the log once, or not at all.

The simulator's attempts are ``None`` while in flight, which counts as
``unknown``. Every payload a harness sends is unique, so a value in the log
names the attempt and the position that produced it; the simulator may send
a batch again after an unknown outcome (``retry_of``), and then its records
may be in the log once per attempt that did not fail.

A read pass is everything one read returned (offset -> bytes per partition,
plus the offsets it could not read and why): *complete* if it read every
partition it names from offset 1 to the high watermark, else *incomplete*
(a consumer that followed the log while it was faulted, a point read): only
what it did return is judged. Two ways to judge:

- :func:`check` -- the whole history against read passes (the chaos run; the
  simulator's scans and final read-back);
- :class:`Tracker` -- observations as they arrive (the simulator, after
  every step): one value per offset, forever.

Every violation has one of the ``KINDS`` (a name and what it means: lost,
duplicate, failed_present, partial, torn, divergent, out_of_order ...).
Batch kinds are reported once per batch (the ``sources`` of a violation say
which reads showed it); ``unreadable`` once per contiguous range per read.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Callable, Iterable, Mapping, NamedTuple, Protocol, Sequence

from server._errors import OutcomeUnknown

__all__ = [
    "Outcome", "OK", "FAILED", "UNKNOWN", "OUTCOMES", "KINDS", "is_unknown_outcome",
    "Batch", "ProducedBatch", "ReadPass", "Violation", "CheckResult",
    "check", "check_order", "check_spans", "Tracker", "behind", "follower_gaps",
]

TP = tuple[str, int]


class Outcome(StrEnum):
    """How a produce attempt ended (the module docstring says what each means)."""

    OK = "ok"
    FAILED = "failed"
    UNKNOWN = "unknown"


OK, FAILED, UNKNOWN = Outcome.OK, Outcome.FAILED, Outcome.UNKNOWN
OUTCOMES = tuple(Outcome)

KINDS: dict[str, str] = {
    "lost": "an acknowledged record is not at its offset in a read that covered it",
    "ack_unreadable": "an acknowledged record's offset could not be read",
    "wrong_offset": "an acknowledged record is in the log, but not at the offset its ack named",
    "ack_overlap": "two acknowledgements named the same offset",
    "duplicate": "a record is in the log more often than attempts that may have written it (an idempotent "
                 "producer's: more than once)",
    "failed_present": "a record of a definitely failed batch is in the log",
    "partial": "a failed or unknown batch is in the log only in part",
    "torn": "a failed or unknown batch is in the log whole, but not contiguous and in order",
    "unexpected": "a value the test never sent (to that partition)",
    "unreadable": "offsets up to the high watermark that a read could not return",
    "divergent": "two observations of one offset (reads, or a read and an ack) differ",
    "read_mismatch": "one read returned an offset that a complete read (without an error there) did not",
    "out_of_order": "a scan returned offsets out of order, skipped or repeated one, or stopped short",
}


def is_unknown_outcome(error: BaseException) -> bool:
    """True if an append error leaves open whether the records were appended:
    only ``OutcomeUnknown``. Every other error is definite (SPEC 1.3), and the
    checker holds the writer to it: such a batch must never appear."""
    return isinstance(error, OutcomeUnknown)


class Batch(Protocol):
    """What the checks read of a produce attempt (:class:`ProducedBatch`, or
    the simulator's live attempt)."""

    batch_id: str
    payloads: tuple[bytes, ...]
    outcome: Outcome | None
    start_offset: int | None
    detail: str
    retry_of: str | None
    idempotent: bool
    """Sent by an idempotent producer (SPEC 7.12): stored once, however many attempts."""

    @property
    def tp(self) -> TP: ...

    @property
    def when(self) -> str: ...


@dataclass(frozen=True)
class ProducedBatch:
    """One produce attempt with its outcome."""

    batch_id: str
    """Unique in the history, e.g. ``p3-17-0`` (thread 3, request 17, item 0)."""
    topic: str
    partition: int
    payloads: tuple[bytes, ...]
    outcome: Outcome
    start_offset: int | None = None
    """First offset the acknowledgement named (``ok`` only)."""
    detail: str = ""
    """How the outcome was decided (status, error type), for reports."""
    sent_s: float | None = None
    """When the request was sent, seconds into the run (to line violations up with faults)."""
    answered_s: float | None = None
    """When its outcome was known, seconds into the run."""
    retry_of: str | None = None
    """The batch this one sends again, with the same payloads."""
    idempotent: bool = False
    """Sent with a producer id and sequence: every attempt of it is one write at most."""

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


def reached(records: Mapping[TP, Mapping[int, bytes]], topic: str, partition: int,
            positions: Mapping[int, int]) -> int:
    """The offset up to which a follower of ``topic`` is done with ``partition``: the last record
    it read, or where its client's position says it is (``positions``: llog's offset of the last
    record before it, which is Kafka's next offset), whichever is further. A Kafka client moves its
    position past records only by reading them or by resetting to the log start when retention
    took them; a follower stuck without a position is behind."""
    return max(max(records[(topic, partition)], default=0), positions.get(partition, 0))


def behind(records: Mapping[TP, Mapping[int, bytes]], topic: str, hws: Mapping[int, int],
           positions: Mapping[int, int]) -> bool:
    """Whether a follower of ``topic`` has not yet reached some partition's high watermark in ``hws``."""
    return any(hw > 0 and reached(records, topic, p, positions) < hw for p, hw in hws.items())


def follower_gaps(kind: str, who: str, records: Mapping[TP, Mapping[int, bytes]], topic: str,
                  hws: Mapping[int, int], log_starts: Mapping[int, int],
                  positions: Mapping[int, int]) -> list[Violation]:
    """What a follower that must miss nothing missed: ``{kind}_behind`` per partition it did not
    reach the end of (:func:`reached`), ``{kind}_skipped`` per partition with offsets (from the
    final log start) it was never given."""
    found = []
    for p, hw in sorted(hws.items()):
        seen = records[(topic, p)]
        done = reached(records, topic, p, positions)
        if hw > 0 and done < hw:
            found.append(Violation(f"{kind}_behind", topic, p, done, None, f"{who} read up to offset {done} of {hw}"))
        missed = [o for o in range(log_starts.get(p, 1), hw + 1) if o not in seen]
        if missed:
            found.append(Violation(f"{kind}_skipped", topic, p, missed[0], None,
                                   f"{len(missed)} of the offsets {log_starts.get(p, 1)}-{hw} never given to "
                                   f"{who} (first {missed[:5]})"))
    return found


@dataclass(frozen=True)
class ReadPass:
    """One read of some partitions: what it returned and what it could not."""

    source: str
    """Who read, e.g. ``library`` or ``consume@broker-2``."""
    records: Mapping[TP, Mapping[int, bytes]]
    """Per partition: offset -> value, everything the read returned."""
    errors: Mapping[TP, Mapping[int, str]] = field(default_factory=dict)
    """Per partition: offset -> error, offsets the read could not return."""
    complete: bool = True
    """False for a read that may have stopped anywhere and skipped what
    failed: only what it did return is checked (values never sent,
    duplicates, failed batches, wrong offsets, and agreement with the
    complete reads)."""
    log_start: Mapping[TP, int] = field(default_factory=dict)
    """Per partition: the log start the read began at (retention let go of
    what is below it, SPEC 7.10): a complete read covers only from there on."""

    def covers(self, tp: TP, offset: int) -> bool:
        """Whether a complete read must hold ``offset`` of ``tp`` (at or above its log start)."""
        return offset >= self.log_start.get(tp, 1)


class Violation(NamedTuple):
    kind: str
    """One of ``KINDS`` (or a harness's own, e.g. the chaos run's liveness kinds)."""
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


def _origin(tp: TP, offset: int, value: bytes, attempts: Sequence[Batch]) -> Violation | None:
    """What a value observed at ``offset`` must be: a record some attempt sent
    to this partition, and not only by attempts that failed definitely."""
    if not attempts:
        return Violation("unexpected", tp[0], tp[1], offset, None, f"value {value[:60]!r} was never sent")
    for a in attempts:
        if a.outcome != FAILED:
            return None
    b = attempts[-1]
    return Violation("failed_present", tp[0], tp[1], offset, b.batch_id,
                     f"{value!r} of a batch that failed ({b.detail}) is in the log{b.when}")


class Tracker:
    """Observations of a live log, judged as they arrive.

    One value per offset, forever: an acknowledgement fixes the value of its
    offsets, and the first value anything saw at an offset is the only one
    any later observation may see. ``attempts_of(tp, value)`` lists the
    attempts that sent ``value`` to ``tp`` (with their outcomes so far).
    """

    def __init__(self, attempts_of: Callable[[TP, bytes], Sequence[Batch]]) -> None:
        self._attempts_of = attempts_of
        self._acked: dict[tuple[TP, int], tuple[bytes, str]] = {}
        self._seen: dict[tuple[TP, int], tuple[bytes, str]] = {}

    def acknowledged(self, b: Batch) -> list[Violation]:
        """An acknowledgement of ``b`` at ``b.start_offset``."""
        assert b.start_offset is not None
        tp, bad = b.tp, []
        for i, value in enumerate(b.payloads):
            offset = b.start_offset + i
            other = self._acked.setdefault((tp, offset), (value, b.batch_id))
            if other[1] != b.batch_id:
                bad.append(Violation("ack_overlap", tp[0], tp[1], offset, b.batch_id,
                                     f"offset {offset} was also acknowledged to batch {other[1]}"))
            seen = self._seen.setdefault((tp, offset), (value, f"ack of {b.batch_id}"))
            if seen[0] != value:
                bad.append(Violation("lost", tp[0], tp[1], offset, b.batch_id,
                                     f"{value!r} acknowledged at {offset}, where {seen[1]} saw {seen[0]!r}"))
        return bad

    def observe(self, tp: TP, offset: int, value: bytes, source: str) -> list[Violation]:
        """``source`` read ``value`` at ``offset`` of ``tp``."""
        origin = _origin(tp, offset, value, self._attempts_of(tp, value))
        bad = [] if origin is None else [origin._replace(sources=(source,))]
        acked = self._acked.get((tp, offset))
        seen = self._seen.setdefault((tp, offset), (value, source))
        if acked is not None and acked[0] != value:
            bad.append(Violation("lost", tp[0], tp[1], offset, acked[1],
                                 f"acknowledged as {acked[0]!r}, holds {value!r}", (source,)))
        elif seen[0] != value:
            bad.append(Violation("divergent", tp[0], tp[1], offset, None,
                                 f"{seen[1]} saw {seen[0]!r}, {source} saw {value!r}", (source,)))
        return bad


def check_order(source: str, tp: TP, offsets: Sequence[int], high_watermark: int, first: int = 1) -> list[Violation]:
    """A scan from ``first`` returns ``first, first + 1, ...`` through the high
    watermark, each once."""
    last = offsets[-1] if offsets else first - 1
    if list(offsets) == list(range(first, first + len(offsets))) and last >= high_watermark:
        return []
    return [Violation("out_of_order", tp[0], tp[1], first, None,
                      f"{source} from {first} returned offsets {list(offsets[:5])}... ({len(offsets)} records, "
                      f"high watermark {high_watermark})", (source,))]


def check_spans(source: str, tp: TP, spans: Sequence[tuple[int, int]], high_watermark: int,
                first: int = 1) -> list[Violation]:
    """Batches ``(start, end)`` of a scan from ``first``: each holds the next
    offset not yet delivered (it may start earlier, over delivered ones), and
    together they reach the high watermark."""
    delivered: list[int] = []
    nxt = first
    for start, end in spans:
        if not start <= nxt <= end:
            delivered.append(start)  # out of order: check_order reports it
            break
        delivered.extend(range(nxt, end + 1))
        nxt = end + 1
    return check_order(source, tp, delivered, high_watermark, first)


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

    def report(self, key: tuple, kind: str, tp: TP, offset: int | None, batch_id: str | None, detail: str,
               source: str | None = None) -> None:
        """A violation of ``kind``, once per ``(kind, *key)``."""
        self.add((kind, *key), Violation(kind, tp[0], tp[1], offset, batch_id, detail), source)

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


def _writes(batches: Sequence[Batch]) -> tuple[list[list[Batch]], dict[tuple[TP, bytes], list[Batch]]]:
    """The batches grouped into writes (a batch and its retries), and
    (partition, value) -> the attempts that sent it."""
    groups: dict[str, list[Batch]] = {}
    sent: dict[tuple[TP, bytes], list[Batch]] = {}
    for b in batches:
        first = groups.get(b.retry_of) if b.retry_of is not None else None
        if first is not None and (first[0].tp, first[0].payloads) == (b.tp, b.payloads):
            first.append(b)
            groups[b.batch_id] = first
        else:
            for value in b.payloads:
                if (b.tp, value) in sent:
                    raise ValueError(f"payload {value!r} sent twice (batches {sent[(b.tp, value)][0].batch_id}, "
                                     f"{b.batch_id})")
            groups[b.batch_id] = [b]
        for value in b.payloads:
            sent.setdefault((b.tp, value), []).append(b)
    unique = {id(g): g for g in groups.values()}
    return list(unique.values()), sent


def check(batches: Sequence[Batch], reads: Sequence[ReadPass]) -> CheckResult:
    """Check the history against the reads; every violation found, none twice."""
    found = _Collector()
    writes, sent = _writes(batches)
    _check_acks(batches, found)
    for read in reads:
        _check_read(writes, sent, read, found)
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


def _check_acks(batches: Sequence[Batch], found: _Collector) -> None:
    owner: dict[tuple[TP, int], Batch] = {}
    for b in batches:
        if b.outcome != OK:
            continue
        assert b.start_offset is not None
        for i in range(len(b.payloads)):
            key = (b.tp, b.start_offset + i)
            other = owner.get(key)
            if other is not None:
                found.report((b.batch_id,), "ack_overlap", b.tp, key[1], b.batch_id,
                             f"offset {key[1]} was also acknowledged to batch {other.batch_id}{b.when}")
                break
            owner[key] = b


def _check_read(writes: Sequence[Sequence[Batch]], sent: Mapping[tuple[TP, bytes], Sequence[Batch]],
                read: ReadPass, found: _Collector) -> None:
    src = read.source
    where = _locate(read)
    for tp, records in read.records.items():
        for offset, value in records.items():
            origin = _origin(tp, offset, value, sent.get((tp, value), ()))
            if origin is not None and origin.kind == "unexpected":
                found.add(("unexpected", tp, offset), origin, src)
    for tp, errors in read.errors.items():
        for first, last in _ranges(errors):
            found.report((src, tp, first), "unreadable", tp, first, None,
                         f"offsets {first}..{last} ({last - first + 1}): {errors[first]}", src)
    for write in writes:
        if write[0].tp in read.records:  # a read that did not cover a partition says nothing of it
            _check_write(write, read, where, found)


def _check_write(write: Sequence[Batch], read: ReadPass, where: Mapping[tuple[TP, bytes], list[int]],
                 found: _Collector) -> None:
    """One write (a batch and its retries) against one read."""
    b, src = write[0], read.source
    offsets = [where.get((b.tp, v), []) for v in b.payloads]
    may_land = sum(1 for x in write if x.outcome != FAILED)
    allowed = 1 if b.idempotent else max(1, may_land)
    for i, at in enumerate(offsets):
        if len(at) > allowed:
            tries = f" ({len(write)} attempts)" if len(write) > 1 else ""
            what = "idempotent batch stored more than once" if b.idempotent else "batch"
            found.report((b.batch_id,), "duplicate", b.tp, at[0], b.batch_id, f"{b.outcome or 'in-flight'} "
                         f"{what}: record {i} {b.payloads[i]!r} is at offsets {at}{tries}{b.when}", src)
            break
    acked = [x for x in write if x.outcome == OK]
    for x in acked:
        _check_acknowledged(x, offsets, read, found)
    present = [i for i, at in enumerate(offsets) if at]
    if acked or not present:
        return
    if may_land == 0:
        last = write[-1]
        found.report((b.batch_id,), "failed_present", b.tp, offsets[present[0]][0], b.batch_id,
                     f"{len(present)} of {len(b.payloads)} records of a batch that failed "
                     f"({last.detail}) are in the log{last.when}", src)
    if read.complete:
        _check_whole(b, offsets, read.errors.get(b.tp, {}), allowed, src, found)


def _check_whole(b: Batch, offsets: list[list[int]], errors: Mapping[int, str], allowed: int, src: str,
                 found: _Collector) -> None:
    """A batch not acknowledged is in a complete read whole (each copy
    contiguous and in order) or not at all."""
    counts = [len(at) for at in offsets]
    present = [i for i, n in enumerate(counts) if n]
    if min(counts) == 0:
        short = [i for i, n in enumerate(counts) if n == 0]
    elif len(set(counts)) > 1 and max(counts) <= allowed:
        short = [i for i, n in enumerate(counts) if n < max(counts)]  # one of its copies is partial
    else:
        short = []
    if short:
        # Where the missing records would be if the batch were whole; if
        # the read could not return those offsets, "unreadable" covers it.
        base = offsets[present[0]][0] - present[0]
        missing = [i for i in short if base + i not in errors]
        if missing:
            found.report((b.batch_id,), "partial", b.tp, offsets[present[0]][0], b.batch_id,
                         f"{b.outcome or 'in-flight'} batch: {len(present)} of {len(b.payloads)} records present, "
                         f"records {missing[:5]} missing{b.when}", src)
    elif len(set(counts)) == 1 and counts[0] <= allowed:
        for copy in range(counts[0]):
            at = [o[copy] for o in offsets]
            if at != list(range(at[0], at[0] + len(at))):
                found.report((b.batch_id,), "torn", b.tp, at[0], b.batch_id,
                             f"{b.outcome or 'in-flight'} batch at offsets {at[:10]}{b.when}", src)
                break


def _check_acknowledged(b: Batch, offsets: list[list[int]], read: ReadPass, found: _Collector) -> None:
    """The acknowledged offsets hold the batch's records (a read that followed
    the log need only hold those it reached)."""
    assert b.start_offset is not None
    records, errors, src = read.records.get(b.tp, {}), read.errors.get(b.tp, {}), read.source
    for i, at in enumerate(offsets):
        want = b.start_offset + i
        if want in at or (not read.complete and not at) or (not at and not read.covers(b.tp, want)):
            continue
        if at:
            found.report((b.batch_id,), "wrong_offset", b.tp, want, b.batch_id,
                         f"record {i} {b.payloads[i]!r} acknowledged at {want} is at {at}{b.when}", src)
        elif want in errors:
            found.report((b.batch_id,), "ack_unreadable", b.tp, want, b.batch_id,
                         f"record {i} acknowledged at {want}{b.when} could not be read: {errors[want]}", src)
        else:
            there = records.get(want)
            holds = "(the read ended before it)" if there is None else f"(offset {want} holds {there[:40]!r})"
            found.report((b.batch_id,), "lost", b.tp, want, b.batch_id,
                         f"record {i} {b.payloads[i]!r} acknowledged at {want} is not in the log {holds}{b.when}",
                         src)
        return  # one violation per batch and read is enough


def _compare_reads(reads: Sequence[ReadPass], found: _Collector) -> None:
    for a_i, a in enumerate(reads):
        for b in reads[a_i + 1 :]:
            for tp in sorted(set(a.records) & set(b.records)):  # what both read
                ra, rb = a.records[tp], b.records[tp]
                ea, eb = a.errors.get(tp, {}), b.errors.get(tp, {})
                missing: dict[str, list[int]] = {b.source: [], a.source: []}
                for offset in sorted(set(ra) | set(rb)):
                    va, vb = ra.get(offset), rb.get(offset)
                    if va is not None and vb is not None:
                        if va != vb:
                            found.report((tp, offset), "divergent", tp, offset, None,
                                         f"{a.source} read {va[:40]!r}, {b.source} read {vb[:40]!r}", a.source)
                    elif va is None and offset not in ea and a.complete and a.covers(tp, offset):
                        missing[a.source].append(offset)
                    elif vb is None and offset not in eb and b.complete and b.covers(tp, offset):
                        missing[b.source].append(offset)
                for lacking, offs in missing.items():
                    other = a.source if lacking == b.source else b.source
                    for first, last in _ranges(offs):
                        found.report((lacking, other, tp, first), "read_mismatch", tp, first, None,
                                     f"{other} returned offsets {first}..{last}, {lacking} did not", lacking)
