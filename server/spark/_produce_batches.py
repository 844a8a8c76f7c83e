"""Values of the produce client: its configuration, encoded records, batches,
acknowledgements, request bodies and counters (see :mod:`server.spark._http_client`)."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from json.encoder import encode_basestring_ascii
from typing import Any, NamedTuple, Sequence

from .._errors import ConfigError
from ._broker_selection import BrokerUrl, parse_broker_list

__all__ = [
    "MIB",
    "ProducerConfig",
    "Batch",
    "BatchAck",
    "ProduceStats",
    "encode_text_records",
    "encode_binary_records",
    "batch_overhead",
    "encode_request",
]


MIB = 1024 * 1024


# -- configuration -------------------------------------------------------------------


@dataclass(frozen=True)
class ProducerConfig:
    """How a task talks to the brokers. Validated on construction."""

    brokers: tuple[BrokerUrl, ...]
    max_request_bytes: int = 4 * MIB
    """Largest JSON body of one /produce request (the broker refuses > 16 MiB by default)."""
    max_request_records: int = 50_000
    """Most records in one request (the broker refuses > 100,000 by default)."""
    max_retries: int = 10
    """Re-sends allowed per batch before the task fails."""
    retry_backoff_initial_ms: float = 100.0
    retry_backoff_max_ms: float = 5_000.0
    """Cap of one backoff delay (full jitter: a uniform draw in [0, cap])."""
    request_timeout_ms: int = 150_000
    """Socket timeout of one request; above the broker's 120 s produce timeout."""
    broker_cooldown_ms: int = 5_000
    """How long a broker that refused a connection is skipped."""
    max_in_flight: int = 4
    """Concurrent requests per task (never two for one partition)."""

    def __post_init__(self) -> None:
        if isinstance(self.brokers, str) or not all(isinstance(b, BrokerUrl) for b in self.brokers):
            object.__setattr__(self, "brokers", parse_broker_list(self.brokers))  # type: ignore[arg-type]
        if not self.brokers:
            raise ConfigError("at least one broker URL is needed")
        if self.max_request_bytes < 1024:
            raise ConfigError(f"max_request_bytes must be >= 1024, got {self.max_request_bytes}")
        if self.max_request_records < 1:
            raise ConfigError(f"max_request_records must be >= 1, got {self.max_request_records}")
        if self.max_retries < 0:
            raise ConfigError(f"max_retries must be >= 0, got {self.max_retries}")
        if self.max_in_flight < 1:
            raise ConfigError(f"max_in_flight must be >= 1, got {self.max_in_flight}")
        if self.request_timeout_ms < 1 or self.retry_backoff_max_ms < 0 or self.retry_backoff_initial_ms < 0:
            raise ConfigError("request_timeout_ms must be >= 1 and the backoff delays >= 0")


# -- record encoding -------------------------------------------------------------------


def encode_text_records(values: Sequence[str | None]) -> tuple[list[str], list[int]]:
    """JSON fragments (ASCII, so their length is their byte count) and UTF-8
    payload sizes of text records. A null record is a ValueError: nothing is
    ever dropped silently."""
    frags, sizes = [], []
    for i, v in enumerate(values):
        if v is None:
            raise ValueError(f"record {i} of the batch is null; a record value must be a string or bytes")
        frags.append(encode_basestring_ascii(v))
        sizes.append(len(v) if v.isascii() else len(v.encode("utf-8")))
    return frags, sizes


def encode_binary_records(values: Sequence[bytes | None]) -> tuple[list[str], list[int]]:
    """``{"base64": ...}`` fragments and payload sizes of binary records."""
    frags, sizes = [], []
    for i, v in enumerate(values):
        if v is None:
            raise ValueError(f"record {i} of the batch is null; a record value must be a string or bytes")
        frags.append('{"base64":"' + base64.b64encode(v).decode("ascii") + '"}')
        sizes.append(len(v))
    return frags, sizes


# -- batches and acks ----------------------------------------------------------------------


