"""One produce request set: ``POST /produce`` with retries and broker fallback
(:class:`ProduceClient`). What each answer means (retriable, definite or
unknown, the broker stopping) comes from the outcome table,
``server/_protocol/outcomes.py``; how the client acts on it is in :mod:`server.client`."""

from __future__ import annotations

import http.client
import json
import logging
import socket
import threading
import time
from typing import Any, NamedTuple, Sequence

from .._protocol.outcomes import (
    CONNECTION_LOST,
    CONNECTION_REFUSED,
    PROTOCOL_ERROR,
    Kind,
    Outcome,
    answer_outcome,
    is_retriable,
    item_outcome,
)
from .._retry import Backoff
from ._broker_selection import BrokerUrl, rendezvous_order
from ._produce_batches import CONTENT_TYPES, Batch, BatchAck, ProducerConfig, ProduceStats, encode_request
from ._produce_errors import BrokerUnreachable, ProduceError, ProduceFailed

__all__ = ["ProduceClient"]

log = logging.getLogger(__name__)


# -- the client ------------------------------------------------------------------------------


class _ConnectFailed(ProduceError):
    """No HTTP answer from a broker (refused, reset, timed out). ``sent``:
    the request may have reached the broker (anything but a refused
    connection), so its outcome is unknown."""

    def __init__(self, message: str, *, sent: bool) -> None:
        super().__init__(message)
        self.sent = sent


class _Reply(NamedTuple):
    status: int
    body: dict[str, Any] | None
    text: str


