"""Produce client for the llog brokers: ``POST /produce`` with retries and broker fallback.

Two layers, both used by the produce job and by ``df.write.format("llog")``:

- :class:`ProduceClient` sends one set of batches (one batch = records for
  one topic-partition) and returns their acknowledgements, retrying until
  every batch is acknowledged or the retry budget is spent.
- :class:`TaskProducer` is what one Spark task uses: it buffers records per
  partition and sends bounded multi-partition requests (``max_request_bytes``
  of JSON body, ``max_request_records`` records) on up to ``max_in_flight``
  concurrent keep-alive connections.

Broker selection. Each topic-partition has a stable preferred broker chosen
by rendezvous (highest-random-weight) hashing over the broker URLs, so every
task of every job sends a partition to the same broker (its batches meet in
that broker's flushes) and removing a broker only moves that broker's
partitions. A broker whose connection fails is marked down for
``broker_cooldown_ms``; meanwhile its partitions go to their next broker in
rendezvous order. When every broker is down the preferred one is tried again.

Retries (the budget is ``max_retries`` re-sends per batch, with capped,
full-jitter exponential backoff from :class:`server._retry.Backoff`):

===========================  ===============================================
answer                       what happens
===========================  ===============================================
200                          every batch acknowledged
409 ``AppendFailed``         acknowledged batches are kept; failed batches
                             whose ``retriable`` is true are re-sent, any
                             other failure fails the task at once
503 ``BackPressureRejected`` nothing was written: the whole request again
503 other, 504, connection   retried (503 ``ShuttingDown`` and connection
failure                      failures also mark the broker down)
400, 403, 404, 413, 500 ...  not retriable: the task fails at once
===========================  ===============================================

Delivery is **at least once**. A 503 back-pressure answer wrote nothing, so
its retry cannot duplicate; but after a 504, a lost connection or a lost
answer the records may have been committed already, and the retry appends
them again. Retried batches are counted (``retried_batches``) so a job can
say how many records may appear twice.

Per-partition order: a task never has two requests for the same partition in
flight, and retries happen inside the request that owns the partition, so
one task's records of a partition are appended in the order it read them.

Errors (all :class:`~server._errors.LlogError`)::

    LlogError
    └── ProduceError               base of the produce client's errors
        └── ProduceFailed          a batch could not be acknowledged: a non-retriable
            │                      answer, or the retry budget is spent; names the
            │                      broker, the topic-partition and the last error
            └── BrokerUnreachable  the last attempt could not connect to any broker
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import logging
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from json.encoder import encode_basestring_ascii
from typing import Any, Callable, NamedTuple, Sequence
from urllib.parse import urlsplit

from .._errors import ConfigError, LlogError
from .._keys import validate_topic
from .._retry import Backoff

__all__ = [
    "ProduceError",
    "ProduceFailed",
    "BrokerUnreachable",
    "ProducerConfig",
    "BrokerUrl",
    "Batch",
    "BatchAck",
    "ProduceClient",
    "ProduceStats",
    "TaskProducer",
    "encode_text_records",
    "encode_binary_records",
    "rendezvous_order",
]

log = logging.getLogger(__name__)

MIB = 1024 * 1024


# -- errors --------------------------------------------------------------------------


class ProduceError(LlogError):
    """Base of the produce client's errors."""


class ProduceFailed(ProduceError):
    """A batch could not be acknowledged.

    ``broker`` is the URL of the last broker tried, ``status`` its HTTP
    status (None for a connection failure), ``error_type``/``last_error`` the
    last error it reported and ``attempts`` how many times the batch was sent.
    """

    def __init__(
        self,
        message: str,
        *,
        broker: str,
        topic: str,
        partition: int,
        last_error: str,
        error_type: str | None = None,
        status: int | None = None,
        attempts: int = 1,
        retriable: bool = False,
    ) -> None:
        super().__init__(message, topic=topic, partition=partition, retriable=retriable)
        self.broker = broker
        self.last_error = last_error
        self.error_type = error_type
        self.status = status
        self.attempts = attempts

    def __str__(self) -> str:
        status = f"HTTP {self.status}" if self.status is not None else "no answer"
        kind = f" {self.error_type}" if self.error_type else ""
        return (
            f"{self.message}: broker {self.broker}, topic-partition {self.topic}:{self.partition}, "
            f"after {self.attempts} attempt(s); last error ({status}{kind}): {self.last_error}"
        )


