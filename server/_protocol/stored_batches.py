"""``StoredBatches``: whole RecordBatch v2 batches back to back, checked once.

This is the unit the write and read paths move: what a producer's group
becomes before it is staged, one index entry's slice, a tail-cache segment,
a compacted object. Only the 61-byte headers are looked at (the CRC once,
when the bytes enter the process from outside); records are decoded only
where one must be looked at (:meth:`StoredBatches.records`).

A slice stored as ``bytes-batch-v1`` (the reference system's encoding, still
readable) becomes one value-only batch stamped with its index entry's
``created_at_ms`` (:func:`decode_stored`), so every reader sees one shape.
"""

from __future__ import annotations

import array
import bisect
from typing import Sequence

from .._errors import CorruptBatch
from .codec import BATCH_ENCODING, EncodedRecords, decode_batch
from .kafka_records import RecordColumns, TimestampType
from .producer_state import MAX_EPOCH, NO_PRODUCER_ID, ProducerBatch, producer_batch_of
from .kafka_batch import (
    ENCODING,
    BatchHeader,
    Record,
    build_batch,
    build_values_batch,
    check_batch,
    decode_columns,
    decode_records,
    read_header,
    with_log_append_time,
)

__all__ = ["StoredBatches", "of_payloads", "decode_stored", "MAX_BATCH_RECORDS"]

MAX_BATCH_RECORDS = 1 << 20
"""Records one built batch holds at most; a longer list becomes several batches."""


class StoredBatches(Sequence[Record]):
    """Checked batches: batch ``i`` is ``data[byte_starts[i]:byte_starts[i + 1]]``
    and holds records ``record_starts[i] .. record_starts[i + 1] - 1`` (counted
    from 0 across the run). ``len()`` is the record count."""

    __slots__ = ("data", "byte_starts", "record_starts", "max_timestamp", "idempotent")

    def __init__(self, data: bytes | memoryview, byte_starts: array.array, record_starts: array.array,
                 max_timestamp: int, idempotent: bool = False) -> None:
        self.data = data
        self.byte_starts = byte_starts
        self.record_starts = record_starts
        self.max_timestamp = max_timestamp
        """The largest ``maxTimestamp`` of the batches (-1 when empty)."""
        self.idempotent = idempotent
        """Some batch carries a producer id (SPEC 7.12): the writer checks its sequence."""

    # -- building ------------------------------------------------------------------------------

    @classmethod
    def check(cls, data: bytes | memoryview, expected_count: int | None = None) -> StoredBatches:
        """``data`` verified as whole batches (magic, lengths, CRC-32C, counts) and,
        when given, holding ``expected_count`` records. Raises CorruptBatch."""
        byte_starts = array.array("q", [0])
        record_starts = array.array("q", [0])
        max_ts = -1
        pos = n = 0
        idempotent = False
        while pos < len(data):
            h = check_batch(data, pos)
            if h.producer_id != NO_PRODUCER_ID:
                _check_producer_fields(h, len(byte_starts) - 1)
                idempotent = True
            pos += h.size
            n += h.records_count
            byte_starts.append(pos)
            record_starts.append(n)
            max_ts = max(max_ts, h.max_timestamp)
        if expected_count is not None and n != expected_count:
            raise CorruptBatch(f"the batches hold {n} records, the index says {expected_count}")
        return cls(data, byte_starts, record_starts, max_ts, idempotent)

    @classmethod
    def of_values(cls, values: Sequence[bytes], timestamp_ms: int,
                  producer: ProducerBatch | None = None) -> StoredBatches:
        """Value-only records (null key, no headers) stamped ``timestamp_ms``;
        with ``producer``, one batch carrying its id, epoch and first sequence."""
        if producer is not None:
            return cls._built([build_values_batch(values, timestamp_ms, **_producer_fields(producer, len(values)))])
        return cls._built([build_values_batch(values[i:i + MAX_BATCH_RECORDS], timestamp_ms)
                           for i in range(0, len(values), MAX_BATCH_RECORDS)])

    @classmethod
    def of_records(cls, records: Sequence[Record], now_ms: int,
                   producer: ProducerBatch | None = None) -> StoredBatches:
        """Records as built by a producer; one without a timestamp gets ``now_ms``;
        with ``producer``, one batch carrying its id, epoch and first sequence."""
        if producer is not None:
            return cls._built([build_batch(records, now_ms=now_ms, **_producer_fields(producer, len(records)))])
        return cls._built([build_batch(records[i:i + MAX_BATCH_RECORDS], now_ms=now_ms)
                           for i in range(0, len(records), MAX_BATCH_RECORDS)])

    @classmethod
    def _built(cls, batches: list[bytes]) -> StoredBatches:
        byte_starts = array.array("q", [0])
        record_starts = array.array("q", [0])
        max_ts = -1
        idempotent = False
        for b in batches:
            h = read_header(b)
            byte_starts.append(byte_starts[-1] + len(b))
            record_starts.append(record_starts[-1] + h.records_count)
            max_ts = max(max_ts, h.max_timestamp)
            idempotent = idempotent or h.producer_id != NO_PRODUCER_ID
        return cls(b"".join(batches), byte_starts, record_starts, max_ts, idempotent)

    @classmethod
    def join(cls, parts: Sequence[StoredBatches]) -> StoredBatches:
        """The runs one after another (one copy of the bytes)."""
        if len(parts) == 1:
            return parts[0]
        byte_starts = array.array("q", [0])
        record_starts = array.array("q", [0])
        for p in parts:
            b0, r0 = byte_starts[-1], record_starts[-1]
            byte_starts.extend(b0 + s for s in p.byte_starts[1:])
            record_starts.extend(r0 + s for s in p.record_starts[1:])
        return cls(b"".join(p.data for p in parts), byte_starts, record_starts,
                   max((p.max_timestamp for p in parts), default=-1), any(p.idempotent for p in parts))

    def with_log_append_time(self, now_ms: int) -> StoredBatches:
        """Every batch stamped with the log's append time (``message.timestamp.type=LogAppendTime``)."""
        return StoredBatches._built([with_log_append_time(self.batch(i), now_ms) for i in range(self.batch_count)])

    # -- reading -------------------------------------------------------------------------------

    def __len__(self) -> int:
        return self.record_starts[-1]

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        b = self.batch_of(i)
        return self.records(b)[i - self.record_starts[b]]

    @property
    def batch_count(self) -> int:
        return len(self.byte_starts) - 1

    @property
    def nbytes(self) -> int:
        return self.byte_starts[-1]

    def batch(self, i: int) -> memoryview:
        return memoryview(self.data)[self.byte_starts[i]:self.byte_starts[i + 1]]

    def header(self, i: int) -> BatchHeader:
        return read_header(self.data, self.byte_starts[i])

    def batch_of(self, k: int) -> int:
        """The batch holding record ``k`` (0-based across the run)."""
        return bisect.bisect_right(self.record_starts, k) - 1

    def records(self, i: int) -> list[Record]:
        """The records of batch ``i`` (already checked: no second CRC pass)."""
        return decode_records(self.data, self.byte_starts[i], verified=True)[1]

    def columns(self, i: int) -> tuple[RecordColumns, TimestampType]:
        """The records of batch ``i`` as columns (no Python object per record), and its timestamp type."""
        return decode_columns(self.data, self.byte_starts[i])

    def all_records(self) -> list[Record]:
        """Every record, in order (record ``k`` is item ``k``)."""
        if self.batch_count == 1:
            return self.records(0)
        return [r for b in range(self.batch_count) for r in self.records(b)]

    def values(self) -> list[bytes | None]:
        return [r.value for r in self.all_records()]

    def producer_batches(self) -> list[ProducerBatch | None]:
        """Each batch's idempotence fields (None: the batch has no producer id)."""
        if not self.idempotent:
            return [None] * self.batch_count
        return [producer_batch_of(self.data, self.byte_starts[i]) for i in range(self.batch_count)]

    def __repr__(self) -> str:
        return f"StoredBatches({len(self)} records in {self.batch_count} batches, {self.nbytes} bytes)"


