"""Jepsen-style fault test with real processes: produce under SIGKILLs, then check the log.

Starts a private Oxia + MinIO (``devstack.LocalStack``), ``--brokers``
role-both brokers and one compactor service (two with ``--two-compactors``)
as real processes, initializes ``--partitions`` partitions of one topic
under a fresh root prefix, then for ``--seconds``:

- ``--producers`` threads send ``POST /produce`` (1-3 partitions x 1-20
  unique records) to random live brokers and record every batch's outcome:
  acknowledged (offsets), definitely failed, or unknown (no answer, 504,
  500, ``OutcomeUnknown``);
  With ``--kafka`` the brokers also run their Kafka listeners and every
  other producer is a librdkafka idempotent producer (acks=all) given every
  listener (``testing/_chaos_kafka.py``): each message must be in the log
  at most once, and at its acknowledged offset; the others write over HTTP
  to the same partitions (idempotently with ``--idempotent``);
- a consumer follows every partition through ``/consume`` on random live
  brokers (what it saw must still be in the log afterwards); with
  ``--groups N`` (and ``--kafka``) a consumer group of librdkafka consumers
  reads too, and may skip nothing (``testing/_chaos_groups.py``); with
  ``--sessions`` (and ``--kafka``) a kafka-python consumer of every partition
  reads through fetch sessions, and may skip nothing either
  (``testing/_chaos_sessions.py``); with ``--security SSL`` or ``SASL_SSL``
  every Kafka client of the run goes through TLS (and SASL: librdkafka as a
  SCRAM user kept in Oxia, kafka-python as a user of the users file);
- with ``--delete-records`` Kafka's DeleteRecords moves the log start of a
  random partition every few seconds, through a broker's Kafka listener with
  ``--kafka`` (``testing/_chaos_purger.py``): every read is checked from the
  final log starts, and a start must never go back;
- a nemesis (``testing/_chaos_nemesis.py``) SIGKILLs a random broker or
  compactor every few seconds and restarts it a moment later on the same
  port, and SIGKILLs and restarts the standalone Oxia once (not with
  ``--no-oxia-restart``). Wider faults, each a flag, all of them with
  ``--all``:

  - ``--pause``: SIGSTOP a random broker, compactor, Oxia server or MinIO
    for 0.5-8 s (past the services' 5 s Oxia session), then SIGCONT;
  - ``--minio-restart``: SIGKILL MinIO once, start it on its port and data;
  - ``--two-compactors``: two compactor services compete for the claims;
  - ``--oxia-node-loss``: Oxia runs as a 3-server cluster (replication
    factor 3) instead of standalone, and one server is SIGKILLed once under
    load and started again seconds later.

  The compactors run vacuum every second with the smallest legal grace, so a
  paused writer or compactor races it.

Then it restarts whatever is down, checks every broker takes a produce
again, reads every partition from offset 1 with ``LeaderlessLogReader`` and
through every broker's ``/consume``, waits (``--compaction-wait``) for the
compactor to catch up, reads with the library once more, and checks the
history against the reads (``testing/history.py``: lost, duplicated,
failed-but-present, partial and torn batches, values never sent, unreadable
offsets, reads that disagree). Liveness is checked too: ``unavailable`` (a
broker did not take a produce again) and ``compaction_stalled``.

Prints progress while running and the counts and every violation kind (with
examples) at the end; ``--out`` writes them as JSON. Exits 1 on any
violation, 2 if the harness itself failed.

    python -m testing.chaos --seconds 60 --producers 16
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from testing.history import KINDS, OK, CheckResult, ReadPass, Violation, check
from testing._chaos_cluster import ChaosCluster
from testing._chaos_groups import GROUP_KINDS, GroupConsumers
from testing._chaos_kafka import KafkaClientProducer, idempotence_stats
from testing._chaos_nemesis import FaultPlan, Nemesis
from testing._chaos_purger import PURGER_KINDS, RecordPurger
from testing._chaos_sessions import SESSION_KINDS, SessionReader
from testing._chaos_workload import (
    History,
    IdempotentProducer,
    Producer,
    TailConsumer,
    log_starts,
    read_consume,
    read_library,
)

__all__ = [
    "ChaosOptions", "ChaosReport", "LIVENESS_KINDS", "acknowledged_by_window", "fault_plan", "options_from_args",
    "run", "main",
]

LIVENESS_KINDS = {
    "unavailable": "a broker did not take a produce again after the faults stopped",
    "compaction_stalled": "the compactor did not catch up after the faults stopped",
    **GROUP_KINDS,
    **SESSION_KINDS,
    **PURGER_KINDS,
}


@dataclass(frozen=True)
class ChaosOptions:
    seconds: float = 60.0
    producers: int = 16
    partitions: int = 16
    brokers: int = 3
    oxia_restart: bool = True
    faults: bool = True
    """False: no nemesis at all (a control run: any violation is then not caused by faults)."""
    fault_interval_s: tuple[float, float] = (2.0, 4.0)
    pause: bool = False
    """SIGSTOP/SIGCONT brokers, compactors, Oxia and MinIO."""
    minio_restart: bool = False
    """SIGKILL MinIO once and start it again."""
    compactors: int = 1
    """Compactor services competing for the partitions' claims."""
    oxia_node_loss: bool = False
    """Run Oxia as a 3-server cluster and lose one server once (no whole-Oxia restart then)."""
    recover_s: float = 60.0
    """After the faults: how long each broker has to take a produce again."""
    compaction_wait_s: float = 30.0
    """After the first reads: how long the compactor has to compact every partition to its end."""
    retention_ms: int = 15_000
    """The topic's retention.ms (-1: keep everything): the log starts move while the faults run (SPEC 7.10)."""
    idempotent: bool = False
    """Idempotent producers (SPEC 7.12) that resend every batch not acknowledged until it is: one copy each."""
    kafka: bool = False
    """librdkafka idempotent producers through the brokers' Kafka listeners (``_chaos_kafka.py``)."""
    groups: int = 0
    """With ``kafka``: librdkafka consumers in one group, every other one static (``_chaos_groups.py``)."""
    kafka_security: str = "PLAINTEXT"
    """With ``kafka``: the listeners' security; every Kafka client of the run uses it (SSL, SASL_SSL)."""
    sessions: bool = False
    """With ``kafka``: a kafka-python reader of every partition through fetch sessions (``_chaos_sessions.py``)."""
    delete_records: bool = False
    """Kafka's DeleteRecords on random partitions while the faults run (``_chaos_purger.py``)."""
    seed: int = 0
    data_dir: Path | None = None
    progress_s: float = 5.0


