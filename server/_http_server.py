"""The HTTP/1.1 server base both services build on (the broker and the compactor service).

Both answer every request with a :class:`Response` whose non-2xx bodies have
one JSON shape (``_protocol/http_error.py``: ``error``, ``error_type``,
``field`` ...). :class:`JSONRequestHandler` is the ``BaseHTTPRequestHandler``
they subclass; it owns what they share:

- :meth:`~JSONRequestHandler.send_answer` writes a Response with a
  ``Content-Length`` (so the connection stays open, HTTP/1.1 keep-alive), or
  with ``Connection: close`` and the connection closed when the Response
  asks for it; a client that went away ends the connection quietly;
- :meth:`~JSONRequestHandler.send_error` answers what the standard library
  refuses by itself (a malformed or over-long request line, an unsupported
  HTTP version or method, too many or too long headers) with the JSON error
  body instead of its HTML page, and closes the connection;
- request logging goes to the subclass module's logger at DEBUG.

The routes, limits and servers stay with each service (``_broker/http.py``,
``_compaction/http.py``).
"""

from __future__ import annotations

import json
import logging
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from typing import Any, Mapping, Sequence

from ._metrics import CONTENT_TYPE
from ._protocol.http_error import error_body
from ._protocol.outcomes import HTTP_PROTOCOL_ERROR, Outcome

__all__ = ["JSON", "PROMETHEUS", "Response", "error_response", "dumps", "JSONRequestHandler"]

JSON = "application/json"
PROMETHEUS = CONTENT_TYPE
"""prometheus_client's text exposition content type."""


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
    """HTTP/1.1 keep-alive, JSON answers of one shape, quiet logging."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        logging.getLogger(type(self).__module__).debug("%s " + format, self.address_string(), *args)

    def send_answer(self, resp: Response) -> None:
        """Write ``resp``; a client gone away (broken pipe, reset) closes the connection."""
        if resp.close:
            self.close_connection = True
        try:
            self.send_response(resp.status)
            self.send_header("Content-Type", resp.content_type)
            self.send_header("Content-Length", str(sum(len(c) for c in resp.chunks)))
            for k, v in resp.headers:
                self.send_header(k, v)
            if resp.close:
                self.send_header("Connection", "close")
            self.end_headers()
            if getattr(self, "command", None) != "HEAD":
                for chunk in resp.chunks:
                    self.wfile.write(chunk)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

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
        self.send_answer(Response(code, error_body(message or phrase, HTTP_PROTOCOL_ERROR.error_type), close=True))

    def count_protocol_error(self, code: int) -> None:
        """Hook: a request the standard library refused (``send_error``); for metrics."""
