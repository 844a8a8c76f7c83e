"""Typed, validated configuration of the storage clients; the library's ``LLOG_*`` settings.

Each config is a frozen dataclass whose fields declare their variable,
default, bounds and help once (:func:`~server._settings.setting`);
``__post_init__`` checks them (and the rules between fields), ``from_env``
builds the config from an environment mapping (``os.environ`` by default)
and names the variable in any error. Secrets are masked in ``repr``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from ._errors import ConfigError
from ._protocol.keys import validate_root_prefix
from ._settings import check_settings, env_int, env_str, from_env, masked_repr, setting

__all__ = ["oxia_addresses", "OxiaConfig", "S3Config", "BatchConfig", "ProducerStateConfig", "MIN_SESSION_TIMEOUT_MS", "env_int", "env_str"]

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


def oxia_addresses(service_address: str) -> list[str]:
    """The ``host:port`` entries of ``LLOG_OXIA_SERVICE_ADDRESS`` (comma-separated), in order."""
    return [a.strip() for a in service_address.split(",") if a.strip()]


@dataclass(frozen=True)
class OxiaConfig:
    """Where Oxia is and how this client identifies itself to it."""

    service_address: str = setting(
        "host:port of the Oxia public service; several, separated by commas, for a cluster without a load "
        "balancer in front (shard assignments come from the first that answers).",
        env="LLOG_OXIA_SERVICE_ADDRESS", example="127.0.0.1:6648"
    )
    namespace: str = setting("Oxia namespace holding the log's metadata.", env="LLOG_OXIA_NAMESPACE",
                             default="default")
    root_prefix: str = setting(
        "Root of every Oxia key and S3 key of this log; several logs can share one bucket and one "
        "namespace under different roots.",
        env="LLOG_ROOT_PREFIX", default="llog",
    )
    session_timeout_ms: int = setting(
        "Lifetime of ephemeral records (compactor claims) after the client dies; at least 5000, "
        "because the Oxia client (oxia==0.2.1) sends a keepalive only every 2000 ms.",
        env="LLOG_OXIA_SESSION_TIMEOUT_MS", default=30_000, min=MIN_SESSION_TIMEOUT_MS,
        why="the Oxia client (oxia==0.2.1) sends a session keepalive only every 2000 ms, so a shorter "
            "session is lost to a single late or failed keepalive and its ephemeral records (compactor "
            "claims) with it",
    )
    client_identifier: str | None = setting(
        "Identity this client reports to Oxia (unset: a random UUID).", env="LLOG_CLIENT_IDENTIFIER", default=None
    )
    request_timeout_ms: int = setting(
        "How long an Oxia request may go unanswered before it fails (retriable); keepalive pings, derived "
        "from it, find a lost or paused Oxia server for the streams that have no deadline.",
        env="LLOG_OXIA_REQUEST_TIMEOUT_MS", default=10_000, min=1_000, max=600_000,
        why="below a second, a busy Oxia (a leader election, a slow disk) fails requests that would have succeeded",
    )

    def __post_init__(self) -> None:
        check_settings(self)
        if not all(":" in entry for entry in self.service_address.split(",")):
            raise ConfigError(
                f"Oxia service address must be host:port, or several separated by commas, got "
                f"{self.service_address!r} (set LLOG_OXIA_SERVICE_ADDRESS)"
            )
        validate_root_prefix(self.root_prefix)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> OxiaConfig:
        return from_env(cls, env)


@dataclass(frozen=True, repr=False)
class S3Config:
    """The bucket and how to reach it. The bucket must already exist."""

    bucket: str | None = setting(
        "The bucket (it must already exist; llog never creates buckets). The writer, broker and compactor "
        "need it; readers take buckets from the URIs in the index.",
        env="LLOG_S3_BUCKET", default=None, min=3, max=63, example="llog",
    )
    endpoint_url: str | None = setting(
        "Endpoint of an S3-compatible server (unset: AWS S3).", env="LLOG_S3_ENDPOINT_URL", default=None,
        example="http://127.0.0.1:9000",
    )
    region_name: str | None = setting(
        "Region; unset: us-east-1.", env="LLOG_S3_REGION_NAME", default=None, example="us-east-1",
        fallback_env=("AWS_REGION", "AWS_DEFAULT_REGION"),
    )
    access_key_id: str | None = setting(
        "Access key.", env="LLOG_S3_ACCESS_KEY_ID", default=None, fallback_env=("AWS_ACCESS_KEY_ID",)
    )
    secret_access_key: str | None = setting(
        "Secret key.", env="LLOG_S3_SECRET_ACCESS_KEY", default=None, fallback_env=("AWS_SECRET_ACCESS_KEY",),
        secret=True,
    )
    session_token: str | None = setting(
        "Session token of temporary credentials.", env="LLOG_S3_SESSION_TOKEN", default=None,
        fallback_env=("AWS_SESSION_TOKEN",), secret=True,
    )
    max_pool_connections: int = 32

    def __post_init__(self) -> None:
        check_settings(self)
        if self.endpoint_url is not None and not self.endpoint_url.startswith(("http://", "https://")):
            raise ConfigError(
                f"LLOG_S3_ENDPOINT_URL must start with http:// or https://, got {self.endpoint_url!r}"
            )
        if self.max_pool_connections < 1:
            raise ConfigError("S3 max_pool_connections must be >= 1")

    def __repr__(self) -> str:
        return masked_repr(self)

    def require_bucket(self) -> str:
        if not self.bucket:
            raise ConfigError("LLOG_S3_BUCKET is not set: the writer and compactor need the bucket name")
        return self.bucket

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> S3Config:
        return from_env(cls, env)


@dataclass(frozen=True)
class ProducerStateConfig:
    """What a partition remembers of its idempotent producers (SPEC 7.12)."""

    expiration_ms: int = setting(
        "Forget an idempotent producer's state in a partition after this idle time (Kafka's "
        "producer.id.expiration.ms); its next batch there is then appended at any sequence.",
        env="LLOG_PRODUCER_ID_EXPIRATION_MS", default=86_400_000, min=1,
    )
    max_per_partition: int = setting(
        "Idempotent producers a partition remembers at most; beyond it the longest idle are forgotten "
        "first. Each costs about 250 bytes of meta/control, which every append rewrites.",
        env="LLOG_PRODUCER_STATE_MAX_PER_PARTITION", default=500, min=1, max=2_000,
    )
    """2,000 producers of 5 batches each keep meta/control near 500 KB, under Oxia's 1 MiB."""

    def __post_init__(self) -> None:
        check_settings(self)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ProducerStateConfig:
        return from_env(cls, env)


