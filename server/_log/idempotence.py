"""What a reservation appends when a group holds idempotent batches (SPEC 7.12).

The writer's commit asks :func:`plan` on the control record it is about to
compare-and-set: which batches, from a given one on, are answered without
being appended (duplicates, refusals), which run of batches after them is
appended, and the producers' state the reservation writes with it. A batch
is checked against the state as the batches before it in the same run left
it, so two batches of one producer in one flush follow each other. Batches
after a refused or duplicate one go to the next reservation: one pending
append covers one contiguous byte range of the shared blob.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable

from .._config import ProducerStateConfig
from .._errors import LlogError, OutcomeUnknown, OutOfOrderSequence, ProducerFenced
from .._metrics import LlogMetrics
from .._protocol.keys import PartitionKeys, TopicPartition
from .._protocol.producer_state import Check, ProducerEntry, ProducerStates, Verdict, check, prune, record
from .._protocol.records import ControlRecord, PendingAppend
from .._protocol.structs import AppendResult, BatchOutcome, SharedAppendGroup
from .staging import StagedBatch

__all__ = ["Plan", "plan", "answer", "group_result", "commit_checked", "REFUSED"]

log = logging.getLogger(__name__)

REFUSED = (Verdict.OUT_OF_ORDER, Verdict.FENCED)
"""Verdicts the writer decides only on a control record read from Oxia (never a cached copy)."""
_APPENDED = Check(Verdict.APPEND)


@dataclass(frozen=True)
class Plan:
    """What one reservation does."""

    answers: tuple[tuple[int, Check], ...]
    """Batches answered without being appended (duplicates, refusals), by index."""
    run_lo: int
    run_hi: int
    """The batches ``[run_lo, run_hi)`` are appended, in order, from the counter."""
    pending: PendingAppend | None
    """The run's pending append (offsets still 0); None: nothing to append."""
    producers: ProducerStates
    """The producers' state the reservation writes (pruned, the run recorded)."""

    @property
    def refuses(self) -> bool:
        return any(v.verdict in REFUSED for _, v in self.answers)


def plan(control: ControlRecord, template: PendingAppend, batches: tuple[StagedBatch, ...] | None, first: int,
         now_ms: int, config: ProducerStateConfig, new_append_id: Callable[[], str]) -> Plan:
    """The reservation on ``control`` of ``template`` (all of it when ``batches``
    is None, else the batches from ``first`` on: module docstring)."""
    producers = control.producers
    if producers:
        producers = prune(producers, now_ms, config.expiration_ms, config.max_per_partition)
    if batches is None:
        return Plan((), 0, 0, template, producers)
    answers: list[tuple[int, Check]] = []
    k, n = first, len(batches)
    run_lo, appended = -1, 0
    recorded: dict[int, ProducerEntry] = {}
    while k < n:
        b = batches[k]
        if b.producer is not None:
            pid = b.producer.producer_id
            entry = recorded[pid] if pid in recorded else producers.get(pid)
            verdict = check(entry, b.producer)
            if verdict.verdict is not Verdict.APPEND:
                if run_lo >= 0:
                    break  # the run ends here; this batch is the next reservation's
                answers.append((k, verdict))
                k += 1
                continue
            recorded[pid] = record(entry, b.producer, control.sequence_counter + appended, now_ms)
        if run_lo < 0:
            run_lo = k
        appended += b.count
        k += 1
    if run_lo < 0:
        run_lo = k
    if run_lo == k:
        return Plan(tuple(answers), k, k, None, control.producers)
    producers = producers.updated(recorded)
    if len(producers) > config.max_per_partition:
        producers = prune(producers, now_ms, config.expiration_ms, config.max_per_partition)
    run = batches[run_lo:k]
    pending = PendingAppend(
        new_append_id(), 0, 0, appended, template.entry_type, template.data_key, template.encoding,
        template.byte_offset + run[0].byte_lo, run[-1].byte_hi - run[0].byte_lo,  # type: ignore[operator]
        template.created_at_ms, max(b.max_timestamp for b in run),
    )
    return Plan(tuple(answers), run_lo, k, pending, producers)


