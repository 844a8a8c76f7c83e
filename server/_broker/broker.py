"""The HTTP broker: /produce and /consume over the writer and the reader.

    python -m server.leaderless_log_broker --role both --port 8080
    llog-broker --help

One process, Python's ``ThreadingHTTPServer`` (a thread per connection,
HTTP/1.1 keep-alive). Routes (the contract is in ``server/HTTP_API.md`` and
``server/openapi.yaml``)::

    GET  /health              {"status", "broker_id", "host", "port", "started_at_ms"}
    GET  /metrics             JSON metrics snapshot plus broker info
    GET  /metrics/prometheus  the same in Prometheus text format
    POST /produce             role write or both
    POST /consume             role read or both

Produce: one request's batches go to the shared ``BatchingProducer`` in one
``submit`` (so they share one flush; no process-wide lock around it), and the
committed results fill the tail cache before the answer is sent. Consume:
``BrokerConsumeService`` (tail cache, then Oxia/S3; long-polls on the
handler thread).

Shutdown (SIGTERM or SIGINT): stop accepting connections, answer requests
on open connections with 503, wake long-polling consumes, flush and close
the producer (every accepted produce gets its answer), then close.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
import time
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Mapping, Sequence

from .._config import BatchConfig, OxiaConfig
from .._errors import BackPressureRejected, ConfigError, LlogError, ProducerClosed
from .._log.reader import LeaderlessLogReader
from .._log.producer import BatchingProducer
from .._log.writer import LeaderlessLogWriter
from .._protocol.keys import TopicPartition
from .._protocol.structs import AppendResult, SharedAppendGroup
from ..leaderless_log_metrics import LlogMetrics
from .codec import (
    TooLarge,
    append_result_json,
    consumed_partition_json,
    parse_consume,
    parse_json_body,
    parse_produce,
)
from .config import ROLES, BrokerConfig
from .consume import BrokerConsumeService
from .http import PROMETHEUS, BrokerHTTPServer, Response, error_response
from .tail_cache import MemoryTailCache, NullTailCache, TailCache, TailSignals
from .tail_cache_file import FileTailCache, namespace_key

__all__ = ["Broker", "BrokerHTTPServer", "Response", "main", "serve"]

log = logging.getLogger(__name__)


class Broker:
    """The broker's services and lifecycle, independent of the HTTP plumbing."""

    def __init__(
        self,
        config: BrokerConfig,
        env: Mapping[str, str],
        *,
        metrics: LlogMetrics | None = None,
    ) -> None:
        self.config = config
        self.metrics = metrics or LlogMetrics(static_labels={"broker_id": config.broker_id})
        self.started_at_ms = int(time.time() * 1000)
        self.port = config.port
        self.signals = TailSignals()
        self.writer: LeaderlessLogWriter | None = None
        self.producer: BatchingProducer | None = None
        self.reader: LeaderlessLogReader | None = None
        self.consume_service: BrokerConsumeService | None = None
        self._draining = threading.Event()
        self._pending_lock = threading.Lock()
        self._pending_writes: dict[TopicPartition, int] = {}
        self._inflight = 0
        self._inflight_cond = threading.Condition()
        self._closed = False
        oxia = OxiaConfig.from_env(env)
        self.cache: TailCache = self._make_cache(oxia)
        try:
            if config.serves_produce:
                self.writer = LeaderlessLogWriter.from_env(env, metrics=self.metrics)
                self.producer = BatchingProducer(self.writer, BatchConfig.from_env(env), metrics=self.metrics)
            if config.serves_consume:
                self.reader = LeaderlessLogReader.from_env(env, metrics=self.metrics)
                self.consume_service = BrokerConsumeService(
                    self.reader, self.cache, self.signals, metrics=self.metrics,
                    local_writes_pending=self._writes_pending,
                )
        except BaseException:
            self.close()
            raise
        self.metrics.set_info(
            broker_id=config.broker_id,
            role=config.role,
            host=config.host,
            started_at_ms=self.started_at_ms,
            tail_cache_mode=self.cache.mode,
            tail_cache_dir=config.tail_cache_dir,
            tail_cache_max_bytes=config.tail_cache_max_bytes,
            max_request_bytes=config.max_request_bytes,
            max_records_per_request=config.max_records_per_request,
            max_wait_ms_cap=config.max_wait_ms_cap,
            root_prefix=oxia.root_prefix,
        )
        self.metrics.set_gauge("broker_info", 1, role=config.role, tail_cache_mode=self.cache.mode)
        # Present (at 0) from the start, so dashboards and rate() see them.
        names = ["http_requests_too_large_total"]
        if config.serves_produce:
            names += ["produce_records_total", "produce_payload_bytes_total", "batcher_flushes_total",
                      "batcher_submits_total", "batcher_backpressure_rejections_total"]
        if config.serves_consume:
            names += ["consume_records_total", "consume_payload_bytes_total", "consume_wakeups_total",
                      "consume_storage_reads_total", "tail_cache_evictions_total"]
        for name in names:
            self.metrics.inc(name, 0)

    def _make_cache(self, oxia: OxiaConfig) -> TailCache:
        c = self.config
        if not c.tail_cache_enabled:
            return NullTailCache(self.signals)
        if c.tail_cache_dir:
            return FileTailCache(
                c.tail_cache_dir,
                namespace_key(oxia.service_address, oxia.namespace, oxia.root_prefix),
                c.tail_cache_max_bytes,
                self.signals,
                self.metrics,
                writer=c.serves_produce,
                poll_ms=c.tail_cache_poll_ms,
            )
        if c.role == "both":
            return MemoryTailCache(c.tail_cache_max_bytes, self.signals, self.metrics)
        return NullTailCache(self.signals)  # nothing in this process would read or fill it

    # -- lifecycle -------------------------------------------------------------------
    @property
    def draining(self) -> bool:
        return self._draining.is_set()

    def enter(self) -> None:
        with self._inflight_cond:
            self._inflight += 1

    def leave(self) -> None:
        with self._inflight_cond:
            self._inflight -= 1
            self._inflight_cond.notify_all()

    def close(self, timeout_s: float = 30.0) -> None:
        """Drain: wake long-polls, flush the producer, wait for requests, close."""
        if self._closed:
            return
        self._closed = True
        self._draining.set()
        if self.consume_service is not None:
            self.consume_service.close()
        if self.producer is not None:
            self.producer.close()
        with self._inflight_cond:
            self._inflight_cond.wait_for(lambda: self._inflight <= 0, timeout_s)
        self.cache.flush()
        self.cache.close()
        for part in (self.writer, self.reader):
            if part is not None:
                part.close()

    # -- routes ------------------------------------------------------------------------
    def health(self, body: bytes) -> Response:
        return Response(200, {
            "status": "ok",
            "broker_id": self.config.broker_id,
            "host": self.config.host,
            "port": self.port,
            "started_at_ms": self.started_at_ms,
        })

    def metrics_json(self, body: bytes) -> Response:
        self._refresh_gauges()
        snap = self.metrics.snapshot()
        snap["broker"] = {
            "broker_id": self.config.broker_id,
            "role": self.config.role,
            "host": self.config.host,
            "port": self.port,
            "started_at_ms": self.started_at_ms,
            "tail_cache_mode": self.cache.mode,
        }
        return Response(200, snap)

    def metrics_prometheus(self, body: bytes) -> Response:
        self._refresh_gauges()
        return Response(200, self.metrics.prometheus_text().encode("utf-8"), PROMETHEUS)

    def _refresh_gauges(self) -> None:
        self.metrics.set_gauge("consume_waiting_requests", len(self.signals.waiters()))
        with self._inflight_cond:
            self.metrics.set_gauge("http_inflight_requests", self._inflight)

    def produce(self, body: bytes) -> Response:
        if self.producer is None:
            return self._role_refused("POST /produce", "write")
        started = time.monotonic()
        request = parse_produce(parse_json_body(body), max_records=self.config.max_records_per_request)
        cap = self.producer.config.max_buffer_bytes
        if request.payload_bytes > cap:
            raise TooLarge(
                f"the request holds {request.payload_bytes} payload bytes, more than the producer's "
                f"buffer of {cap} (LLOG_BATCH_MAX_BUFFER_BYTES); split it",
                "topic_partitions",
            )
        groups = request.groups
        self._writes_begin(groups)
        try:
            future = self.producer.submit(groups)
        except BackPressureRejected as exc:
            self._writes_end(groups)
            results = [AppendResult(g.topic, g.partition, len(g.payloads), error=exc) for g in groups]
        except BaseException as exc:
            self._writes_end(groups)
            if isinstance(exc, ProducerClosed):
                return error_response(503, "the broker is shutting down", "ProducerClosed", headers=[("Retry-After", "1")])
            raise
        else:
            future.add_done_callback(lambda f: self._fill_cache(groups, f))
            try:
                results = future.result(self.config.produce_timeout_ms / 1000.0)
            except FutureTimeout:
                self.metrics.inc("produce_timeouts_total")
                return error_response(
                    504,
                    f"no flush outcome within {self.config.produce_timeout_ms} ms; the records may or "
                    "may not be committed (LLOG_BROKER_PRODUCE_TIMEOUT_MS)",
                    "OutcomeUnknown",
                    retriable=True,
                )
        return self._produce_response(results, request.record_count, request.payload_bytes, started)

    def _fill_cache(self, groups: Sequence[SharedAppendGroup], future: Future) -> None:
        """Runs when the flush resolves (normally on the flusher thread, in
        commit order): committed slices go to the tail cache, which wakes
        consumes waiting on those partitions."""
        try:
            results = future.result()
            for g, res in zip(groups, results):
                if res.ok and res.start_offset is not None:
                    self.cache.publish(g.tp, res.start_offset, g.payloads)
        except Exception:  # the cache is an optimization; never fail a produce for it
            log.warning("tail cache fill failed", exc_info=True)
        finally:
            self._writes_end(groups)
            for tp in {g.tp for g in groups}:
                self.signals.notify(tp)  # also after a failure: deferred consumes re-check

    def _writes_begin(self, groups: Sequence[SharedAppendGroup]) -> None:
        with self._pending_lock:
            for g in groups:
                self._pending_writes[g.tp] = self._pending_writes.get(g.tp, 0) + 1

    def _writes_end(self, groups: Sequence[SharedAppendGroup]) -> None:
        with self._pending_lock:
            for g in groups:
                left = self._pending_writes.get(g.tp, 0) - 1
                if left > 0:
                    self._pending_writes[g.tp] = left
                else:
                    self._pending_writes.pop(g.tp, None)

    def _writes_pending(self, tp: TopicPartition) -> bool:
        """Whether a produce of this broker to ``tp`` awaits its flush."""
        with self._pending_lock:
            return tp in self._pending_writes

    def _produce_response(
        self, results: Sequence[AppendResult], records: int, nbytes: int, started: float
    ) -> Response:
        failed = [r for r in results if r.error is not None]
        body: dict[str, Any] = {
            "results": [append_result_json(r) for r in results],
            "success_count": len(results) - len(failed),
            "error_count": len(failed),
        }
        headers: list[tuple[str, str]] = []
        if not failed:
            status = 200
            self.metrics.inc("produce_records_total", records)
            self.metrics.inc("produce_payload_bytes_total", nbytes)
            self.metrics.observe("produce_request_seconds", time.monotonic() - started)
        else:
            if len(failed) == len(results) and all(isinstance(r.error, BackPressureRejected) for r in failed):
                status = 503
                body["error_type"] = "BackPressureRejected"
                headers.append(("Retry-After", "1"))
            else:
                status = 409
                body["error_type"] = "AppendFailed"
            first = failed[0]
            body["error"] = (
                f"{len(failed)} of {len(results)} batches failed; first "
                f"{first.topic}:{first.partition}: {first.error}"
            )
            for r in failed:
                self.metrics.inc("produce_failed_batches_total", error=type(r.error).__name__)
        return Response(status, body, headers=headers)

    def consume(self, body: bytes) -> Response:
        if self.consume_service is None:
            return self._role_refused("POST /consume", "read")
        request = parse_consume(parse_json_body(body), max_wait_ms_cap=self.config.max_wait_ms_cap)
        result = self.consume_service.consume(request)
        return Response(200, {
            "results": [consumed_partition_json(p) for p in result.partitions],
            "record_count": result.record_count,
            "payload_bytes": result.payload_bytes,
            "waited_ms": result.waited_ms,
        })

    def _role_refused(self, what: str, needed: str) -> Response:
        return error_response(
            403,
            f"this broker runs role {self.config.role!r} and does not serve {what}; "
            f"send it to a broker with role {needed!r} or 'both'",
            "RoleNotServed",
            role=self.config.role,
        )


