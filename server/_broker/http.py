"""The broker's HTTP plumbing: routing, body limits, the server.

``_Handler`` turns each request into a call of a route method of the broker
(``Broker.produce(body) -> Response``, ...; a route answers its own errors),
after checking the path, the method (405 with ``Allow``) and the body (411
without a ``Content-Length``, 413 past ``max_request_bytes`` before reading
it, 408 when it stalls past ``http_read_timeout_ms``). Requests are counted in
flight until their answer is written, so a shutdown waits for them. Method
dispatch, skipping a body no route read, writing answers, keep-alive and the
JSON answer to requests the standard library refuses come from the base both
services share (``server/_http_server.py``); ``Response`` and
``error_response`` are re-exported from there.
"""

from __future__ import annotations

import logging
import time
from urllib.parse import unquote, urlsplit
from http.server import ThreadingHTTPServer
from typing import TYPE_CHECKING

from .._errors import LlogError
from .._http_server import JSON, PROMETHEUS, JSONRequestHandler, Response, error_response
from .._protocol.outcomes import (
    INTERNAL_ERROR,
    INVALID_REQUEST,
    LENGTH_REQUIRED,
    NOT_FOUND,
    REQUEST_TIMEOUT,
    REQUEST_TOO_LARGE,
    SHUTTING_DOWN,
)

if TYPE_CHECKING:
    from .broker import Broker

__all__ = ["Response", "BrokerHTTPServer", "ROUTES", "JSON", "PROMETHEUS", "error_response"]

log = logging.getLogger(__name__)

TOPIC_PATH = "/topics/{name}"
DELETE_RECORDS_PATH = "/topics/{name}/delete-records"
GROUP_OFFSETS_PATH = "/groups/{group}/offsets"
ROUTES: dict[str, dict[str, str]] = {
    "/health": {"GET": "health"},
    "/metrics": {"GET": "metrics_json"},
    "/metrics/prometheus": {"GET": "metrics_prometheus"},
    "/produce": {"POST": "produce"},
    "/producers": {"POST": "producers"},
    "/consume": {"POST": "consume"},
    "/topics": {"GET": "topics", "POST": "topics"},
    TOPIC_PATH: {"GET": "topics", "PATCH": "topics", "DELETE": "topics"},
    DELETE_RECORDS_PATH: {"POST": "delete_records"},
    "/groups": {"GET": "groups"},
    GROUP_OFFSETS_PATH: {"GET": "groups", "POST": "groups"},
}
"""Path (``{name}``, ``{group}``: one path segment) -> method -> the broker's route."""


def _match(path: str) -> tuple[str | None, str | None]:
    """The ROUTES key ``path`` falls under and the topic or group name it carries."""
    if path in ROUTES:
        return path, None
    if path.startswith("/topics/") and "/" not in path[len("/topics/"):] and len(path) > len("/topics/"):
        return TOPIC_PATH, path[len("/topics/"):]
    parts = path.split("/")
    if len(parts) == 4 and parts[1] == "groups" and parts[2] and parts[3] == "offsets":
        return GROUP_OFFSETS_PATH, unquote(parts[2])
    if len(parts) == 4 and parts[1] == "topics" and parts[2] and parts[3] == "delete-records":
        return DELETE_RECORDS_PATH, parts[2]
    return None, None


