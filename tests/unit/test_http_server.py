"""The HTTP server base both services share (``server/_http_server.py``), over real sockets.

Each test runs against the broker's handler (over in-memory stores) and the
compactor service's handler (over a stub service) where the behaviour is
shared: method dispatch (405 with ``Allow``), a body no route reads never
taken for the next request, a request target that does not parse, and the
read timeout that closes a stalled client.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from typing import Any, Callable, Iterator

import pytest

from server._broker.broker import Broker
from server._broker.config import BrokerConfig
from server._broker.http import BrokerHTTPServer
from server._broker.tail_cache import MemoryTailCache
from server._compaction.http import serve
from server._config import BatchConfig, OxiaConfig, S3Config
from server._storage.metastore import InMemoryMetadataStore
from server._storage.objectstore import InMemoryObjectStore
from server.leaderless_log_metrics import LlogMetrics
from server.leaderless_log_reader import LeaderlessLogReader
from server.leaderless_log_writer import BatchingProducer, LeaderlessLogWriter
from server._runtime import REAL_RUNTIME

READ_TIMEOUT_S = 0.5


class StubService:
    """What the compactor's HTTP handler reads from its service."""

    def __init__(self) -> None:
        self.metrics = LlogMetrics()
        self.runtime = REAL_RUNTIME

    def health(self) -> dict[str, Any]:
        return {"status": "ok"}

    def metrics_json(self) -> dict[str, Any]:
        return {"counters": {}}

    def metrics_prometheus(self) -> bytes:
        return b""


def _broker_server() -> tuple[int, Callable[[], None]]:
    oxia, s3 = OxiaConfig("fake:1", root_prefix="llog"), S3Config("llog")
    meta, objs = InMemoryMetadataStore(), InMemoryObjectStore()
    metrics = LlogMetrics()
    writer = LeaderlessLogWriter(oxia, s3, metadata_store=meta, object_store=objs)
    broker = Broker(
        BrokerConfig(port=0, http_read_timeout_ms=int(READ_TIMEOUT_S * 1000)),
        producer=BatchingProducer(writer, BatchConfig(max_delay_ms=1), metrics=metrics, owns_writer=True),
        reader=LeaderlessLogReader(oxia, s3, metadata_store=meta, object_store=objs, metrics=metrics),
        cache=MemoryTailCache(1 << 20, metrics=metrics), metrics=metrics,
    )
    server = BrokerHTTPServer(broker)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()

    def stop() -> None:
        server.shutdown()
        server.server_close()
        broker.close()

    return server.server_address[1], stop


def _compactor_server() -> tuple[int, Callable[[], None]]:
    server, _ = serve(StubService(), "127.0.0.1", 0, read_timeout_s=READ_TIMEOUT_S)  # type: ignore[arg-type]

    def stop() -> None:
        server.shutdown()
        server.server_close()

    return server.server_address[1], stop


@pytest.fixture(params=["broker", "compactor"])
def port(request: pytest.FixtureRequest) -> Iterator[int]:
    port, stop = _broker_server() if request.param == "broker" else _compactor_server()
    try:
        yield port
    finally:
        stop()


@pytest.fixture
def broker_port() -> Iterator[int]:
    port, stop = _broker_server()
    try:
        yield port
    finally:
        stop()


class Conn:
    """One client connection that reads answers one at a time."""

    def __init__(self, port: int, timeout_s: float = 10.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
        self.buf = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _fill(self) -> bool:
        chunk = self.sock.recv(65536)
        self.buf += chunk
        return bool(chunk)

    def answer(self, head: bool = False) -> tuple[int, dict[str, str], bytes] | None:
        """The next answer, or None when the server closed the connection first
        (``head``: the answer to a HEAD, whose Content-Length has no body behind it)."""
        while b"\r\n\r\n" not in self.buf:
            if not self._fill():
                return None
        top, _, self.buf = self.buf.partition(b"\r\n\r\n")
        lines = top.decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
        need = 0 if head else int(headers["content-length"])
        while len(self.buf) < need:
            assert self._fill(), "the connection closed inside an answer"
        body, self.buf = self.buf[:need], self.buf[need:]
        return int(lines[0].split()[1]), headers, body

    def closed(self) -> bool:
        """Whether the server closed the connection (after any answer already read)."""
        return not self.buf and not self._fill()

    def close(self) -> None:
        self.sock.close()


def get(path: str = "/health", extra: bytes = b"") -> bytes:
    return b"GET " + path.encode() + b" HTTP/1.1\r\nHost: x\r\n" + extra + b"\r\n"


def error_doc(body: bytes) -> dict[str, Any]:
    doc = json.loads(body)
    assert isinstance(doc["error"], str) and doc["error"] and isinstance(doc["error_type"], str), doc
    return doc


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "BREW"])
def test_a_method_a_path_does_not_serve_is_405_with_allow_and_the_connection_stays_open(port, method) -> None:
    conn = Conn(port)
    conn.send(f"{method} /health HTTP/1.1\r\nHost: x\r\nContent-Length: 7\r\n\r\n{{\"a\":1}}".encode() + get())
    status, headers, body = conn.answer()
    assert (status, headers["allow"], headers["content-type"]) == (405, "GET", "application/json")
    assert error_doc(body)["error_type"] == "MethodNotAllowed"
    assert conn.answer()[0] == 200  # the body was skipped: the next request is read as one
    conn.close()


def test_head_is_405_without_a_body(port) -> None:
    conn = Conn(port)
    conn.send(b"HEAD /health HTTP/1.1\r\nHost: x\r\n\r\n" + get())
    status, headers, body = conn.answer(head=True)
    assert (status, headers["allow"], body) == (405, "GET", b"")
    assert conn.answer()[0] == 200
    conn.close()