@dataclass
class ChaosReport:
    options: dict[str, Any]
    data_dir: str
    root_prefix: str
    seconds: float
    requests: int
    statuses: dict[str, int]
    batches: dict[str, int]
    records: dict[str, int]
    not_ok: dict[str, int]
    """Failed and unknown batches by how the outcome was decided (status, error type)."""
    unknown_present: int
    unknown_absent: int
    kills: dict[str, int]
    restart_failures: dict[str, int]
    nemesis_events: list[str]
    reads: dict[str, int]
    compaction: dict[str, Any]
    phases_s: dict[str, float]
    """Wall time of each phase: start, faults, heal_and_probe, reads, compaction_wait, last_read_and_check."""
    violations: dict[str, int]
    examples: dict[str, list[str]]
    violation_list: list[dict[str, Any]] = field(default_factory=list)
    tail_consumer: dict[str, Any] = field(default_factory=dict)
    """Requests of the consumer that followed the log during the faults, and its (expected) errors."""
    acknowledged_by_window: list[int] = field(default_factory=list)
    """Batches acknowledged in each quarter of the fault phase (progress while faulting)."""
    idempotence: dict[str, int] = field(default_factory=dict)
    """With idempotent producers: batches, attempts, batches sent again, answers that were duplicates,
    refusals, and batches still not acknowledged when the run stopped."""
    group: dict[str, int] = field(default_factory=dict)
    """With a consumer group: its consumers, records read, restarts, commits refused, fatal errors."""
    sessions: dict[str, int] = field(default_factory=dict)
    """With ``kafka``: the fetch-session reader's records read and poll errors."""
    purger: dict[str, Any] = field(default_factory=dict)
    """With ``delete_records``: DeleteRecords calls made, those that moved a log start, errors."""

    @property
    def ok(self) -> bool:
        return not self.violations

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        b, r = self.batches, self.records
        lines = [
            f"requests {self.requests} in {self.seconds:.0f}s; HTTP {dict(sorted(self.statuses.items()))}",
            f"batches: acknowledged {b.get('ok', 0)}, definitely failed {b.get('failed', 0)}, "
            f"unknown {b.get('unknown', 0)} (in the log {self.unknown_present}, absent {self.unknown_absent})",
            f"records: acknowledged {r.get('ok', 0)}, definitely failed {r.get('failed', 0)}, "
            f"unknown {r.get('unknown', 0)}",
            f"acknowledged per quarter of the run: {self.acknowledged_by_window}",
            f"faults: {dict(self.kills) or 'none'}; Oxia restarts {self.kills.get('oxia', 0)}"
            + (f"; restart failures {self.restart_failures}" if self.restart_failures else ""),
            f"reads (records): {self.reads}",
            f"consumer while faulting: {self.tail_consumer}",
            *([f"idempotent producers: {self.idempotence}"] if self.idempotence else []),
            *([f"consumer group: {self.group}"] if self.group else []),
            *([f"fetch-session reader: {self.sessions}"] if self.sessions else []),
            *([f"DeleteRecords: {self.purger}"] if self.purger else []),
            f"compaction: {self.compaction.get('summary', '')}",
            f"phases (s): {self.phases_s}",
        ]
        if self.not_ok:
            lines.append("not acknowledged, by cause: " + ", ".join(
                f"{k} {v}" for k, v in sorted(self.not_ok.items(), key=lambda kv: -kv[1])))
        if not self.violations:
            lines.append("no violations")
        else:
            lines.append(f"VIOLATIONS: {sum(self.violations.values())}")
            for kind, n in sorted(self.violations.items(), key=lambda kv: -kv[1]):
                desc = KINDS.get(kind) or LIVENESS_KINDS.get(kind, "")
                lines.append(f"  {kind}: {n}  ({desc})")
                for ex in self.examples.get(kind, []):
                    lines.append(f"      {ex}")
        return "\n".join(lines)


