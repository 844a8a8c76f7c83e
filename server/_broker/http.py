"""The broker's HTTP plumbing: routing, body limits, JSON answers, the server.

``_Handler`` turns each request into a call of a route method of the broker
(``Broker.produce(body) -> Response``, ...), after checking the path, the
method (405 with ``Allow``) and the body (411 without a ``Content-Length``,
413 past ``max_request_bytes`` before reading it). Every answer carries a
``Content-Length`` (HTTP/1.1 keep-alive); an error answered without reading
the body skips it, or closes the connection when it cannot. Requests are
counted in flight until their answer is written, so a shutdown waits for
them.
"""

from __future__ import annotations

import logging
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, Mapping, Sequence
from urllib.parse import urlsplit

from .._errors import InvalidRequest, LlogError
from .codec import InvalidField, TooLarge, dumps, error_body

if TYPE_CHECKING:
    from .broker import Broker

__all__ = ["Response", "BrokerHTTPServer", "ROUTES", "JSON", "PROMETHEUS", "error_response"]

log = logging.getLogger(__name__)

JSON = "application/json"
PROMETHEUS = "text/plain; version=0.0.4; charset=utf-8"
ROUTES: dict[str, dict[str, str]] = {
    "/health": {"GET": "health"},
    "/metrics": {"GET": "metrics_json"},
    "/metrics/prometheus": {"GET": "metrics_prometheus"},
    "/produce": {"POST": "produce"},
    "/consume": {"POST": "consume"},
}
_KNOWN_METHODS = {"GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"}


class Response:
    """What a route answers: status, body bytes, content type, extra headers."""

    __slots__ = ("status", "body", "content_type", "headers", "close")

    def __init__(
        self,
        status: int,
        body: bytes | Mapping[str, Any],
        content_type: str = JSON,
        headers: Sequence[tuple[str, str]] = (),
        close: bool = False,
    ) -> None:
        self.status = status
        self.body = body if isinstance(body, bytes) else dumps(body)
        self.content_type = content_type
        self.headers = tuple(headers)
        self.close = close