def answer(verdict: Check, batch: StagedBatch, tp: TopicPartition) -> BatchOutcome:
    """The outcome of a batch answered without being appended."""
    if verdict.verdict is Verdict.DUPLICATE:
        start = verdict.first_offset
        return BatchOutcome(start, start + batch.count - 1, duplicate=True)  # type: ignore[operator]
    if verdict.verdict is Verdict.OLD_DUPLICATE:
        return BatchOutcome(None, None, duplicate=True)
    cls = ProducerFenced if verdict.verdict is Verdict.FENCED else OutOfOrderSequence
    return BatchOutcome(None, None, error=cls(verdict.reason, topic=tp.topic, partition=tp.partition))


def group_result(group: SharedAppendGroup, outcomes: tuple[BatchOutcome, ...]) -> AppendResult:
    """A checked group's result: one batch's outcome as the group's; for several,
    the first error, or the offsets when they were appended in one run."""
    tp = group.tp
    if len(outcomes) == 1:
        (o,) = outcomes
        return AppendResult(tp.topic, tp.partition, group.count, o.start_offset, o.end_offset, o.index_key,
                            o.wal_uri, error=o.error, duplicate=o.duplicate, batches=outcomes)
    error = next((o.error for o in outcomes if o.error is not None), None)
    fresh = all(o.error is None and not o.duplicate for o in outcomes) and all(
        a.end_offset + 1 == b.start_offset for a, b in zip(outcomes, outcomes[1:]))  # type: ignore[operator]
    start, end = (outcomes[0].start_offset, outcomes[-1].end_offset) if fresh else (None, None)
    last = outcomes[-1]
    return AppendResult(tp.topic, tp.partition, group.count, start, end, last.index_key if fresh else None,
                        last.wal_uri if fresh else None, error=error, duplicate=all(o.duplicate for o in outcomes),
                        batches=outcomes)


Commit = Callable[[PartitionKeys, PendingAppend, "tuple[StagedBatch, ...] | None", int], "tuple[int, Plan]"]
"""The writer's reservation: reserve what :func:`plan` picks from a batch on;
returns the first offset reserved and the plan."""


def commit_checked(commit: Commit, keys: PartitionKeys, group: SharedAppendGroup, template: PendingAppend,
                   batches: tuple[StagedBatch, ...], metrics: LlogMetrics) -> AppendResult:
    """Commit a group holding idempotent batches: reservations one after
    another, each appending the run of batches :func:`plan` picks and
    answering those before it, until every batch has its outcome. An error
    fails the batches not answered yet; never raises."""
    tp = keys.tp
    outcomes: list[BatchOutcome | None] = [None] * len(batches)
    error: LlogError | None = None
    i = 0
    try:
        while i < len(batches):
            start, planned = commit(keys, template, batches, i)
            for k, verdict in planned.answers:
                outcomes[k] = o = answer(verdict, batches[k], tp)
                if o.duplicate:
                    metrics.inc("writer_duplicate_batches_total")
                else:
                    metrics.inc("writer_refused_batches_total", error=type(o.error).__name__)
            if planned.pending is not None:
                run_end = start + planned.pending.msg_count - 1
                where = {"index_key": keys.index(run_end), "wal_uri": planned.pending.data_key}
            for k in range(planned.run_lo, planned.run_hi):
                outcomes[k] = BatchOutcome(start, start + batches[k].count - 1, **where)
                start += batches[k].count
            i = planned.run_hi  # past the answered ones too: the run, or all of them, ends there
    except LlogError as exc:
        metrics.inc("writer_commit_failures_total", error=type(exc).__name__)
        error = exc
    except Exception as exc:  # a bug: what it struck may be committed
        log.exception("unexpected error committing %s", tp)
        error = OutcomeUnknown(f"internal error while committing: {exc!r}", topic=tp.topic, partition=tp.partition)
    done = tuple(o if o is not None else BatchOutcome(None, None, error=error) for o in outcomes)
    appended = [b for b, o in zip(batches, done) if o.error is None and not o.duplicate]
    metrics.inc("writer_records_total", sum(b.count for b in appended))
    metrics.inc("writer_payload_bytes_total", sum(b.byte_hi - b.byte_lo for b in appended))
    return group_result(group, done)
