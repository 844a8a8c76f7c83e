"""Values of the produce client: its configuration, encoded records, batches,
acknowledgements, request bodies and counters (see :mod:`server.client`)."""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass, field
from json.encoder import encode_basestring_ascii
from typing import Any, NamedTuple, Sequence

import numpy as np

from .._protocol.kafka_batch import HEADER_SIZE, with_producer
from .._protocol.produce_binary import (
    BINARY_HEADER_SIZE,
    PRODUCE_BINARY_V2_CONTENT_TYPE,
    PRODUCE_VERSION_2,
    binary_produce_header,
)
from .._errors import ConfigError
from .._settings import check_settings, setting
from ._broker_selection import BrokerUrl, parse_broker_list
from ._kafka_wire import build_batches
from ._record_chunks import BODIES, NO_TIMESTAMP, Body, RecordChunk

__all__ = [
    "MIB",
    "ProducerConfig",
    "Batch",
    "BatchAck",
    "ProduceStats",
    "CONTENT_TYPES",
    "batch_overhead",
    "request_overhead",
    "encode_request",
]


MIB = 1024 * 1024


# -- configuration -------------------------------------------------------------------


@dataclass(frozen=True)
class ProducerConfig:
    """How a task talks to the brokers. Validated on construction.

    The settings with an ``option`` are the ones the produce job offers as
    flags (``--max-request-bytes``) and the Spark writer as options
    (``maxRequestBytes``); both take their defaults, bounds and help from here.
    """

    brokers: tuple[BrokerUrl, ...]
    max_request_bytes: int = setting(
        "Largest body of one /produce request (the broker refuses > 16 MiB by default).",
        default=4 * MIB, min=1024, option="maxRequestBytes",
    )
    max_request_records: int = setting(
        "Most records in one request (the broker refuses > 100,000 by default).",
        default=50_000, min=1, option="maxRequestRecords",
    )
    max_retries: int = setting("Re-sends allowed per batch before the task fails.", default=10, min=0,
                               option="maxRetries")
    retry_backoff_initial_ms: float = setting(
        "Cap of the first backoff delay; it doubles per retry up to retry_backoff_max_ms.", default=100.0, min=0,
        flag=False,
    )
    retry_backoff_max_ms: float = setting(
        "Cap of one backoff delay (full jitter: a uniform draw in [0, cap]).", default=5_000.0, min=0, flag=False
    )
    request_timeout_ms: int = setting(
        "Socket timeout of one request; above the broker's 120 s produce timeout.", default=150_000, min=1,
        flag=False,
    )
    broker_cooldown_ms: int = setting("How long a broker that refused a connection is skipped.", default=5_000,
                                      min=0, flag=False)
    max_in_flight: int = setting("Concurrent requests per task (never two for one partition).", default=4,
                                 min=1, option="maxInFlight")
    body: Body = setting(
        "Request body: binary (application/vnd.llog.produce.v2, RecordBatch v2 batches stored as sent) or "
        "json (what the reference system's brokers accept).",
        default="binary", choices=BODIES, option="produceBody",
    )
    max_batch_bytes: int = setting(
        "Largest RecordBatch of the binary body (a topic refuses batches over its max.message.bytes, "
        "1,048,588 by default); a larger record goes alone.",
        default=1_000_000, min=1024, option="maxBatchBytes",
    )
    exactly_once: bool = setting(
        "Store every row once, also when Spark retries a task or a reply is lost: each task is an idempotent "
        "producer (SPEC 7.12) whose batches a retried attempt sends again identically. false: at-least-once, "
        "for brokers without POST /producers (the reference system's).",
        default=True, option="exactlyOnce",
    )

    def __post_init__(self) -> None:
        if isinstance(self.brokers, str) or not all(isinstance(b, BrokerUrl) for b in self.brokers):
            object.__setattr__(self, "brokers", parse_broker_list(self.brokers))  # type: ignore[arg-type]
        if not self.brokers:
            raise ConfigError("at least one broker URL is needed")
        check_settings(self)


# -- batches and acks ----------------------------------------------------------------------


@dataclass
class Batch:
    """Records for one topic-partition, already in the body's wire form."""

    topic: str
    partition: int
    chunks: list[RecordChunk]
    attempts: int = 0
    """How many times this batch has been sent."""
    producer: tuple[int, int, int] | None = None
    """``(producer_id, producer_epoch, base_sequence)``: an idempotent batch (SPEC 7.12),
    sent as one RecordBatch, stored once however often it is sent."""

    @property
    def count(self) -> int:
        return sum(c.count for c in self.chunks)

    @property
    def payload_bytes(self) -> int:
        return sum(c.payload_bytes for c in self.chunks)


class BatchAck(NamedTuple):
    """One acknowledged batch."""

    topic: str
    partition: int
    start_offset: int | None
    """First offset assigned (inclusive); None only for a duplicate too old to have them."""
    end_offset: int | None
    """Last offset assigned (inclusive)."""
    count: int
    payload_bytes: int
    broker: str
    duplicate: bool = False
    """An idempotent batch the log held already (an earlier attempt's): offsets are its first ones."""