def acknowledged_by_window(batches: list[Any], seconds: float, windows: int = 4) -> list[int]:
    """Acknowledged batches by when they were answered, in ``windows`` equal slices of ``seconds``.

    Answers after ``seconds`` (the probes after the faults) count nowhere.
    """
    counts = [0] * windows
    for b in batches:
        if b.outcome == OK and b.answered_s is not None and 0 <= b.answered_s <= seconds:
            counts[min(windows - 1, int(b.answered_s / seconds * windows))] += 1
    return counts


def fault_plan(opts: ChaosOptions) -> FaultPlan:
    """A cluster of Oxia servers loses one server instead of restarting as a whole."""
    return FaultPlan(
        oxia_restart=opts.faults and opts.oxia_restart and not opts.oxia_node_loss,
        pause=opts.pause, minio_restart=opts.minio_restart, oxia_node_loss=opts.oxia_node_loss,
    )


def _probe_brokers(cluster: ChaosCluster, history: History, deadline_s: float, say: Callable[[str], None]) -> list[Violation]:
    """Each broker must acknowledge a produce within ``deadline_s``; the probes join the history."""
    probe = Producer(-1, cluster, history, threading.Event(), seed=12345)
    found = []
    for b in cluster.brokers:
        deadline = time.monotonic() + deadline_s
        attempts = 0
        while True:
            attempts += 1
            sent = probe.send_one(b.port, tag=f"probe-{b.name}")
            if all(x.outcome == OK for x in sent):
                break
            if time.monotonic() > deadline:
                found.append(Violation(
                    "unavailable", cluster.topic, sent[0].partition, None, None,
                    f"{b.name} answered no produce with ok within {deadline_s:.0f}s after the faults "
                    f"({attempts} attempts; last: {sent[0].detail})",
                ))
                say(f"[chaos] {b.name} did not recover: {sent[0].detail}")
                break
            time.sleep(0.2)  # pacing between probes; the deadline bounds the wait
    return found