class BrokerUnreachable(ProduceFailed):
    """The last attempt could not connect to any broker."""


# -- configuration -------------------------------------------------------------------


class BrokerUrl(NamedTuple):
    """One broker: ``http[s]://host:port[/prefix]``."""

    url: str
    """The URL as given, without a trailing ``/`` (used in messages and hashing)."""
    scheme: str
    host: str
    port: int
    prefix: str
    """Path prefix before ``/produce`` (empty unless the broker sits behind a proxy path)."""

    @classmethod
    def parse(cls, text: str) -> BrokerUrl:
        raw = text.strip().rstrip("/")
        parts = urlsplit(raw)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"broker URL must look like http://host:port, got {text!r}")
        if parts.query or parts.fragment:
            raise ConfigError(f"broker URL must not have a query or fragment, got {text!r}")
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            raise ConfigError(f"broker URL has an invalid port: {text!r}") from None
        return cls(raw, parts.scheme, parts.hostname, port, parts.path)


def parse_broker_list(value: str | Sequence[str]) -> tuple[BrokerUrl, ...]:
    """Broker URLs from a comma-separated string or a sequence; at least one."""
    items = value.split(",") if isinstance(value, str) else list(value)
    urls = tuple(BrokerUrl.parse(u) for u in items if u and u.strip())
    if not urls:
        raise ConfigError("at least one broker URL is needed (e.g. http://127.0.0.1:8080)")
    if len({u.url for u in urls}) != len(urls):
        raise ConfigError(f"broker URLs must be distinct, got {[u.url for u in urls]}")
    return urls


@dataclass(frozen=True)
class ProducerConfig:
    """How a task talks to the brokers. Validated on construction."""

    brokers: tuple[BrokerUrl, ...]
    max_request_bytes: int = 4 * MIB
    """Largest JSON body of one /produce request (the broker refuses > 16 MiB by default)."""
    max_request_records: int = 50_000
    """Most records in one request (the broker refuses > 100,000 by default)."""
    max_retries: int = 10
    """Re-sends allowed per batch before the task fails."""
    retry_backoff_initial_ms: float = 100.0
    retry_backoff_max_ms: float = 5_000.0
    """Cap of one backoff delay (full jitter: a uniform draw in [0, cap])."""
    request_timeout_ms: int = 150_000
    """Socket timeout of one request; above the broker's 120 s produce timeout."""
    broker_cooldown_ms: int = 5_000
    """How long a broker that refused a connection is skipped."""
    max_in_flight: int = 4
    """Concurrent requests per task (never two for one partition)."""

    def __post_init__(self) -> None:
        if isinstance(self.brokers, str) or not all(isinstance(b, BrokerUrl) for b in self.brokers):
            object.__setattr__(self, "brokers", parse_broker_list(self.brokers))  # type: ignore[arg-type]
        if not self.brokers:
            raise ConfigError("at least one broker URL is needed")
        if self.max_request_bytes < 1024:
            raise ConfigError(f"max_request_bytes must be >= 1024, got {self.max_request_bytes}")
        if self.max_request_records < 1:
            raise ConfigError(f"max_request_records must be >= 1, got {self.max_request_records}")
        if self.max_retries < 0:
            raise ConfigError(f"max_retries must be >= 0, got {self.max_retries}")
        if self.max_in_flight < 1:
            raise ConfigError(f"max_in_flight must be >= 1, got {self.max_in_flight}")
        if self.request_timeout_ms < 1 or self.retry_backoff_max_ms < 0 or self.retry_backoff_initial_ms < 0:
            raise ConfigError("request_timeout_ms must be >= 1 and the backoff delays >= 0")


# -- record encoding -------------------------------------------------------------------


def encode_text_records(values: Sequence[str | None]) -> tuple[list[str], list[int]]:
    """JSON fragments (ASCII, so their length is their byte count) and UTF-8
    payload sizes of text records. A null record is a ValueError: nothing is
    ever dropped silently."""
    frags, sizes = [], []
    for i, v in enumerate(values):
        if v is None:
            raise ValueError(f"record {i} of the batch is null; a record value must be a string or bytes")
        frags.append(encode_basestring_ascii(v))
        sizes.append(len(v) if v.isascii() else len(v.encode("utf-8")))
    return frags, sizes


