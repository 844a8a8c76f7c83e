"""``CompactorService``: the compactor service's scheduler, discovery, workers and vacuum thread.

The design is described in :mod:`server.leaderless_log_compactor_server`
(the entry point, which also re-exports this class); the HTTP surface is in
``http.py``, the claims (and why a claim of our own never blocks us) in
``claims.py``.
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import random
import threading
import time
from dataclasses import dataclass
from http.server import ThreadingHTTPServer
from typing import Any, Callable, Mapping

from .._config import OxiaConfig, S3Config
from .._errors import LlogError, PartitionNotInitialized
from .._protocol.keys import LogLayout, TopicPartition
from .._storage.metastore import MetadataStore, OxiaMetadataStore
from .._storage.objectstore import ObjectStore, S3ObjectStore
from ..leaderless_log_metrics import LlogMetrics
from .blob_cache import SharedBlobCache
from .claims import Claims
from .config import CompactorServiceConfig
from .http import serve
from .tasks import (
    OUTCOME_BUSY,
    OUTCOME_COMPACTED,
    OUTCOME_ERROR,
    OUTCOME_NOT_INITIALIZED,
    OUTCOME_RESUMED,
    Compactor,
    TaskResult,
    VacuumLike,
)

__all__ = ["CompactorService", "TaskResult", "Compactor", "VacuumLike"]

log = logging.getLogger(__name__)

_MAX_SCHEDULER_WAIT_S = 1.0


@dataclass
class _LogState:
    """Scheduler bookkeeping for one log (guarded by the service's condition)."""

    next_eligible: float = 0.0
    running: bool = False
    last_outcome: str | None = None
    lag_offsets: int | None = None
    source: str = "target"


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
        compactor_factory: Callable[[], Compactor] | None = None,
        vacuum_factory: Callable[[], VacuumLike] | None = None,
        serve_http: bool = True,
        rng: random.Random | None = None,
    ) -> None:
        self.config = config
        self.layout = LogLayout(oxia_config.root_prefix)
        self.metrics = metrics or LlogMetrics()
        self._oxia_config = oxia_config
        self._s3_config = s3_config
        self._owns_meta = metadata_store is None
        self._owns_objects = object_store is None
        self._meta = metadata_store or OxiaMetadataStore(oxia_config, self.metrics)
        try:
            self._objects = object_store or S3ObjectStore(s3_config, self.metrics)
        except Exception:
            if self._owns_meta:
                self._meta.close()
            raise
        # Compactors read shared blobs through a cache (see blob_cache.py); vacuum
        # and the claims use the plain stores.
        self._compactor_objects: ObjectStore = (
            SharedBlobCache(self._objects, self.layout.shared_wal_prefix, config.blob_cache_bytes, self.metrics)
            if config.blob_cache_bytes > 0 else self._objects
        )
        self._compactor_factory = compactor_factory or self._default_compactor
        self._vacuum_factory = vacuum_factory or self._default_vacuum
        self._serve_http = serve_http
        self._rng = rng or random.Random()

        self._cond = threading.Condition()
        self._logs: dict[TopicPartition, _LogState] = {
            tp: _LogState() for tp in config.targets
        }
        self._in_flight = 0
        self._stop = threading.Event()
        self._next_discovery = 0.0
        self._last_discovery_ms: int | None = None
        self._queue: queue.Queue[TopicPartition | None] = queue.Queue()
        self._workers: list[threading.Thread] = []
        self._scheduler: threading.Thread | None = None
        self._vacuum_thread: threading.Thread | None = None
        self._vacuum: VacuumLike | None = None
        self._local = threading.local()
        self._compactors: list[Compactor] = []
        self._compactors_lock = threading.Lock()
        self._claims = Claims(self._meta, config.compactor_id, self.metrics)
        self._http: ThreadingHTTPServer | None = None
        self._http_thread: threading.Thread | None = None
        self._started = False
        self._closed = False
        self._close_lock = threading.Lock()
        self.started_at_ms = int(time.time() * 1000)

        self.metrics.set_info(
            component="compactor",
            compactor_id=config.compactor_id,
            root_prefix=self.layout.root,
            workers=config.workers,
            targets=[str(tp) for tp in config.targets],
            discovery_interval_ms=config.discovery_interval_ms,
            idle_sleep_ms=config.idle_sleep_ms,
            error_sleep_ms=config.error_sleep_ms,
            vacuum_interval_ms=config.vacuum.interval_ms,
            vacuum_grace_ms=config.vacuum.grace_ms,
            blob_cache_bytes=config.blob_cache_bytes,
        )
        self.metrics.set_gauge("compactor_info", 1, compactor_id=config.compactor_id)
        self.metrics.set_gauge("compactor_workers", config.workers)
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
        return cls(config, oxia_config, s3_config, **kwargs)

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
            self._start_http()
        for i in range(self.config.workers):
            t = threading.Thread(target=self._worker_loop, name=f"llog-compactor-worker-{i}", daemon=True)
            t.start()
            self._workers.append(t)
        self._scheduler = threading.Thread(target=self._schedule_loop, name="llog-compactor-scheduler", daemon=True)
        self._scheduler.start()
        if self.config.vacuum.interval_ms > 0:
            self._vacuum_thread = threading.Thread(target=self._vacuum_loop, name="llog-compactor-vacuum", daemon=True)
            self._vacuum_thread.start()
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
        if self._scheduler is not None:
            self._scheduler.join(timeout=5)
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._in_flight > 0 and time.monotonic() < deadline:
                self._cond.wait(min(0.2, max(0.0, deadline - time.monotonic())))
            finished = self._in_flight == 0
            running = [str(tp) for tp, st in self._logs.items() if st.running]
        for _ in self._workers:
            self._queue.put(None)
        if not finished:
            log.warning(
                "compactor %s: %d runs still in flight after %.1fs (%s); abandoning them "
                "(they resume on the next compactor that takes the log)",
                self.config.compactor_id, len(running), timeout_s, ", ".join(running),
            )
        if self._vacuum_thread is not None:
            self._vacuum_thread.join(timeout=max(0.0, deadline - time.monotonic()) + 1)
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
        with self._compactors_lock:
            compactors, self._compactors = self._compactors, []
        for c in compactors:
            _close_quietly(c)
        if self._vacuum is not None:
            _close_quietly(self._vacuum)
        if self._compactor_objects is not self._objects:
            _close_quietly(self._compactor_objects)
        if self._owns_objects:
            _close_quietly(self._objects)
        if self._owns_meta:
            _close_quietly(self._meta)
        log.info("compactor %s stopped", self.config.compactor_id)

    # -- discovery ---------------------------------------------------------------------
    def discover(self) -> int:
        """Scan Oxia for initialized logs (SPEC 7.8); return how many are new."""
        root = self.layout.root
        try:
            keys = self._meta.list_keys(f"{root}/", f"{root}/~/", partition_key=None)
        except LlogError:
            self.metrics.inc("compactor_discovery_passes_total", outcome="error")
            raise
        found = {tp for tp in map(self.layout.parse_control_key, keys) if tp is not None}
        now = time.monotonic()
        with self._cond:
            new = [tp for tp in found if tp not in self._logs]
            for tp in new:
                self._logs[tp] = _LogState(next_eligible=now, source="discovered")
            self._cond.notify_all()
        self._last_discovery_ms = int(time.time() * 1000)
        self.metrics.inc("compactor_discovery_passes_total", outcome="ok")
        self.metrics.inc("compactor_partitions_discovered_total", len(new))
        self.metrics.set_gauge("compactor_discovery_last_found", len(found))
        self._update_gauges()
        if new:
            log.info("discovery found %d new logs: %s", len(new), ", ".join(sorted(map(str, new))[:20]))
        return len(new)

    def known_partitions(self) -> list[TopicPartition]:
        with self._cond:
            return sorted(self._logs)

    # -- scheduling ----------------------------------------------------------------------
    def _schedule_loop(self) -> None:
        while not self._stop.is_set():
            now = time.monotonic()
            if self.config.discovery_interval_ms > 0 and now >= self._next_discovery:
                self._next_discovery = now + self.config.discovery_interval_ms / 1000
                try:
                    self.discover()
                except Exception as exc:  # noqa: BLE001 - keep scheduling the known logs
                    log.warning("discovery failed (retrying in %d ms): %s",
                                self.config.discovery_interval_ms, exc)
            with self._cond:
                if self._stop.is_set():
                    break
                self._dispatch(time.monotonic())
                self._cond.wait(self._wait_s(time.monotonic()))

    def _dispatch(self, now: float) -> None:
        """Hand shuffled eligible logs to free workers (holding the condition)."""
        free = self.config.workers - self._in_flight
        if free <= 0:
            return
        eligible = [tp for tp, st in self._logs.items() if not st.running and st.next_eligible <= now]
        self._rng.shuffle(eligible)
        for tp in eligible[:free]:
            self._logs[tp].running = True
            self._in_flight += 1
            self._queue.put(tp)
        self.metrics.set_gauge("compactor_in_flight_tasks", self._in_flight)

    def _wait_s(self, now: float) -> float:
        """How long the scheduler may sleep before something can be due."""
        wake = now + _MAX_SCHEDULER_WAIT_S
        if self.config.discovery_interval_ms > 0:
            wake = min(wake, self._next_discovery)
        if self._in_flight < self.config.workers:
            waiting = [st.next_eligible for st in self._logs.values() if not st.running]
            if waiting:
                wake = min(wake, min(waiting))
        return max(0.001, wake - now)

    def _worker_loop(self) -> None:
        while True:
            tp = self._queue.get()
            if tp is None:
                return
            outcome = OUTCOME_ERROR
            try:
                outcome = self.attempt(tp).outcome
            except BaseException:  # attempt() catches everything; belt and braces for the counters
                log.exception("compactor task for %s crashed", tp)
            finally:
                self._finish(tp, outcome)

    def _finish(self, tp: TopicPartition, outcome: str) -> None:
        with self._cond:
            st = self._logs[tp]
            st.running = False
            st.next_eligible = time.monotonic() + self._delay_s(outcome, st.lag_offsets)
            self._in_flight -= 1
            self.metrics.set_gauge("compactor_in_flight_tasks", self._in_flight)
            self._cond.notify_all()

    def _delay_s(self, outcome: str, lag_offsets: int | None) -> float:
        """Per-log pause before the next attempt (see the module docstring)."""
        c = self.config
        if outcome == OUTCOME_RESUMED or (outcome == OUTCOME_COMPACTED and (lag_offsets or 0) > 0):
            return 0.0
        if outcome == OUTCOME_ERROR:
            return (c.error_sleep_ms + self._rng.uniform(0, c.error_jitter_ms)) / 1000
        return (c.idle_sleep_ms + self._rng.uniform(0, c.idle_jitter_ms)) / 1000

    # -- one task --------------------------------------------------------------------------
    def attempt(self, tp: TopicPartition) -> TaskResult:
        """Claim ``tp``, run ``compact_once`` on it, release the claim. Never raises."""
        started = time.perf_counter()
        keys = self.layout.keys(tp)
        result = None
        error = None
        try:
            self._claims.retry_release(keys)
            version = self._claims.claim(keys)
        except Exception as exc:  # noqa: BLE001
            version, outcome, error = None, OUTCOME_ERROR, f"claim failed: {exc}"
            log.warning("cannot claim %s: %s", tp, exc)
        else:
            outcome = OUTCOME_BUSY
        if version is not None:
            try:
                result = self._compactor().compact_once(tp.topic, tp.partition)
                outcome = str(getattr(result.outcome, "value", result.outcome))
                self._note_result(tp, result)
            except PartitionNotInitialized:
                outcome = OUTCOME_NOT_INITIALIZED
            except Exception as exc:  # noqa: BLE001 - one log's failure must not stop the others
                outcome, error = OUTCOME_ERROR, f"{type(exc).__name__}: {exc}"
                self.metrics.inc("compactor_task_errors_total", error=type(exc).__name__)
                log.warning("compaction of %s failed (retry in ~%d ms): %s", tp, self.config.error_sleep_ms, error)
            finally:
                self._claims.release(keys, version)
        seconds = time.perf_counter() - started
        self.metrics.inc("compactor_tasks_total", outcome=outcome)
        self.metrics.observe("compactor_task_seconds", seconds)
        with self._cond:
            st = self._logs.setdefault(tp, _LogState())
            st.last_outcome = outcome
        return TaskResult(tp, outcome, result, error, seconds)

    def _note_result(self, tp: TopicPartition, result: Any) -> None:
        lag = int(result.lag_offsets)
        with self._cond:
            self._logs.setdefault(tp, _LogState()).lag_offsets = lag
        self.metrics.set_gauge("compactor_lag_offsets", lag, topic=tp.topic, partition=tp.partition)

    def unreleased_claims(self) -> dict[TopicPartition, int]:
        """Logs whose claim release failed and is still to be retried -> claim version."""
        return self._claims.unreleased()

    def _compactor(self) -> Compactor:
        """This worker thread's compactor (created on first use; stores are shared)."""
        c = getattr(self._local, "compactor", None)
        if c is None:
            c = self._compactor_factory()
            self._local.compactor = c
            with self._compactors_lock:
                self._compactors.append(c)
        return c

    def _default_compactor(self) -> Compactor:
        from .compactor import LeaderlessLogCompactor

        limits = {}
        if self.config.max_offsets_per_run is not None:
            limits["max_offsets_per_run"] = self.config.max_offsets_per_run
        if self.config.max_bytes_per_run is not None:
            limits["max_bytes_per_run"] = self.config.max_bytes_per_run
        return LeaderlessLogCompactor(
            self._oxia_config, self._s3_config, metrics=self.metrics,
            metadata_store=self._meta, object_store=self._compactor_objects, **limits,
        )

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

    # -- vacuum --------------------------------------------------------------------------------
    def _default_vacuum(self) -> VacuumLike:
        from .vacuum import Vacuum

        return Vacuum(
            self._oxia_config, self._s3_config,
            grace_ms=self.config.vacuum.grace_ms,
            delete_redundant_entries=self.config.vacuum.delete_redundant_entries,
            metrics=self.metrics, metadata_store=self._meta, object_store=self._objects,
        )

    def _vacuum_loop(self) -> None:
        interval_s = self.config.vacuum.interval_ms / 1000
        # Start at a random point of the first interval so a fleet started
        # together does not vacuum in lockstep.
        first = interval_s * self._rng.uniform(0.5, 1.0)
        while not self._stop.wait(first if first is not None else interval_s):
            first = None
            self.run_vacuum()

    def run_vacuum(self) -> Any:
        """One vacuum pass now (also what the interval thread calls). Never raises."""
        try:
            if self._vacuum is None:
                self._vacuum = self._vacuum_factory()
            report = self._vacuum.run_once()
        except Exception as exc:  # noqa: BLE001 - the next interval tries again
            log.warning("vacuum pass failed: %s", exc)
            return None
        log.info(
            "vacuum: scanned %d objects, deleted %d (%d bytes), %d redundant index entries, %d errors",
            report.scanned, len(report.deleted), report.bytes_reclaimed,
            len(report.redundant_entries), len(report.errors),
        )
        return report

    # -- HTTP and state --------------------------------------------------------------------------------------
    def _start_http(self) -> None:
        self._http, self._http_thread = serve(self, self.config.bind_host, self.config.port)

    def _update_gauges(self) -> None:
        with self._cond:
            known = len(self._logs)
            discovered = sum(1 for st in self._logs.values() if st.source == "discovered")
            in_flight = self._in_flight
        self.metrics.set_gauge("compactor_partitions_known", known)
        self.metrics.set_gauge("compactor_partitions_discovered", discovered)
        self.metrics.set_gauge("compactor_in_flight_tasks", in_flight)

    def health(self) -> dict[str, Any]:
        with self._cond:
            running = sorted(str(tp) for tp, st in self._logs.items() if st.running)
            known = len(self._logs)
        return {
            "status": "stopping" if self._stop.is_set() else "ok",
            "compactor_id": self.config.compactor_id,
            "host": self.config.bind_host,
            "port": self.http_port,
            "started_at_ms": self.started_at_ms,
            "workers": self.config.workers,
            "in_flight": running,
            "partitions_known": known,
            "last_discovery_at_ms": self._last_discovery_ms,
        }

    def metrics_json(self) -> dict[str, Any]:
        self._update_gauges()
        snap = self.metrics.snapshot()
        with self._cond:
            partitions = {
                str(tp): {
                    "running": st.running,
                    "last_outcome": st.last_outcome,
                    "lag_offsets": st.lag_offsets,
                    "source": st.source,
                }
                for tp, st in sorted(self._logs.items())
            }
        snap["service"] = {**self.health(), "partitions": partitions}
        return snap

    def metrics_prometheus(self) -> str:
        self._update_gauges()
        return self.metrics.prometheus_text()


def _close_quietly(obj: Any) -> None:
    try:
        obj.close()
    except Exception as exc:  # noqa: BLE001 - closing must not mask shutdown
        log.debug("closing %r failed: %s", obj, exc)