def _wait_compaction(cluster: ChaosCluster, hws: dict[int, int], wait_s: float) -> tuple[dict[str, Any], list[Violation]]:
    """Wait until every partition is compacted to its end (cursor = high watermark + 1)."""
    from server.leaderless_log_reader import LeaderlessLogReader

    started = time.monotonic()
    with LeaderlessLogReader.from_env(cluster.env) as reader:
        first = {p: reader.compaction_cursor(cluster.topic, p) for p in hws}
        cursors = dict(first)
        while True:
            cursors = {p: reader.compaction_cursor(cluster.topic, p) for p in hws}
            behind = {p: hws[p] + 1 - c for p, c in cursors.items() if c <= hws[p]}
            if not behind or time.monotonic() - started > wait_s:
                break
            time.sleep(0.2)  # polling Oxia for a condition, bounded by wait_s
    took = time.monotonic() - started
    info = {
        "waited_s": round(took, 1),
        "behind_offsets": {str(p): n for p, n in behind.items()},
        "cursor_before_wait": {str(p): c for p, c in first.items()},
        "cursor_after_wait": {str(p): c for p, c in cursors.items()},
        "summary": (f"all {len(hws)} partitions compacted to their end in {took:.1f}s" if not behind else
                    f"{len(behind)} of {len(hws)} partitions behind after {took:.0f}s "
                    f"({sum(behind.values())} offsets)"),
    }
    found = [
        Violation("compaction_stalled", cluster.topic, p, cursors[p], None,
                  f"cursor {cursors[p]} (was {first[p]}), high watermark {hws[p]}: "
                  f"{n} offsets not compacted {wait_s:.0f}s after the faults stopped")
        for p, n in sorted(behind.items())
    ]
    return info, found


