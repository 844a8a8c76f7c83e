"""Compaction and vacuum, and the service that runs them.

``compactor`` (``LeaderlessLogCompactor``, SPEC 7.7), ``vacuum`` (SPEC 7.9)
and ``vacuum_cli``; the service (SPEC 7.8): ``service`` (threads and
wiring), ``cli`` (flags, ``main``), ``scheduler`` (which log is due,
delays), ``discovery``, ``task_runner`` (claim, run, release), ``claims``,
``tasks`` (``TaskOutcome``, ``TaskResult``), ``vacuum_runner``, ``http``
(health and metrics), ``config`` and ``blob_cache`` (shared WAL blobs read
once per pass). The public faces are ``server.leaderless_log_compactor``,
``server.leaderless_log_compactor_server`` and ``server.leaderless_log_vacuum``.
Does not import ``server._broker``.

The service
-----------
One process compacts many logs::

    scheduler thread ──► bounded worker pool (LLOG_COMPACTOR_WORKERS daemon threads)
         │                    each task: claim ─► compact_once ─► release
         ├─ discovery every LLOG_COMPACTOR_DISCOVERY_INTERVAL_MS
         └─ per-log next-eligible time (idle / error sleeps with jitter)
    vacuum thread ──► Vacuum.run_once every LLOG_VACUUM_INTERVAL_MS (0: never)
    HTTP thread   ──► GET /health, /metrics (JSON), /metrics/prometheus

**Targets.** The seed set ``LLOG_COMPACTOR_TARGETS`` plus every log discovery
finds: it lists ``[{root}/, {root}/~/)`` on all shards (no partition key) and
keeps the ``.../meta/control`` keys (SPEC 7.8, 3.3). The set only grows; logs
are never deleted.

**Scheduling.** Each pass the scheduler shuffles the logs that are eligible
(not running, next-eligible time reached) and hands as many to the pool as
it has free workers, so there is at most one task per log in this process
and no queue of stale decisions. After a task the log's next-eligible time is

- now, after a run that compacted or resumed and left offsets uncompacted
  (the run hit its per-run limit: keep going);
- now + idle sleep + U(0, idle jitter), when there was nothing (more) to do,
  the log was claimed by another compactor, or a run lost a race;
- now + error sleep + U(0, error jitter), after an error.

**Claims.** Before ``compact_once`` a worker creates the ephemeral
``meta/compactor-claim`` if absent; "exists" means another compactor is busy
with the log and it is skipped. An unknown outcome is resolved by reading the
claim back (ours if it names our ``compactor_id``). The claim is deleted
afterwards conditional on the version the create returned, so a worker never
deletes another compactor's claim; if the process dies, Oxia's session expiry
frees it. A claim of our own never blocks us: with one task per log in this
process, a claim naming our ``compactor_id`` found by a create is a leftover
(a release that failed while Oxia was down, with our session surviving the
outage), so it is deleted conditional on its version and the create
retried; a failed release is also remembered and retried before the log's
next run. Claims only avoid wasted work: correctness rests on
``compact_once``'s own conditional writes.

**Shared-blob cache.** The compactors read through
:class:`~server._compaction.blob_cache.SharedBlobCache` (``LLOG_COMPACTOR_BLOB_CACHE_BYTES``):
a shared WAL blob that a second log compacts from is fetched whole once and
sliced from memory, which cuts S3 GETs per compacted MB about tenfold when
many logs share each flush (see the benchmark in ``loadtest/bench_compactor.py``).

**Shutdown** (SIGTERM, SIGINT, ``close()``): stop scheduling, wait up to
``LLOG_COMPACTOR_SHUTDOWN_TIMEOUT_MS`` for in-flight runs (each then releases
its claim), then close the clients. Closing the Oxia client ends its session,
which drops any claim still held by a run that did not finish in time; such a
run is simply resumed later by whichever compactor takes the log (every step
of ``compact_once`` is resumable). A second signal exits at once.
"""
