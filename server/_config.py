"""Typed, validated configuration; the only place the library reads ``LLOG_*``.

Each config is a frozen dataclass validated in ``__post_init__``; ``from_env``
builds it from an environment mapping (``os.environ`` by default) and names
the variable in any error. Secrets are masked in ``repr``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from typing import Mapping

from ._errors import ConfigError
from ._metrics import LlogMetrics
from ._protocol.keys import validate_root_prefix

__all__ = ["OxiaConfig", "S3Config", "BatchConfig", "LoadtestInfo", "MIN_SESSION_TIMEOUT_MS", "env_int", "env_str"]

MIN_SESSION_TIMEOUT_MS = 5_000
"""The shortest Oxia session timeout that works with ``oxia==0.2.1``.

That client sends a session keepalive every ``max(timeout / 10, 2000 ms)``
(capped just below the timeout), never faster than every 2 s, and both it
and the server drop the session once a whole timeout passes without one.
Measured against Oxia with one client holding an ephemeral key: at 2000 ms
the session dies between two keepalives (154 of 289 claim creates failed
with SessionNotFound in 30 s, four sessions lost); 3000 and 4000 ms survive
an idle machine but lose the session to a single failed keepalive. 5000 ms
is the smallest value that survives one lost keepalive (two intervals, 4 s,
plus 1 s to spare), and what the devstack and the tests use."""


def env_str(env: Mapping[str, str], name: str, default: str | None = None) -> str | None:
    value = env.get(name)
    if value is None or value.strip() == "":
        return default
    return value.strip()


def env_int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env_str(env, name)
    if raw is None:
        return default
    try:
        return int(raw.replace("_", ""))
    except ValueError:
        raise ConfigError(f"{name} must be an integer, got {raw!r}") from None


def _require(env: Mapping[str, str], name: str, what: str) -> str:
    value = env_str(env, name)
    if value is None:
        raise ConfigError(f"{name} is not set: {what}")
    return value


def _masked_repr(obj: object, secret_fields: set[str]) -> str:
    shown = []
    for f in fields(obj):  # type: ignore[arg-type]
        value = getattr(obj, f.name)
        if f.name in secret_fields and value:
            value = "***"
        shown.append(f"{f.name}={value!r}")
    return f"{type(obj).__name__}({', '.join(shown)})"


@dataclass(frozen=True)
class OxiaConfig:
    """Where Oxia is and how this client identifies itself to it."""

    service_address: str
    """``host:port`` of the Oxia public service (LLOG_OXIA_SERVICE_ADDRESS)."""
    namespace: str = "default"
    root_prefix: str = "llog"
    """Root of every Oxia and S3 key of this log (LLOG_ROOT_PREFIX)."""
    session_timeout_ms: int = 30_000
    """Lifetime of ephemeral records (compactor claims) after the client dies;
    at least ``MIN_SESSION_TIMEOUT_MS`` (LLOG_OXIA_SESSION_TIMEOUT_MS)."""
    client_identifier: str | None = None

    def __post_init__(self) -> None:
        if not self.service_address or ":" not in self.service_address:
            raise ConfigError(
                f"Oxia service address must be host:port, got {self.service_address!r} "
                "(set LLOG_OXIA_SERVICE_ADDRESS)"
            )
        validate_root_prefix(self.root_prefix)
        if self.session_timeout_ms < MIN_SESSION_TIMEOUT_MS:
            raise ConfigError(
                f"LLOG_OXIA_SESSION_TIMEOUT_MS must be >= {MIN_SESSION_TIMEOUT_MS}, got "
                f"{self.session_timeout_ms}: the Oxia client (oxia==0.2.1) sends a session keepalive "
                "only every 2000 ms, so a shorter session is lost to a single late or failed keepalive "
                "and its ephemeral records (compactor claims) with it"
            )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> OxiaConfig:
        env = os.environ if env is None else env
        return cls(
            service_address=_require(
                env, "LLOG_OXIA_SERVICE_ADDRESS", "set it to the Oxia host:port, e.g. 127.0.0.1:6648"
            ),
            namespace=env_str(env, "LLOG_OXIA_NAMESPACE", "default") or "default",
            root_prefix=env_str(env, "LLOG_ROOT_PREFIX", "llog") or "llog",
            session_timeout_ms=env_int(env, "LLOG_OXIA_SESSION_TIMEOUT_MS", 30_000),
            client_identifier=env_str(env, "LLOG_CLIENT_IDENTIFIER"),
        )


@dataclass(frozen=True, repr=False)
class S3Config:
    """The bucket and how to reach it. The bucket must already exist."""

    bucket: str | None
    """Required to write; readers take buckets from the URIs in the index."""
    endpoint_url: str | None = None
    region_name: str | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = field(default=None)
    session_token: str | None = field(default=None)
    max_pool_connections: int = 32

    def __post_init__(self) -> None:
        if self.bucket is not None and not (3 <= len(self.bucket) <= 63):
            raise ConfigError(f"LLOG_S3_BUCKET must be a 3-63 character bucket name, got {self.bucket!r}")
        if self.endpoint_url is not None and not self.endpoint_url.startswith(("http://", "https://")):
            raise ConfigError(
                f"LLOG_S3_ENDPOINT_URL must start with http:// or https://, got {self.endpoint_url!r}"
            )
        if self.max_pool_connections < 1:
            raise ConfigError("S3 max_pool_connections must be >= 1")

    def __repr__(self) -> str:
        return _masked_repr(self, {"secret_access_key", "session_token"})

    def require_bucket(self) -> str:
        if not self.bucket:
            raise ConfigError("LLOG_S3_BUCKET is not set: the writer and compactor need the bucket name")
        return self.bucket

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> S3Config:
        env = os.environ if env is None else env
        return cls(
            bucket=env_str(env, "LLOG_S3_BUCKET"),
            endpoint_url=env_str(env, "LLOG_S3_ENDPOINT_URL"),
            region_name=env_str(env, "LLOG_S3_REGION_NAME")
            or env_str(env, "AWS_REGION")
            or env_str(env, "AWS_DEFAULT_REGION"),
            access_key_id=env_str(env, "LLOG_S3_ACCESS_KEY_ID") or env_str(env, "AWS_ACCESS_KEY_ID"),
            secret_access_key=env_str(env, "LLOG_S3_SECRET_ACCESS_KEY")
            or env_str(env, "AWS_SECRET_ACCESS_KEY"),
            session_token=env_str(env, "LLOG_S3_SESSION_TOKEN") or env_str(env, "AWS_SESSION_TOKEN"),
        )


@dataclass(frozen=True)
class BatchConfig:
    """When the BatchingProducer flushes and how much it may hold."""

    max_bytes: int = 8 * 1024 * 1024
    """Flush once this many payload bytes are buffered (LLOG_BATCH_MAX_BYTES)."""
    max_delay_ms: int = 500
    """Flush this long after the first buffered record (LLOG_BATCH_MAX_DELAY_MS)."""
    max_buffer_bytes: int = 128 * 1024 * 1024
    """Cap on all accepted, not yet committed payload bytes (LLOG_BATCH_MAX_BUFFER_BYTES)."""
    max_inflight_flushes: int = 8
    """Flushes between the start of their PUT and the end of their commits
    (LLOG_BATCH_MAX_INFLIGHT_FLUSHES): several PUTs side by side while the
    commits of earlier flushes run in order; 1 is one flush at a time. With
    an S3-like store (a 200-300 ms 8 MiB PUT) n flushes in flight cap a
    broker near n x 8 MiB per PUT time: 8 keeps that above what one broker
    ingests on loopback."""

    max_block_ms: int = 1000
    """How long a submission that does not fit in ``max_buffer_bytes`` waits
    for room, in arrival order, before it is refused with BackPressureRejected
    (LLOG_BATCH_MAX_BLOCK_MS, like Kafka's ``max.block.ms``; 0 refuses at
    once). Waiting turns an overload into latency: refusing at once made
    clients resend whole bodies the broker then parsed and refused again, and
    ingest fell to a third of capacity."""

    def __post_init__(self) -> None:
        if self.max_bytes < 1:
            raise ConfigError(f"LLOG_BATCH_MAX_BYTES must be >= 1, got {self.max_bytes}")
        if self.max_block_ms < 0:
            raise ConfigError(f"LLOG_BATCH_MAX_BLOCK_MS must be >= 0, got {self.max_block_ms}")
        if self.max_delay_ms < 0:
            raise ConfigError(f"LLOG_BATCH_MAX_DELAY_MS must be >= 0, got {self.max_delay_ms}")
        if not 1 <= self.max_inflight_flushes <= 16:
            raise ConfigError(f"LLOG_BATCH_MAX_INFLIGHT_FLUSHES must be 1-16, got {self.max_inflight_flushes}")
        if self.max_buffer_bytes < self.max_bytes:
            raise ConfigError(
                f"LLOG_BATCH_MAX_BUFFER_BYTES ({self.max_buffer_bytes}) must be >= "
                f"LLOG_BATCH_MAX_BYTES ({self.max_bytes})"
            )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> BatchConfig:
        env = os.environ if env is None else env
        return cls(
            max_bytes=env_int(env, "LLOG_BATCH_MAX_BYTES", cls.max_bytes),
            max_delay_ms=env_int(env, "LLOG_BATCH_MAX_DELAY_MS", cls.max_delay_ms),
            max_buffer_bytes=env_int(env, "LLOG_BATCH_MAX_BUFFER_BYTES", cls.max_buffer_bytes),
            max_inflight_flushes=env_int(env, "LLOG_BATCH_MAX_INFLIGHT_FLUSHES", cls.max_inflight_flushes),
            max_block_ms=env_int(env, "LLOG_BATCH_MAX_BLOCK_MS", cls.max_block_ms),
        )


@dataclass(frozen=True)
class LoadtestInfo:
    """The load-test scenario a process runs in, set by the orchestrator
    (``LLOG_LOADTEST_*``) so dashboards can show the run shape. Exported as
    ``llog_loadtest_scenario_info`` and ``llog_loadtest_*`` gauges."""

    scenario: str
    run_id: str = ""
    brokers: int = 0
    partitions: int = 0
    target_records_per_second: int = 0
    concurrency: int = 0
    record_bytes: int = 0

    def __post_init__(self) -> None:
        if not self.scenario or not self.scenario.isprintable():
            raise ConfigError(f"LLOG_LOADTEST_SCENARIO must be a printable name, got {self.scenario!r}")
        for f in fields(self)[2:]:
            if getattr(self, f.name) < 0:
                raise ConfigError(f"LLOG_LOADTEST_{f.name.upper()} must be >= 0, got {getattr(self, f.name)}")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> LoadtestInfo | None:
        """None unless ``LLOG_LOADTEST_SCENARIO`` is set."""
        env = os.environ if env is None else env
        scenario = env_str(env, "LLOG_LOADTEST_SCENARIO")
        if not scenario:
            return None
        numbers = {f.name: env_int(env, f"LLOG_LOADTEST_{f.name.upper()}", 0) for f in fields(cls)[2:]}
        return cls(scenario=scenario, run_id=env_str(env, "LLOG_LOADTEST_RUN_ID", "") or "", **numbers)

    def to_env(self) -> dict[str, str]:
        """The ``LLOG_LOADTEST_*`` variables that reproduce this info."""
        env = {"LLOG_LOADTEST_SCENARIO": self.scenario, "LLOG_LOADTEST_RUN_ID": self.run_id}
        env.update({f"LLOG_LOADTEST_{f.name.upper()}": str(getattr(self, f.name)) for f in fields(self)[2:]})
        return env

    def publish(self, metrics: LlogMetrics) -> None:
        metrics.set_info_metric("loadtest_scenario_info", scenario=self.scenario, run_id=self.run_id)
        for f in fields(self)[2:]:
            metrics.set_gauge(f"loadtest_{f.name}", getattr(self, f.name))