def run(opts: ChaosOptions, say: Callable[[str], None] = print) -> ChaosReport:
    """One chaos run; raises only if the harness itself fails."""
    own_dir = opts.data_dir is None
    data_dir = Path(tempfile.mkdtemp(prefix="llog-chaos-")) if own_dir else Path(opts.data_dir)
    say(f"[chaos] data and process logs in {data_dir}")
    started = time.monotonic()
    phases: dict[str, float] = {}

    def phase(name: str) -> None:
        nonlocal started
        now = time.monotonic()
        phases[name] = round(now - started, 1)
        started = now

    oxia_mode = "cluster" if opts.oxia_node_loss else "standalone"
    with ChaosCluster(data_dir, partitions=opts.partitions, brokers=opts.brokers, compactors=opts.compactors,
                      oxia_mode=oxia_mode, retention_ms=opts.retention_ms, kafka=opts.kafka,
                      kafka_security=opts.kafka_security) as cluster:
        phase("start")
        say(f"[chaos] up in {phases['start']:.1f}s: {opts.brokers} brokers, {opts.compactors} compactor(s), "
            f"Oxia {oxia_mode}, {opts.partitions} partitions of {cluster.topic!r} under {cluster.root_prefix}; "
            f"faults {fault_plan(opts)}")
        stop = threading.Event()
        history = History()  # its clock is the run's: batch times line up with nemesis events
        http_kind = IdempotentProducer if opts.idempotent else Producer
        producers = [(KafkaClientProducer if opts.kafka and i % 2 else http_kind)(
            i, cluster, history, stop, seed=opts.seed * 1000 + i) for i in range(opts.producers)]
        nemesis = Nemesis(cluster, stop, seconds=opts.seconds, plan=fault_plan(opts), seed=opts.seed,
                          interval_s=opts.fault_interval_s, t0=history.t0)
        tail = TailConsumer(cluster, stop, seed=opts.seed)
        group = GroupConsumers(cluster, stop, opts.groups, seed=opts.seed) if opts.groups else None
        sessions = SessionReader(cluster, stop) if opts.kafka and opts.sessions else None
        purger = RecordPurger(cluster, stop, seed=opts.seed) if opts.delete_records else None
        t0 = history.t0
        tail.start()
        for reader in (group, sessions, purger):
            if reader is not None:
                reader.start()
        for p in producers:
            p.start()
        if opts.faults:
            nemesis.start()
        while not stop.wait(min(opts.progress_s, max(0.0, opts.seconds - (time.monotonic() - t0)))):
            elapsed = time.monotonic() - t0
            requests, outcomes = history.snapshot()
            batches = {str(k): v for k, v in outcomes.items()}  # "ok", not Outcome.OK
            say(f"[chaos] {elapsed:5.1f}s requests {requests} batches {batches} kills {dict(nemesis.kills)} "
                f"live brokers {len(cluster.live_brokers())}/{opts.brokers}")
            if elapsed >= opts.seconds:
                stop.set()
        for p in producers:
            p.join()
        tail.join()
        for reader in (group, sessions, purger):
            if reader is not None:
                reader.join()
        if nemesis.is_alive():
            nemesis.join()
        ran_s = time.monotonic() - t0
        progress = acknowledged_by_window(history.batches, ran_s)
        phase("faults")
        healed = cluster.heal()
        say(f"[chaos] faults stopped after {ran_s:.1f}s; restarted {healed or 'nothing'}; probing the brokers")
        liveness = _probe_brokers(cluster, history, opts.recover_s, say)
        phase("heal_and_probe")
        say("[chaos] reading every partition (library, then /consume on every broker)")
        reads: list[ReadPass] = []
        library, hws = read_library(cluster.env, cluster.topic, opts.partitions, "library")
        reads.append(library)
        for b in cluster.brokers:
            if b.ready:
                reads.append(read_consume(b.port, cluster.topic, opts.partitions, hws, f"consume@{b.name}"))
        phase("reads")
        compaction, stalled = _wait_compaction(cluster, hws, opts.compaction_wait_s)
        phase("compaction_wait")
        liveness += stalled
        say(f"[chaos] compaction: {compaction['summary']}; reading once more with the library")
        after, _ = read_library(cluster.env, cluster.topic, opts.partitions, "library-after-compaction")
        reads.append(after)
        reads.append(tail.read_pass())
        for reader in (group, sessions):
            if reader is not None:
                reader.drain(hws, opts.recover_s)
                reads.append(reader.read_pass())
        starts = log_starts(cluster.env, cluster.topic, opts.partitions)
        for reader in (group, sessions):
            if reader is not None:
                liveness += reader.check(hws, starts)
                reader.close()
        if purger is not None:
            liveness += purger.check()
        result = check(history.batches, reads)
        if any(s > 1 for s in starts.values()):
            say(f"[chaos] retention{' and DeleteRecords' if purger is not None else ''} moved {sum(s > 1 for s in starts.values())} log starts "
                f"(up to offset {max(starts.values())}); acknowledged records below them are let go")
        phase("last_read_and_check")
        report = _report(opts, cluster, data_dir, ran_s, history, nemesis, result, liveness, compaction, phases)
        report.tail_consumer = {"requests": tail.requests, "errors": dict(tail.errors)}
        report.acknowledged_by_window = progress
        report.idempotence = idempotence_stats(history, producers)
        report.group = group.stats() if group is not None else {}
        report.sessions = sessions.stats() if sessions is not None else {}
        report.purger = purger.stats() if purger is not None else {}
    if own_dir and report.ok:
        shutil.rmtree(data_dir, ignore_errors=True)
    return report