# -- process entry point -----------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m server.leaderless_log_broker",
        description=(
            "llog HTTP broker: POST /produce and POST /consume over Oxia + S3, "
            "with GET /health, /metrics and /metrics/prometheus."
        ),
        epilog=(
            "Flags override the environment. Also read: LLOG_OXIA_* and LLOG_S3_* (where the log "
            "lives), LLOG_ROOT_PREFIX, LLOG_BATCH_MAX_BYTES / _MAX_DELAY_MS / _MAX_BUFFER_BYTES "
            "(batching), LLOG_BROKER_MAX_REQUEST_BYTES, LLOG_BROKER_MAX_RECORDS_PER_REQUEST, "
            "LLOG_BROKER_MAX_WAIT_MS, LLOG_BROKER_PRODUCE_TIMEOUT_MS, LLOG_TAIL_CACHE_POLL_MS. "
            "See .env.example and server/HTTP_API.md."
        ),
    )
    p.add_argument("--role", choices=ROLES, help="endpoints to serve (default both; LLOG_BROKER_ROLE)")
    p.add_argument("--broker-id", help="name in /health and /metrics (LLOG_BROKER_ID; default broker-HOST-PID)")
    p.add_argument("--host", help="bind address (LLOG_BROKER_HOST; default 127.0.0.1)")
    p.add_argument("--port", type=int, help="bind port, 0 = any free port (LLOG_BROKER_PORT; default 8080)")
    p.add_argument("--tail-cache-dir", help="shared file-backed tail cache directory (LLOG_TAIL_CACHE_DIR)")
    p.add_argument(
        "--tail-cache-max-bytes", type=int,
        help="tail cache cap, 0 disables (LLOG_TAIL_CACHE_MAX_BYTES; default 512 MiB)",
    )
    p.add_argument("--log-level", default="INFO", help="logging level (default INFO)")
    return p.parse_args(argv)


