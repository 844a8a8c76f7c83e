"""``CompactorService``: wires the compactor service's parts together and runs its threads.

The design is described in :mod:`server._compaction`; the entry point is
:mod:`server.leaderless_log_compactor_server`. Each part has its own
module::

    scheduler thread ─ Scheduler (scheduler.py): which log is due, delays
         │             Discovery (discovery.py): lists meta/control keys
         ▼ queue
    worker threads ─── TaskRunner (task_runner.py): claim (claims.py), compact_once, release
    vacuum thread ──── VacuumRunner (vacuum_runner.py)
    retention thread ─ RetentionRunner (retention_runner.py): each topic's retention
    HTTP thread ────── serve (http.py): /health, /metrics, /metrics/prometheus

This class owns the stores, the threads and the one condition that guards
the scheduler's state (workers finishing, discovery adding logs and the HTTP
thread reading it all take it); ``health()`` and ``metrics_json()`` are what
the HTTP thread answers with.
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import threading
from http.server import ThreadingHTTPServer
from typing import Any, Callable, Mapping, Sequence

from .._config import OxiaConfig, S3Config
from .._errors import LlogError
from .._protocol.keys import LogLayout, TopicPartition
from .._storage.metastore import MetadataStore
from .._storage.objectstore import ObjectStore
from .._storage.billing import S3Billing, S3Prices
from .._storage.stores import Stores
from .._metrics import PRESENT_AT_START, LlogMetrics
from .._runtime import REAL_RUNTIME, RandomSource, Runtime
from .blob_cache import SharedBlobCache
from .claims import Claims
from .config import CompactorServiceConfig
from .discovery import Discovery
from .http import serve
from .scheduler import Scheduler
from .task_runner import TaskRunner
from .tasks import Compactor, TaskOutcome, TaskResult, VacuumLike, close_quietly
from .retention_runner import RetentionRunner
from .vacuum_runner import VacuumRunner

__all__ = ["CompactorService", "TaskOutcome", "TaskResult", "Compactor", "VacuumLike"]

log = logging.getLogger(__name__)



class CompactorService:
    """Compacts every known log, one claimed task per log at a time.

    ``start()`` runs the threads (and the HTTP server when ``serve_http``);
    ``run_pass()`` is the one-shot alternative (``--once``); ``close()``
    stops and releases everything and is safe to call twice.
    """

    def __init__(
        self,
        config: CompactorServiceConfig,
        oxia_config: OxiaConfig,
        s3_config: S3Config,
        *,
        metrics: LlogMetrics | None = None,
        metadata_store: MetadataStore | None = None,
        object_store: ObjectStore | None = None,
        stores: Stores | None = None,
        compactor_factory: Callable[[], Compactor] | None = None,
        vacuum_factory: Callable[[], VacuumLike] | None = None,
        serve_http: bool = True,
        rng: RandomSource | None = None,
        prices: S3Prices | None = None,
        runtime: Runtime = REAL_RUNTIME,
    ) -> None:
        """``runtime``: the clock, ids and randomness of the service and every
        part it builds (``server._runtime``); ``rng`` overrides its random
        source for scheduling jitter and order."""
        self.config = config
        self.runtime = runtime
        self.layout = LogLayout(oxia_config.root_prefix)
        self.metrics = metrics or LlogMetrics(static_labels={"compactor_id": config.compactor_id}, process_metrics=True)
        self._oxia_config = oxia_config
        self._s3_config = s3_config
        self._prices = prices or S3Prices()
        self._open_stores(stores, metadata_store, object_store)
        self._serve_http = serve_http
        self._rng = rng or runtime.rng
        self._cond = threading.Condition()  # guards self._scheduler
        self._stop = threading.Event()
        self._scheduler = Scheduler(config, rng=self._rng, runtime=runtime)
        self._discovery = Discovery(self._meta, self.layout, self.metrics, runtime=runtime)
        self._claims = Claims(self._meta, config.compactor_id, self.metrics, runtime=runtime)
        self._runner = TaskRunner(
            self._claims, self.layout, self.metrics, compactor_factory or self._default_compactor,
            error_sleep_ms=config.error_sleep_ms, runtime=runtime,
        )
        self._vacuum_runner = VacuumRunner(
            vacuum_factory or self._default_vacuum, config.vacuum.interval_ms, self._stop, self._rng,
        )
        self._retention_runner = RetentionRunner(
            self._meta, self.layout, self.known_partitions, config.retention_interval_ms, self._stop, self._rng,
            self.metrics, runtime=runtime, grace_ms=config.vacuum.grace_ms,
        )
        self._queue: queue.Queue[TopicPartition | None] = queue.Queue()
        self._workers: list[threading.Thread] = []
        self._scheduler_thread: threading.Thread | None = None
        self._http: ThreadingHTTPServer | None = None
        self._http_thread: threading.Thread | None = None
        self._started = False
        self._closed = False
        self._close_lock = threading.Lock()
        self.started_at_ms = runtime.clock.now_ms()
        self._publish_info()

    def _open_stores(
        self, stores: Stores | None, metadata_store: MetadataStore | None, object_store: ObjectStore | None
    ) -> None:
        """One Stores for every part of the service (one Oxia session): the
        given one, or our own. The compactors read shared blobs through a
        cache (blob_cache.py); vacuum, discovery and the claims use the plain
        stores."""
        self._own_stores = stores is None
        self._stores = stores or Stores.open(
            self._oxia_config, self._s3_config, self.metrics, metadata_store=metadata_store, object_store=object_store,
        )
        self._meta, self._objects = self._stores.meta, self._stores.objects
        c = self.config
        cached = (
            SharedBlobCache(self._objects, self.layout.shared_wal_prefix, c.blob_cache_bytes, self.metrics)
            if c.blob_cache_bytes > 0 else self._objects
        )
        self._compactor_stores = Stores(self._meta, cached, owns_objects=cached is not self._objects)
        self.billing = S3Billing.for_stores(
            self.metrics, self._objects, self._s3_config.bucket, self._oxia_config.root_prefix, self._prices,
        )

    def _publish_info(self) -> None:
        c = self.config
        self.metrics.set_info(
            component="compactor",
            compactor_id=c.compactor_id,
            root_prefix=self.layout.root,
            workers=c.workers,
            targets=[str(tp) for tp in c.targets],
            discovery_interval_ms=c.discovery_interval_ms,
            idle_sleep_ms=c.idle_sleep_ms,
            error_sleep_ms=c.error_sleep_ms,
            vacuum_interval_ms=c.vacuum.interval_ms,
            vacuum_grace_ms=c.vacuum.grace_ms,
            blob_cache_bytes=c.blob_cache_bytes,
            min_bytes_per_run=c.min_bytes_per_run,
            max_delay_ms=c.max_delay_ms,
        )
        self.metrics.set_info_metric(
            "compactor_info", compactor_id=c.compactor_id, workers=c.workers, root_prefix=self.layout.root,
            discovery_interval_ms=c.discovery_interval_ms, blob_cache_bytes=c.blob_cache_bytes,
            vacuum_interval_ms=c.vacuum.interval_ms,
        )
        self.metrics.present(*PRESENT_AT_START["compactor"])
        self.metrics.set_gauge("compactor_workers", c.workers)
        self.metrics.set_gauge("compactor_unreleased_claims", 0)
        self._update_gauges()

    @classmethod
    def from_env(
        cls, env: Mapping[str, str] | None = None, *, config: CompactorServiceConfig | None = None, **kwargs
    ) -> CompactorService:
        """Build from ``LLOG_OXIA_*``, ``LLOG_S3_*``, ``LLOG_COMPACTOR_*`` and ``LLOG_VACUUM_*``."""
        config = config or CompactorServiceConfig.from_env(env)
        oxia_config = OxiaConfig.from_env(env)
        if oxia_config.client_identifier is None:
            # Oxia records the client identity on ephemeral records: make claims traceable.
            oxia_config = dataclasses.replace(oxia_config, client_identifier=config.compactor_id)
        s3_config = S3Config.from_env(env)
        s3_config.require_bucket()
        kwargs.setdefault("prices", S3Prices.from_env(env))
        return cls(config, oxia_config, s3_config, **kwargs)

    def _default_compactor(self) -> Compactor:
        from .compactor import LeaderlessLogCompactor

        return LeaderlessLogCompactor(
            self._oxia_config, self._s3_config, metrics=self.metrics, stores=self._compactor_stores,
            max_offsets_per_run=self.config.max_offsets_per_run, max_bytes_per_run=self.config.max_bytes_per_run,
            min_bytes_per_run=self.config.min_bytes_per_run, max_delay_ms=self.config.max_delay_ms,
            runtime=self.runtime,
        )

    def _default_vacuum(self) -> VacuumLike:
        from .vacuum import Vacuum

        return Vacuum(
            self._oxia_config, self._s3_config,
            grace_ms=self.config.vacuum.grace_ms, allow_unsafe_grace=self.config.vacuum.allow_unsafe_grace,
            delete_redundant_entries=self.config.vacuum.delete_redundant_entries,
            metrics=self.metrics, stores=self._stores, runtime=self.runtime,
        )

    # -- lifecycle -------------------------------------------------------------------
    def __enter__(self) -> CompactorService:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def http_port(self) -> int | None:
        """The bound HTTP port (useful with port 0), None when not serving."""
        return None if self._http is None else self._http.server_address[1]

    def start(self) -> CompactorService:
        """Start the HTTP server, the workers, the scheduler and the vacuum thread."""
        if self._started:
            return self
        self._started = True
        if self._serve_http:
            self._http, self._http_thread = serve(
                self, self.config.bind_host, self.config.port, read_timeout_s=self.config.http_read_timeout_ms / 1000,
            )
        for i in range(self.config.workers):
            t = threading.Thread(target=self._worker_loop, name=f"llog-compactor-worker-{i}", daemon=True)
            t.start()
            self._workers.append(t)
        self._scheduler_thread = threading.Thread(
            target=self._schedule_loop, name="llog-compactor-scheduler", daemon=True,
        )
        self._scheduler_thread.start()
        self._vacuum_runner.start()
        self._retention_runner.start()
        log.info(
            "compactor %s started: %d workers, %d seed targets, discovery every %d ms, vacuum every %d ms%s",
            self.config.compactor_id, self.config.workers, len(self.config.targets),
            self.config.discovery_interval_ms, self.config.vacuum.interval_ms,
            f", HTTP on http://{self.config.bind_host}:{self.http_port}" if self._http else "",
        )
        return self

    def request_stop(self) -> None:
        """Ask the scheduler (and a ``run_pass``) to stop; returns at once."""
        self._stop.set()
        with self._cond:
            self._cond.notify_all()

    def stop(self, timeout_s: float | None = None) -> bool:
        """Stop scheduling and wait (bounded) for in-flight runs to finish.

        Returns True if every in-flight run finished in time.
        """
        timeout_s = self.config.shutdown_timeout_ms / 1000 if timeout_s is None else timeout_s
        self.request_stop()
        if self._scheduler_thread is not None:
            self._scheduler_thread.join(timeout=5)
        clock = self.runtime.clock
        deadline = clock.monotonic() + timeout_s
        with self._cond:
            while self._scheduler.in_flight > 0 and clock.monotonic() < deadline:
                self._cond.wait(min(0.2, max(0.0, deadline - clock.monotonic())))
            finished = self._scheduler.in_flight == 0
            running = [str(tp) for tp in self._scheduler.running()]
        for _ in self._workers:
            self._queue.put(None)
        if not finished:
            log.warning(
                "compactor %s: %d runs still in flight after %.1fs (%s); abandoning them "
                "(they resume on the next compactor that takes the log)",
                self.config.compactor_id, len(running), timeout_s, ", ".join(running),
            )
        self._vacuum_runner.join(max(0.0, deadline - clock.monotonic()) + 1)
        self._retention_runner.join(max(0.0, deadline - clock.monotonic()) + 1)
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            if self._http_thread is not None:
                self._http_thread.join(timeout=5)
            self._http = None
        return finished

    def close(self) -> None:
        """Stop, then close the compactors, vacuum and the clients (ending the
        Oxia session drops any claim a run that is still going holds)."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        self.stop()
        self._runner.close()
        close_quietly(self._vacuum_runner)
        close_quietly(self._compactor_stores)
        if self._own_stores:
            close_quietly(self._stores)
        log.info("compactor %s stopped", self.config.compactor_id)

    # -- discovery ---------------------------------------------------------------------
    def discover(self) -> int:
        """Scan Oxia for initialized logs (SPEC 7.8); return how many are new."""
        new = self._discovery.run(self._add_discovered)
        self._update_gauges()
        return len(new)

    def _add_discovered(self, found: set[TopicPartition]) -> Sequence[TopicPartition]:
        with self._cond:
            new = self._scheduler.add_discovered(found)
            self._cond.notify_all()
        return new

    def known_partitions(self) -> list[TopicPartition]:
        with self._cond:
            return self._scheduler.known()

    # -- the scheduler and worker threads ----------------------------------------------------
    def _schedule_loop(self) -> None:
        while not self._stop.is_set():
            with self._cond:
                discovery_due = self._scheduler.take_discovery()
            if discovery_due:
                try:
                    self.discover()
                except Exception as exc:  # noqa: BLE001 - keep scheduling the known logs
                    log.warning("discovery failed (retrying in %d ms): %s",
                                self.config.discovery_interval_ms, exc)
            with self._cond:
                if self._stop.is_set():
                    break
                for tp in self._scheduler.take_due():
                    self._queue.put(tp)
                self.metrics.set_gauge("compactor_in_flight_tasks", self._scheduler.in_flight)
                self._cond.wait(self._scheduler.wait_s())

    def _worker_loop(self) -> None:
        while True:
            tp = self._queue.get()
            if tp is None:
                return
            outcome = TaskOutcome.ERROR
            try:
                outcome = self.attempt(tp).outcome
            except BaseException:  # attempt() catches everything; belt and braces for the counters
                log.exception("compactor task for %s crashed", tp)
            finally:
                with self._cond:
                    self._scheduler.finish(tp, outcome)
                    self.metrics.set_gauge("compactor_in_flight_tasks", self._scheduler.in_flight)
                    self._cond.notify_all()

    def attempt(self, tp: TopicPartition) -> TaskResult:
        """Claim ``tp``, run ``compact_once`` on it, release the claim. Never raises."""
        res = self._runner.attempt(tp)
        lag = None if res.result is None else int(res.result.lag_offsets)
        with self._cond:
            self._scheduler.record(tp, res.outcome, lag)
        return res

    def unreleased_claims(self) -> dict[TopicPartition, int]:
        """Logs whose claim release failed and is still to be retried -> claim version."""
        return self._claims.unreleased()

    # -- one-shot ----------------------------------------------------------------------------
    def run_pass(self) -> list[TaskResult]:
        """``--once``: discover (if enabled), then one attempt per known log on
        the worker pool; returns when all are done or on stop."""
        if self.config.discovery_interval_ms > 0:
            try:
                self.discover()
            except LlogError as exc:
                log.warning("discovery failed; compacting the seed targets only: %s", exc)
        todo = self.known_partitions()
        self._rng.shuffle(todo)
        results: list[TaskResult] = []
        lock = threading.Lock()

        def work() -> None:
            while not self._stop.is_set():
                with lock:
                    if not todo:
                        return
                    tp = todo.pop()
                res = self.attempt(tp)
                with lock:
                    results.append(res)

        threads = [threading.Thread(target=work, name=f"llog-compactor-once-{i}", daemon=True)
                   for i in range(min(self.config.workers, max(1, len(todo))))]
        for t in threads:
            t.start()
        for t in threads:
            while t.is_alive():
                t.join(0.2)
        return results

    def run_retention(self) -> list:
        """One retention pass over every known log now (also what the interval thread runs). Never raises."""
        return self._retention_runner.run_once()

    def run_vacuum(self) -> Any:
        """One vacuum pass now (also what the interval thread calls). Never raises."""
        return self._vacuum_runner.run_once()

    # -- state, for HTTP --------------------------------------------------------------------------------------
    def _update_gauges(self) -> None:
        with self._cond:
            known = len(self._scheduler.known())
            discovered = self._scheduler.discovered_count()
            in_flight = self._scheduler.in_flight
            pending = sum(1 for st in self._scheduler.states().values() if not st.running and st.lag_offsets)
        self.metrics.set_gauge("compactor_partitions_pending", pending)
        self.metrics.set_gauge("compactor_partitions_known", known)
        self.metrics.set_gauge("compactor_discovered_partitions", discovered)
        self.metrics.set_gauge("compactor_in_flight_tasks", in_flight)

    def health(self) -> dict[str, Any]:
        with self._cond:
            running = sorted(str(tp) for tp in self._scheduler.running())
            known = len(self._scheduler.known())
        return {
            "status": "stopping" if self._stop.is_set() else "ok",
            "compactor_id": self.config.compactor_id,
            "host": self.config.bind_host,
            "port": self.http_port,
            "started_at_ms": self.started_at_ms,
            "workers": self.config.workers,
            "in_flight": running,
            "partitions_known": known,
            "last_discovery_at_ms": self._discovery.last_pass_ms,
        }

    def metrics_json(self) -> dict[str, Any]:
        self._update_gauges()
        snap = self.metrics.snapshot()
        with self._cond:
            states = self._scheduler.states()
        partitions = {
            str(tp): {
                "running": st.running,
                "last_outcome": None if st.last_outcome is None else st.last_outcome.value,
                "lag_offsets": st.lag_offsets,
                "source": st.source,
            }
            for tp, st in states.items()
        }
        snap["service"] = {**self.health(), "partitions": partitions}
        snap["s3"] = {"billing": self.billing.publish()}
        return snap

    def metrics_prometheus(self) -> bytes:
        self._update_gauges()
        self.billing.publish()
        return self.metrics.prometheus_text()