CONTENT_TYPES: dict[Body, str] = {"binary": PRODUCE_BINARY_V2_CONTENT_TYPE, "json": "application/json"}
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_JSON_HEAD = b'{"topic_partitions":['
_JSON_TAIL = b"]}"
_JSON_TAIL_FLUSH = b'],"flush":true}'


def request_overhead(body: Body) -> int:
    """Bytes of a request body outside its batches."""
    return BINARY_HEADER_SIZE if body == "binary" else len(_JSON_HEAD) + len(_JSON_TAIL_FLUSH)


def batch_overhead(topic: str, partition: int, body: Body) -> int:
    """Bytes of a batch outside its records (JSON: plus a separating comma;
    the records' own trailing commas pay for the one dropped)."""
    if body == "binary":
        return 2 + len(topic.encode("utf-8")) + 4 + 4 + HEADER_SIZE
    return len(f'{{"topic":{encode_basestring_ascii(topic)},"partition":{partition},"records":[]}}') + 1


def encode_request(
    batches: Sequence[Batch], body: Body, *, flush: bool = False, max_batch_bytes: int = 1_000_000,
    now_ms: int | None = None,
) -> bytes:
    """One ``/produce`` body of ``batches``, in order (they map 1:1 to the
    answer's results); ``flush`` asks the broker to flush them now. Binary:
    each partition's records as RecordBatch v2 batches of at most
    ``max_batch_bytes``; records without a timestamp get ``now_ms``."""
    if body == "binary":
        now = int(time.time() * 1000) if now_ms is None else now_ms
        parts: list[bytes | memoryview] = [binary_produce_header(len(batches), flush=flush, version=PRODUCE_VERSION_2)]
        for b in batches:
            if b.producer is None:
                kafka = b"".join(_kafka_batches(b, now, max_batch_bytes))
            else:  # one batch, its size bounded when it was cut (TaskProducer), carrying the producer
                (one,) = _kafka_batches(b, now, _ONE_BATCH)
                kafka = with_producer(one, *b.producer)
            name = b.topic.encode("utf-8")
            parts += [_U16.pack(len(name)), name, _U32.pack(b.partition), _U32.pack(len(kafka)), kafka]
        return b"".join(parts)
    parts = [_JSON_HEAD]
    for i, b in enumerate(batches):
        head = f'{{"topic":{encode_basestring_ascii(b.topic)},"partition":{b.partition},'
        if b.producer is not None:
            head += '"producer_id":%d,"producer_epoch":%d,"base_sequence":%d,' % b.producer
        head += '"records":['
        parts.append((("," if i else "") + head).encode("ascii"))
        records = b"".join(c.data for c in b.chunks)
        parts += [records[:-1], b"]}"]  # each record carries a trailing comma; drop the last
    parts.append(_JSON_TAIL_FLUSH if flush else _JSON_TAIL)
    return b"".join(parts)


_ONE_BATCH = 1 << 62
"""A bound no batch reaches: build one batch of all the records."""


def _kafka_batches(batch: Batch, now_ms: int, max_batch_bytes: int) -> list[bytes]:
    chunks = batch.chunks
    if len(chunks) == 1:
        tails, ends, stamps = chunks[0].data, chunks[0].ends, chunks[0].timestamps
    else:
        tails = b"".join(c.data for c in chunks)
        shifts = np.cumsum([0] + [int(c.ends[-1]) for c in chunks[:-1]])
        ends = np.concatenate([c.ends + shift for c, shift in zip(chunks, shifts)])
        stamps = np.concatenate([c.timestamps for c in chunks])  # type: ignore[misc]
    stamps = np.where(stamps == NO_TIMESTAMP, now_ms, stamps)  # type: ignore[arg-type]
    return build_batches(tails, ends, stamps, max_batch_bytes)


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
    """Records of those batches: the bound on duplicates when no Spark task failed
    (none with an idempotent producer: a re-sent batch is answered as a duplicate)."""
    duplicate_batches: int = 0
    """Idempotent batches answered as duplicates: stored already, by an earlier send
    of this task or of a failed attempt of it, and not stored again."""
    duplicate_records: int = 0
    ranges: dict[int, list[int]] = field(default_factory=dict)
    """partition -> [first offset, last offset, records] acknowledged to this producer."""

    def add_ack(self, ack: BatchAck) -> None:
        self.records_acked += ack.count
        self.bytes_acked += ack.payload_bytes
        if ack.duplicate:
            self.duplicate_batches += 1
            self.duplicate_records += ack.count
        if ack.start_offset is None or ack.end_offset is None:
            return
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
        self.duplicate_batches += other.duplicate_batches
        self.duplicate_records += other.duplicate_records
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
            "duplicate_batches": self.duplicate_batches,
            "duplicate_records": self.duplicate_records,
            "ranges": {str(p): r for p, r in sorted(self.ranges.items())},
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ProduceStats:
        return cls(
            records_acked=d["records_acked"], bytes_acked=d["bytes_acked"], requests=d["requests"],
            retries=d["retries"], retried_batches=d["retried_batches"],
            retried_records=d.get("retried_records", 0),
            unknown_batches=d.get("unknown_batches", 0), unknown_records=d.get("unknown_records", 0),
            duplicate_batches=d.get("duplicate_batches", 0), duplicate_records=d.get("duplicate_records", 0),
            ranges={int(p): list(r) for p, r in d["ranges"].items()},
        )