def test_a_body_no_route_reads_is_never_taken_for_the_next_request(port) -> None:
    smuggled = get("/smuggled")
    conn = Conn(port)
    conn.send(get("/health", b"Content-Length: %d\r\n" % len(smuggled)) + smuggled + get("/metrics"))
    first, second = conn.answer(), conn.answer()
    assert (first[0], second[0]) == (200, 200), (first, second)
    assert b"smuggled" not in first[2] + second[2]
    conn.close()


def test_a_chunked_body_no_route_reads_closes_the_connection(port) -> None:
    smuggled = get("/smuggled")
    conn = Conn(port)
    conn.send(get("/health", b"Transfer-Encoding: chunked\r\n") + b"%x\r\n" % len(smuggled) + smuggled + b"\r\n0\r\n\r\n")
    status, headers, body = conn.answer()
    assert (status, headers.get("connection")) == (200, "close")
    assert conn.closed()
    conn.close()


@pytest.mark.parametrize("length", [b"abc", b"-1", b"1, 2", b"99999999999"])
def test_an_unusable_length_on_a_refused_body_closes_the_connection(port, length) -> None:
    conn = Conn(port)
    conn.send(b"PATCH /health HTTP/1.1\r\nHost: x\r\nContent-Length: " + length + b"\r\n\r\n" + get())
    status, headers, _ = conn.answer()
    assert (status, headers.get("connection")) == (405, "close")
    assert conn.closed()
    conn.close()


@pytest.mark.parametrize("target", ["http://[::1/health", "//[x", "/%00", "/health/../health"])
def test_a_target_that_does_not_parse_or_route_is_404(port, target) -> None:
    conn = Conn(port)
    conn.send(get(target))
    status, headers, body = conn.answer()
    assert (status, headers["content-type"]) == (404, "application/json")
    assert error_doc(body)["error_type"] == "NotFound"
    conn.close()


@pytest.mark.parametrize("prefix", [b"", b"GET /hea", b"GET /health HTTP/1.1\r\nHost: x\r\nX-Half: "])
def test_a_client_stalled_before_its_request_ends_is_closed_after_the_read_timeout(port, prefix) -> None:
    conn = Conn(port, timeout_s=READ_TIMEOUT_S + 10)
    conn.send(prefix)
    started = time.monotonic()
    assert conn.answer() is None  # closed without an answer: nothing was asked
    assert time.monotonic() - started < READ_TIMEOUT_S + 5
    conn.close()


def test_a_body_stalled_past_the_read_timeout_is_408_and_closed(broker_port) -> None:
    conn = Conn(broker_port, timeout_s=READ_TIMEOUT_S + 10)
    conn.send(b"POST /produce HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"topic_partitions\"")
    status, headers, body = conn.answer()
    assert (status, headers["connection"]) == (408, "close")
    assert error_doc(body)["error_type"] == "RequestTimeout"
    assert conn.closed()
    conn.close()


def test_a_client_that_resets_inside_a_body_leaves_the_server_serving(broker_port) -> None:
    conn = Conn(broker_port)
    conn.send(b"POST /produce HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
    conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    conn.close()  # SO_LINGER 0: a reset, not a FIN
    other = Conn(broker_port)
    other.send(get())
    assert other.answer()[0] == 200
    other.close()


@pytest.mark.parametrize(("count", "size", "status"), [
    (1, 65_000, 200), (15, 4_000, 200), (17, 4_000, 431), (40, 2_000, 431), (101, 10, 431), (1, 65_600, 431),
])
def test_the_header_block_is_bounded_in_all_not_only_per_line(port, count, size, status) -> None:
    # Per line (64 KiB) and per count (100) alone, one request could hold 6.4 MB of headers.
    headers = b"".join(b"X-H-%d: %s\r\n" % (i, b"h" * size) for i in range(count))
    conn = Conn(port)
    conn.send(get("/health", headers))
    got, answer_headers, body = conn.answer()
    assert got == status
    if status == 431:
        assert error_doc(body)["error_type"] == "HttpProtocolError" and answer_headers["connection"] == "close"
    conn.close()


@pytest.mark.parametrize("request_line", [b"GET /health", b"GET /health HTTP/0.9", b"GET /nope"])
def test_an_http_0_9_request_gets_a_status_line_and_headers(port, request_line) -> None:
    # A bare 0.9 body would leave a client no way to tell a 404 from a 200.
    conn = Conn(port)
    conn.send(request_line + b"\r\n\r\n")
    status, headers, body = conn.answer()
    assert status == (404 if b"nope" in request_line else 200)
    assert (headers["content-type"], headers["connection"]) == ("application/json", "close")
    assert conn.closed()
    conn.close()


@pytest.mark.parametrize(("version", "connection"), [("HTTP/1.1", "close"), ("HTTP/1.0", None), ("HTTP/1.0", "close")])
def test_an_answer_says_close_when_the_request_asked_for_it(port, version, connection) -> None:
    conn = Conn(port)
    extra = f"Connection: {connection}\r\n" if connection else ""
    conn.send(f"GET /health {version}\r\nHost: x\r\n{extra}\r\n".encode() + get())
    status, headers, _ = conn.answer()
    assert (status, headers.get("connection")) == (200, "close")
    assert conn.closed()  # the pipelined second request was never answered
    conn.close()


def test_a_keep_alive_answer_does_not_say_close(port) -> None:
    conn = Conn(port)
    conn.send(b"GET /health HTTP/1.0\r\nConnection: keep-alive\r\n\r\n" + get())
    first, second = conn.answer(), conn.answer()
    assert (first[0], second[0]) == (200, 200) and "connection" not in first[1]
    conn.close()
