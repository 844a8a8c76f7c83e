"""One simulated run: build the world from a seed, drive it, check it.

``run_seed(seed)`` draws the run's shape (logs, writers, compactors, a
fencer, a vacuum, readers) from the seed, starts every actor in its own
thread under the :class:`Scheduler` (every protocol object it builds gets
the run's :class:`~server._runtime.Runtime`, ``_clock.sim_runtime``), checks
after every step, checks everything once more at the end, and returns a
:class:`RunResult`. Any violation raises :class:`SimFailure` carrying the
last steps of the trace and the command that replays the run exactly.
"""

from __future__ import annotations

import random
import traceback
from collections import Counter
from dataclasses import dataclass, field

from server._config import OxiaConfig, ProducerStateConfig, S3Config
from server._log.producer_ids import ProducerIds
from server._compaction.retention import RetentionOutcome, RetentionResult, apply_retention
from server._catalogue.topic_config import TopicConfig
from server._log.stored import StoredSizes
from server._log.log_start import delete_records
from server._log.retire import retire_log, revive_log
from server._protocol.constants import VACUUM_GRACE_MS
from server._protocol.keys import LogLayout, TopicPartition
from server._protocol.records import CompactionCursor
from server.leaderless_log_compactor import LeaderlessLogCompactor
from server.leaderless_log_reader import LeaderlessLogReader
from server.leaderless_log_vacuum import Vacuum
from server.leaderless_log_writer import LeaderlessLogWriter

from ..history import Outcome
from . import _actors
from ._checker import Checker, CheckFailed
from ._clock import SimClock, sim_runtime
from ._faults import FaultPlan, FaultRates
from ._history import History
from ._pools import inline_pools
from ._scheduler import Scheduler, StepLimit
from ._stores import ClockedObjectStore, IndexedMetadataStore, SimMetadataStore, SimObjectStore

__all__ = ["SimConfig", "RunResult", "SimFailure", "run_seed"]

OXIA = OxiaConfig("sim:1", root_prefix="llog")
S3 = S3Config("llog")
GRACE_MS = VACUUM_GRACE_MS
LAYOUT = LogLayout("llog")
PRODUCER_STATE = ProducerStateConfig(expiration_ms=365 * 86_400_000)
"""Simulated time jumps by grace periods: producers must not expire in a run (expiry has unit tests)."""


@dataclass(frozen=True)
class SimConfig:
    max_steps: int = 4_000
    """A run still going after this many steps fails (livelock or a hang)."""
    faults: FaultRates = field(default_factory=FaultRates)
    scan_every: int = 8
    """Full scan of one log every this many writing steps."""
    trace_len: int = 40
    stop_after: int | None = None
    """End each run after this many steps (every actor still running stops
    as if crashed) and check the state it left."""
    scale: float = 1.0
    """Multiplies the number of operations per actor."""


@dataclass(frozen=True)
class RunResult:
    seed: int
    steps: int
    order_hash: str
    faults: Counter
    acked: int
    failed: int
    unknown: int
    checker_reads: int
    sim_ms: int
    shape: str
    handoffs: frozenset
    errors: Counter
    """Append outcomes other than acknowledged, by error type (``crash`` for
    a writer that died mid-append)."""
    retention: Counter = field(default_factory=Counter)
    """Retention passes that finished and log-start moves among them."""
    idempotence: Counter = field(default_factory=Counter)
    """Idempotent attempts, those answered as duplicates, and zombie batches refused as fenced."""
    """Distinct (step, next step of another actor) pairs, as (actor kind|op|key kind)."""


class SimFailure(AssertionError):
    """A seed broke an invariant. ``str()`` shows the reason, the trace and
    how to replay it."""

    def __init__(self, seed: int, reason: str, trace: list[str], shape: str, order_hash: str,
                 actors: list[str] = ()) -> None:
        self.seed = seed
        self.reason = reason
        self.trace = trace
        self.actors = list(actors)
        self.shape = shape
        self.order_hash = order_hash
        super().__init__(self.render())

    def render(self) -> str:
        return "\n".join([
            f"simulation seed {self.seed} failed ({self.shape}):",
            *("  " + line for line in self.reason.splitlines()),
            f"last {len(self.trace)} steps (step, sim time, actor, op, key, fault):",
            *("  " + line for line in self.trace),
            "actors when it failed:",
            *("  " + line for line in self.actors),
            f"order hash {self.order_hash}; replay: python -m testing.simulate --seed {self.seed}",
        ])


