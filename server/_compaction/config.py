"""Typed configuration of the compactor service and of vacuum (``LLOG_COMPACTOR_*``, ``LLOG_VACUUM_*``).

Like ``_config.py``: frozen dataclasses validated in ``__post_init__``;
``from_env`` is the only code that reads these variables and names the
variable in every error. Command-line flags override the environment with
``dataclasses.replace`` on the result (see the service's ``main``).
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import Mapping

from .._config import LoadtestInfo, env_int, env_str
from .._errors import ConfigError, InvalidRequest
from .._http_server import DEFAULT_HTTP_READ_TIMEOUT_MS
from .._protocol.keys import TopicPartition

__all__ = [
    "CompactionLimits",
    "CompactorServiceConfig",
    "VacuumConfig",
    "parse_targets",
    "default_compactor_id",
    "DEFAULT_MAX_OFFSETS",
    "DEFAULT_MAX_BYTES",
]

DEFAULT_MAX_OFFSETS = 100_000
DEFAULT_MAX_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class CompactionLimits:
    """How much one compaction run may take on: the one place the limits are
    read from the environment (the compactor's ``from_env`` and the service)."""

    max_offsets_per_run: int = DEFAULT_MAX_OFFSETS
    """Offsets per run (LLOG_COMPACTOR_MAX_OFFSETS_PER_RUN)."""
    max_bytes_per_run: int = DEFAULT_MAX_BYTES
    """Source bytes per run (LLOG_COMPACTOR_MAX_BYTES_PER_RUN)."""

    def __post_init__(self) -> None:
        for name in ("max_offsets_per_run", "max_bytes_per_run"):
            value = getattr(self, name)
            if isinstance(value, bool) or value < 1:
                raise ConfigError(f"LLOG_COMPACTOR_{name.upper()} must be >= 1, got {value}")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> CompactionLimits:
        env = os.environ if env is None else env
        return cls(
            max_offsets_per_run=env_int(env, "LLOG_COMPACTOR_MAX_OFFSETS_PER_RUN", DEFAULT_MAX_OFFSETS),
            max_bytes_per_run=env_int(env, "LLOG_COMPACTOR_MAX_BYTES_PER_RUN", DEFAULT_MAX_BYTES),
        )

DEFAULT_VACUUM_GRACE_MS = 3_600_000
"""SPEC 7.0 ``G``: one hour, well over twice the 60 s reference deadline ``D``."""
DEFAULT_VACUUM_INTERVAL_MS = 600_000


def default_compactor_id() -> str:
    """``{hostname}-{pid}``: unique per process on a machine, readable in claims."""
    return f"{socket.gethostname()}-{os.getpid()}"


def parse_targets(text: str | None) -> tuple[TopicPartition, ...]:
    """Parse ``orders:0,orders:1`` (blanks and duplicates ignored, order kept)."""
    if text is None:
        return ()
    seen: dict[TopicPartition, None] = {}
    for item in text.split(","):
        if not item.strip():
            continue
        try:
            seen[TopicPartition.parse(item)] = None
        except InvalidRequest as exc:
            raise ConfigError(f"LLOG_COMPACTOR_TARGETS: {exc.message}") from None
    return tuple(seen)


def _non_negative(name: str, value: int) -> None:
    if value < 0:
        raise ConfigError(f"{name} must be >= 0, got {value}")


@dataclass(frozen=True)
class VacuumConfig:
    """How vacuum decides what is old enough to delete, and how often it runs."""

    grace_ms: int = DEFAULT_VACUUM_GRACE_MS
    """Objects younger than this are never deleted (LLOG_VACUUM_GRACE_MS)."""
    interval_ms: int = DEFAULT_VACUUM_INTERVAL_MS
    """Pause between passes in the compactor service; 0 disables (LLOG_VACUUM_INTERVAL_MS)."""
    delete_redundant_entries: bool = True
    """Delete WAL index entries below the cursor before counting references
    (SPEC 7.9 SHOULD; LLOG_VACUUM_DELETE_REDUNDANT_ENTRIES=0 turns it off)."""

    def __post_init__(self) -> None:
        _non_negative("LLOG_VACUUM_GRACE_MS", self.grace_ms)
        _non_negative("LLOG_VACUUM_INTERVAL_MS", self.interval_ms)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> VacuumConfig:
        env = os.environ if env is None else env
        return cls(
            grace_ms=env_int(env, "LLOG_VACUUM_GRACE_MS", DEFAULT_VACUUM_GRACE_MS),
            interval_ms=env_int(env, "LLOG_VACUUM_INTERVAL_MS", DEFAULT_VACUUM_INTERVAL_MS),
            delete_redundant_entries=env_int(env, "LLOG_VACUUM_DELETE_REDUNDANT_ENTRIES", 1) != 0,
        )


@dataclass(frozen=True)
class CompactorServiceConfig:
    """Everything the long-running compactor service needs beyond Oxia and S3."""

    compactor_id: str
    """Written into every claim (LLOG_COMPACTOR_ID; default ``hostname-pid``)."""
    bind_host: str = "127.0.0.1"
    """HTTP bind address (LLOG_COMPACTOR_BIND_HOST)."""
    port: int = 8090
    """HTTP port; 0 picks a free one (LLOG_COMPACTOR_PORT)."""
    http_read_timeout_ms: int = DEFAULT_HTTP_READ_TIMEOUT_MS
    """An HTTP connection that sends nothing for this long (idle, or stalled inside a request) is
    closed (LLOG_COMPACTOR_HTTP_READ_TIMEOUT_MS)."""
    targets: tuple[TopicPartition, ...] = ()
    """Seed partitions compacted even before discovery sees them (LLOG_COMPACTOR_TARGETS)."""
    workers: int = 2
    """Partitions compacted in parallel (LLOG_COMPACTOR_WORKERS)."""
    discovery_interval_ms: int = 30_000
    """Pause between scans for initialized partitions; 0 disables discovery
    (LLOG_COMPACTOR_DISCOVERY_INTERVAL_MS)."""
    idle_sleep_ms: int = 1_000
    """A partition with nothing to do (or busy elsewhere) waits this long (LLOG_COMPACTOR_IDLE_SLEEP_MS)."""
    error_sleep_ms: int = 5_000
    """A partition whose run failed waits this long (LLOG_COMPACTOR_ERROR_SLEEP_MS)."""
    idle_jitter_ms: int = 500
    """Uniform random extra on the idle sleep (LLOG_COMPACTOR_IDLE_JITTER_MS)."""
    error_jitter_ms: int = 2_000
    """Uniform random extra on the error sleep (LLOG_COMPACTOR_ERROR_JITTER_MS)."""
    max_offsets_per_run: int = DEFAULT_MAX_OFFSETS
    """Offsets per compaction run (LLOG_COMPACTOR_MAX_OFFSETS_PER_RUN)."""
    max_bytes_per_run: int = DEFAULT_MAX_BYTES
    """Source bytes per compaction run (LLOG_COMPACTOR_MAX_BYTES_PER_RUN)."""
    blob_cache_bytes: int = 128 * 1024 * 1024
    """Memory for whole shared WAL blobs that several logs compact slices of
    (``blob_cache.py``); 0 fetches every slice by range (LLOG_COMPACTOR_BLOB_CACHE_BYTES)."""
    shutdown_timeout_ms: int = 30_000
    """On SIGTERM, how long to wait for in-flight runs before closing the
    clients anyway (safe: every step is resumable) (LLOG_COMPACTOR_SHUTDOWN_TIMEOUT_MS)."""
    vacuum: VacuumConfig = VacuumConfig()
    loadtest: LoadtestInfo | None = None
    """The load-test scenario, under the orchestrator (LLOG_LOADTEST_*)."""

    def __post_init__(self) -> None:
        if not self.compactor_id:
            raise ConfigError("LLOG_COMPACTOR_ID must not be empty")
        if not self.bind_host:
            raise ConfigError("LLOG_COMPACTOR_BIND_HOST must not be empty")
        if not 0 <= self.port <= 65_535:
            raise ConfigError(f"LLOG_COMPACTOR_PORT must be 0-65535, got {self.port}")
        if self.workers < 1:
            raise ConfigError(f"LLOG_COMPACTOR_WORKERS must be >= 1, got {self.workers}")
        if self.http_read_timeout_ms < 1:
            raise ConfigError(f"LLOG_COMPACTOR_HTTP_READ_TIMEOUT_MS must be >= 1, got {self.http_read_timeout_ms}")
        for name in (
            "discovery_interval_ms", "idle_sleep_ms", "error_sleep_ms",
            "idle_jitter_ms", "error_jitter_ms", "shutdown_timeout_ms", "blob_cache_bytes",
        ):
            _non_negative(f"LLOG_COMPACTOR_{name.upper()}", getattr(self, name))
        CompactionLimits(self.max_offsets_per_run, self.max_bytes_per_run)  # validates both

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> CompactorServiceConfig:
        env = os.environ if env is None else env

        limits = CompactionLimits.from_env(env)
        return cls(
            compactor_id=env_str(env, "LLOG_COMPACTOR_ID") or default_compactor_id(),
            bind_host=env_str(env, "LLOG_COMPACTOR_BIND_HOST", "127.0.0.1") or "127.0.0.1",
            port=env_int(env, "LLOG_COMPACTOR_PORT", 8090),
            http_read_timeout_ms=env_int(env, "LLOG_COMPACTOR_HTTP_READ_TIMEOUT_MS", DEFAULT_HTTP_READ_TIMEOUT_MS),
            targets=parse_targets(env_str(env, "LLOG_COMPACTOR_TARGETS")),
            workers=env_int(env, "LLOG_COMPACTOR_WORKERS", 2),
            discovery_interval_ms=env_int(env, "LLOG_COMPACTOR_DISCOVERY_INTERVAL_MS", 30_000),
            idle_sleep_ms=env_int(env, "LLOG_COMPACTOR_IDLE_SLEEP_MS", 1_000),
            error_sleep_ms=env_int(env, "LLOG_COMPACTOR_ERROR_SLEEP_MS", 5_000),
            idle_jitter_ms=env_int(env, "LLOG_COMPACTOR_IDLE_JITTER_MS", 500),
            error_jitter_ms=env_int(env, "LLOG_COMPACTOR_ERROR_JITTER_MS", 2_000),
            max_offsets_per_run=limits.max_offsets_per_run,
            max_bytes_per_run=limits.max_bytes_per_run,
            blob_cache_bytes=env_int(env, "LLOG_COMPACTOR_BLOB_CACHE_BYTES", 128 * 1024 * 1024),
            shutdown_timeout_ms=env_int(env, "LLOG_COMPACTOR_SHUTDOWN_TIMEOUT_MS", 30_000),
            vacuum=VacuumConfig.from_env(env),
            loadtest=LoadtestInfo.from_env(env),
        )
