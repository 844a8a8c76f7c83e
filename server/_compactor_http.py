"""HTTP surface of the compactor service: GET /health, /metrics (JSON), /metrics/prometheus.

Served by a stdlib ``ThreadingHTTPServer`` on its own named thread; the
handler only reads the service's state and metrics, so a slow scrape never
blocks compaction.
"""

from __future__ import annotations

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from ._compactor_service import CompactorService

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
                body = {"error": f"no such path {path!r}", "paths": ["/health", "/metrics", "/metrics/prometheus"]}
                self._send(404, json.dumps(body).encode(), "application/json")
        except Exception as exc:  # noqa: BLE001 - answer rather than drop the connection
            log.exception("HTTP %s failed", path)
            self._send(500, json.dumps({"error": str(exc)}).encode(), "application/json")

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, fmt: str, *args: object) -> None:
        log.debug("HTTP %s " + fmt, self.client_address[0], *args)