def _short(key: str) -> str:
    return key.replace("llog/", "").replace("/partitions/", ":")


def run_seed(seed: int, config: SimConfig | None = None) -> RunResult:
    """Run one seed; raises SimFailure if anything is wrong."""
    config = config or SimConfig()
    plan = random.Random(f"{seed}:plan")
    n_logs = plan.randint(1, 3)
    tps = [("t", p) for p in range(n_logs)]
    n_writers = plan.randint(2, 4)
    n_compactors = plan.choice((1, 1, 2))
    n_readers = plan.randint(1, 2)
    with_fencer = plan.random() < 0.5
    with_vacuum = plan.random() < 0.7
    # Drawn last, so the earlier choices of every seed stay what they were.
    deferral = {"min_bytes_per_run": 64, "max_delay_ms": 40} if plan.random() < 0.3 else {}
    with_retention = plan.random() < 0.4
    with_deletion = plan.random() < 0.25
    n_idempotent = plan.choice((0, 1, 1, 2))
    with_record_deletion = plan.random() < 0.3
    shape = (f"{n_logs} logs, {n_writers} writers, {n_compactors} compactors{' (deferring)' if deferral else ''}, "
             f"{n_readers} readers{', fencer' if with_fencer else ''}{', vacuum' if with_vacuum else ''}"
             f"{', retention' if with_retention else ''}{', topic deletion' if with_deletion else ''}"
             f"{f', {n_idempotent} idempotent producers' if n_idempotent else ''}"
             f"{', DeleteRecords' if with_record_deletion else ''}")

    clock = SimClock()
    faults = FaultPlan(random.Random(f"{seed}:faults"), config.faults)
    sched = Scheduler(random.Random(f"{seed}:sched"), clock, faults, trace_len=config.trace_len)
    runtime = sim_runtime(seed, clock, sched.sleep)
    history = History()
    meta = IndexedMetadataStore()
    objects = ClockedObjectStore(clock)
    checker = Checker(meta, objects, history, OXIA, S3, tps, random.Random(f"{seed}:checker"),
                      scan_every=config.scan_every)
    sim_meta = SimMetadataStore(meta, sched, checker.note_meta_write)
    sim_objects = SimObjectStore(objects, sched, checker.note_object_write)
    parts = {"metadata_store": sim_meta, "object_store": sim_objects, "runtime": runtime}
    kept_sizes = StoredSizes(sim_meta)  # the retention runner's: sizes kept between its passes

    def retain(tp: tuple[str, int], config: TopicConfig) -> RetentionResult:
        keys = LAYOUT.keys(TopicPartition(*tp))
        result = apply_retention(sim_meta, keys, config, runtime=runtime, sizes=kept_sizes)
        if result.outcome is RetentionOutcome.ADVANCED:  # SPEC 7.10: only compacted ranges go
            got = meta.get(keys.compaction_cursor, keys.partition_key)
            cursor = 1 if got is None else CompactionCursor.decode(got.value).offset
            if result.log_start_offset > cursor:
                history.violations.append(
                    f"retention{tp} moved the log start to {result.log_start_offset}, past the compaction "
                    f"cursor {cursor}: it let records go that were not compacted")
        return result

    world = _actors.World(
        sched=sched, clock=clock, history=history, tps=tps,
        new_writer=lambda: inline_pools(LeaderlessLogWriter(OXIA, S3, commit_parallelism=1,
                                                             producer_state=PRODUCER_STATE, **parts)),
        new_compactor=lambda: inline_pools(LeaderlessLogCompactor(OXIA, S3, **deferral, **parts)),
        new_reader=lambda: inline_pools(LeaderlessLogReader(OXIA, S3, **parts)),
        new_vacuum=lambda: Vacuum(OXIA, S3, grace_ms=GRACE_MS, allow_unsafe_grace=True,  # tests try unsafe ones
                                   **parts),
        grace_ms=GRACE_MS,
        retain=retain,
        delete_records=lambda tp, before: delete_records(sim_meta, LAYOUT.keys(TopicPartition(*tp)), before,
                                                         runtime=runtime),
        retire=lambda tp: retire_log(sim_meta, LAYOUT.keys(TopicPartition(*tp)), runtime.clock.now_ms()),
        revive=lambda tp: revive_log(sim_meta, LAYOUT.keys(TopicPartition(*tp))),
        new_producer_ids=lambda: ProducerIds(sim_meta, LAYOUT, runtime=runtime),
    )
    sched.max_jump_ms = world.max_jump_ms

    def ops(lo: int, hi: int) -> int:
        return max(1, round(plan.randint(lo, hi) * config.scale))

    actors = []
    for i in range(n_writers):
        mine = plan.sample(tps, plan.randint(1, n_logs))
        actors.append((f"w{i}", "writer", _actors.writer, (mine, ops(3, 8))))
    for i in range(n_idempotent):
        mine = plan.sample(tps, plan.randint(1, n_logs))
        actors.append((f"i{i}", "idempotent", _actors.idempotent_writer, (mine, ops(3, 8))))
    for i in range(n_compactors):
        actors.append((f"compactor{i}", "compactor", _actors.compactor, (ops(3, 10),)))
    if with_fencer:
        actors.append(("fencer", "fencer", _actors.fencer, (ops(1, 2),)))
    if with_vacuum:
        actors.append(("vacuum", "vacuum", _actors.vacuum, (ops(1, 3),)))
    if with_retention:
        actors.append(("retainer", "retainer", _actors.retainer, (ops(2, 6),)))
    if with_deletion:
        actors.append(("deleter", "deleter", _actors.topic_deleter, (ops(1, 2),)))
    if with_record_deletion:
        actors.append(("purger", "purger", _actors.record_deleter, (ops(2, 5),)))
    for i in range(n_readers):
        actors.append((f"r{i}", "reader", _actors.reader, (ops(3, 8),)))

    def trace() -> list[str]:
        return [_short(s.line()) for s in sched.trace]

    for name, kind, body, args in actors:
        rng = random.Random(f"{seed}:{name}")
        sched.spawn(name, kind, lambda body=body, name=name, rng=rng, args=args: body(world, name, rng, *args))

    def after_step(step) -> None:
        crashed = sched.failed_actor()
        if crashed is not None:
            raise CheckFailed(f"actor {crashed.name} died of an unexpected "
                            f"{type(crashed.error).__name__}: {crashed.error}")
        checker.after_step()

    try:
        sched.run(config.max_steps, after_step, config.stop_after)
        checker.final()
    except (CheckFailed, StepLimit) as exc:
        raise SimFailure(seed, f"{type(exc).__name__}: {exc}", trace(), shape, sched.order_hash,
                         [_short(line) for line in sched.whereabouts()]) from None
    except Exception as exc:  # a bug in the simulator (or the library) surfacing in the checker
        reason = "".join(traceback.format_exception(exc)[-6:]).rstrip()
        raise SimFailure(seed, f"unexpected {type(exc).__name__} in the checker:\n{reason}", trace(), shape,
                         sched.order_hash, [_short(line) for line in sched.whereabouts()]) from exc
    finally:
        sched.stop_all()

    status = Counter(a.outcome for a in history.attempts)
    return RunResult(
        seed=seed, steps=sched.steps, order_hash=sched.order_hash, faults=Counter(faults.counts),
        acked=status[Outcome.OK], failed=status[Outcome.FAILED], unknown=status[Outcome.UNKNOWN],
        checker_reads=checker.reads, sim_ms=int(clock.elapsed_ms), shape=shape,
        handoffs=frozenset(sched.handoffs),
        errors=Counter(a.detail.split(":", 1)[0].replace(" ", "_") for a in history.attempts if a.detail),
        retention=Counter(passes=history.retention_passes, advances=history.retention_advances,
                          deletions=history.topic_deletions, records_deletions=history.records_deletions),
        idempotence=Counter(duplicates=history.duplicates_answered, fenced_zombies=history.fenced_zombies,
                            batches=sum(1 for a in history.attempts if a.idempotent)),
    )
