"""Typed configuration of the compactor service and of vacuum (``LLOG_COMPACTOR_*``, ``LLOG_VACUUM_*``).

Like ``_config.py``: frozen dataclasses whose fields declare their variable,
default, bounds and help once (:mod:`server._settings`); ``from_env`` is the
only code that reads these variables and names the variable in every error.
Command-line flags, generated from the same declarations, override the
environment (see ``cli.py`` and ``vacuum_cli.py``).
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import Any, Mapping

from .._errors import ConfigError, InvalidRequest
from .._http_server import DEFAULT_HTTP_READ_TIMEOUT_MS
from .._protocol.constants import MIN_SAFE_GRACE_MS, VACUUM_GRACE_MS, check_grace
from .._protocol.keys import TopicPartition
from .._settings import check_settings, from_env, nested, same_as, setting

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
DEFAULT_SERVICE_MIN_BYTES = 4 * 1024 * 1024
"""The service waits for this much (or ``DEFAULT_SERVICE_MAX_DELAY_MS``) before compacting a log: at a
trickle, compacting every second wrote one tiny object per log per second (see ARCHITECTURE.md)."""
DEFAULT_SERVICE_MAX_DELAY_MS = 30_000


@dataclass(frozen=True)
class CompactionLimits:
    """How much one compaction run may take on: the one place the limits are
    declared (the compactor's ``from_env`` and the service read them)."""

    max_offsets_per_run: int = setting(
        "Most offsets one compaction run rewrites into one compacted blob.",
        env="LLOG_COMPACTOR_MAX_OFFSETS_PER_RUN", default=DEFAULT_MAX_OFFSETS, min=1,
    )
    max_bytes_per_run: int = setting(
        "Most source bytes one compaction run reads.", env="LLOG_COMPACTOR_MAX_BYTES_PER_RUN",
        default=DEFAULT_MAX_BYTES, min=1,
    )

    def __post_init__(self) -> None:
        check_settings(self)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> CompactionLimits:
        return from_env(cls, env)


DEFAULT_VACUUM_GRACE_MS = VACUUM_GRACE_MS
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


@dataclass(frozen=True)
class VacuumConfig:
    """How vacuum decides what is old enough to delete, and how often it runs."""

    grace_ms: int = setting(
        f"Never delete objects younger than this; at least {MIN_SAFE_GRACE_MS} ms, 2 x (the 60 s reference "
        "deadline + 5 s of clock skew), or acknowledged records can be lost (SPEC 7.0).",
        env="LLOG_VACUUM_GRACE_MS", default=DEFAULT_VACUUM_GRACE_MS, min=0,
    )
    interval_ms: int = setting(
        "How often the compactor service runs a vacuum pass; 0 disables it there (llog-vacuum runs one pass).",
        env="LLOG_VACUUM_INTERVAL_MS", default=DEFAULT_VACUUM_INTERVAL_MS, min=0,
    )
    delete_redundant_entries: bool = setting(
        "Delete WAL index entries below the compaction cursor before counting references (SPEC 7.9 "
        "SHOULD); 0 keeps them.",
        env="LLOG_VACUUM_DELETE_REDUNDANT_ENTRIES", default=True,
    )
    allow_unsafe_grace: bool = setting(
        "Accept a grace below the safe minimum; only while no writer and no compactor runs (a clean-up "
        "after everything stopped).",
        env="LLOG_VACUUM_ALLOW_UNSAFE_GRACE", default=False,
    )

    def __post_init__(self) -> None:
        check_settings(self)
        check_grace(self.grace_ms, allow_unsafe=self.allow_unsafe_grace)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> VacuumConfig:
        return from_env(cls, env, **overrides)


@dataclass(frozen=True)
class CompactorServiceConfig:
    """Everything the long-running compactor service needs beyond Oxia and S3."""

    compactor_id: str = setting(
        "Identity written into every claim.", env="LLOG_COMPACTOR_ID",
        start_default=default_compactor_id, start_default_text="HOSTNAME-PID",
    )
    bind_host: str = setting("HTTP bind address.", env="LLOG_COMPACTOR_BIND_HOST", default="127.0.0.1")
    port: int = setting("HTTP port; 0 picks a free one.", env="LLOG_COMPACTOR_PORT", default=8090, min=0,
                        max=65_535)
    http_read_timeout_ms: int = setting(
        "An HTTP connection that sends nothing for this long (idle, or stalled inside a request) is closed.",
        env="LLOG_COMPACTOR_HTTP_READ_TIMEOUT_MS", default=DEFAULT_HTTP_READ_TIMEOUT_MS, min=1,
    )
    targets: tuple[TopicPartition, ...] = setting(
        "Seed logs compacted even before discovery sees them, e.g. orders:0,orders:1.",
        env="LLOG_COMPACTOR_TARGETS", default=(), parse=parse_targets,
    )
    workers: int = setting("Logs compacted in parallel.", env="LLOG_COMPACTOR_WORKERS", default=2, min=1)
    discovery_interval_ms: int = setting(
        "How often to scan Oxia for newly initialized logs; 0 disables discovery.",
        env="LLOG_COMPACTOR_DISCOVERY_INTERVAL_MS", default=30_000, min=0,
    )
    idle_sleep_ms: int = setting(
        "How long a log with nothing to do (or busy elsewhere) waits before its next attempt.",
        env="LLOG_COMPACTOR_IDLE_SLEEP_MS", default=1_000, min=0,
    )
    error_sleep_ms: int = setting("How long a log whose run failed waits.", env="LLOG_COMPACTOR_ERROR_SLEEP_MS",
                                  default=5_000, min=0)
    idle_jitter_ms: int = setting("Uniform random extra on the idle sleep.", env="LLOG_COMPACTOR_IDLE_JITTER_MS",
                                  default=500, min=0)
    error_jitter_ms: int = setting("Uniform random extra on the error sleep.",
                                   env="LLOG_COMPACTOR_ERROR_JITTER_MS", default=2_000, min=0)
    max_offsets_per_run: int = same_as(CompactionLimits, "max_offsets_per_run")
    max_bytes_per_run: int = same_as(CompactionLimits, "max_bytes_per_run")
    min_bytes_per_run: int = setting(
        "A log's uncompacted tail smaller than this waits (up to LLOG_COMPACTOR_MAX_DELAY_MS) for more before "
        "it is compacted: fewer, bigger compacted objects (S3 PUTs, index entries, vacuum work); 0 compacts "
        "whatever is there.",
        env="LLOG_COMPACTOR_MIN_BYTES_PER_RUN", default=DEFAULT_SERVICE_MIN_BYTES, min=0,
    )
    max_delay_ms: int = setting(
        "The longest a WAL entry waits for LLOG_COMPACTOR_MIN_BYTES_PER_RUN to fill before it is compacted "
        "anyway (measured from the entry's created_at_ms); 0 never waits.",
        env="LLOG_COMPACTOR_MAX_DELAY_MS", default=DEFAULT_SERVICE_MAX_DELAY_MS, min=0, max=3_600_000,
    )
    blob_cache_bytes: int = setting(
        "Memory for whole shared WAL blobs that several logs compact slices of (cuts S3 GETs per compacted "
        "MB ~10x); 0 fetches every slice by range.",
        env="LLOG_COMPACTOR_BLOB_CACHE_BYTES", default=128 * 1024 * 1024, min=0,
    )
    shutdown_timeout_ms: int = setting(
        "On SIGTERM/SIGINT, wait this long for runs in flight before closing anyway (an abandoned run is "
        "resumed by the next compactor that takes the log).",
        env="LLOG_COMPACTOR_SHUTDOWN_TIMEOUT_MS", default=30_000, min=0,
    )
    retention_interval_ms: int = setting(
        "How often the service applies each topic's retention.ms and retention.bytes (SPEC 7.10): moves each "
        "log's start past the compacted ranges they let go; vacuum deletes them a grace period later. 0 "
        "disables retention here.",
        env="LLOG_RETENTION_INTERVAL_MS", default=30_000, min=0,
    )
    vacuum: VacuumConfig = nested(VacuumConfig)

    def __post_init__(self) -> None:
        check_settings(self)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> CompactorServiceConfig:
        """From ``LLOG_COMPACTOR_*`` and ``LLOG_VACUUM_*``; ``overrides`` that are not None win."""
        return from_env(cls, env, **overrides)