def encode_binary_records(values: Sequence[bytes | None]) -> tuple[list[str], list[int]]:
    """``{"base64": ...}`` fragments and payload sizes of binary records."""
    frags, sizes = [], []
    for i, v in enumerate(values):
        if v is None:
            raise ValueError(f"record {i} of the batch is null; a record value must be a string or bytes")
        frags.append('{"base64":"' + base64.b64encode(v).decode("ascii") + '"}')
        sizes.append(len(v))
    return frags, sizes


# -- batches and acks ----------------------------------------------------------------------


@dataclass
class Batch:
    """Records for one topic-partition, already encoded as JSON fragments."""

    topic: str
    partition: int
    fragments: list[str]
    payload_bytes: int
    attempts: int = 0
    """How many times this batch has been sent."""

    @property
    def count(self) -> int:
        return len(self.fragments)

    def header(self) -> str:
        return f'{{"topic":{encode_basestring_ascii(self.topic)},"partition":{self.partition},"records":['

    def encoded_size(self) -> int:
        return batch_overhead(self.topic, self.partition) + sum(map(len, self.fragments)) + max(0, self.count - 1)


class BatchAck(NamedTuple):
    """One acknowledged batch."""

    topic: str
    partition: int
    start_offset: int
    """First offset assigned (inclusive)."""
    end_offset: int
    """Last offset assigned (inclusive)."""
    count: int
    payload_bytes: int
    broker: str


_REQUEST_HEAD = '{"topic_partitions":['
_REQUEST_TAIL = "]}"


def batch_overhead(topic: str, partition: int) -> int:
    """Bytes of a batch's JSON around its record fragments, plus a separating comma."""
    return len(f'{{"topic":{encode_basestring_ascii(topic)},"partition":{partition},"records":[]}}') + 1


def encode_request(batches: Sequence[Batch]) -> bytes:
    parts = [_REQUEST_HEAD]
    for i, b in enumerate(batches):
        if i:
            parts.append(",")
        parts.append(b.header())
        parts.append(",".join(b.fragments))
        parts.append("]}")
    parts.append(_REQUEST_TAIL)
    return "".join(parts).encode("ascii")


def rendezvous_order(brokers: Sequence[BrokerUrl], topic: str, partition: int) -> list[BrokerUrl]:
    """Brokers in rendezvous order for a topic-partition: a stable, process-
    independent ranking (blake2b, not Python's salted ``hash``)."""

    def weight(b: BrokerUrl) -> bytes:
        return hashlib.blake2b(f"{b.url}\0{topic}\0{partition}".encode(), digest_size=8).digest()

    return sorted(brokers, key=weight, reverse=True)


# -- stats -----------------------------------------------------------------------------------


