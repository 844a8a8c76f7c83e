"""``BrokerConfig``: the HTTP broker's role, address, limits and tail cache.

Validated in the constructor; ``from_env`` reads the ``LLOG_BROKER_*`` and
``LLOG_TAIL_CACHE_*`` variables (the CLI flags of
``python -m server.leaderless_log_broker`` override them).
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import Mapping

from .._config import LoadtestInfo, env_int, env_str
from .._errors import ConfigError
from .._http_server import DEFAULT_HTTP_READ_TIMEOUT_MS

__all__ = ["BrokerConfig", "ROLES", "MIB"]

MIB = 1024 * 1024
ROLES = ("write", "read", "both")
_MAX_PORT = 65_535


def default_broker_id() -> str:
    return f"broker-{socket.gethostname()}-{os.getpid()}"


@dataclass(frozen=True)
class BrokerConfig:
    """How one broker process serves HTTP."""

    role: str = "both"
    """``write`` serves /produce, ``read`` serves /consume, ``both`` serves both (LLOG_BROKER_ROLE)."""
    broker_id: str = "broker-1"
    """Name reported by /health and /metrics (LLOG_BROKER_ID; default broker-{host}-{pid})."""
    host: str = "127.0.0.1"
    """Bind address (LLOG_BROKER_HOST)."""
    port: int = 8080
    """Bind port; 0 picks a free one, reported by /health (LLOG_BROKER_PORT)."""
    max_request_bytes: int = 16 * MIB
    """Largest request body accepted; larger ones get 413 unread (LLOG_BROKER_MAX_REQUEST_BYTES)."""
    max_records_per_request: int = 100_000
    """Most records one /produce request may carry (LLOG_BROKER_MAX_RECORDS_PER_REQUEST)."""
    max_wait_ms_cap: int = 30_000
    """Server-side cap on a /consume request's max_wait_ms (LLOG_BROKER_MAX_WAIT_MS)."""
    produce_timeout_ms: int = 120_000
    """How long a /produce request waits for its flush before answering 504 (LLOG_BROKER_PRODUCE_TIMEOUT_MS)."""
    http_read_timeout_ms: int = DEFAULT_HTTP_READ_TIMEOUT_MS
    """A connection that sends nothing for this long is closed: idle between requests, or stalled
    inside one (a body that stalls is answered 408 first) (LLOG_BROKER_HTTP_READ_TIMEOUT_MS)."""
    tail_cache_dir: str | None = None
    """Shared directory of the file-backed tail cache; None: in-process (LLOG_TAIL_CACHE_DIR)."""
    tail_cache_max_bytes: int = 512 * MIB
    """Byte cap of the tail cache; 0 disables it (LLOG_TAIL_CACHE_MAX_BYTES)."""
    tail_cache_poll_ms: int = 10
    """File-backed mode: how often a waiting consume stats the shared high-watermark files
    (LLOG_TAIL_CACHE_POLL_MS)."""
    loadtest: LoadtestInfo | None = None
    """The load-test scenario, under the orchestrator (LLOG_LOADTEST_*)."""

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ConfigError(f"LLOG_BROKER_ROLE must be one of {', '.join(ROLES)}, got {self.role!r}")
        if not self.broker_id or len(self.broker_id) > 200 or not self.broker_id.isprintable():
            raise ConfigError(f"LLOG_BROKER_ID must be 1-200 printable characters, got {self.broker_id!r}")
        if not self.host:
            raise ConfigError("LLOG_BROKER_HOST must not be empty")
        if not 0 <= self.port <= _MAX_PORT:
            raise ConfigError(f"LLOG_BROKER_PORT must be 0-{_MAX_PORT}, got {self.port}")
        if self.max_request_bytes < 1024:
            raise ConfigError(f"LLOG_BROKER_MAX_REQUEST_BYTES must be >= 1024, got {self.max_request_bytes}")
        if self.max_records_per_request < 1:
            raise ConfigError(
                f"LLOG_BROKER_MAX_RECORDS_PER_REQUEST must be >= 1, got {self.max_records_per_request}"
            )
        if self.max_wait_ms_cap < 0:
            raise ConfigError(f"LLOG_BROKER_MAX_WAIT_MS must be >= 0, got {self.max_wait_ms_cap}")
        if self.produce_timeout_ms < 1:
            raise ConfigError(f"LLOG_BROKER_PRODUCE_TIMEOUT_MS must be >= 1, got {self.produce_timeout_ms}")
        if self.http_read_timeout_ms < 1:
            raise ConfigError(f"LLOG_BROKER_HTTP_READ_TIMEOUT_MS must be >= 1, got {self.http_read_timeout_ms}")
        if self.tail_cache_max_bytes < 0:
            raise ConfigError(f"LLOG_TAIL_CACHE_MAX_BYTES must be >= 0, got {self.tail_cache_max_bytes}")
        if not 1 <= self.tail_cache_poll_ms <= 1000:
            raise ConfigError(f"LLOG_TAIL_CACHE_POLL_MS must be 1-1000, got {self.tail_cache_poll_ms}")

    @property
    def serves_produce(self) -> bool:
        return self.role in ("write", "both")

    @property
    def serves_consume(self) -> bool:
        return self.role in ("read", "both")

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
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: object) -> BrokerConfig:
        """From ``LLOG_BROKER_*`` / ``LLOG_TAIL_CACHE_*``; ``overrides`` (CLI
        flags) win over the environment when not None."""
        env = os.environ if env is None else env
        values: dict[str, object] = {
            "role": env_str(env, "LLOG_BROKER_ROLE", "both"),
            "broker_id": env_str(env, "LLOG_BROKER_ID") or default_broker_id(),
            "host": env_str(env, "LLOG_BROKER_HOST", cls.host),
            "port": env_int(env, "LLOG_BROKER_PORT", cls.port),
            "max_request_bytes": env_int(env, "LLOG_BROKER_MAX_REQUEST_BYTES", cls.max_request_bytes),
            "max_records_per_request": env_int(
                env, "LLOG_BROKER_MAX_RECORDS_PER_REQUEST", cls.max_records_per_request
            ),
            "max_wait_ms_cap": env_int(env, "LLOG_BROKER_MAX_WAIT_MS", cls.max_wait_ms_cap),
            "produce_timeout_ms": env_int(env, "LLOG_BROKER_PRODUCE_TIMEOUT_MS", cls.produce_timeout_ms),
            "http_read_timeout_ms": env_int(env, "LLOG_BROKER_HTTP_READ_TIMEOUT_MS", cls.http_read_timeout_ms),
            "tail_cache_dir": env_str(env, "LLOG_TAIL_CACHE_DIR"),
            "tail_cache_max_bytes": env_int(env, "LLOG_TAIL_CACHE_MAX_BYTES", cls.tail_cache_max_bytes),
            "tail_cache_poll_ms": env_int(env, "LLOG_TAIL_CACHE_POLL_MS", cls.tail_cache_poll_ms),
            "loadtest": LoadtestInfo.from_env(env),
        }
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)  # type: ignore[arg-type]
