"""Values that cross the public API: append groups, append results, read records."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from .._errors import InvalidRequest, LlogError
from .codec import EncodedRecords
from .kafka_batch import Record, TimestampType
from .keys import TopicPartition, validate_partition, validate_topic
from .stored_batches import StoredBatches, of_payloads

__all__ = ["SharedAppendGroup", "AppendResult", "ReadRecord", "normalize_payloads", "validate_groups"]


def normalize_payloads(payloads: object, topic: str, partition: int) -> Sequence[bytes | Record]:
    """Payloads as a tuple of bytes or :class:`Record`; str is UTF-8 encoded.
    Raises InvalidRequest for an empty list or an element that is not
    bytes-like, str or a Record. :class:`EncodedRecords` and
    :class:`StoredBatches` (verified bytes already) are kept as they are."""
    if isinstance(payloads, (EncodedRecords, StoredBatches)):
        if len(payloads) == 0:
            raise InvalidRequest("payloads must not be empty", topic=topic, partition=partition)
        return payloads
    if isinstance(payloads, (bytes, bytearray, memoryview, str)) or not isinstance(payloads, Sequence):
        raise InvalidRequest(
            "payloads must be a list of bytes or str records", topic=topic, partition=partition
        )
    if len(payloads) == 0:
        raise InvalidRequest("payloads must not be empty", topic=topic, partition=partition)
    out = []
    for i, p in enumerate(payloads):
        if isinstance(p, (bytes, Record)):
            out.append(p)
        elif isinstance(p, (bytearray, memoryview)):
            out.append(bytes(p))
        elif isinstance(p, str):
            out.append(p.encode("utf-8"))
        else:
            raise InvalidRequest(
                f"payloads[{i}] must be bytes, str or Record, got {type(p).__name__}",
                topic=topic,
                partition=partition,
            )
    return tuple(out)


@dataclass(frozen=True)
class SharedAppendGroup:
    """Records to append to one topic-partition as one batch.

    ``payloads`` are values (bytes or str: null key, no headers, stamped
    when written), :class:`Record` objects (key, value, headers, timestamp),
    or batches already encoded (:class:`StoredBatches`, a Kafka client's
    bytes). Validated on construction: a bad topic, partition or payload
    list raises InvalidRequest before anything is written.
    """

    topic: str
    partition: int
    payloads: Sequence[bytes | Record] = field(default=())

    def __post_init__(self) -> None:
        validate_topic(self.topic)
        validate_partition(self.partition, self.topic)
        object.__setattr__(self, "payloads", normalize_payloads(self.payloads, self.topic, self.partition))

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    @property
    def count(self) -> int:
        return len(self.payloads)

    @property
    def payload_bytes(self) -> int:
        """Bytes the group buffers: an encoded group's batch bytes, otherwise keys and values."""
        payloads = self.payloads
        if isinstance(payloads, StoredBatches):
            return payloads.nbytes
        if isinstance(payloads, EncodedRecords):
            return payloads.payload_bytes
        return sum(len(p.value or b"") + len(p.key or b"") if isinstance(p, Record) else len(p) for p in payloads)

    def encode(self, now_ms: int) -> StoredBatches:
        """The group as stored batches; records without a timestamp get ``now_ms``
        (an encoded group is returned as it is)."""
        return of_payloads(self.payloads, now_ms)


def validate_groups(groups: Sequence[SharedAppendGroup], what: str) -> list[SharedAppendGroup]:
    """``groups`` as a list, checked for what every append entry point
    requires: at least one group, each a :class:`SharedAppendGroup` (which
    validated itself). Raises InvalidRequest naming ``what`` was called."""
    groups = list(groups)
    if not groups:
        raise InvalidRequest(f"{what} needs at least one group")
    for g in groups:
        if not isinstance(g, SharedAppendGroup):
            raise InvalidRequest(f"groups must be SharedAppendGroup, got {type(g).__name__}")
    return groups


@dataclass(frozen=True)
class AppendResult:
    """Outcome of one group of an ``append_shared`` call.

    On success ``error`` is None and the offsets, index key and WAL URI are
    set; on failure ``error`` holds the typed error and the rest is None.
    """

    topic: str
    partition: int
    count: int
    start_offset: int | None = None
    """First offset assigned (inclusive)."""
    end_offset: int | None = None
    """Last offset assigned (inclusive)."""
    index_key: str | None = None
    wal_uri: str | None = None
    """``s3://bucket/key`` of the shared WAL blob holding the batch."""
    byte_offset: int | None = None
    byte_length: int | None = None
    error: LlogError | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def raise_for_error(self) -> AppendResult:
        if self.error is not None:
            raise self.error
        return self


@dataclass(frozen=True)
class ReadRecord:
    """One record read back from the log."""

    topic: str
    partition: int
    offset: int
    payload: bytes | None
    """The record's value (None: a tombstone)."""
    key: bytes | None = None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    timestamp_ms: int = 0
    timestamp_type: TimestampType = TimestampType.CREATE_TIME

    @property
    def value(self) -> bytes | None:
        return self.payload
