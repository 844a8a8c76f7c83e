"""The HTTP/1.1 server base both services build on (the broker and the compactor service).

Both answer every request with a :class:`Response` whose non-2xx bodies have
one JSON shape (``_protocol/http_error.py``: ``error``, ``error_type``,
``field`` ...). :class:`JSONRequestHandler` is the ``BaseHTTPRequestHandler``
they subclass; it owns what they share:

- every request, whatever its method token, reaches the subclass's
  :meth:`~JSONRequestHandler.dispatch`, so a method a path does not serve is
  answered 405 with ``Allow`` (:meth:`~JSONRequestHandler.method_not_allowed`)
  rather than the standard library's 501;
- a body no route read (a GET with a body, a refused POST) is skipped before
  the answer, or the connection closed when it cannot be skipped safely
  (chunked, an invalid or too large ``Content-Length``), so its bytes are
  never taken for the next request on the connection;
- the socket read timeout (``timeout``, seconds, set per server from its
  config): an idle keep-alive connection, or a client that stalls inside a
  request line, its headers or its body, is closed after it;
- a header block over ``max_header_bytes`` (64 KiB) is refused with 431: the
  standard library bounds only each line (64 KiB) and their number (100), so
  one request could make the server hold 6.4 MB of headers, and a few dozen
  connections gigabytes;
- :meth:`~JSONRequestHandler.send_answer` writes a Response with a
  ``Content-Length`` (so the connection stays open, HTTP/1.1 keep-alive), or
  with ``Connection: close`` and the connection closed when the Response or
  the request asks for it (or the request is HTTP/1.0, or HTTP/0.9, which is
  answered as 1.0: a bare 0.9 body has no status); a client that went away
  ends the connection quietly;
- :meth:`~JSONRequestHandler.send_error` answers what the standard library
  refuses by itself (a malformed or over-long request line, an unsupported
  HTTP version, too many or too long headers) with the JSON error
  body instead of its HTML page, and closes the connection;
- request logging goes to the subclass module's logger at DEBUG.

The routes, limits and servers stay with each service (``_broker/http.py``,
``_compaction/http.py``).
"""

from __future__ import annotations

import http.client
import json
import logging
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from typing import Any, BinaryIO, Mapping, Sequence
from urllib.parse import urlsplit

from ._metrics import CONTENT_TYPE
from ._protocol.http_error import error_body
from ._protocol.outcomes import HTTP_PROTOCOL_ERROR, METHOD_NOT_ALLOWED, Outcome

__all__ = [
    "JSON", "PROMETHEUS", "DEFAULT_HTTP_READ_TIMEOUT_MS", "Response", "error_response", "dumps", "JSONRequestHandler",
]

JSON = "application/json"
PROMETHEUS = CONTENT_TYPE
"""prometheus_client's text exposition content type."""
DEFAULT_HTTP_READ_TIMEOUT_MS = 300_000
"""Both services' default socket read timeout (idle keep-alive, or a stalled request)."""
_KNOWN_METHODS = frozenset({"GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"})


def dumps(doc: object) -> bytes:
    """Compact UTF-8 JSON."""
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


class Response:
    """What a route answers: status, body, content type, extra headers, and
    whether the connection closes after it.

    The body is bytes, a JSON document (a mapping, encoded here), or a list
    of byte buffers written one after the other: a binary answer made of
    views of stored bytes is sent without joining them into one copy."""

    __slots__ = ("status", "chunks", "content_type", "headers", "close")

    def __init__(
        self,
        status: int,
        body: bytes | Mapping[str, Any] | list[bytes | memoryview],
        content_type: str = JSON,
        headers: Sequence[tuple[str, str]] = (),
        close: bool = False,
    ) -> None:
        self.status = status
        if isinstance(body, list):
            self.chunks: tuple[bytes | memoryview, ...] = tuple(body)
        else:
            self.chunks = (body if isinstance(body, bytes) else dumps(body),)
        self.content_type = content_type
        self.headers = tuple(headers)
        self.close = close

    @property
    def body(self) -> bytes:
        """The whole body as one bytes object (a copy when it has several chunks)."""
        return self.chunks[0] if len(self.chunks) == 1 and isinstance(self.chunks[0], bytes) else b"".join(self.chunks)


def error_response(outcome: Outcome, message: str, field: str | None = None, **kw: Any) -> Response:
    """A JSON error answer with the status and ``error_type`` of ``outcome`` (a
    row of ``_protocol/outcomes.py``); ``headers`` and ``close`` go to the
    Response, any other keyword into the body (``role``, ``retriable``, ``paths``)."""
    if outcome.status is None:
        raise ValueError(f"{outcome.error_type} has no status of its own")
    headers = kw.pop("headers", ())
    close = kw.pop("close", False)
    return Response(outcome.status, error_body(message, outcome.error_type, field, **kw), headers=headers, close=close)