@dataclass
class ProduceStats:
    """Counters of one task (or, summed, one job)."""

    records_acked: int = 0
    bytes_acked: int = 0
    """Payload bytes acknowledged."""
    requests: int = 0
    """HTTP requests sent, retries included."""
    retries: int = 0
    """Retry rounds: requests re-sent after a retriable failure."""
    retried_batches: int = 0
    """Batches re-sent (their records may be duplicated unless the failure was 503 back-pressure)."""
    retried_records: int = 0
    ranges: dict[int, list[int]] = field(default_factory=dict)
    """partition -> [first offset, last offset, records] acknowledged to this producer."""

    def add_ack(self, ack: BatchAck) -> None:
        self.records_acked += ack.count
        self.bytes_acked += ack.payload_bytes
        r = self.ranges.get(ack.partition)
        if r is None:
            self.ranges[ack.partition] = [ack.start_offset, ack.end_offset, ack.count]
        else:
            r[0] = min(r[0], ack.start_offset)
            r[1] = max(r[1], ack.end_offset)
            r[2] += ack.count

    def merge(self, other: ProduceStats) -> None:
        self.records_acked += other.records_acked
        self.bytes_acked += other.bytes_acked
        self.requests += other.requests
        self.retries += other.retries
        self.retried_batches += other.retried_batches
        self.retried_records += other.retried_records
        for p, (lo, hi, n) in other.ranges.items():
            r = self.ranges.get(p)
            if r is None:
                self.ranges[p] = [lo, hi, n]
            else:
                r[0], r[1], r[2] = min(r[0], lo), max(r[1], hi), r[2] + n

    def to_json(self) -> dict[str, Any]:
        return {
            "records_acked": self.records_acked,
            "bytes_acked": self.bytes_acked,
            "requests": self.requests,
            "retries": self.retries,
            "retried_batches": self.retried_batches,
            "retried_records": self.retried_records,
            "ranges": {str(p): r for p, r in sorted(self.ranges.items())},
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ProduceStats:
        return cls(
            records_acked=d["records_acked"], bytes_acked=d["bytes_acked"], requests=d["requests"],
            retries=d["retries"], retried_batches=d["retried_batches"],
            retried_records=d.get("retried_records", 0),
            ranges={int(p): list(r) for p, r in d["ranges"].items()},
        )


# -- the client ------------------------------------------------------------------------------


class _ConnectFailed(Exception):
    """No HTTP answer from a broker (refused, reset, timed out)."""


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

    def post(self, broker: BrokerUrl, path: str, body: bytes) -> _Reply:
        """One POST on the thread's keep-alive connection. A reused connection
        the server closed while idle is retried once on a fresh one; any other
        transport failure is :class:`_ConnectFailed`."""
        for attempt in range(2):
            conn = self._conn(broker)
            reused = conn.sock is not None
            try:
                conn.request("POST", broker.prefix + path, body=body, headers={"Content-Type": "application/json"})
                resp = conn.getresponse()
                data = resp.read()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError) as exc:
                self._drop_conn(broker)
                if reused and attempt == 0:
                    continue
                raise _ConnectFailed(f"{type(exc).__name__}: {exc}") from exc
            except (OSError, http.client.HTTPException) as exc:  # refused, timeout, DNS, bad status line
                self._drop_conn(broker)
                raise _ConnectFailed(f"{type(exc).__name__}: {exc}") from exc
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
    def send(self, batches: Sequence[Batch], stats: ProduceStats, stats_lock: threading.Lock) -> list[BatchAck]:
        """Send ``batches`` until each is acknowledged; return the acks.

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
                got, failed = self._send_once(broker, group, stats, stats_lock)
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
            with stats_lock:
                stats.retries += 1
                stats.retried_batches += len(pending)
                stats.retried_records += sum(b.count for b in pending)
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

    def _send_once(
        self, broker: BrokerUrl, batches: list[Batch], stats: ProduceStats, stats_lock: threading.Lock
    ) -> tuple[list[BatchAck], list[tuple[Batch, _Failure]]]:
        body = encode_request(batches)
        with stats_lock:
            stats.requests += 1
        try:
            reply = self.post(broker, "/produce", body)
        except _ConnectFailed as exc:
            self._mark_down(broker, str(exc))
            f = _Failure(True, None, "ConnectionFailed", f"cannot reach {broker.url}: {exc}")
            return [], [(b, f) for b in batches]
        return self._classify(broker, batches, reply)

    def _classify(
        self, broker: BrokerUrl, batches: list[Batch], reply: _Reply
    ) -> tuple[list[BatchAck], list[tuple[Batch, _Failure]]]:
        body = reply.body or {}
        error_type = body.get("error_type")
        error = str(body.get("error") or reply.text[:500] or f"HTTP {reply.status}")
        results = body.get("results")
        if reply.status in (200, 409) or (reply.status == 503 and error_type == "BackPressureRejected"):
            if not isinstance(results, list) or len(results) != len(batches):
                f = _Failure(False, reply.status, "ProtocolError", f"answer does not map 1:1 to the request: {error}")
                return [], [(b, f) for b in batches]
            acks, failed = [], []
            for b, res in zip(batches, results):
                if res.get("ok"):
                    acks.append(BatchAck(
                        b.topic, b.partition, int(res["start_offset"]), int(res["end_offset"]),
                        int(res.get("count", b.count)), b.payload_bytes, broker.url,
                    ))
                else:
                    failed.append((b, _Failure(
                        bool(res.get("retriable", False)), reply.status,
                        str(res.get("error_type") or error_type), str(res.get("error") or error),
                    )))
            return acks, failed
        if reply.status == 503 and error_type in ("ShuttingDown", "ProducerClosed"):
            self._mark_down(broker, error)
        if reply.status in (502, 503, 504):
            f = _Failure(True, reply.status, error_type or "Unavailable", error)
        elif reply.status == 413:
            f = _Failure(False, reply.status, error_type, f"{error} (lower max_request_bytes / max_request_records)")
        else:
            f = _Failure(False, reply.status, error_type, error)
        return [], [(b, f) for b in batches]


class _Failure(NamedTuple):
    retriable: bool
    status: int | None
    error_type: str | None
    error: str


# -- the task producer ---------------------------------------------------------------------


class _Buffer:
    __slots__ = ("fragments", "payload_bytes", "encoded_bytes")

    def __init__(self) -> None:
        self.fragments: list[str] = []
        self.payload_bytes: list[int] = []
        self.encoded_bytes = 0


class TaskProducer:
    """Buffers one task's records per partition and sends bounded requests.

    ``add(partitions, fragments, sizes)`` appends records (fragments from
    :func:`encode_text_records` / :func:`encode_binary_records`); a request
    is sent once a broker's eligible partitions hold ``max_request_bytes`` or
    ``max_request_records``. ``flush()`` sends the rest and waits; a failure
    in any request is raised from the next ``add``/``flush``. Buffered memory
    stays below about ``(max_in_flight + 1) * max_request_bytes``.
    """

    def __init__(
        self,
        topic: str,
        config: ProducerConfig,
        *,
        on_progress: Callable[[ProduceStats], None] | None = None,
        progress_interval_s: float = 1.0,
    ) -> None:
        self.topic = validate_topic(topic)
        self.config = config
        self.client = ProduceClient(config)
        self.stats = ProduceStats()
        self._stats_lock = threading.Lock()
        self._cond = threading.Condition()
        self._buffers: dict[int, _Buffer] = {}
        self._buffered_bytes = 0
        self._buffered_records = 0
        self._inflight_partitions: set[int] = set()
        self._inflight = 0
        self._error: BaseException | None = None
        self._pool = ThreadPoolExecutor(config.max_in_flight, thread_name_prefix="llog-produce")
        self._overhead = {}  # partition -> batch JSON overhead
        self._on_progress = on_progress
        self._progress_interval_s = progress_interval_s
        self._last_progress = time.monotonic()
        self._closed = False

    def __enter__(self) -> TaskProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _batch_overhead(self, partition: int) -> int:
        o = self._overhead.get(partition)
        if o is None:
            o = self._overhead[partition] = batch_overhead(self.topic, partition)
        return o

    def add(self, partitions: Sequence[int], fragments: Sequence[str], sizes: Sequence[int]) -> None:
        with self._cond:
            self._raise_error()
            for p, frag, size in zip(partitions, fragments, sizes):
                buf = self._buffers.get(p)
                if buf is None:
                    buf = self._buffers[p] = _Buffer()
                buf.fragments.append(frag)
                buf.payload_bytes.append(size)
                buf.encoded_bytes += len(frag) + 1
                self._buffered_bytes += len(frag) + 1
            self._buffered_records += len(fragments)
            self._pump(final=False)
        self._maybe_progress()

    def flush(self) -> ProduceStats:
        """Send everything buffered, wait for every request; return the stats."""
        with self._cond:
            while True:
                self._raise_error()
                self._pump(final=True)
                if self._inflight == 0 and self._buffered_records == 0:
                    break
                self._cond.wait(0.5)
        self._maybe_progress(force=True)
        return self.stats

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.client.stop()
        self._pool.shutdown(wait=True, cancel_futures=True)
        self.client.close()

    def _raise_error(self) -> None:
        if self._error is not None:
            raise self._error

    def _maybe_progress(self, force: bool = False) -> None:
        if self._on_progress is None:
            return
        now = time.monotonic()
        if force or now - self._last_progress >= self._progress_interval_s:
            self._last_progress = now
            try:
                self._on_progress(self.stats)
            except Exception:  # progress is best effort
                log.debug("progress callback failed", exc_info=True)

    def _pump(self, final: bool) -> None:
        """Dispatch requests while slots are free (called with the lock held).
        Without ``final`` only full requests go, unless the buffer is over its
        memory bound; then the call waits for completions."""
        cfg = self.config
        limit = cfg.max_request_bytes * (cfg.max_in_flight + 1)
        while True:
            self._raise_error()
            over = self._buffered_bytes > limit
            sent = False
            while self._inflight < cfg.max_in_flight:
                req = self._take_request(allow_partial=final or over)
                if req is None:
                    break
                broker, batches = req
                self._inflight += 1
                self._inflight_partitions.update(b.partition for b in batches)
                self._pool.submit(self._run, batches)
                sent = True
                over = self._buffered_bytes > limit
            if final or not over:
                return
            if not sent:
                self._cond.wait(0.5)

    def _take_request(self, allow_partial: bool) -> tuple[BrokerUrl, list[Batch]] | None:
        cfg = self.config
        groups: dict[BrokerUrl, list[int]] = {}
        for p, buf in self._buffers.items():
            if buf.fragments and p not in self._inflight_partitions:
                groups.setdefault(self.client.preferred_broker(self.topic, p), []).append(p)
        if not groups:
            return None

        def volume(ps: list[int]) -> tuple[int, int]:
            return (sum(self._buffers[p].encoded_bytes for p in ps), sum(len(self._buffers[p].fragments) for p in ps))

        broker, parts = max(groups.items(), key=lambda kv: volume(kv[1]))
        nbytes, nrecords = volume(parts)
        room = cfg.max_request_bytes - len(_REQUEST_HEAD) - len(_REQUEST_TAIL)
        if not allow_partial and nbytes < room and nrecords < cfg.max_request_records:
            return None
        batches: list[Batch] = []
        records_left = cfg.max_request_records
        for p in sorted(parts, key=lambda q: -self._buffers[q].encoded_bytes):
            if records_left <= 0 or room <= self._batch_overhead(p):
                break
            buf = self._buffers[p]
            room -= self._batch_overhead(p)
            take, used = 0, 0
            for frag in buf.fragments:
                if take >= records_left or (used + len(frag) + 1 > room and (take or batches)):
                    break
                used += len(frag) + 1
                take += 1
            if take == 0:
                break
            frags, sizes = buf.fragments[:take], buf.payload_bytes[:take]
            del buf.fragments[:take], buf.payload_bytes[:take]
            buf.encoded_bytes -= used
            self._buffered_bytes -= used
            self._buffered_records -= take
            records_left -= take
            room -= used
            batches.append(Batch(self.topic, p, frags, sum(sizes)))
        return (broker, batches) if batches else None

    def _run(self, batches: list[Batch]) -> None:
        try:
            acks = self.client.send(batches, self.stats, self._stats_lock)
        except BaseException as exc:  # noqa: BLE001 - handed to the task thread
            with self._cond:
                if self._error is None:
                    self._error = exc
                self._inflight -= 1
                self._inflight_partitions.difference_update(b.partition for b in batches)
                self._cond.notify_all()
            return
        with self._cond:
            with self._stats_lock:
                for a in acks:
                    self.stats.add_ack(a)
            self._inflight -= 1
            self._inflight_partitions.difference_update(b.partition for b in batches)
            self._cond.notify_all()


def check_brokers(brokers: Sequence[BrokerUrl], timeout_s: float = 5.0) -> dict[str, str | None]:
    """``GET /health`` on each broker: url -> None when it answered ok, else the error."""
    out: dict[str, str | None] = {}
    for b in brokers:
        cls = http.client.HTTPSConnection if b.scheme == "https" else http.client.HTTPConnection
        conn = cls(b.host, b.port, timeout=timeout_s)
        try:
            conn.request("GET", b.prefix + "/health")
            resp = conn.getresponse()
            resp.read()
            out[b.url] = None if resp.status == 200 else f"GET /health answered {resp.status}"
        except (OSError, http.client.HTTPException, socket.timeout) as exc:
            out[b.url] = f"{type(exc).__name__}: {exc}"
        finally:
            conn.close()
    return out
