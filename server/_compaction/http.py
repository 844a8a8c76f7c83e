"""HTTP surface of the compactor service: GET /health, /metrics (JSON), /metrics/prometheus.

Served by a stdlib ``ThreadingHTTPServer`` on its own named thread; the
handler only reads the service's state and metrics, so a slow scrape never
blocks compaction. The handler builds on the base the broker uses too
(``server/_http_server.py``), so every error answer is the same JSON error
body (``error``, ``error_type``), including the ones the standard library
produces itself (malformed request line, unsupported HTTP version, over-long
request line or headers). Every path serves GET only: any other method is
405 with ``Allow: GET``, as on the broker.
"""

from __future__ import annotations

import logging
import threading
from http.server import ThreadingHTTPServer
from typing import TYPE_CHECKING

from .._http_server import PROMETHEUS, JSONRequestHandler, Response, error_response
from .._protocol.outcomes import INTERNAL_ERROR, NOT_FOUND

if TYPE_CHECKING:
    from .service import CompactorService

__all__ = ["serve"]

log = logging.getLogger(__name__)


def serve(
    service: CompactorService, host: str, port: int, *, read_timeout_s: float | None = None,
) -> tuple[ThreadingHTTPServer, threading.Thread]:
    """Bind ``host:port`` (0: any free port) and serve ``service`` on a daemon
    thread; a connection silent for ``read_timeout_s`` is closed (default: the base's)."""

    class Handler(_Handler):
        pass

    Handler.service = service
    if read_timeout_s is not None:
        Handler.timeout = read_timeout_s
    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="llog-compactor-http", daemon=True,
    )
    thread.start()
    return server, thread


_PATHS = ("/health", "/metrics", "/metrics/prometheus")


class _Handler(JSONRequestHandler):
    service: CompactorService
    server_version = "llog-compactor/1"

    def dispatch(self) -> None:
        clock = self.service.runtime.clock
        started = clock.monotonic()
        path = self.request_path().rstrip("/") or "/"
        method = self.command
        if method == "GET" or path not in _PATHS:
            resp = self._route(path)
        else:
            resp = self.method_not_allowed(method, path, ["GET"])
        label = path if path in _PATHS else "other"
        metrics = self.service.metrics
        metrics.inc("http_requests_total", path=label, method=self.method_label(method), status=resp.status)
        metrics.observe("http_request_seconds", clock.monotonic() - started, path=label)
        self.send_answer(resp)

    def count_protocol_error(self, code: int) -> None:
        self.service.metrics.inc("http_requests_total", path="other", method="OTHER", status=code)

    def _route(self, path: str) -> Response:
        try:
            if path == "/health":
                doc = self.service.health()
                return Response(200 if doc["status"] == "ok" else 503, doc)
            if path == "/metrics":
                return Response(200, self.service.metrics_json())
            if path == "/metrics/prometheus":
                return Response(200, self.service.metrics_prometheus(), PROMETHEUS)
            return error_response(NOT_FOUND, f"no such path {path!r}", paths=list(_PATHS))
        except Exception as exc:  # noqa: BLE001 - answer rather than drop the connection
            log.exception("HTTP %s failed", path)
            return error_response(INTERNAL_ERROR, str(exc))