class JSONRequestHandler(BaseHTTPRequestHandler):
    """HTTP/1.1 keep-alive, JSON answers of one shape, quiet logging.

    Subclasses implement :meth:`dispatch` and answer with :meth:`send_answer`;
    a route that uses the body reads it with :meth:`read_request_body`."""

    protocol_version = "HTTP/1.1"
    timeout: float | None = DEFAULT_HTTP_READ_TIMEOUT_MS / 1000
    max_skipped_body_bytes = 1 << 20
    """An unread body up to this size is read and dropped (the connection stays
    open); a larger one closes the connection instead."""
    max_header_bytes = 64 * 1024
    """The whole header block (the request line has its own 64 KiB); more is a 431."""
    _body_used = True  # until parse_request has read a request's headers

    def __getattr__(self, name: str) -> Any:
        # Every method token reaches dispatch, so a wrong one gets 405 + Allow.
        if name.startswith("do_"):
            return self.dispatch
        raise AttributeError(name)

    def dispatch(self) -> None:
        """Answer the request (``self.command``, ``self.path``, ``self.headers``)."""
        raise NotImplementedError

    def parse_request(self) -> bool:
        self._body_used = False
        rfile = self.rfile
        self.rfile = _HeaderBudget(rfile, self.max_header_bytes)  # type: ignore[assignment]
        try:
            if not super().parse_request():
                return False
        finally:
            self.rfile = rfile
        if self.request_version == "HTTP/0.9":
            # HTTP/0.9 answers are a bare body: no status, no Content-Type, so
            # a client could not tell an error from a result. Answer as 1.0.
            self.request_version = "HTTP/1.0"
        return True

    def handle(self) -> None:
        try:
            super().handle()
        except ConnectionError:  # the client reset the connection: nothing to answer
            self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        logging.getLogger(type(self).__module__).debug("%s " + format, self.address_string(), *args)

    # -- the request -------------------------------------------------------------------------
    def request_path(self) -> str:
        """The path of the request target without its query. A target that
        does not parse (``http://[::1``) is returned whole: no route has that
        path, so it is a 404 rather than a dropped connection."""
        try:
            return urlsplit(self.path).path
        except ValueError:
            return self.path

    @staticmethod
    def method_label(method: str) -> str:
        """A method as a metric label: the standard ones, else ``OTHER`` (a bounded set)."""
        return method if method in _KNOWN_METHODS else "OTHER"

    def content_length(self) -> int | None:
        """The one valid Content-Length, else None (absent, repeated with
        different values, not a plain decimal, or with Transfer-Encoding)."""
        values = self.headers.get_all("Content-Length") or []
        if self.headers.get("Transfer-Encoding") or not values or len(set(v.strip() for v in values)) != 1:
            return None
        text = values[0].strip()
        if not (text.isascii() and text.isdigit()):
            return None
        return int(text)

    def read_request_body(self, length: int) -> bytes:
        """``length`` bytes of body (fewer when the client closed early); the
        caller has checked the length. A stalled client raises TimeoutError."""
        self._body_used = True
        return self.rfile.read(length)

    def method_not_allowed(self, method: str, path: str, allow: Sequence[str]) -> Response:
        """405 for a path that does not serve ``method``, with ``Allow``."""
        allowed = ", ".join(allow)
        return error_response(
            METHOD_NOT_ALLOWED, f"{method} is not allowed on {path}; use {allowed}", headers=[("Allow", allowed)],
        )

    # -- the answer --------------------------------------------------------------------------
    def send_answer(self, resp: Response) -> None:
        """Write ``resp`` (after dropping a body no route read); a client gone
        away (broken pipe, reset) closes the connection."""
        if not self._body_used:
            self._drop_unread_body(resp)
        if resp.close:
            self.close_connection = True
        try:
            self.send_response(resp.status)
            self.send_header("Content-Type", resp.content_type)
            self.send_header("Content-Length", str(sum(len(c) for c in resp.chunks)))
            for k, v in resp.headers:
                self.send_header(k, v)
            if self.close_connection:  # asked for, HTTP/1.0, or resp.close: say so
                self.send_header("Connection", "close")
            self.end_headers()
            if getattr(self, "command", None) != "HEAD":
                for chunk in resp.chunks:
                    self.wfile.write(chunk)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _drop_unread_body(self, resp: Response) -> None:
        """Skip the body of a request answered without it, or mark ``resp``
        to close the connection when the body cannot be skipped safely."""
        self._body_used = True
        if resp.close:
            return
        if self.headers.get("Transfer-Encoding"):
            resp.close = True
            return
        if self.headers.get("Content-Length") is None:
            return
        length = self.content_length()
        if length is None or length > self.max_skipped_body_bytes:
            resp.close = True
            return
        try:
            while length > 0:  # in pieces: a dropped body is never held whole
                piece = self.rfile.read(min(length, 1 << 16))
                if not piece:
                    resp.close = True
                    return
                length -= len(piece)
        except (TimeoutError, ConnectionError):
            resp.close = True

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """Every error the standard library answers by itself, as the JSON
        error body with the connection closed."""
        self.log_error("code %d, message %s", code, message)
        try:
            phrase = HTTPStatus(code).phrase
        except ValueError:
            phrase = "Error"
        if getattr(self, "request_version", "HTTP/0.9") == "HTTP/0.9":
            # parse_request gave up before it knew the version: answer with a
            # status line and headers anyway (0.9 would send the body alone).
            self.request_version = "HTTP/1.0"
        self.count_protocol_error(code)
        text = f"{message or phrase}: {explain}" if explain else message or phrase
        self.send_answer(Response(code, error_body(text, HTTP_PROTOCOL_ERROR.error_type), close=True))

    def count_protocol_error(self, code: int) -> None:
        """Hook: a request the standard library refused (``send_error``); for metrics."""


class _HeaderBudget:
    """The request's stream while ``parse_request`` reads the header block:
    counts the bytes and refuses past ``budget`` (``parse_request`` answers
    the ``HTTPException`` with 431)."""

    def __init__(self, rfile: BinaryIO, budget: int) -> None:
        self._rfile = rfile
        self._left = budget
        self._budget = budget

    def readline(self, limit: int = -1) -> bytes:
        line = self._rfile.readline(limit)
        self._left -= len(line)
        if self._left < 0:
            raise http.client.HTTPException(f"the request headers exceed {self._budget} bytes")
        return line
