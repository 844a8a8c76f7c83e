"""The Kafka listener's sockets: connections, frames, and responses in request order.

One accept thread; per connection a reader thread and a writer thread. The
reader reads size-prefixed frames, begins each request in order (a Produce
submits its batches there, so one connection's batches reach the log in the
order sent, as from Kafka, which handles a connection's requests one at a
time) and hands the rest to the shared handler pool (``threads`` workers, so
a produce waiting for its flush or a fetch long-polling holds a worker, never
the connection); the writer sends the answers in the order the requests came,
as Kafka's protocol requires, while later requests of the same connection are
already being handled (clients keep up to 5 in flight). A request the handler answers with ``None`` (a produce
with ``acks=0``) takes its place in the order and sends nothing. Each connection's produce requests
waiting for their flush are counted (``stalls.py``): when every producing connection has 5, the
flush starts at once.

At most ``max_inflight`` requests of one connection are queued or running;
the reader stops reading until one is answered (back-pressure through TCP,
as Kafka's ``queued.max.requests``).

A connection costs two threads, so they are bounded: past
``max_connections`` a new one is closed at once (Kafka's
``max.connections``; the client retries, or goes to another broker), and a
connection that neither sends a byte nor takes one for ``max_idle_ms`` is
closed (Kafka's ``connections.max.idle.ms``, 10 minutes): a client whose
machine died without closing its sockets would otherwise hold them forever.
Clients send something every few seconds (fetches, heartbeats) or close
their own idle connections first (the Java client at 9 minutes).

What is not a request closes the connection, as Kafka closes it: a size below
8 or above ``max_frame_bytes`` (read no further: the stream cannot be
resynchronized), a header that does not parse, an API or version not served.
An ApiVersions request of a version the broker does not know is answered
with version 0 and UNSUPPORTED_VERSION instead (KIP-511), so the client can
pick a version.

With ``tls`` every connection starts with a TLS handshake on its reading
thread (``tls.py``); one that fails is closed. With ``gate`` each
connection's requests pass its SASL gate (``sasl.py``) in order until it
has authenticated: the gate answers the SASL requests itself, and closes
the connection after a failure, after its answer is sent.
"""

from __future__ import annotations

import io
import logging
import queue
import socket
import ssl
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Protocol

from .._metrics import LlogMetrics
from .codec import API_VERSIONS, PRODUCE, SIZE, KafkaRequest, MalformedFrame, decode_request, \
    unsupported_api_versions
from .gather import Answer, send_parts
from .sasl import Screened
from .stalls import ProduceStalls
from .tls import HandshakeFailed, TlsRaw, TlsStream

__all__ = ["KafkaListener", "Begin"]

log = logging.getLogger(__name__)

Begin = Callable[[KafkaRequest], Callable[[], "bytes | Answer | None"]]
"""Called on the reader thread in request order; returns what the pool runs to answer
the request with its framed response (None: no response)."""

class Gate(Protocol):
    """One connection's SASL gate (``sasl.SaslGate``); once ``authenticated`` it is asked nothing more."""

    authenticated: bool

    def screen(self, request: KafkaRequest) -> Screened | None:
        """None: serve the request; else what to answer instead."""

_CLOSE = object()

DEFAULT_MAX_CONNECTIONS = 10_000
DEFAULT_MAX_IDLE_MS = 600_000


