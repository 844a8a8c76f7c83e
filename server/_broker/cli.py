"""The broker process: flags, ``serve`` and ``main``.

    python -m server.leaderless_log_broker --role both --port 8080
    llog-broker --help

One process, Python's ``ThreadingHTTPServer`` (a thread per connection,
HTTP/1.1 keep-alive) over one :class:`~server._broker.broker.Broker` built
from the environment (``Broker.from_env``).

Shutdown (SIGTERM or SIGINT): stop accepting connections, then
``Broker.close()``: answer requests on open connections with 503, wake
long-polling consumes, flush and close the producer (every accepted produce
gets its answer), then close the parts.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
from typing import Mapping, Sequence

from .._errors import ConfigError, LlogError
from .broker import Broker
from .config import ROLES, BrokerConfig
from .http import BrokerHTTPServer

__all__ = ["main", "parse_args", "serve"]

log = logging.getLogger(__name__)



def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m server.leaderless_log_broker",
        description=(
            "llog HTTP broker: POST /produce and POST /consume over Oxia + S3, "
            "with GET /health, /metrics and /metrics/prometheus."
        ),
        epilog=(
            "Flags override the environment. Also read: LLOG_OXIA_* and LLOG_S3_* (where the log "
            "lives), LLOG_ROOT_PREFIX, LLOG_BATCH_MAX_BYTES / _MAX_DELAY_MS / _MAX_BUFFER_BYTES "
            "(batching), LLOG_BROKER_MAX_REQUEST_BYTES, LLOG_BROKER_MAX_RECORDS_PER_REQUEST, "
            "LLOG_BROKER_MAX_WAIT_MS, LLOG_BROKER_PRODUCE_TIMEOUT_MS, LLOG_BROKER_HTTP_READ_TIMEOUT_MS, "
            "LLOG_TAIL_CACHE_POLL_MS. "
            "See .env.example and server/HTTP_API.md."
        ),
    )
    p.add_argument("--role", choices=ROLES, help="endpoints to serve (default both; LLOG_BROKER_ROLE)")
    p.add_argument("--broker-id", help="name in /health and /metrics (LLOG_BROKER_ID; default broker-HOST-PID)")
    p.add_argument("--host", help="bind address (LLOG_BROKER_HOST; default 127.0.0.1)")
    p.add_argument("--port", type=int, help="bind port, 0 = any free port (LLOG_BROKER_PORT; default 8080)")
    p.add_argument("--tail-cache-dir", help="shared file-backed tail cache directory (LLOG_TAIL_CACHE_DIR)")
    p.add_argument(
        "--tail-cache-max-bytes", type=int,
        help="tail cache cap, 0 disables (LLOG_TAIL_CACHE_MAX_BYTES; default 512 MiB)",
    )
    p.add_argument("--log-level", default="INFO", help="logging level (default INFO)")
    return p.parse_args(argv)


def serve(config: BrokerConfig, env: Mapping[str, str], stop: threading.Event) -> None:
    """Run a broker until ``stop`` is set, then shut down gracefully."""
    broker = Broker.from_env(config, env)
    try:
        server = BrokerHTTPServer(broker)
    except BaseException:
        broker.close()
        raise
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, name="llog-broker-http")
    thread.start()
    try:
        # One machine-readable line on stdout: how tests and scripts learn the
        # port. If nobody reads it any more (the parent died: BrokenPipeError)
        # the broker shuts down rather than serve on, unannounced.
        print(json.dumps({
            "event": "listening", "broker_id": config.broker_id, "role": config.role,
            "host": config.host, "port": broker.port, "tail_cache": broker.cache.mode,
        }), flush=True)
        log.info("broker %s (role %s) listening on http://%s:%d", config.broker_id, config.role, config.host,
                 broker.port)
        stop.wait()
    finally:
        log.info("broker %s shutting down", config.broker_id)
        server.shutdown()  # stop accepting
        server.server_close()
        thread.join()
        broker.close()
        log.info("broker %s stopped", config.broker_id)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s %(threadName)s: %(message)s",
    )
    try:
        config = BrokerConfig.from_env(
            os.environ,
            role=args.role,
            broker_id=args.broker_id,
            host=args.host,
            port=args.port,
            tail_cache_dir=args.tail_cache_dir,
            tail_cache_max_bytes=args.tail_cache_max_bytes,
        )
    except ConfigError as exc:
        print(f"llog-broker: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        serve(config, os.environ, stop)
    except ConfigError as exc:
        print(f"llog-broker: {exc}", file=sys.stderr)
        return 2
    except (LlogError, OSError) as exc:
        print(f"llog-broker: cannot start: {exc}", file=sys.stderr)
        return 1
    return 0