def _report(opts: ChaosOptions, cluster: ChaosCluster, data_dir: Path, ran_s: float, history: History,
            nemesis: Nemesis, result: CheckResult, liveness: list[Violation], compaction: dict[str, Any],
            phases: dict[str, float]) -> ChaosReport:
    violations = [*result.violations, *liveness]
    by_kind: dict[str, int] = {}
    examples: dict[str, list[str]] = {}
    for v in violations:
        by_kind[v.kind] = by_kind.get(v.kind, 0) + 1
        if len(examples.setdefault(v.kind, [])) < 4:
            examples[v.kind].append(v.describe())
    return ChaosReport(
        options={k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(opts).items()},
        data_dir=str(data_dir),
        root_prefix=cluster.root_prefix,
        seconds=round(ran_s, 1),
        requests=history.requests,
        statuses=dict(history.statuses),
        batches=dict(result.batches),
        records=dict(result.records),
        not_ok=dict(history.details),
        unknown_present=result.unknown_present,
        unknown_absent=result.unknown_absent,
        kills=dict(nemesis.kills),
        restart_failures=dict(nemesis.restart_failures),
        nemesis_events=[f"{e.at_s:7.2f}s {e.what}" for e in nemesis.events],
        reads=dict(result.reads),
        compaction=compaction,
        phases_s=phases,
        violations=by_kind,
        examples=examples,
        violation_list=[v._asdict() for v in violations[:5000]],
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m testing.chaos", description=__doc__.split("\n\n")[0],
        epilog="Violation kinds: " + "; ".join(f"{k}: {v}" for k, v in {**KINDS, **LIVENESS_KINDS}.items()),
    )
    p.add_argument("--seconds", type=float, default=60.0, help="how long producers and faults run (default 60)")
    p.add_argument("--producers", type=int, default=16, help="producer threads (default 16)")
    p.add_argument("--partitions", type=int, default=16, help="partitions of the topic (default 16)")
    p.add_argument("--brokers", type=int, default=3, help="broker processes, role both (default 3)")
    p.add_argument("--no-oxia-restart", action="store_true", help="do not kill and restart Oxia")
    p.add_argument("--no-faults", action="store_true", help="no nemesis at all (a control run)")
    p.add_argument("--fault-interval", type=float, nargs=2, default=(2.0, 4.0), metavar=("MIN_S", "MAX_S"),
                   help="seconds between faults, drawn uniformly (default 2 4)")
    p.add_argument("--pause", action="store_true",
                   help="SIGSTOP brokers, compactors, Oxia and MinIO for 0.5-8 s, then SIGCONT")
    p.add_argument("--minio-restart", action="store_true", help="SIGKILL MinIO once and start it again")
    p.add_argument("--two-compactors", action="store_true", help="two compactor services compete for claims")
    p.add_argument("--oxia-node-loss", action="store_true",
                   help="a 3-server Oxia cluster; SIGKILL one server once under load, start it later")
    p.add_argument("--all", action="store_true", help="every fault above together, and --delete-records")
    p.add_argument("--recover-seconds", type=float, default=60.0,
                   help="after the faults, how long each broker has to take a produce again (default 60)")
    p.add_argument("--idempotent", action="store_true",
                   help="idempotent producers (POST /producers, sequences) that resend every batch not acknowledged "
                        "until it is: every batch must be in the log once")
    p.add_argument("--kafka", action="store_true",
                   help="the brokers run their Kafka listeners and every other producer is a librdkafka "
                        "idempotent producer (acks=all) through them: every message in the log at most once")
    p.add_argument("--groups", type=int, default=0, metavar="N",
                   help="with --kafka: N librdkafka consumers in one group (every other one static), restarted now "
                        "and then, whose coordinator the faults move: no record may be skipped")
    p.add_argument("--sessions", action="store_true",
                   help="with --kafka: a kafka-python consumer of every partition reads through fetch sessions "
                        "(KIP-227), which broker kills end: no record may be skipped")
    p.add_argument("--security", choices=("PLAINTEXT", "SSL", "SASL_SSL"), default="PLAINTEXT",
                   help="with --kafka: the listeners serve TLS (SSL), or TLS and SASL (SASL_SSL: librdkafka with "
                        "SCRAM-SHA-256, kafka-python with PLAIN), with throwaway certificates; every Kafka "
                        "client of the run uses it (default PLAINTEXT)")
    p.add_argument("--delete-records", action="store_true",
                   help="DeleteRecords on a random partition every 0.5-1.5 s (through the Kafka listeners with --kafka), "
                        "to an offset in the lower third of what it holds: records below the log starts are let go")
    p.add_argument("--retention-ms", type=int, default=15_000,
                   help="the topic's retention.ms: log starts move past old compacted ranges while the faults "
                        "run; acknowledged records below them are let go (default 15000; -1 keeps everything)")
    p.add_argument("--compaction-wait", type=float, default=30.0,
                   help="after the first reads, how long the compactor has to catch up (default 30)")
    p.add_argument("--seed", type=int, default=None, help="seed of the producers' and the nemesis's choices")
    p.add_argument("--data-dir", type=Path, help="keep the stack's data and the process logs here "
                   "(default: a temporary directory, deleted after a run without violations)")
    p.add_argument("--out", type=Path, help="write the summary as JSON here")
    p.add_argument("--log-level", default="WARNING", help="logging level of this process (default WARNING)")
    return p.parse_args(argv)


