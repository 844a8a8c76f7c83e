"""One task on one log: claim it, run ``compact_once``, release the claim.

A task never raises: a claim that cannot be made is an ``error``, a claim
another compactor holds is ``busy`` (``compact_once`` is not called), a seed
target without ``meta/control`` is ``not_initialized`` and any failure of
``compact_once`` is an ``error`` (one log's failure must not stop the
others). The claim is released whatever the run did (``claims.py``).

Each worker thread gets its own compactor from the factory, made on first
use; the stores underneath are shared.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable

from .._errors import PartitionNotInitialized
from .._protocol.keys import LogLayout, PartitionKeys, TopicPartition
from .._metrics import LlogMetrics
from .._runtime import REAL_RUNTIME, Runtime
from .claims import Claims
from .tasks import Compactor, TaskOutcome, TaskResult, close_quietly

__all__ = ["TaskRunner"]

log = logging.getLogger(__name__)


class TaskRunner:
    """Runs tasks for the service's workers (and ``run_pass``). Thread-safe."""

    def __init__(
        self,
        claims: Claims,
        layout: LogLayout,
        metrics: LlogMetrics,
        compactor_factory: Callable[[], Compactor],
        *,
        error_sleep_ms: int,
        runtime: Runtime = REAL_RUNTIME,
    ) -> None:
        self._claims = claims
        self._clock = runtime.clock
        self._layout = layout
        self._metrics = metrics
        self._factory = compactor_factory
        self._error_sleep_ms = error_sleep_ms  # only for the log line
        self._local = threading.local()
        self._compactors: list[Compactor] = []
        self._compactors_lock = threading.Lock()

    def attempt(self, tp: TopicPartition) -> TaskResult:
        """Claim ``tp``, run ``compact_once`` on it, release the claim. Never raises."""
        started = self._clock.perf_counter()
        keys = self._layout.keys(tp)
        result, error = None, None
        try:
            self._claims.retry_release(keys)
            version = self._claims.claim(keys)
        except Exception as exc:  # noqa: BLE001
            outcome, error = TaskOutcome.ERROR, f"claim failed: {exc}"
            log.warning("cannot claim %s: %s", tp, exc)
        else:
            if version is None:
                outcome = TaskOutcome.BUSY
            else:
                outcome, result, error = self._run_claimed(tp, keys, version)
        seconds = self._clock.perf_counter() - started
        self._metrics.inc("compactor_tasks_total", outcome=outcome.value)
        self._metrics.observe("compactor_task_seconds", seconds)
        return TaskResult(tp, outcome, result, error, seconds)

    def _run_claimed(self, tp: TopicPartition, keys: PartitionKeys, version: int) -> tuple[TaskOutcome, Any, str | None]:
        """``compact_once`` under our claim (at ``version``), then release it."""
        try:
            result = self._compactor().compact_once(tp.topic, tp.partition)
            outcome = TaskOutcome(getattr(result.outcome, "value", result.outcome))
            self._metrics.set_gauge("compactor_lag_offsets", int(result.lag_offsets), topic=tp.topic,
                                    partition=tp.partition)
            backlog = int(getattr(result, "backlog_offsets", result.lag_offsets))
            self._metrics.set_gauge("compactor_backlog_offsets", backlog, topic=tp.topic, partition=tp.partition)
            return outcome, result, None
        except PartitionNotInitialized:
            return TaskOutcome.NOT_INITIALIZED, None, None
        except Exception as exc:  # noqa: BLE001 - one log's failure must not stop the others
            error = f"{type(exc).__name__}: {exc}"
            self._metrics.inc("compactor_task_errors_total", error=type(exc).__name__)
            log.warning("compaction of %s failed (retry in ~%d ms): %s", tp, self._error_sleep_ms, error)
            return TaskOutcome.ERROR, None, error
        finally:
            self._claims.release(keys, version)

    def _compactor(self) -> Compactor:
        """This thread's compactor (created on first use)."""
        c = getattr(self._local, "compactor", None)
        if c is None:
            c = self._factory()
            self._local.compactor = c
            with self._compactors_lock:
                self._compactors.append(c)
        return c

    def close(self) -> None:
        """Close every compactor made so far (quietly); safe to call twice."""
        with self._compactors_lock:
            compactors, self._compactors = self._compactors, []
        for c in compactors:
            close_quietly(c)
