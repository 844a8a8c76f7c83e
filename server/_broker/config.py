"""``BrokerConfig``: the HTTP broker's role, address, limits and tail cache.

Validated in the constructor; ``from_env`` reads the ``LLOG_BROKER_*`` and
``LLOG_TAIL_CACHE_*`` variables (the CLI flags of
``python -m server.leaderless_log_broker`` override them).
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import Any, Mapping

from .._errors import ConfigError
from .._http_server import DEFAULT_HTTP_READ_TIMEOUT_MS
from .._settings import check_settings, from_env, setting

__all__ = ["BrokerConfig", "ROLES", "MIB"]

MIB = 1024 * 1024
ROLES = ("write", "read", "both")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
"""What the Kafka listener can authenticate with (``server/_kafka/sasl.py``; declared here, where
the setting is checked, so a broker without a listener does not import Kafka's codec)."""


def sasl_mechanisms(text: str) -> tuple[str, ...]:
    """``LLOG_KAFKA_SASL_MECHANISMS`` as a tuple; ConfigError naming what is wrong."""
    names = tuple(dict.fromkeys(m.strip().upper() for m in text.split(",") if m.strip()))
    unknown = [m for m in names if m not in SASL_MECHANISMS]
    if not names or unknown:
        raise ConfigError(f"LLOG_KAFKA_SASL_MECHANISMS: {', '.join(unknown) or 'none given'}: choose among "
                          f"{', '.join(SASL_MECHANISMS)}, comma-separated")
    return names


def default_broker_id() -> str:
    return f"broker-{socket.gethostname()}-{os.getpid()}"


@dataclass(frozen=True)
class BrokerConfig:
    """How one broker process serves HTTP."""

    role: str = setting(
        "Endpoints served: write (/produce), read (/consume) or both.", env="LLOG_BROKER_ROLE", default="both",
        choices=ROLES,
    )
    broker_id: str = setting(
        "Name reported by /health and /metrics.", env="LLOG_BROKER_ID",
        default="broker-1", min=1, max=200, start_default=default_broker_id, start_default_text="broker-HOST-PID",
    )
    host: str = setting("Bind address.", env="LLOG_BROKER_HOST", default="127.0.0.1")
    port: int = setting("Bind port; 0 picks a free port, reported by /health.", env="LLOG_BROKER_PORT",
                        default=8080, min=0, max=65_535)
    max_request_bytes: int = setting(
        "Largest request body; larger ones get 413 before they are read.", env="LLOG_BROKER_MAX_REQUEST_BYTES",
        default=16 * MIB, min=1024,
    )
    max_records_per_request: int = setting(
        "Most records one /produce request may carry (413 beyond).", env="LLOG_BROKER_MAX_RECORDS_PER_REQUEST",
        default=100_000, min=1,
    )
    max_wait_ms_cap: int = setting(
        "Server-side cap on a /consume request's max_wait_ms.", env="LLOG_BROKER_MAX_WAIT_MS", default=30_000, min=0
    )
    produce_timeout_ms: int = setting(
        "How long /produce waits for its flush before answering 504.", env="LLOG_BROKER_PRODUCE_TIMEOUT_MS",
        default=120_000, min=1,
    )
    http_read_timeout_ms: int = setting(
        "A connection that sends nothing for this long is closed: idle between requests, or stalled inside "
        "one (a body that stalls is answered 408 first).",
        env="LLOG_BROKER_HTTP_READ_TIMEOUT_MS", default=DEFAULT_HTTP_READ_TIMEOUT_MS, min=1,
    )
    topic_cache_ms: int = setting(
        "How long a topic's catalogue record is trusted before produce or consume reads it again (a "
        "topic or partition it has not seen is read at once; another broker's delete is seen within this).",
        env="LLOG_BROKER_TOPIC_CACHE_MS", default=1_000, min=0, max=60_000,
    )
    log_start_refresh_ms: int = setting(
        "How long a partition's log start (moved by retention) is trusted before a consume reads its control "
        "record again; records just below a log start that moved within this may still be answered (vacuum "
        "deletes them a grace period later).",
        env="LLOG_BROKER_LOG_START_REFRESH_MS", default=1_000, min=0, max=60_000,
    )
    tail_cache_dir: str | None = setting(
        "Directory shared by writer and reader broker processes for a file-backed tail cache (unset: an "
        "in-process cache, when one broker runs both roles).",
        env="LLOG_TAIL_CACHE_DIR", default=None,
    )
    tail_cache_max_bytes: int = setting(
        "Byte cap of the tail cache; 0 disables it.", env="LLOG_TAIL_CACHE_MAX_BYTES", default=512 * MIB, min=0
    )
    tail_cache_poll_ms: int = setting(
        "File-backed mode: how often a waiting consume stats the shared high-watermark files to notice a "
        "write process's publish (never Oxia or S3).",
        env="LLOG_TAIL_CACHE_POLL_MS", default=10, min=1, max=1000,
    )

    kafka_port: int | None = setting(
        "Port of the Kafka protocol listener (KAFKA_API.md); unset: no listener. 0 picks a free port.",
        env="LLOG_KAFKA_PORT", default=None, kind=int, min=0, max=65_535,
    )
    kafka_advertised_host: str | None = setting(
        "Host name Metadata gives Kafka clients for this broker (unset: the bind address, or the machine's "
        "host name when that is a wildcard).", env="LLOG_KAFKA_ADVERTISED_HOST", default=None, min=1, max=255,
    )
    kafka_threads: int = setting(
        "Threads handling Kafka requests (a produce waiting for its flush or a fetch long-polling holds one).",
        env="LLOG_KAFKA_THREADS", default=64, min=2, max=4096,
    )
    kafka_max_inflight: int = setting(
        "Requests of one Kafka connection queued or running at once; the listener reads no more until one "
        "is answered.", env="LLOG_KAFKA_MAX_INFLIGHT", default=16, min=2, max=1024,
    )
    kafka_max_connections: int = setting(
        "Kafka connections open at once (two threads each); a connection past it is closed at once and its "
        "client retries (Kafka's max.connections).", env="LLOG_KAFKA_MAX_CONNECTIONS", default=10_000, min=1,
        max=1_000_000,
    )
    kafka_connections_max_idle_ms: int = setting(
        "A Kafka connection that sends nothing and takes nothing for this long is closed (Kafka's "
        "connections.max.idle.ms); 0: never.", env="LLOG_KAFKA_CONNECTIONS_MAX_IDLE_MS", default=600_000, min=0,
        max=86_400_000,
    )
    kafka_fetch_sessions: int = setting(
        "Kafka fetch sessions (KIP-227) a broker keeps at most, least recently used evicted first; a consumer "
        "in one names only what changed per fetch (Kafka's max.incremental.fetch.session.cache.slots; "
        "0: none).", env="LLOG_KAFKA_FETCH_SESSIONS", default=1000, min=0, max=1_000_000,
    )
    kafka_group_initial_rebalance_delay_ms: int = setting(
        "How long a Kafka group's coordinator waits for more members after the first joins an empty group "
        "(Kafka's group.initial.rebalance.delay.ms).", env="LLOG_KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS",
        default=3_000, min=0, max=300_000,
    )

    kafka_tls_cert: str | None = setting(
        "PEM file of the Kafka listener's certificate (and chain): the listener speaks TLS only (Kafka's SSL "
        "and SASL_SSL listeners); unset: plaintext.", env="LLOG_KAFKA_TLS_CERT", default=None, min=1,
    )
    kafka_tls_key: str | None = setting(
        "PEM file of LLOG_KAFKA_TLS_CERT's private key, unencrypted (unset: it is in the certificate's file).",
        env="LLOG_KAFKA_TLS_KEY", default=None, min=1,
    )
    kafka_tls_client_ca: str | None = setting(
        "PEM file of the authorities Kafka clients' certificates must be signed by: every client must present "
        "one (Kafka's ssl.client.auth=required); unset: none is asked for.", env="LLOG_KAFKA_TLS_CLIENT_CA",
        default=None, min=1,
    )
    kafka_sasl: str = setting(
        "on: every Kafka connection authenticates with SASL first, as a SCRAM user kept in Oxia (kafka-configs "
        "--entity-type users, llog-admin users) or one of LLOG_KAFKA_SASL_USERS (Kafka's SASL_PLAINTEXT, or "
        "SASL_SSL with TLS); off: no authentication, unless LLOG_KAFKA_SASL_USERS is set.",
        env="LLOG_KAFKA_SASL", default="off", choices=("off", "on"),
    )
    kafka_sasl_users: str | None = setting(
        "File of more users, one name:password a line, read again when it changes; setting it turns "
        "LLOG_KAFKA_SASL on. A name in it hides the same name in Oxia.",
        env="LLOG_KAFKA_SASL_USERS", default=None, min=1,
    )
    kafka_sasl_mechanisms: str = setting(
        "SASL mechanisms offered, comma-separated, of PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 (Kafka's "
        "sasl.enabled.mechanisms).", env="LLOG_KAFKA_SASL_MECHANISMS", default="PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        min=1,
    )

    def __post_init__(self) -> None:
        check_settings(self)
        if self.kafka_tls_cert is None and (self.kafka_tls_key or self.kafka_tls_client_ca):
            raise ConfigError("LLOG_KAFKA_TLS_KEY and LLOG_KAFKA_TLS_CLIENT_CA need LLOG_KAFKA_TLS_CERT, the "
                              "listener's certificate")
        sasl_mechanisms(self.kafka_sasl_mechanisms)
        if self.kafka_port is not None and self.role != "both":
            raise ConfigError(f"the Kafka listener (LLOG_KAFKA_PORT) needs role 'both', not {self.role!r}: "
                              "Metadata names every listener as a partition's leader, for writes and reads")
        if not self.broker_id.isprintable():
            raise ConfigError(f"LLOG_BROKER_ID must be printable characters only, got {self.broker_id!r}")

    @property
    def serves_produce(self) -> bool:
        return self.role in ("write", "both")

    @property
    def serves_consume(self) -> bool:
        return self.role in ("read", "both")

    @property
    def kafka_host(self) -> str:
        """What Metadata names as this broker's host."""
        if self.kafka_advertised_host:
            return self.kafka_advertised_host
        return socket.gethostname() if self.host in ("", "0.0.0.0", "::") else self.host

    @property
    def kafka_sasl_on(self) -> bool:
        return self.kafka_sasl == "on" or self.kafka_sasl_users is not None

    @property
    def kafka_mechanisms(self) -> tuple[str, ...]:
        return sasl_mechanisms(self.kafka_sasl_mechanisms)

    @property
    def tail_cache_enabled(self) -> bool:
        return self.tail_cache_max_bytes > 0

    @property
    def tail_cache_mode(self) -> str:
        """``off``, ``file`` (shared directory) or ``memory`` (this process only)."""
        if not self.tail_cache_enabled:
            return "off"
        return "file" if self.tail_cache_dir else "memory"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> BrokerConfig:
        """From ``LLOG_BROKER_*`` / ``LLOG_TAIL_CACHE_*``; ``overrides`` (CLI
        flags) win over the environment when not None."""
        return from_env(cls, env, **overrides)