def error_response(status: int, message: str, error_type: str, field: str | None = None, **kw: Any) -> Response:
    """A JSON error answer; ``headers`` and ``close`` go to the Response, any
    other keyword into the body (``role``, ``retriable``)."""
    headers = kw.pop("headers", ())
    close = kw.pop("close", False)
    return Response(status, error_body(message, error_type, field, **kw), headers=headers, close=close)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "llog-broker/0.1"
    disable_nagle_algorithm = True  # the header and body writes must not wait for ACKs
    timeout = 300  # idle keep-alive connections are closed after this
    server: BrokerHTTPServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        log.debug("%s " + format, self.address_string(), *args)

    def __getattr__(self, name: str) -> Any:
        # Every method token reaches _dispatch, so a wrong one gets 405 + Allow.
        if name.startswith("do_"):
            return self._dispatch
        raise AttributeError(name)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """Every error the standard library answers by itself (a malformed or
        over-long request line, an unsupported HTTP version, too many or too
        long headers) as the JSON error body, with the connection closed."""
        self.log_error("code %d, message %s", code, message)
        try:
            phrase = HTTPStatus(code).phrase
        except ValueError:
            phrase = "Error"
        if getattr(self, "request_version", "HTTP/0.9") == "HTTP/0.9":
            # parse_request gave up before it knew the version: answer with a
            # status line and headers anyway (0.9 would send the body alone).
            self.request_version = "HTTP/1.0"
        self.command = getattr(self, "command", None)
        broker = getattr(self.server, "broker", None)
        if broker is not None:
            broker.metrics.inc("http_requests_total", path="other", method="OTHER", status=code)
        try:
            self._send(Response(code, error_body(message or phrase, "HttpProtocolError"), close=True))
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _send(self, resp: Response) -> None:
        if resp.close:
            self.close_connection = True
        self.send_response(resp.status)
        self.send_header("Content-Type", resp.content_type)
        self.send_header("Content-Length", str(len(resp.body)))
        for k, v in resp.headers:
            self.send_header(k, v)
        if resp.close:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(resp.body)

    def _dispatch(self) -> None:
        broker = self.server.broker
        started = time.monotonic()
        path = urlsplit(self.path).path
        method = self.command
        # In flight until the answer is written: shutdown waits for it.
        broker.enter()
        try:
            resp = self._route(broker, path, method)
            label = path if path in ROUTES else "other"
            broker.metrics.inc(
                "http_requests_total", path=label, method=method if method in _KNOWN_METHODS else "OTHER",
                status=resp.status,
            )
            broker.metrics.observe("http_request_seconds", time.monotonic() - started, path=label)
            try:
                self._send(resp)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True
        finally:
            broker.leave()

    def _route(self, broker: Broker, path: str, method: str) -> Response:
        route = ROUTES.get(path)
        if route is None:
            return self._refuse(error_response(404, f"no such path: {path}", "NotFound"))
        name = route.get(method)
        if name is None:
            allow = ", ".join(route)
            return self._refuse(error_response(
                405, f"{method} is not allowed on {path}; use {allow}", "MethodNotAllowed",
                headers=[("Allow", allow)],
            ))
        if broker.draining:
            return self._refuse(error_response(503, "the broker is shutting down", "ShuttingDown", close=True))
        try:
            body = self._read_body() if method == "POST" else b""
            return getattr(broker, name)(body)
        except _BodyRefused as refused:
            return refused.response
        except TooLarge as exc:
            return error_response(413, exc.message, "RequestTooLarge", exc.field)
        except InvalidField as exc:
            return error_response(400, exc.message, "InvalidRequest", exc.field)
        except InvalidRequest as exc:
            return error_response(400, str(exc), "InvalidRequest")
        except LlogError as exc:
            log.warning("%s %s failed: %s", method, path, exc)
            return error_response(503 if exc.retriable else 500, str(exc), type(exc).__name__, retriable=exc.retriable)
        except Exception as exc:  # a bug: answer, log, keep serving
            log.exception("%s %s failed", method, path)
            return error_response(500, f"internal error: {exc!r}", "InternalError")

    def _refuse(self, resp: Response) -> Response:
        """An answer given without using the body: drop the body, or close the
        connection when it cannot be skipped safely."""
        if self.headers.get("Transfer-Encoding"):
            resp.close = True
        elif self.headers.get("Content-Length") is not None:
            length = self._content_length()
            if length is None or length > self.server.broker.config.max_request_bytes:
                resp.close = True
            elif length:
                self.rfile.read(length)
        return resp

    def _content_length(self) -> int | None:
        """The one valid Content-Length, else None (absent, repeated with
        different values, not a plain decimal, or with Transfer-Encoding)."""
        values = self.headers.get_all("Content-Length") or []
        if self.headers.get("Transfer-Encoding") or not values or len(set(v.strip() for v in values)) != 1:
            return None
        text = values[0].strip()
        if not (text.isascii() and text.isdigit()):
            return None
        return int(text)

    def _read_body(self) -> bytes:
        """The request body, refusing before reading it when it is too large."""
        limit = self.server.broker.config.max_request_bytes
        if self.headers.get("Transfer-Encoding"):
            raise _BodyRefused(error_response(
                411, "Transfer-Encoding is not supported: send the body with a Content-Length",
                "LengthRequired", "Content-Length", close=True,
            ))
        values = self.headers.get_all("Content-Length") or []
        if not values:
            raise _BodyRefused(
                error_response(411, "Content-Length is required", "LengthRequired", "Content-Length", close=True)
            )
        length = self._content_length()
        if length is None:
            raise _BodyRefused(error_response(
                400, f"invalid Content-Length {', '.join(values)!r}", "InvalidRequest", "Content-Length", close=True,
            ))
        if length > limit:
            self.server.broker.metrics.inc("http_requests_too_large_total")
            raise _BodyRefused(error_response(
                413, f"request body of {length} bytes exceeds the limit of {limit} bytes "
                "(LLOG_BROKER_MAX_REQUEST_BYTES)", "RequestTooLarge", "Content-Length", close=True,
            ))
        body = self.rfile.read(length)
        if len(body) != length:
            raise _BodyRefused(error_response(400, "request body ended early", "InvalidRequest", close=True))
        return body


class _BodyRefused(Exception):
    def __init__(self, response: Response) -> None:
        super().__init__(response.status)
        self.response = response


class BrokerHTTPServer(ThreadingHTTPServer):
    """``ThreadingHTTPServer`` bound to one :class:`Broker`."""

    daemon_threads = True  # idle keep-alive connections must not block exit
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        super().__init__((broker.config.host, broker.config.port), _Handler)
        broker.port = self.server_address[1]
