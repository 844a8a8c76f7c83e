"""The broker: /produce and /consume over a producer, a reader and a tail cache.

One :class:`Broker` holds the routes (``Broker.produce(body) -> Response``,
...) and the lifecycle; the HTTP plumbing is ``http.py``, the process entry
point (flags, ``serve``, ``main``) is ``cli.py``. Routes (the contract is in
``server/HTTP_API.md`` and ``server/openapi.yaml``)::

    GET  /health              {"status", "broker_id", "host", "port", "started_at_ms"}
    GET  /metrics             JSON metrics snapshot plus broker info
    GET  /metrics/prometheus  the same in Prometheus text format
    POST /produce             role write or both
    POST /producers           role write or both: an idempotent producer's id and epoch
    GET, POST /groups/...     consumer groups' committed offsets (``groups_route.py``)
    POST /consume             role read or both
    /topics, /topics/{name}   the topic catalogue (``topics.py``)
    POST /topics/{name}/delete-records   move log starts (``delete_records_route.py``)

Built from parts: ``Broker(config, producer=..., reader=..., cache=...,
metrics=...)`` (what the unit tests do, over the in-memory stores), or
``Broker.from_env(config)``, which builds the parts from ``LLOG_*`` as the
process does.

Produce: one request's batches go to the shared ``BatchingProducer`` in one
``submit`` (so they share one flush; no process-wide lock around it), and the
committed results fill the tail cache before the answer is sent. Consume:
``BrokerConsumeService`` (tail cache, then Oxia/S3; long-polls on the
handler thread).
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Mapping, Sequence

from .._config import BatchConfig, OxiaConfig, ProducerStateConfig, S3Config
from .._errors import BackPressureRejected, ConfigError, ProducerClosed
from .._http_server import PROMETHEUS, Response, error_response
from .._log.producer import BatchingProducer
from .._log.reader import LeaderlessLogReader
from .._log.retire import revive_log
from .._log.writer import LeaderlessLogWriter
from .._catalogue.catalogue import TopicCatalogue
from .._catalogue.topic_config import TopicDefaults
from .._protocol.keys import LogLayout, TopicPartition
from .._protocol.structs import AppendResult, SharedAppendGroup
from .._storage.billing import S3Billing, S3Prices
from .._storage.metastore import MetadataStore
from .._storage.stores import Stores
from .._metrics import PRESENT_AT_START, LlogMetrics
from .._runtime import REAL_RUNTIME, Runtime
from .._protocol.http_json import (
    append_result_json,
    consumed_partition_json,
    parse_consume,
    parse_json_body,
)
from .._protocol.outcomes import (
    APPEND_FAILED,
    BACK_PRESSURE_REJECTED,
    NOT_FOUND,
    OUTCOME_UNKNOWN,
    PRODUCER_CLOSED,
    ROLE_NOT_SERVED,
)
from .._protocol.produce_binary import parse_produce_body
from .answers import answers_errors
from .delete_records_route import delete_records_route
from .groups_route import groups_route
from .producers_route import producers_route
from .record_deletion import RecordDeletion
from .._groups.offsets import GroupOffsets
from .._log.producer_ids import ProducerIds
from .topics import BrokerTopics
from .config import BrokerConfig
from .consume import BrokerConsumeService
from .._protocol.consume_binary import CONSUME_BINARY_CONTENT_TYPE, accepts_binary_consume, encode_binary_consume
from .appends import Appends
from .tail_cache import TailCache
from .tail_cache_file import make_tail_cache

__all__ = ["Broker", "make_tail_cache"]

log = logging.getLogger(__name__)




class Broker:
    """The broker's routes and lifecycle over its parts, independent of the HTTP plumbing.

    Parts: ``producer`` (None for role ``read``), ``reader`` (None for role
    ``write``), ``cache`` (the tail cache; it carries the ``TailSignals`` its
    publishes notify and consume requests wait on, so the two sides cannot
    use different registries) and ``metrics`` (the registry the parts report
    to as well).

    Ownership: the broker owns the parts it is given. :meth:`close` drains
    and closes them in the one order that answers every accepted request (wake
    long-polls, close the producer: it flushes what it accepted and refuses
    the rest; wait for the requests in flight; flush and close the cache;
    close the reader): only the broker knows when its last request is done.
    What a part holds stays with the part: the producer closes its writer
    when it owns it (``BatchingProducer(owns_writer=True)``, as
    :meth:`from_env` builds it). Every ``close()`` is idempotent, so the
    maker of a part may close it again.
    """

    def __init__(
        self,
        config: BrokerConfig,
        *,
        producer: BatchingProducer | None,
        reader: LeaderlessLogReader | None,
        cache: TailCache,
        metrics: LlogMetrics,
        stores: Stores | None = None,
        billing: S3Billing | None = None,
        topics: BrokerTopics | None = None,
        producer_ids: ProducerIds | None = None,
        group_offsets: GroupOffsets | None = None,
        meta: MetadataStore | None = None,
    ) -> None:
        """``stores``: the Stores the parts share, if the broker is to close
        it after them (``from_env`` opens one). ``billing``: the S3 billing
        estimate shown under ``s3.billing`` (request costs from ``metrics``
        when not given). ``topics``: the topic catalogue produce and consume
        check and ``/topics`` serves (``from_env`` builds one); without it any
        topic-partition is accepted and ``/topics`` answers 404.
        ``producer_ids``: what ``POST /producers`` hands out (writing roles).
        ``meta``: the metadata store ``/topics/{name}/delete-records`` writes
        (default: ``stores``'); without it and ``topics`` that route answers 404."""
        _check_parts(config, producer, reader)
        self.config = config
        self.producer = producer
        self.reader = reader
        self.cache = cache
        self.signals = cache.signals
        self.metrics = metrics
        self.started_at_ms = int(time.time() * 1000)
        self.port = config.port
        self._draining = threading.Event()
        self._inflight = 0
        self._inflight_cond = threading.Condition()
        self._closed = False
        self._stores = stores
        self.billing = billing or S3Billing(metrics, None)
        self.topics = topics
        self.producer_ids = producer_ids
        self.group_offsets = group_offsets
        self.appends = None if producer is None else Appends(producer, cache, topics)
        self.consume_service: BrokerConsumeService | None = None
        if reader is not None:
            self.consume_service = BrokerConsumeService(
                reader, cache, cache.signals, metrics=metrics, local_writes_pending=self._writes_pending,
                check=None if topics is None else topics.check_consume,
                log_start_refresh_ms=config.log_start_refresh_ms,
            )
        if meta is None and stores is not None:
            meta = stores.meta
        self.records: RecordDeletion | None = None
        if meta is not None and topics is not None:
            self.records = RecordDeletion(meta, self.layout, topics, self.runtime, self.consume_service)
        self._report_info()

    @classmethod
    def from_env(cls, config: BrokerConfig, env: Mapping[str, str] | None = None, *,
                 metrics: LlogMetrics | None = None, runtime: Runtime = REAL_RUNTIME) -> Broker:
        """A broker over parts built from the environment (``LLOG_OXIA_*``,
        ``LLOG_S3_*``, ``LLOG_ROOT_PREFIX``, ``LLOG_BATCH_*``): the tail cache
        ``config`` asks for, a producer over its own writer (roles write and
        both), a reader (roles read and both), all over one ``Stores`` (one
        Oxia session per process). The broker owns them; closing it closes
        the writer too (the producer owns it), then the stores. ``runtime``:
        the clock, ids and randomness of the writer, producer and reader."""
        env = os.environ if env is None else env
        metrics = metrics or LlogMetrics(static_labels={"broker_id": config.broker_id}, process_metrics=True)
        built: list[Any] = []
        try:
            oxia, s3 = OxiaConfig.from_env(env), S3Config.from_env(env)
            stores = Stores.open(oxia, s3, metrics)
            built.append(stores)
            cache = make_tail_cache(config, oxia, metrics)
            built.append(cache)
            producer = reader = None
            if config.serves_produce:
                writer = LeaderlessLogWriter(oxia, s3, metrics=metrics, stores=stores, runtime=runtime,
                                             producer_state=ProducerStateConfig.from_env(env))
                built.append(writer)
                producer = BatchingProducer(writer, BatchConfig.from_env(env), metrics=metrics, owns_writer=True,
                                            runtime=runtime)
                built[-1] = producer
            if config.serves_consume:
                reader = LeaderlessLogReader(oxia, s3, metrics=metrics, stores=stores, runtime=runtime)
                built.append(reader)
            billing = S3Billing.for_stores(metrics, stores.objects, s3.bucket, oxia.root_prefix, S3Prices.from_env(env))
            init = producer.ensure_initialized if producer is not None else None
            layout = LogLayout(oxia.root_prefix)
            catalogue = TopicCatalogue(stores.meta, layout, defaults=TopicDefaults.from_env(env),
                                       initialize=None if init is None else (lambda tp: init(tp.topic, tp.partition)),
                                       revive=lambda tp: revive_log(stores.meta, layout.keys(tp)), runtime=runtime)
            return cls(
                config, producer=producer, reader=reader, cache=cache, metrics=metrics, stores=stores, billing=billing,
                topics=BrokerTopics(catalogue, cache_ms=config.topic_cache_ms),
                producer_ids=None if producer is None else ProducerIds(stores.meta, layout, runtime=runtime),
                group_offsets=GroupOffsets(stores.meta, layout, runtime=runtime),
            )
        except BaseException:
            for part in reversed(built):
                part.close()
            raise

    @property
    def stores(self) -> Stores | None:
        """The stores the parts share, when the broker opened them (``from_env``)."""
        return self._stores

    @property
    def layout(self) -> LogLayout:
        return self._part().layout

    @property
    def runtime(self) -> Runtime:
        return self._part().runtime

    def _part(self) -> Any:
        return self.producer.writer if self.producer is not None else self.reader

    def bind_port(self, port: int) -> None:
        """The port the HTTP server bound (config port 0 picks one)."""
        self.port = port
        self._report_info()

    def _report_info(self) -> None:
        config = self.config
        part = self._part()
        self.metrics.set_info(
            broker_id=config.broker_id, role=config.role, host=config.host, started_at_ms=self.started_at_ms,
            tail_cache_mode=self.cache.mode, tail_cache_dir=config.tail_cache_dir,
            tail_cache_max_bytes=config.tail_cache_max_bytes, max_request_bytes=config.max_request_bytes,
            max_records_per_request=config.max_records_per_request, max_wait_ms_cap=config.max_wait_ms_cap,
            root_prefix=part.layout.root,
        )
        batch = self.producer.config if self.producer is not None else None
        self.metrics.set_info_metric(
            "broker_info", broker_id=config.broker_id, role=config.role, host=config.host, port=self.port,
            tail_cache_mode=self.cache.mode, root_prefix=part.layout.root, max_request_bytes=config.max_request_bytes,
            batch_max_bytes=batch.max_bytes if batch else "", batch_max_delay_ms=batch.max_delay_ms if batch else "",
            batch_max_buffer_bytes=batch.max_buffer_bytes if batch else "",
        )
        self.metrics.present(*PRESENT_AT_START["broker"])
        if config.serves_produce:
            self.metrics.present(*PRESENT_AT_START["broker_write"])
        if config.serves_consume:
            self.metrics.present(*PRESENT_AT_START["broker_read"])

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
        """Drain and close the parts: wake long-polls, close the producer (it
        flushes what it accepted; later produces get 503 ``ProducerClosed``),
        wait up to ``timeout_s`` for requests in flight, flush and close the
        cache, close the reader. Safe to call twice."""
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
        if self.reader is not None:
            self.reader.close()
        if self._stores is not None:
            self._stores.close()

    # -- routes ------------------------------------------------------------------------
    @answers_errors
    def health(self, body: bytes) -> Response:
        return Response(200, {
            "status": "ok",
            "broker_id": self.config.broker_id,
            "host": self.config.host,
            "port": self.port,
            "started_at_ms": self.started_at_ms,
        })

    @answers_errors
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
        snap["s3"] = {"billing": self.billing.publish()}
        return Response(200, snap)

    @answers_errors
    def metrics_prometheus(self, body: bytes) -> Response:
        self._refresh_gauges()
        self.billing.publish()
        return Response(200, self.metrics.prometheus_text(), PROMETHEUS)

    def _refresh_gauges(self) -> None:
        self.metrics.set_gauge("consume_waiting_requests", len(self.signals.waiters()))
        with self._inflight_cond:
            self.metrics.set_gauge("http_inflight_requests", self._inflight)

    @answers_errors
    def produce(self, body: bytes, content_type: str | None = None) -> Response:
        """A JSON body, or the binary one by its ``Content-Type`` (``binary.py``)."""
        if self.appends is None:
            return self._role_refused("POST /produce", "write")
        started = time.monotonic()
        request = parse_produce_body(body, content_type, max_records=self.config.max_records_per_request)
        groups = self.appends.prepare(request.groups)
        if not groups:  # a flush-only request (the parser allows none only with flush)
            self.appends.producer.request_flush()
            return Response(200, {"results": [], "success_count": 0, "error_count": 0})
        request_id = _new_request_id()
        log.debug("produce %s: %d batches, %d records", request_id, len(groups), request.record_count)
        try:
            future = self.appends.submit(groups, request_id=request_id, flush=request.flush)
        except BackPressureRejected as exc:
            results = [AppendResult(g.topic, g.partition, len(g.payloads), error=exc) for g in groups]
        except ProducerClosed:
            return error_response(PRODUCER_CLOSED, "the broker is shutting down", headers=[("Retry-After", "1")])
        else:
            try:
                results = future.result(self.config.produce_timeout_ms / 1000.0)
            except FutureTimeout:
                self.metrics.inc("produce_timeouts_total")
                return error_response(
                    OUTCOME_UNKNOWN,
                    f"no flush outcome within {self.config.produce_timeout_ms} ms; the records may or "
                    "may not be committed (LLOG_BROKER_PRODUCE_TIMEOUT_MS)",
                    retriable=OUTCOME_UNKNOWN.retriable,
                )
        log.debug(
            "produce %s answered in %.1f ms: %d of %d batches committed", request_id,
            (time.monotonic() - started) * 1000, sum(1 for r in results if r.error is None), len(results),
        )
        return self._produce_response(results, groups, started)

    def _writes_pending(self, tp: TopicPartition) -> bool:
        return self.appends is not None and self.appends.pending(tp)

    def _produce_response(
        self, results: Sequence[AppendResult], groups: Sequence[SharedAppendGroup], started: float
    ) -> Response:
        failed = [r for r in results if r.error is not None]
        # Every acknowledged batch counts, in a 409 beside a failed one too: the
        # client was given its offsets (the load-test reconciliation relies on it).
        acked = [(r, g) for r, g in zip(results, groups) if r.error is None]
        self.metrics.inc("produce_records_total", sum(r.count for r, _ in acked))
        self.metrics.inc("produce_payload_bytes_total", sum(g.payload_bytes for _, g in acked))
        body: dict[str, Any] = {
            "results": [append_result_json(r) for r in results],
            "success_count": len(results) - len(failed),
            "error_count": len(failed),
        }
        headers: list[tuple[str, str]] = []
        if not failed:
            status = 200
            self.metrics.observe("produce_request_seconds", time.monotonic() - started)
        else:
            outcome = APPEND_FAILED
            if len(failed) == len(results) and all(isinstance(r.error, BackPressureRejected) for r in failed):
                outcome = BACK_PRESSURE_REJECTED
                headers.append(("Retry-After", "1"))
            status = outcome.status
            body["error_type"] = outcome.error_type
            first = failed[0]
            body["error"] = (
                f"{len(failed)} of {len(results)} batches failed; first "
                f"{first.topic}:{first.partition}: {first.error}"
            )
            for r in failed:
                self.metrics.inc("produce_failed_batches_total", error=type(r.error).__name__)
        return Response(status, body, headers=headers)

    @answers_errors
    def consume(self, body: bytes, accept: str | None = None) -> Response:
        """The answer is JSON, or the binary layout of ``consume_binary.py``
        when ``accept`` (the request's Accept header) asks for it."""
        if self.consume_service is None:
            return self._role_refused("POST /consume", "read")
        request = parse_consume(parse_json_body(body), max_wait_ms_cap=self.config.max_wait_ms_cap)
        request_id = _new_request_id()
        started = time.monotonic()
        result = self.consume_service.consume(request)
        log.debug(
            "consume %s: %d partitions, %d records, %d bytes, waited %d ms, answered in %.1f ms", request_id,
            len(request.partitions), result.record_count, result.payload_bytes, result.waited_ms,
            (time.monotonic() - started) * 1000,
        )
        if accepts_binary_consume(accept):
            return Response(200, encode_binary_consume(
                result.partitions, result.record_count, result.payload_bytes, result.waited_ms,
            ), CONSUME_BINARY_CONTENT_TYPE)
        return Response(200, {
            "results": [consumed_partition_json(p) for p in result.partitions],
            "record_count": result.record_count,
            "payload_bytes": result.payload_bytes,
            "waited_ms": result.waited_ms,
        })

    @answers_errors
    def groups_route(self, body: bytes, method: str, group: str | None, query: str) -> Response:
        if self.group_offsets is None:
            return error_response(NOT_FOUND, "this broker keeps no consumer group offsets")
        return groups_route(self.group_offsets, body, method, group, query)

    @answers_errors
    def producers(self, body: bytes) -> Response:
        if self.producer_ids is None:
            return self._role_refused("POST /producers", "write")
        return producers_route(self.producer_ids, body)

    @answers_errors
    def topics_route(self, body: bytes, method: str, name: str | None) -> Response:
        """``/topics`` (GET lists, POST creates) and ``/topics/{name}`` (GET, PATCH, DELETE)."""
        t = self.topics
        if t is None:
            return error_response(NOT_FOUND, "this broker has no topic catalogue")
        if name is None:
            return t.list_route() if method == "GET" else t.create_route(body)
        if method == "GET":
            return t.get_route(name)
        return t.patch_route(name, body) if method == "PATCH" else t.delete_route(name)

    @answers_errors
    def delete_records_route(self, body: bytes, name: str) -> Response:
        """``POST /topics/{name}/delete-records``."""
        if self.records is None:
            return error_response(NOT_FOUND, "this broker has no topic catalogue and cannot delete records")
        return delete_records_route(self.records, self.topics, name, body)

    def _role_refused(self, what: str, needed: str) -> Response:
        return error_response(ROLE_NOT_SERVED, f"this broker runs role {self.config.role!r} and does not serve {what}; "
                              f"send it to a broker with role {needed!r} or 'both'", role=self.config.role)


def _check_parts(config: BrokerConfig, producer: BatchingProducer | None, reader: LeaderlessLogReader | None) -> None:
    """The parts a role needs, and no others: a part the role never uses would be a resource held for nothing."""
    for name, part, needed in (("producer", producer, config.serves_produce), ("reader", reader, config.serves_consume)):
        if (part is not None) != needed:
            raise ConfigError(
                f"a broker with role {config.role!r} needs {'a' if needed else 'no'} {name}, "
                f"got {'none' if part is None else type(part).__name__}"
            )


def _new_request_id() -> str:
    """A short id that ties a request's debug lines to the flush it joined."""
    return uuid.uuid4().hex[:12]