@dataclass
class Batch:
    """Records for one topic-partition, already encoded as JSON fragments."""

    topic: str
    partition: int
    fragments: list[str]
    payload_bytes: int
    attempts: int = 0
    """How many times this batch has been sent."""

    @property
    def count(self) -> int:
        return len(self.fragments)

    def header(self) -> str:
        return f'{{"topic":{encode_basestring_ascii(self.topic)},"partition":{self.partition},"records":['

    def encoded_size(self) -> int:
        return batch_overhead(self.topic, self.partition) + sum(map(len, self.fragments)) + max(0, self.count - 1)


class BatchAck(NamedTuple):
    """One acknowledged batch."""

    topic: str
    partition: int
    start_offset: int
    """First offset assigned (inclusive)."""
    end_offset: int
    """Last offset assigned (inclusive)."""
    count: int
    payload_bytes: int
    broker: str


_REQUEST_HEAD = '{"topic_partitions":['
_REQUEST_TAIL = "]}"


def batch_overhead(topic: str, partition: int) -> int:
    """Bytes of a batch's JSON around its record fragments, plus a separating comma."""
    return len(f'{{"topic":{encode_basestring_ascii(topic)},"partition":{partition},"records":[]}}') + 1


def encode_request(batches: Sequence[Batch]) -> bytes:
    parts = [_REQUEST_HEAD]
    for i, b in enumerate(batches):
        if i:
            parts.append(",")
        parts.append(b.header())
        parts.append(",".join(b.fragments))
        parts.append("]}")
    parts.append(_REQUEST_TAIL)
    return "".join(parts).encode("ascii")


# -- stats -----------------------------------------------------------------------------------


@dataclass
class ProduceStats:
    """Counters of one task (or, summed, one job)."""

    records_acked: int = 0
    bytes_acked: int = 0
    """Payload bytes acknowledged."""
    requests: int = 0
    """HTTP requests sent, retries included."""
    retries: int = 0
    """Retry rounds: requests re-sent after a retriable failure."""
    retried_batches: int = 0
    """Batches re-sent, after a definite failure (cannot duplicate) or an unknown outcome (may)."""
    retried_records: int = 0
    unknown_batches: int = 0
    """Batches whose outcome was unknown (``OutcomeUnknown``, a 504, a
    connection lost after the request went out); each was sent again, so its
    records may be in the log twice."""
    unknown_records: int = 0
    """Records of those batches: the bound on duplicates when no Spark task failed."""
    ranges: dict[int, list[int]] = field(default_factory=dict)
    """partition -> [first offset, last offset, records] acknowledged to this producer."""

    def add_ack(self, ack: BatchAck) -> None:
        self.records_acked += ack.count
        self.bytes_acked += ack.payload_bytes
        r = self.ranges.get(ack.partition)
        if r is None:
            self.ranges[ack.partition] = [ack.start_offset, ack.end_offset, ack.count]
        else:
            r[0] = min(r[0], ack.start_offset)
            r[1] = max(r[1], ack.end_offset)
            r[2] += ack.count

    def merge(self, other: ProduceStats) -> None:
        self.records_acked += other.records_acked
        self.bytes_acked += other.bytes_acked
        self.requests += other.requests
        self.retries += other.retries
        self.retried_batches += other.retried_batches
        self.retried_records += other.retried_records
        self.unknown_batches += other.unknown_batches
        self.unknown_records += other.unknown_records
        for p, (lo, hi, n) in other.ranges.items():
            r = self.ranges.get(p)
            if r is None:
                self.ranges[p] = [lo, hi, n]
            else:
                r[0], r[1], r[2] = min(r[0], lo), max(r[1], hi), r[2] + n

    def to_json(self) -> dict[str, Any]:
        return {
            "records_acked": self.records_acked,
            "bytes_acked": self.bytes_acked,
            "requests": self.requests,
            "retries": self.retries,
            "retried_batches": self.retried_batches,
            "retried_records": self.retried_records,
            "unknown_batches": self.unknown_batches,
            "unknown_records": self.unknown_records,
            "ranges": {str(p): r for p, r in sorted(self.ranges.items())},
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ProduceStats:
        return cls(
            records_acked=d["records_acked"], bytes_acked=d["bytes_acked"], requests=d["requests"],
            retries=d["retries"], retried_batches=d["retried_batches"],
            retried_records=d.get("retried_records", 0),
            unknown_batches=d.get("unknown_batches", 0), unknown_records=d.get("unknown_records", 0),
            ranges={int(p): list(r) for p, r in d["ranges"].items()},
        )
