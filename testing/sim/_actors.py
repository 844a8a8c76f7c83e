"""The actors: what each simulated process does, in its own thread.

Each actor is a loop of protocol operations on the real classes, built over
the scheduling store wrappers. A ``SimCrash`` raised at a scheduling point
ends the current operation like a SIGKILL: the actor drops its object (a
writer's control cache, a compactor's state) and a fresh instance carries
on, as a restarted process would. Errors a correct run can produce under
the injected faults are expected; any other error is a violation recorded
in the history.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Callable

from server._catalogue.topic_config import TopicConfig
from server._errors import (
    CompactionConflict,
    ConcurrencyConflict,
    LlogError,
    MetadataStoreError,
    ObjectNotFound,
    ObjectStoreError,
    OffsetOutOfRange,
    OutOfOrderSequence,
    PartitionFenced,
    PartitionNotInitialized,
    ProducerFenced,
)
from server._protocol.constants import REFERENCE_DEADLINE_MS
from server._protocol.structs import ProducerSequence, SharedAppendGroup

from ._clock import SimClock
from ..history import Outcome
from ._history import History
from ._scheduler import Scheduler, SimCrash

__all__ = ["World", "writer", "idempotent_writer", "compactor", "fencer", "vacuum", "reader", "retainer",
           "record_deleter", "topic_deleter"]

TP = tuple[str, int]
JUMP_MARGIN_MS = 5_000
"""Room a time jump leaves below ``G - D`` for the steps of the operation."""


@dataclass
class World:
    """What every actor shares: the scheduler, clock, history and factories
    for fresh protocol objects over the scheduling stores."""

    sched: Scheduler
    clock: SimClock
    history: History
    tps: list[TP]
    new_writer: Callable[[], object]
    new_compactor: Callable[[], object]
    new_reader: Callable[[], object]
    new_vacuum: Callable[[], object]
    grace_ms: int
    retain: Callable[[TP, TopicConfig], object] | None = None
    """One retention pass (SPEC 7.10) over a log, under a topic config."""
    delete_records: Callable[[TP, int | None], object] | None = None
    """Move a log's start to an offset (None: the counter), as Kafka's DeleteRecords (SPEC 7.13)."""
    retire: Callable[[TP], bool] | None = None
    """Retire a log (a deleted topic, SPEC 7.11); True once its cursor is at its start."""
    revive: Callable[[TP], bool] | None = None
    """Revive a retired log (the topic's name created again)."""
    new_producer_ids: Callable[[], object] | None = None
    """A fresh ``ProducerIds`` over the scheduling stores."""
    retirements: dict[TP, int] = field(default_factory=dict)
    """Times each log was retired (its producers forgotten, SPEC 7.11)."""

    def nap(self, seconds: float) -> None:
        """Idle a while; a crash while idle is only a restart."""
        try:
            self.sched.sleep(seconds)
        except SimCrash:
            pass

    def jump(self, ms: int) -> None:
        """Move time forward as far as the operations in flight allow."""
        try:
            self.sched.point("time.jump", f"+{ms}ms")
        except SimCrash:
            return
        ms = int(min(ms, self.max_jump_ms()))
        if ms > 0:
            self.sched.faults.counts["grace_jump"] += 1
            self.clock.advance(ms)

    def max_jump_ms(self) -> float:
        """SPEC 7.0 assumes an operation does not take longer than ``G - D``
        between writing an object and referencing it (the blob age check and
        the reference are moments apart). A jump larger than that while an
        append or compaction is in flight would model a stall the protocol
        does not claim to survive, so jumps are capped to keep it true."""
        refs = self.history.references_in_flight
        if not refs:
            return float("inf")
        oldest = min(refs.values())
        return max(0.0, self.grace_ms - REFERENCE_DEADLINE_MS - JUMP_MARGIN_MS - (self.clock.elapsed_ms - oldest))


def _expected(exc: LlogError, *allowed: type[LlogError]) -> bool:
    return isinstance(exc, allowed) and not isinstance(exc, ObjectNotFound)


def writer(world: World, name: str, rng: random.Random, tps: list[TP], appends: int) -> None:
    h = world.history
    w = world.new_writer()
    for tp in tps:
        for _ in range(10):
            try:
                w.initialize_partition(*tp)
                break
            except SimCrash:
                w = world.new_writer()
            except LlogError as exc:
                if not _expected(exc, MetadataStoreError):
                    h.violations.append(f"{name}: initialize_partition{tp} raised {exc!r}")
    retry: list[tuple[TP, tuple[bytes, ...]]] = []
    for n in range(appends):
        if retry:
            groups, retry = retry, []
        else:
            k = 2 if len(tps) > 1 and rng.random() < 0.35 else 1
            groups = [(tp, tuple(f"{name}-{n}-{g}-{i}".encode() for i in range(rng.randint(1, 3))))
                      for g, tp in enumerate(rng.sample(tps, k))]
        attempts = [h.begin(name, tp, payloads) for tp, payloads in groups]
        h.references_in_flight[name] = world.clock.elapsed_ms
        try:
            results = w.append_shared_results([SharedAppendGroup(tp[0], tp[1], list(p)) for tp, p in groups])
        except SimCrash:
            for a in attempts:
                h.crashed(a)
            w = world.new_writer()
            world.nap(rng.uniform(0.001, 0.2))
            results = None
        except LlogError as exc:
            h.violations.append(f"{name}: append_shared_results raised {exc!r}")
            results = None
        finally:
            h.references_in_flight.pop(name, None)
        if results is not None:
            for a, r in zip(attempts, results):
                if r.error is not None:
                    h.fail(a, r.error)
                    if isinstance(r.error, ObjectNotFound):
                        h.violations.append(f"{name}: append {a.batch_id} failed with {r.error!r}")
                else:
                    h.acknowledge(a, r.start_offset, r.end_offset)
        # A producer that cannot tell whether its append landed may send it
        # again (at-least-once): the records may then appear twice.
        retry = [(a.tp, a.payloads) for a in attempts if a.outcome == Outcome.UNKNOWN and rng.random() < 0.5]
        if rng.random() < 0.05:
            _close(w)
            w = world.new_writer()
        if rng.random() < 0.3:
            world.nap(rng.uniform(0.001, 0.05))
    if rng.random() < 0.5:
        _close(w)


def _init_producer(world: World, name: str, h: History):
    """The named producer's next epoch (InitProducerId), retried through crashes and store faults."""
    for _ in range(30):
        try:
            return world.new_producer_ids().init(name)  # type: ignore[misc]
        except SimCrash:
            pass
        except LlogError as exc:
            if not _expected(exc, MetadataStoreError, ConcurrencyConflict):
                h.violations.append(f"{name}: init producer raised {exc!r}")
                return None
        world.nap(0.01)
    return None


def idempotent_writer(world: World, name: str, rng: random.Random, tps: list[TP], appends: int) -> None:
    """An idempotent producer (SPEC 7.12): each batch carries its producer id,
    epoch and sequence, and is sent until its outcome is decided -- again
    after an unknown outcome or a crash, sometimes through another writer
    (another broker, with a stale cache). Every batch must be stored once:
    answered appended, or a duplicate with the offsets it got the first time;
    an out-of-order or fenced answer is a violation unless an earlier batch
    of the same call to that log was not appended. Now and then the producer
    re-initializes (a new epoch, sequences from 0); once the new epoch has
    written to a log, the old instance sends one more batch there, which
    must be refused as fenced and never stored (unless the log was retired
    since: a deleted topic forgets its producers, SPEC 7.11)."""
    h = world.history
    ident = _init_producer(world, name, h)
    if ident is None:
        return
    retired = dict(world.retirements)  # as the epoch began: a retired log forgets its producers
    w = world.new_writer()
    seq = {tp: 0 for tp in tps}
    zombie = None  # (the previous identity, its next sequences) until the new epoch writes
    for _ in range(appends):
        k = 2 if len(tps) > 1 and rng.random() < 0.35 else 1
        plan: list[tuple[TP, int, tuple[bytes, ...]]] = []
        for tp in rng.sample(tps, k):
            for _ in range(2 if rng.random() < 0.25 else 1):  # two batches of one producer in one flush
                first = seq[tp] + sum(len(p) for t, _, p in plan if t == tp)
                plan.append((tp, first, tuple(f"{name}-e{ident.producer_epoch}-{tp[1]}-{first + i}".encode()
                                              for i in range(rng.randint(1, 3)))))
        verdict = _send_until_decided(world, name, rng, h, w, ident, plan, retired)
        if verdict == "stuck":
            return  # an outcome that stays unknown: a later sequence could not follow it
        if verdict == "forgotten":  # the topic was deleted and created again: start a new epoch
            ident, zombie = _init_producer(world, name, h), None
            if ident is None:
                return
            retired, seq = dict(world.retirements), {tp: 0 for tp in tps}
            continue
        for tp, first, payloads in plan:
            seq[tp] = max(seq[tp], first + len(payloads))
        if zombie is not None:
            tp = plan[0][0]
            _zombie(world, name, h, world.new_writer(), zombie[0], tp, zombie[1][tp], zombie[2].get(tp, 0))
            zombie = None
        if rng.random() < 0.3:
            w = world.new_writer()  # the next request goes to another broker
        if rng.random() < 0.12:
            old, ident = ident, _init_producer(world, name, h)
            if ident is None:
                return
            if rng.random() < 0.6:
                zombie = (old, dict(seq), dict(world.retirements))
            retired, seq = dict(world.retirements), {tp: 0 for tp in tps}
        if rng.random() < 0.3:
            world.nap(rng.uniform(0.001, 0.05))


def _send_until_decided(world: World, name: str, rng: random.Random, h: History, w, ident,
                        plan: list[tuple[TP, int, tuple[bytes, ...]]], retired: dict[TP, int]) -> str:
    """Send the batches until each is acknowledged: ``done``; ``stuck`` when
    one stays unknown (or a violation ended it); ``forgotten`` when a log
    refused one after it was retired since the epoch began."""
    todo = list(plan)
    for _attempt in range(40):
        groups = [SharedAppendGroup(tp[0], tp[1], list(p), producer=ProducerSequence(
            ident.producer_id, ident.producer_epoch, first)) for tp, first, p in todo]
        attempts = [h.begin(name, tp, p, idempotent=True) for tp, _, p in todo]
        h.references_in_flight[name] = world.clock.elapsed_ms
        try:
            results = w.append_shared_results(groups)
        except SimCrash:
            for a in attempts:
                h.crashed(a)
            w = world.new_writer()
            world.nap(rng.uniform(0.001, 0.2))
            continue
        except LlogError as exc:
            h.violations.append(f"{name}: append_shared_results raised {exc!r}")
            return "stuck"
        finally:
            h.references_in_flight.pop(name, None)
        left, blocked = [], set()
        for item, a, r in zip(todo, attempts, results):
            tp = item[0]
            if r.error is None and r.start_offset is not None:
                h.acknowledge(a, r.start_offset, r.end_offset)
                h.duplicates_answered += r.duplicate
                continue
            if r.error is None:
                h.undecided(a, "answered as a duplicate too old to have offsets")
                h.violations.append(f"{name}: batch {a.batch_id}, the producer's latest, was answered as a "
                                    "duplicate too old to have offsets")
                return "stuck"
            h.fail(a, r.error)
            if isinstance(r.error, (ProducerFenced, OutOfOrderSequence)) and tp not in blocked:
                if world.retirements.get(tp, 0) != retired.get(tp, 0):
                    return "forgotten"
                h.violations.append(f"{name}: batch {a.batch_id} (sequence {item[1]}) refused: {r.error!r}")
                return "stuck"
            blocked.add(tp)  # the batches after it in this call follow a batch not appended
            left.append(item)
        if not left:
            return "done"
        todo = left
        if rng.random() < 0.5:
            w = world.new_writer()
        world.nap(rng.uniform(0.001, 0.05))
    return "stuck"


def _zombie(world: World, name: str, h: History, w, old, tp: TP, next_seq: int, retired_before: int) -> None:
    """The producer's previous instance sends its next batch to a log the new one wrote to."""
    payloads = (f"{name}-zombie-e{old.producer_epoch}-{tp[1]}-{next_seq}".encode(),)
    a = h.begin(name, tp, payloads, idempotent=True)
    try:
        (r,) = w.append_shared_results([SharedAppendGroup(tp[0], tp[1], list(payloads), producer=ProducerSequence(
            old.producer_id, old.producer_epoch, next_seq))])
    except SimCrash:
        h.crashed(a)
        return
    if r.error is None:
        h.acknowledge(a, r.start_offset, r.end_offset)
        if world.retirements.get(tp, 0) == retired_before:
            h.violations.append(f"{name}: a batch of superseded epoch {old.producer_epoch} was appended at "
                                f"{r.start_offset} after the new epoch wrote to {tp[0]}:{tp[1]}")
        return
    h.fail(a, r.error)
    if isinstance(r.error, ProducerFenced):
        h.fenced_zombies += 1


def _close(w) -> None:
    """A graceful stop: ``close()`` clears the pendings the writer left
    (SPEC 7.3, C5 on close); a crash inside it is a SIGKILL mid-way."""
    try:
        w.close()
    except SimCrash:
        pass


def compactor(world: World, name: str, rng: random.Random, runs: int) -> None:
    h = world.history
    c = world.new_compactor()
    for _ in range(runs):
        world.nap(rng.uniform(0.001, 0.05))
        tp = rng.choice(world.tps)
        h.references_in_flight[name] = world.clock.elapsed_ms
        try:
            c.compact_once(tp[0], tp[1], max_offsets=rng.randint(1, 8))
        except SimCrash:
            c = world.new_compactor()
        except LlogError as exc:
            if not _expected(exc, MetadataStoreError, ObjectStoreError, CompactionConflict, PartitionNotInitialized):
                h.violations.append(f"{name}: compact_once{tp} raised {type(exc).__name__}: {exc}")
        finally:
            h.references_in_flight.pop(name, None)


def fencer(world: World, name: str, rng: random.Random, cycles: int) -> None:
    h = world.history
    w = world.new_writer()
    for _ in range(cycles):
        world.nap(rng.uniform(0.005, 0.1))
        tp = rng.choice(world.tps)
        for op in ("fence_partition", "unfence_partition"):
            for _attempt in range(20):  # the log must end OPEN, so keep at it
                try:
                    getattr(w, op)(*tp)
                    break
                except SimCrash:
                    w = world.new_writer()
                except LlogError as exc:
                    if isinstance(exc, PartitionNotInitialized):
                        break
                    if not _expected(exc, MetadataStoreError, ConcurrencyConflict):
                        h.violations.append(f"{name}: {op}{tp} raised {type(exc).__name__}: {exc}")
                world.nap(rng.uniform(0.001, 0.02))
            world.nap(rng.uniform(0.001, 0.05))


def vacuum(world: World, name: str, rng: random.Random, passes: int) -> None:
    h = world.history
    v = world.new_vacuum()
    for _ in range(passes):
        world.nap(rng.uniform(0.01, 0.2))
        if rng.random() < 0.7:
            world.jump(world.grace_ms + rng.randint(1_000, 120_000))
        try:
            report = v.run_once()
        except SimCrash:
            v = world.new_vacuum()
            continue
        except LlogError as exc:
            if not _expected(exc, ObjectStoreError):
                h.violations.append(f"{name}: vacuum raised {type(exc).__name__}: {exc}")
            continue
        for err in report.errors:
            if "simulated" not in err:
                h.violations.append(f"{name}: vacuum reported {err}")


def retainer(world: World, name: str, rng: random.Random, passes: int) -> None:
    """Retention passes with drawn limits: the log start moves past old or
    surplus compacted ranges while everything else runs (SPEC 7.10)."""
    h = world.history
    for _ in range(passes):
        world.nap(rng.uniform(0.005, 0.1))
        tp = rng.choice(world.tps)
        config = TopicConfig(retention_ms=rng.choice((-1, 0, rng.randint(0, 500))),
                             retention_bytes=rng.choice((-1, -1, rng.randint(0, 2_000))))
        try:
            result = world.retain(tp, config)  # type: ignore[misc]
        except SimCrash:
            continue
        except LlogError as exc:
            if not _expected(exc, MetadataStoreError):
                h.violations.append(f"{name}: retention{tp} raised {type(exc).__name__}: {exc}")
            continue
        h.retention_passes += 1
        if result.log_start_offset > result.previous_log_start:
            h.retention_advances += 1


def record_deleter(world: World, name: str, rng: random.Random, calls: int) -> None:
    """DeleteRecords while everything else runs: the log start moves to an acknowledged
    offset or one past it (inside an entry, above the cursor, into the pending append),
    now and then to the counter (SPEC 7.13)."""
    h = world.history
    for _ in range(calls):
        world.nap(rng.uniform(0.005, 0.1))
        tp = rng.choice(world.tps)
        acked = h.acked_offsets.get(tp)
        before = None if not acked or rng.random() < 0.1 else rng.choice(acked) + rng.randint(0, 1)
        try:
            world.delete_records(tp, before)  # type: ignore[misc]
        except SimCrash:
            continue
        except LlogError as exc:
            # Fenced (a fencer, a deleted topic), the log not there yet, or its control record
            # busy for the whole back-off; never out of range: an acknowledged offset is below S.
            if not _expected(exc, MetadataStoreError, PartitionFenced, PartitionNotInitialized, ConcurrencyConflict):
                h.violations.append(f"{name}: delete_records{tp}({before}) raised {type(exc).__name__}: {exc}")
            continue
        h.records_deletions += 1


def topic_deleter(world: World, name: str, rng: random.Random, cycles: int) -> None:
    """Delete a log's topic and create the name again, while everything else runs:
    retire the log, then revive it (SPEC 7.11). Nothing the old topic held may
    show in the new one; the checker reads from the log start."""
    h = world.history
    for _ in range(cycles):
        world.nap(rng.uniform(0.01, 0.2))
        tp = rng.choice(world.tps)
        for op in (world.retire, world.revive):
            for _attempt in range(20):
                # A retirement is counted as it starts and again as it ends (also by a crash):
                # a producer whose epoch began while one ran sees the count move.
                retiring = op is world.retire
                if retiring:
                    world.retirements[tp] = world.retirements.get(tp, 0) + 1
                try:
                    if op(tp):  # type: ignore[misc]
                        break  # retired with its cursor at its start / open again
                except SimCrash:
                    pass
                except LlogError as exc:
                    if not _expected(exc, MetadataStoreError):
                        h.violations.append(f"{name}: {op.__name__}{tp} raised {type(exc).__name__}: {exc}")
                        break
                finally:
                    if retiring:
                        world.retirements[tp] += 1
                world.nap(rng.uniform(0.001, 0.02))
            world.nap(rng.uniform(0.005, 0.05))
        h.topic_deletions += 1


def reader(world: World, name: str, rng: random.Random, reads: int) -> None:
    h = world.history
    r = world.new_reader()
    for _ in range(reads):
        world.nap(rng.uniform(0.001, 0.05))
        tp = rng.choice(world.tps)
        acked = h.acked_offsets.get(tp)
        if not acked:
            continue
        offset = rng.choice(acked)
        how = rng.choice(("read_offset", "read_offset", "iter_from", "iter_runs"))
        try:
            start_before = r.log_start_offset(*tp)
            if how == "read_offset":
                got = [(offset, r.read_offset(tp[0], tp[1], offset).payload)]
            elif how == "iter_from":
                got = [(x.offset, x.payload) for x in r.iter_from(tp[0], tp[1], offset, offset + rng.randint(0, 12))]
            else:
                got = [(o, run.records[o - run.base_offset].value) for run in r.iter_runs(tp[0], tp[1], offset)
                       for o in range(run.first, run.last + 1)]
        except SimCrash:
            r = world.new_reader()
            continue
        except OffsetOutOfRange as exc:
            # Legal only for an offset below the log start the error names (retention let it go).
            if exc.log_start_offset is None or not offset < exc.log_start_offset:
                h.violations.append(f"{name}: {how}({tp[0]}:{tp[1]}, {offset}) raised {exc}")
            continue
        except LlogError as exc:
            if not _expected(exc, MetadataStoreError, ObjectStoreError):
                h.violations.append(f"{name}: {how}({tp[0]}:{tp[1]}, {offset}) raised {type(exc).__name__}: {exc}")
            continue
        below = [o for o, _ in got if o < start_before]
        if below:
            h.violations.append(f"{name}: {how}({tp[0]}:{tp[1]}, {offset}) returned offset {below[0]} below the "
                                f"log start {start_before} it saw before reading [8.1.10]")
        if not got or got[0][0] != offset:
            h.violations.append(f"{name}: {how}({tp[0]}:{tp[1]}, {offset}) returned offsets {[o for o, _ in got][:3]}")
        h.reads.extend((name, tp, o, p) for o, p in got)
