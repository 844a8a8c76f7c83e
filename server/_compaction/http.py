"""HTTP surface of the compactor service: GET /health, /metrics (JSON), /metrics/prometheus.

Served by a stdlib ``ThreadingHTTPServer`` on its own named thread; the
handler only reads the service's state and metrics, so a slow scrape never
blocks compaction. Every error answer is the broker's JSON error body
(``_protocol/http_error.py``: ``error``, ``error_type``), including the ones
the standard library produces itself (malformed request line, unsupported
HTTP version, over-long request line or headers, unknown method).
"""

from __future__ import annotations

import json
import logging
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from .._protocol.http_error import error_body

if TYPE_CHECKING:
    from .service import CompactorService

__all__ = ["serve"]

log = logging.getLogger(__name__)


def serve(service: CompactorService, host: str, port: int) -> tuple[ThreadingHTTPServer, threading.Thread]:
    """Bind ``host:port`` (0: any free port) and serve ``service`` on a daemon thread."""

    class Handler(_Handler):
        pass

    Handler.service = service
    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.2}, name="llog-compactor-http", daemon=True,
    )
    thread.start()
    return server, thread


_PATHS = ("/health", "/metrics", "/metrics/prometheus")


class _Handler(BaseHTTPRequestHandler):
    service: CompactorService
    server_version = "llog-compactor/1"
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        path = urlsplit(self.path).path.rstrip("/") or "/"
        try:
            if path == "/health":
                doc = self.service.health()
                self._send(200 if doc["status"] == "ok" else 503, json.dumps(doc).encode(), "application/json")
            elif path == "/metrics":
                self._send(200, json.dumps(self.service.metrics_json()).encode(), "application/json")
            elif path == "/metrics/prometheus":
                self._send(200, self.service.metrics_prometheus().encode(), "text/plain; version=0.0.4; charset=utf-8")
            else:
                body = error_body(f"no such path {path!r}", "NotFound", paths=list(_PATHS))
                self._send(404, json.dumps(body).encode(), "application/json")
        except Exception as exc:  # noqa: BLE001 - answer rather than drop the connection
            log.exception("HTTP %s failed", path)
            self._send(500, json.dumps(error_body(str(exc), "InternalError")).encode(), "application/json")

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """Every error the standard library answers by itself as the JSON
        error body (instead of its HTML page), closing the connection."""
        self.log_error("code %d, message %s", code, message)
        try:
            phrase = HTTPStatus(code).phrase
        except ValueError:
            phrase = "Error"
        if getattr(self, "request_version", "HTTP/0.9") == "HTTP/0.9":
            # parse_request gave up before it knew the version: answer with a
            # status line and headers anyway (0.9 would send the body alone).
            self.request_version = "HTTP/1.0"
        self.close_connection = True
        body = json.dumps(error_body(message or phrase, "HttpProtocolError")).encode()
        try:
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Connection", "close")
            self.end_headers()
            if getattr(self, "command", None) != "HEAD":
                self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, fmt: str, *args: object) -> None:
        log.debug("HTTP %s " + fmt, self.client_address[0], *args)