def _check_producer_fields(h: BatchHeader, i: int) -> None:
    """An idempotent batch's epoch and sequence are in Kafka's ranges (its id is not -1)."""
    if h.producer_id < 0 or not 0 <= h.producer_epoch <= MAX_EPOCH or h.base_sequence < 0:
        raise CorruptBatch(f"batch {i}: producerId {h.producer_id}, producerEpoch {h.producer_epoch}, baseSequence "
                           f"{h.base_sequence} is not a valid idempotent producer's")


def _producer_fields(producer: ProducerBatch, count: int) -> dict[str, int]:
    if count > MAX_BATCH_RECORDS:
        raise ValueError(f"an idempotent batch holds at most {MAX_BATCH_RECORDS} records, not {count}")
    return {"producer_id": producer.producer_id, "producer_epoch": producer.epoch,
            "base_sequence": producer.first_seq}


def of_payloads(payloads: Sequence[bytes | Record] | EncodedRecords, now_ms: int,
                producer: ProducerBatch | None = None) -> StoredBatches:
    """A group's payloads as stored batches (:class:`SharedAppendGroup`'s encoding)."""
    if isinstance(payloads, StoredBatches):
        return payloads
    if isinstance(payloads, EncodedRecords):
        return StoredBatches.of_values(list(payloads), now_ms, producer)
    if any(isinstance(p, Record) for p in payloads):
        return StoredBatches.of_records([p if isinstance(p, Record) else Record(p) for p in payloads], now_ms,
                                        producer)
    return StoredBatches.of_values(payloads, now_ms, producer)  # type: ignore[arg-type]


def decode_stored(data: bytes | memoryview, encoding: str, expected_count: int | None,
                  created_at_ms: int) -> StoredBatches:
    """A stored slice of either encoding as batches; a ``bytes-batch-v1`` slice
    becomes value-only records stamped ``created_at_ms``. Raises CorruptBatch."""
    if encoding == ENCODING:
        return StoredBatches.check(data, expected_count)
    if encoding == BATCH_ENCODING:
        values = decode_batch(data, expected_count)
        if not values:
            return StoredBatches(b"", array.array("q", [0]), array.array("q", [0]), -1)
        return StoredBatches.of_values(values, created_at_ms)
    raise CorruptBatch(f"unsupported batch encoding {encoding!r}")
