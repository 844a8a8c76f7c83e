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
import textwrap
import threading
from typing import Mapping, Sequence

from .._config import BatchConfig, OxiaConfig, ProducerStateConfig, S3Config
from .._errors import ConfigError, LlogError
from .._settings import Flags, environment_help
from .._signals import wait_for_stop
from .._storage.billing import S3Prices
from .broker import Broker
from .config import BrokerConfig
from .http import BrokerHTTPServer

from .._catalogue.topic_config import TopicDefaults

__all__ = ["main", "parse_args", "serve", "FLAGS", "ENVIRONMENT"]

log = logging.getLogger(__name__)


FLAGS = Flags(BrokerConfig)
"""The flags: one per :class:`BrokerConfig` setting (``--role``, ``--port`` ...)."""
ENVIRONMENT = (OxiaConfig, S3Config, S3Prices, BatchConfig, ProducerStateConfig, TopicDefaults)
"""The other configs the broker reads from the environment (``Broker.from_env``)."""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m server.leaderless_log_broker",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=textwrap.fill(
            "llog HTTP broker: POST /produce and POST /consume over Oxia + S3, with GET /health, /metrics "
            "and /metrics/prometheus. Each flag overrides its variable.", 100,
        ),
        epilog=(
            "Also read from the environment (see .env.example and server/HTTP_API.md):\n"
            + environment_help(ENVIRONMENT)
        ),
    )
    FLAGS.add_to(p)
    p.add_argument("--log-level", default="INFO", help="logging level (default INFO)")
    return p


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    return _parser().parse_args(argv)


def serve(config: BrokerConfig, env: Mapping[str, str], stop: threading.Event) -> None:
    """Run a broker until ``stop`` is set, then shut down gracefully."""
    broker = Broker.from_env(config, env)
    try:
        server = BrokerHTTPServer(broker)
    except BaseException:
        broker.close()
        raise
    try:
        kafka = None
        if config.kafka_port is not None:
            from .kafka_front import KafkaFront  # kafka-python's import (0.2 s) only for a broker that speaks Kafka

            kafka = KafkaFront(broker, location=f"s3://{S3Config.from_env(env).bucket}/{broker.layout.root}")
    except BaseException:
        server.server_close()
        broker.close()
        raise
    # serve_forever looks for a shutdown every poll_interval: a stop waits for it.
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="llog-broker-http")
    thread.start()
    try:
        # One machine-readable line on stdout: how tests and scripts learn the
        # port. If nobody reads it any more (the parent died: BrokenPipeError)
        # the broker shuts down rather than serve on, unannounced.
        print(json.dumps({
            "event": "listening", "broker_id": config.broker_id, "role": config.role,
            "host": config.host, "port": broker.port, "tail_cache": broker.cache.mode,
            "kafka_port": None if kafka is None else kafka.port,
        }), flush=True)
        if kafka is not None:
            log.info("broker %s: Kafka listener on %s:%d (node %d, %s)", config.broker_id, config.kafka_host,
                     kafka.port, kafka.nodes.me.node_id if kafka.nodes else -1, kafka.security)
        log.info("broker %s (role %s) listening on http://%s:%d", config.broker_id, config.role, config.host,
                 broker.port)
        wait_for_stop(stop)
    finally:
        log.info("broker %s shutting down", config.broker_id)
        server.shutdown()  # stop accepting
        server.server_close()
        if kafka is not None:
            kafka.close()
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
        config = BrokerConfig.from_env(os.environ, **FLAGS.values(args))
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