class ProduceClient:
    """Sends batches to the brokers with retries and fallback. Thread-safe:
    each thread keeps its own keep-alive connection per broker."""

    def __init__(self, config: ProducerConfig) -> None:
        self.config = config
        self._local = threading.local()
        self._down_until: dict[str, float] = {}
        self._order: dict[tuple[str, int], list[BrokerUrl]] = {}
        self._lock = threading.Lock()
        self._all_conns: list[http.client.HTTPConnection] = []
        self._stopping = threading.Event()

    # -- brokers --
    def preferred_broker(self, topic: str, partition: int) -> BrokerUrl:
        """The first live broker in the partition's rendezvous order."""
        return self._candidates(topic, partition)[0]

    def _candidates(self, topic: str, partition: int) -> list[BrokerUrl]:
        now = time.monotonic()
        with self._lock:
            order = self._order.get((topic, partition))
            if order is None:
                order = self._order[(topic, partition)] = rendezvous_order(self.config.brokers, topic, partition)
            live = [b for b in order if self._down_until.get(b.url, 0.0) <= now]
            down = sorted((b for b in order if b not in live), key=lambda b: self._down_until[b.url])
        return live + down

    def _mark_down(self, broker: BrokerUrl, reason: str) -> None:
        with self._lock:
            self._down_until[broker.url] = time.monotonic() + self.config.broker_cooldown_ms / 1000.0
        log.warning("broker %s marked down for %d ms: %s", broker.url, self.config.broker_cooldown_ms, reason)

    def _conn(self, broker: BrokerUrl) -> http.client.HTTPConnection:
        conns = getattr(self._local, "conns", None)
        if conns is None:
            conns = self._local.conns = {}
        conn = conns.get(broker.url)
        if conn is None:
            cls = http.client.HTTPSConnection if broker.scheme == "https" else http.client.HTTPConnection
            conn = cls(broker.host, broker.port, timeout=self.config.request_timeout_ms / 1000.0)
            conns[broker.url] = conn
            with self._lock:
                self._all_conns.append(conn)
        return conn

    def _drop_conn(self, broker: BrokerUrl) -> None:
        conn = getattr(self._local, "conns", {}).pop(broker.url, None)
        if conn is not None:
            conn.close()

    def post(self, broker: BrokerUrl, path: str, body: bytes, content_type: str = "application/json") -> _Reply:
        """One POST on the thread's keep-alive connection. A reused connection
        the server closed while idle is retried once on a fresh one; any other
        transport failure is :class:`_ConnectFailed`."""
        for attempt in range(2):
            conn = self._conn(broker)
            reused = conn.sock is not None
            try:
                conn.request("POST", broker.prefix + path, body=body, headers={"Content-Type": content_type})
                resp = conn.getresponse()
                data = resp.read()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError) as exc:
                self._drop_conn(broker)
                if reused and attempt == 0:
                    continue  # the broker closed the idle connection before reading the request
                raise _ConnectFailed(f"{type(exc).__name__}: {exc}", sent=True) from exc
            except (OSError, http.client.HTTPException) as exc:  # refused, timeout, DNS, bad status line
                self._drop_conn(broker)
                sent = not isinstance(exc, (ConnectionRefusedError, socket.gaierror))
                raise _ConnectFailed(f"{type(exc).__name__}: {exc}", sent=sent) from exc
            if resp.will_close:
                self._drop_conn(broker)
            text = data.decode("utf-8", errors="replace")
            try:
                parsed = json.loads(data) if data else None
            except ValueError:
                parsed = None
            return _Reply(resp.status, parsed if isinstance(parsed, dict) else None, text)
        raise AssertionError("unreachable")

    def stop(self) -> None:
        """Make retry loops in progress give up at their next backoff."""
        self._stopping.set()

    def close(self) -> None:
        self.stop()
        with self._lock:
            conns, self._all_conns = self._all_conns, []
        for c in conns:
            c.close()

    # -- sending --
    def send(
        self, batches: Sequence[Batch], stats: ProduceStats, stats_lock: threading.Lock, *, flush: bool = False
    ) -> list[BatchAck]:
        """Send ``batches`` until each is acknowledged; return the acks
        (``flush``: ask the broker to flush them now, not after its batch delay).

        Raises :class:`ProduceFailed` (or :class:`BrokerUnreachable`) naming the
        broker, topic-partition and last error when a batch fails for good.
        """
        acks: list[BatchAck] = []
        pending = list(batches)
        backoff = Backoff(
            initial_ms=self.config.retry_backoff_initial_ms,
            max_ms=self.config.retry_backoff_max_ms,
            max_attempts=2**31,
            max_elapsed_ms=float("inf"),
        )
        while pending:
            groups: dict[BrokerUrl, list[Batch]] = {}
            for b in pending:
                groups.setdefault(self.preferred_broker(b.topic, b.partition), []).append(b)
            retry: list[tuple[Batch, BrokerUrl, _Failure]] = []
            for broker, group in groups.items():
                for b in group:
                    b.attempts += 1
                got, failed = self._send_once(broker, group, stats, stats_lock, flush)
                acks.extend(got)
                retry.extend((b, broker, f) for b, f in failed)
            if not retry:
                break
            for b, broker, f in retry:
                if not f.retriable or b.attempts > self.config.max_retries:
                    cls = BrokerUnreachable if f.status is None else ProduceFailed
                    what = "non-retriable error" if not f.retriable else "retry budget exhausted"
                    raise cls(
                        f"produce failed ({what})", broker=broker.url, topic=b.topic, partition=b.partition,
                        last_error=f.error, error_type=f.error_type, status=f.status, attempts=b.attempts,
                        retriable=f.retriable,
                    )
            pending = [b for b, _, _ in retry]
            unknown = [b for b, _, f in retry if f.unknown]
            with stats_lock:
                stats.retries += 1
                stats.retried_batches += len(pending)
                stats.retried_records += sum(b.count for b in pending)
                # Unknown outcomes are re-sent and counted: at-least-once without a
                # producer; an idempotent batch that was stored is answered duplicate.
                stats.unknown_batches += len(unknown)
                stats.unknown_records += sum(b.count for b in unknown)
            backoff = backoff.next()
            log.info(
                "retrying %d batch(es) in %.0f ms: %s", len(pending), backoff.delay_s * 1000, retry[0][2].error
            )
            if self._stopping.wait(backoff.delay_s):
                b = pending[0]
                raise ProduceFailed(
                    "produce abandoned: the producer is closing", broker=retry[0][1].url, topic=b.topic,
                    partition=b.partition, last_error=retry[0][2].error, attempts=b.attempts, retriable=True,
                )
        return acks

    def request_flush(self, broker: BrokerUrl, stats: ProduceStats, stats_lock: threading.Lock) -> bool:
        """Send ``broker`` a flush-only request (no records, ``flush``): it
        flushes what it holds now instead of after its batch delay. A hint:
        any failure is logged and returns False, and the records it concerns
        are acknowledged (or retried) by their own requests all the same."""
        with stats_lock:
            stats.requests += 1
        try:
            reply = self.post(broker, "/produce", encode_request([], self.config.body, flush=True),
                              CONTENT_TYPES[self.config.body])
        except _ConnectFailed as exc:
            log.debug("flush request to %s failed: %s", broker.url, exc)
            return False
        if reply.status != 200:
            log.debug("flush request to %s answered %d: %s", broker.url, reply.status, reply.text[:200])
        return reply.status == 200

    def _send_once(
        self, broker: BrokerUrl, batches: list[Batch], stats: ProduceStats, stats_lock: threading.Lock, flush: bool
    ) -> tuple[list[BatchAck], list[tuple[Batch, _Failure]]]:
        body = encode_request(batches, self.config.body, flush=flush, max_batch_bytes=self.config.max_batch_bytes)
        with stats_lock:
            stats.requests += 1
        try:
            reply = self.post(broker, "/produce", body, CONTENT_TYPES[self.config.body])
        except _ConnectFailed as exc:
            self._mark_down(broker, str(exc))
            row = CONNECTION_LOST if exc.sent else CONNECTION_REFUSED
            f = _Failure.of(row, None, None, f"cannot reach {broker.url}: {exc}")
            return [], [(b, f) for b in batches]
        return self._classify(broker, batches, reply)

    def _classify(
        self, broker: BrokerUrl, batches: list[Batch], reply: _Reply
    ) -> tuple[list[BatchAck], list[tuple[Batch, _Failure]]]:
        body = reply.body or {}
        error_type = body.get("error_type")
        error = str(body.get("error") or reply.text[:500] or f"HTTP {reply.status}")
        results = body.get("results")
        answer = answer_outcome(reply.status, error_type)
        if answer.per_item:  # 200, AppendFailed, BackPressureRejected: one outcome per batch
            if not isinstance(results, list) or len(results) != len(batches):
                f = _Failure.of(PROTOCOL_ERROR, reply.status, None, f"answer does not map 1:1 to the request: {error}")
                return [], [(b, f) for b in batches]
            acks, failed = [], []
            for b, res in zip(batches, results):
                item = item_outcome(res)
                if item.kind is Kind.SUCCESS:
                    start, end = res.get("start_offset"), res.get("end_offset")
                    acks.append(BatchAck(
                        b.topic, b.partition, None if start is None else int(start), None if end is None else int(end),
                        int(res.get("count", b.count)), b.payload_bytes, broker.url, res.get("duplicate") is True,
                    ))
                else:
                    detail = res.get("error") if isinstance(res, dict) else None
                    failed.append((b, _Failure.of(item, reply.status, res, str(detail or error))))
            return acks, failed
        if answer.stopping:
            self._mark_down(broker, error)
        if reply.status == 413:
            error = f"{error} (lower max_request_bytes / max_request_records)"
        return [], [(b, _Failure.of(answer, reply.status, body, error)) for b in batches]


class _Failure(NamedTuple):
    retriable: bool
    status: int | None
    error_type: str | None
    error: str
    unknown: bool = False
    """The batch may be in the log already (an unknown outcome): a re-send may duplicate it."""

    @classmethod
    def of(cls, outcome: Outcome, status: int | None, answered: object, error: str) -> _Failure:
        """A failure as ``outcome`` says; ``answered``: the answer (or ``results[]``
        item) whose own ``retriable`` and ``error_type`` take precedence."""
        doc = answered if isinstance(answered, dict) else {}
        error_type = doc.get("error_type") or outcome.error_type or None
        retriable = is_retriable(outcome, doc.get("retriable"))
        return cls(retriable, status, error_type, error, unknown=outcome.kind is Kind.UNKNOWN)