class _Handler(JSONRequestHandler):
    server_version = "llog-broker/0.1"
    disable_nagle_algorithm = True  # the header and body writes must not wait for ACKs
    server: BrokerHTTPServer

    def count_protocol_error(self, code: int) -> None:
        broker = getattr(self.server, "broker", None)
        if broker is not None:
            broker.metrics.inc("http_requests_total", path="other", method="OTHER", status=code)

    def dispatch(self) -> None:
        broker = self.server.broker
        started = time.monotonic()
        path = self.request_path()
        method = self.command
        # In flight until the answer is written: shutdown waits for it.
        broker.enter()
        try:
            resp = self._route(broker, path, method)
            label = _match(path)[0] or "other"
            broker.metrics.inc("http_requests_total", path=label, method=self.method_label(method), status=resp.status)
            broker.metrics.observe("http_request_seconds", time.monotonic() - started, path=label)
            self.send_answer(resp)
        finally:
            broker.leave()

    def _route(self, broker: Broker, path: str, method: str) -> Response:
        key, topic = _match(path)
        route = None if key is None else ROUTES[key]
        if route is None:
            return error_response(NOT_FOUND, f"no such path: {path}")
        name = route.get(method)
        if name is None:
            return self.method_not_allowed(method, path, list(route))
        if broker.draining:
            return error_response(SHUTTING_DOWN, "the broker is shutting down", close=True)
        try:
            body = self._read_body() if method in ("POST", "PATCH") else b""
            if name == "topics":
                return broker.topics_route(body, method, topic)
            if name == "groups":
                return broker.groups_route(body, method, topic, urlsplit(self.path).query)
            if name == "delete_records":
                return broker.delete_records_route(body, topic)
            if name == "produce":  # two body formats, by Content-Type
                return broker.produce(body, self.headers.get("Content-Type"))
            if name == "consume":  # two answer formats, by Accept
                return broker.consume(body, self.headers.get("Accept"))
            return getattr(broker, name)(body)
        except _BodyRefused as refused:
            return refused.response
        except Exception as exc:  # a bug: answer, log, keep serving
            log.exception("%s %s failed", method, path)
            return error_response(INTERNAL_ERROR, f"internal error: {exc!r}")

    def _read_body(self) -> bytes:
        """The request body, refusing before reading it when it is too large."""
        limit = self.server.broker.config.max_request_bytes
        if self.headers.get("Transfer-Encoding"):
            raise _BodyRefused(error_response(
                LENGTH_REQUIRED, "Transfer-Encoding is not supported: send the body with a Content-Length",
                "Content-Length", close=True,
            ))
        values = self.headers.get_all("Content-Length") or []
        if not values:
            raise _BodyRefused(
                error_response(LENGTH_REQUIRED, "Content-Length is required", "Content-Length", close=True)
            )
        length = self.content_length()
        if length is None:
            raise _BodyRefused(error_response(
                INVALID_REQUEST, f"invalid Content-Length {', '.join(values)!r}", "Content-Length", close=True,
            ))
        if length > limit:
            self.server.broker.metrics.inc("http_requests_too_large_total")
            raise _BodyRefused(error_response(
                REQUEST_TOO_LARGE, f"request body of {length} bytes exceeds the limit of {limit} bytes "
                "(LLOG_BROKER_MAX_REQUEST_BYTES)", "Content-Length", close=True,
            ))
        try:
            body = self.read_request_body(length)
        except TimeoutError:
            raise _BodyRefused(error_response(
                REQUEST_TIMEOUT, f"the request body did not arrive within {self.timeout:g} s "
                "(LLOG_BROKER_HTTP_READ_TIMEOUT_MS)", close=True,
            )) from None
        except ConnectionError:  # the client is gone; the answer is written to no one
            body = b""
        if len(body) != length:
            raise _BodyRefused(error_response(INVALID_REQUEST, "request body ended early", close=True))
        return body


class _BodyRefused(LlogError):
    """A request body refused before it was read (411, 413, a short body):
    carries the answer to send."""

    def __init__(self, response: Response) -> None:
        super().__init__(f"request body refused: HTTP {response.status}")
        self.response = response


class BrokerHTTPServer(ThreadingHTTPServer):
    """``ThreadingHTTPServer`` bound to one :class:`Broker`."""

    daemon_threads = True  # idle keep-alive connections must not block exit
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        config = broker.config
        handler = type("_Handler", (_Handler,), {
            "timeout": config.http_read_timeout_ms / 1000, "max_skipped_body_bytes": config.max_request_bytes,
        })
        super().__init__((config.host, config.port), handler)
        broker.bind_port(self.server_address[1])