@dataclass(frozen=True)
class BatchConfig:
    """When the BatchingProducer flushes and how much it may hold."""

    max_bytes: int = setting("Flush once this many payload bytes are buffered.", env="LLOG_BATCH_MAX_BYTES",
                             default=8 * 1024 * 1024, min=1)
    max_delay_ms: int = setting("Flush this long after the first buffered record.", env="LLOG_BATCH_MAX_DELAY_MS",
                                default=500, min=0)
    max_buffer_bytes: int = setting(
        "Cap on accepted, not yet committed payload bytes (at least LLOG_BATCH_MAX_BYTES); a produce beyond "
        "it waits up to LLOG_BATCH_MAX_BLOCK_MS, then gets 503.",
        env="LLOG_BATCH_MAX_BUFFER_BYTES", default=128 * 1024 * 1024, min=1,
    )
    max_inflight_flushes: int = setting(
        "Flushes in flight: their S3 PUTs run side by side while the Oxia commits of earlier flushes run "
        "in order (1 = one flush at a time).",
        env="LLOG_BATCH_MAX_INFLIGHT_FLUSHES", default=8, min=1, max=16,
    )
    """With an S3-like store (a 200-300 ms 8 MiB PUT) n flushes in flight cap
    a broker near n x 8 MiB per PUT time: 8 keeps that above what one broker
    ingests on loopback."""
    max_block_ms: int = setting(
        "How long a produce that does not fit in the buffer waits for room, in arrival order, before a "
        "503 (BackPressureRejected; 0 refuses at once; Kafka's max.block.ms).",
        env="LLOG_BATCH_MAX_BLOCK_MS", default=1000, min=0,
    )
    """Waiting turns an overload into latency: refusing at once made clients
    resend whole bodies the broker then parsed and refused again, and ingest
    fell to a third of capacity."""

    def __post_init__(self) -> None:
        check_settings(self)
        if self.max_buffer_bytes < self.max_bytes:
            raise ConfigError(
                f"LLOG_BATCH_MAX_BUFFER_BYTES ({self.max_buffer_bytes}) must be >= "
                f"LLOG_BATCH_MAX_BYTES ({self.max_bytes})"
            )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> BatchConfig:
        return from_env(cls, env)