def serve(config: BrokerConfig, env: Mapping[str, str], stop: threading.Event) -> None:
    """Run a broker until ``stop`` is set, then shut down gracefully."""
    broker = Broker(config, env)
    try:
        server = BrokerHTTPServer(broker)
    except BaseException:
        broker.close()
        raise
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, name="llog-broker-http")
    thread.start()
    try:
        # One machine-readable line on stdout: how tests and scripts learn the
        # port. If nobody reads it any more (the parent died: BrokenPipeError)
        # the broker shuts down rather than serve on, unannounced.
        print(json.dumps({
            "event": "listening", "broker_id": config.broker_id, "role": config.role,
            "host": config.host, "port": broker.port, "tail_cache": broker.cache.mode,
        }), flush=True)
        log.info("broker %s (role %s) listening on http://%s:%d", config.broker_id, config.role, config.host,
                 broker.port)
        stop.wait()
    finally:
        log.info("broker %s shutting down", config.broker_id)
        server.shutdown()  # stop accepting
        server.server_close()
        thread.join()
        broker.close()
        log.info("broker %s stopped", config.broker_id)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s %(threadName)s: %(message)s",
    )
    try:
        config = BrokerConfig.from_env(
            os.environ,
            role=args.role,
            broker_id=args.broker_id,
            host=args.host,
            port=args.port,
            tail_cache_dir=args.tail_cache_dir,
            tail_cache_max_bytes=args.tail_cache_max_bytes,
        )
    except ConfigError as exc:
        print(f"llog-broker: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        serve(config, os.environ, stop)
    except ConfigError as exc:
        print(f"llog-broker: {exc}", file=sys.stderr)
        return 2
    except (LlogError, OSError) as exc:
        print(f"llog-broker: cannot start: {exc}", file=sys.stderr)
        return 1
    return 0

