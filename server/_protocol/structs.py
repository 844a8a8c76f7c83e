"""Values that cross the public API: append groups, append results, read records."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from .._errors import InvalidRequest, LlogError
from .codec import EncodedRecords
from .kafka_batch import Record, TimestampType
from .keys import TopicPartition, validate_partition, validate_topic
from .producer_state import MAX_EPOCH, SEQUENCE_MODULUS, ProducerBatch
from .stored_batches import MAX_BATCH_RECORDS, StoredBatches, of_payloads

__all__ = [
    "ProducerSequence", "SharedAppendGroup", "AppendResult", "BatchOutcome", "ReadRecord", "normalize_payloads",
    "validate_groups",
]


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
class ProducerSequence:
    """An idempotent batch's identity (Kafka's ``producerId``, ``producerEpoch``,
    ``baseSequence``): the producer id and epoch from ``InitProducerId``
    (:class:`~server._log.producer_ids.ProducerIds`) and the sequence of the
    batch's first record, counted per partition from 0."""

    producer_id: int
    producer_epoch: int
    base_sequence: int

    def __post_init__(self) -> None:
        for name, value, top in (("producer_id", self.producer_id, 1 << 63),
                                 ("producer_epoch", self.producer_epoch, MAX_EPOCH + 1),
                                 ("base_sequence", self.base_sequence, SEQUENCE_MODULUS)):
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < top:
                raise InvalidRequest(f"{name} must be an integer in 0..{top - 1}, got {value!r}")


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
    producer: ProducerSequence | None = None
    """Makes the group one idempotent batch (SPEC 7.12): stored once however often
    it is sent. Encoded payloads carry it in their batch header instead."""

    def __post_init__(self) -> None:
        validate_topic(self.topic)
        validate_partition(self.partition, self.topic)
        payloads = normalize_payloads(self.payloads, self.topic, self.partition)
        object.__setattr__(self, "payloads", payloads)
        if isinstance(payloads, StoredBatches):
            if self.producer is not None:
                raise InvalidRequest("encoded batches carry their producer fields in their header; "
                                     "give no producer", topic=self.topic, partition=self.partition)
        elif self.producer is not None:
            if not isinstance(self.producer, ProducerSequence):
                raise InvalidRequest(f"producer must be a ProducerSequence, got {type(self.producer).__name__}",
                                     topic=self.topic, partition=self.partition)
            if len(payloads) > MAX_BATCH_RECORDS:
                raise InvalidRequest(f"an idempotent group holds at most {MAX_BATCH_RECORDS} records",
                                     topic=self.topic, partition=self.partition)

    @property
    def producer_batch(self) -> ProducerBatch | None:
        """The idempotence fields of the group's batch (None: not idempotent)."""
        p = self.producer
        return None if p is None else ProducerBatch(p.producer_id, p.producer_epoch, p.base_sequence, self.count)

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
        return of_payloads(self.payloads, now_ms, self.producer_batch)


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
    duplicate: bool = False
    """An idempotent batch the log held already (SPEC 7.12): nothing was stored;
    the offsets are those it got the first time, None when too old to be remembered."""
    batches: tuple[BatchOutcome, ...] | None = None
    """One outcome per stored batch of the group, when a batch of it is idempotent:
    such a batch may be a duplicate or refused while the others are appended."""

    @property
    def ok(self) -> bool:
        return self.error is None

    def raise_for_error(self) -> AppendResult:
        if self.error is not None:
            raise self.error
        return self


@dataclass(frozen=True)
class BatchOutcome:
    """What became of one batch of a group (:attr:`AppendResult.batches`)."""

    start_offset: int | None
    end_offset: int | None
    duplicate: bool = False
    error: LlogError | None = None
    index_key: str | None = None
    """The index entry of the run that appended it (None unless appended now)."""
    wal_uri: str | None = None


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