class KafkaListener:
    """Serves Kafka's protocol on ``host:port`` with ``handler`` (module docstring)."""

    def __init__(self, begin: Begin, *, host: str, port: int, max_frame_bytes: int, threads: int,
                 max_inflight: int, metrics: LlogMetrics, stalls: ProduceStalls | None = None,
                 max_connections: int = DEFAULT_MAX_CONNECTIONS, max_idle_ms: int = DEFAULT_MAX_IDLE_MS,
                 tls: ssl.SSLContext | None = None, gate: Callable[[str], Gate] | None = None) -> None:
        """``stalls``: told of each connection's produce requests begun and answered (``stalls.py``);
        ``max_idle_ms`` 0: connections are never closed for idleness; ``tls``: the connections speak
        TLS; ``gate``: a new connection's SASL gate, given its peer (module docstring)."""
        self._begin = begin
        self._tls = tls
        self._gate = gate
        self._stalls = stalls
        self._max_frame = max_frame_bytes
        self._max_inflight = max_inflight
        self._max_connections = max_connections
        self._idle_s = max_idle_ms / 1000 if max_idle_ms > 0 else None
        self._metrics = metrics
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="llog-kafka")
        self._sock = socket.create_server((host, port), backlog=128, reuse_port=False)
        self.port: int = self._sock.getsockname()[1]
        self._conns: set[_Connection] = set()
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="llog-kafka-accept", daemon=True)

    def start(self) -> KafkaListener:
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop accepting, close every connection, wait for the handlers running."""
        if self._closed.is_set():
            return
        self._closed.set()
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
        self._thread.join(5)
        with self._lock:
            conns = list(self._conns)
        for c in conns:
            c.close()
        self._pool.shutdown(wait=True)

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                sock, peer = self._sock.accept()
            except OSError:
                return
            with self._lock:
                full = len(self._conns) >= self._max_connections
            if full:
                self._metrics.inc("kafka_connections_closed_total", reason="limit")
                log.warning("kafka connection from %s:%s refused: %d connections open (LLOG_KAFKA_MAX_CONNECTIONS)",
                            peer[0], peer[1], self._max_connections)
                sock.close()
                continue
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.settimeout(self._idle_s)  # a read or send with no progress for that long: idle, closed
            conn = _Connection(self, sock, f"{peer[0]}:{peer[1]}")
            with self._lock:
                self._conns.add(conn)
                self._metrics.set_gauge("kafka_connections", len(self._conns))
            conn.start()

    def _forget(self, conn: _Connection) -> None:
        with self._lock:
            self._conns.discard(conn)
            self._metrics.set_gauge("kafka_connections", len(self._conns))



class _Connection:
    def __init__(self, listener: KafkaListener, sock: socket.socket, peer: str) -> None:
        self.listener = listener
        self.sock = sock
        self.peer = peer
        self.answers: queue.Queue = queue.Queue(maxsize=listener._max_inflight)
        self._closed = threading.Event()
        self.gate = None if listener._gate is None else listener._gate(peer)
        self._close_after = False
        self.tls = None if listener._tls is None else TlsStream(sock, listener._tls)
        self.rfile: io.BufferedReader | None = None

    def start(self) -> None:
        threading.Thread(target=self._read_loop, name=f"llog-kafka-read-{self.peer}", daemon=True).start()
        threading.Thread(target=self._write_loop, name=f"llog-kafka-write-{self.peer}", daemon=True).start()

    def close(self) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        self.listener._forget(self)

    def _idle(self) -> None:
        if not self._closed.is_set():
            self.listener._metrics.inc("kafka_connections_closed_total", reason="idle")
            log.info("kafka connection %s: idle for %.0f s: closing", self.peer, self.listener._idle_s)
            self.close()

    def _read_exactly(self, n: int) -> bytes | None:
        """``n`` bytes, None at the end of the stream (the buffered reader fills one ``bytes``
        of ``n`` for a large read, and saves system calls on small frames)."""
        assert self.rfile is not None
        data = self.rfile.read(n)
        return data if len(data) == n else None

    def _open(self) -> bool:
        """The reader over the socket, after the TLS handshake with one; False: closed."""
        if self.tls is None:
            self.rfile = self.sock.makefile("rb", buffering=1 << 16)
            return True
        try:
            self.tls.handshake()
        except HandshakeFailed as exc:
            self.listener._metrics.inc("kafka_connections_closed_total", reason="tls")
            log.info("kafka connection %s: %s: closing (a client without TLS, or one that does not trust this "
                     "broker's certificate?)", self.peer, exc)
            return False
        self.rfile = io.BufferedReader(TlsRaw(self.tls), 1 << 16)
        return True

    def _read_loop(self) -> None:
        metrics = self.listener._metrics
        try:
            if not self._open():
                return
            while not self._closed.is_set() and not self._close_after:
                head = self._read_exactly(4)
                if head is None:
                    break
                (size,) = SIZE.unpack(head)
                if not 8 <= size <= self.listener._max_frame:
                    metrics.inc("kafka_protocol_errors_total", reason="frame_size")
                    log.info("kafka connection %s: a frame of %d bytes (allowed 8-%d): closing", self.peer, size,
                             self.listener._max_frame)
                    break
                frame = self._read_exactly(size)
                if frame is None:
                    break
                answer = self._dispatch(frame)
                if answer is None:
                    break
                self.answers.put(answer)  # blocks at max_inflight: back-pressure
        except TimeoutError:
            self._idle()
        except (OSError, ValueError):  # ValueError: the file was closed under the read
            pass
        finally:
            self.answers.put(_CLOSE)
            if self.rfile is not None:
                self.rfile.close()  # the socket's descriptor stays open while its file does

    def _dispatch(self, frame: bytes) -> Future | None:
        """The future of the frame's answer, or None to close the connection."""
        try:
            request = decode_request(frame)
        except MalformedFrame as exc:
            if exc.api_key == API_VERSIONS and exc.version_not_served and exc.correlation_id is not None:
                done: Future = Future()
                done.set_result(unsupported_api_versions(exc.correlation_id))
                return done
            self.listener._metrics.inc("kafka_protocol_errors_total", reason="malformed")
            log.info("kafka connection %s: %s: closing", self.peer, exc)
            return None
        if self.gate is not None and not self.gate.authenticated:
            try:
                screened = self.gate.screen(request)
            except Exception:
                log.exception("kafka connection %s: the SASL gate failed: closing", self.peer)
                return None
            if screened is not None:
                if screened.answer is None:
                    return None
                self._close_after = screened.close
                done = Future()
                done.set_result(screened.answer)
                return done
        try:
            answer = self.listener._begin(request)
        except Exception:
            log.exception("kafka connection %s: a handler failed: closing", self.peer)
            return None
        stalls = self.listener._stalls
        if stalls is None or request.api.key != PRODUCE:
            return self.listener._pool.submit(answer)
        stalls.begun(self)

        def answer_counted() -> bytes | Answer | None:
            # Counted as answered before the future resolves: the writer may send the answer
            # the moment it does, and the client's next request must find the count lowered,
            # or a stalled connection reads 6 and is never flushed (stalls.py counts to 5).
            try:
                return answer()
            finally:
                stalls.answered(self)

        return self.listener._pool.submit(answer_counted)

    def _write_loop(self) -> None:
        try:
            while True:
                item = self.answers.get()
                if item is _CLOSE:
                    break
                try:
                    data = item.result()
                except Exception:
                    log.exception("kafka connection %s: a handler failed: closing", self.peer)
                    break
                if data is not None and not self._closed.is_set():
                    if self.tls is None:
                        send_parts(self.sock, data)
                    else:
                        send_parts(self.tls, data)  # type: ignore[arg-type]
        except TimeoutError:
            self._idle()
        except OSError:
            pass
        finally:
            self.close()
            _drain(self.answers)


def _drain(answers: queue.Queue) -> None:
    """Unblock a reader stuck on a full queue after the writer stopped."""
    while True:
        try:
            answers.get_nowait()
        except queue.Empty:
            return