def options_from_args(args: argparse.Namespace, seed: int) -> ChaosOptions:
    """The run's options from the command line; ``--all`` turns on every wider fault."""
    return ChaosOptions(
        seconds=args.seconds, producers=args.producers, partitions=args.partitions, brokers=args.brokers,
        oxia_restart=not args.no_oxia_restart, faults=not args.no_faults,
        fault_interval_s=tuple(args.fault_interval), recover_s=args.recover_seconds,
        compaction_wait_s=args.compaction_wait, retention_ms=args.retention_ms, seed=seed, data_dir=args.data_dir,
        pause=args.pause or args.all, minio_restart=args.minio_restart or args.all,
        compactors=2 if args.two_compactors or args.all else 1, oxia_node_loss=args.oxia_node_loss or args.all,
        idempotent=args.idempotent, kafka=args.kafka, groups=args.groups, sessions=args.sessions,
        kafka_security=args.security,
        delete_records=args.delete_records or args.all,
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    seed = args.seed if args.seed is not None else int(time.time())
    opts = options_from_args(args, seed)
    if (opts.groups or opts.sessions or opts.kafka_security != "PLAINTEXT") and not opts.kafka:
        print("[chaos] --groups, --sessions and --security need --kafka (they are the Kafka listeners' and "
              "clients')", file=sys.stderr)
        return 2
    print(f"[chaos] seed {seed}", flush=True)
    try:
        report = run(opts, say=lambda s: print(s, flush=True))
    except Exception as exc:  # noqa: BLE001 - the harness failed, not the system under test
        logging.exception("chaos run failed")
        print(f"[chaos] harness error: {exc}", file=sys.stderr)
        return 2
    print(report.summary())
    if not report.ok:
        print(f"[chaos] data and logs kept in {report.data_dir}")
    if args.out:
        args.out.write_text(json.dumps(report.to_json(), indent=2) + "\n")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
