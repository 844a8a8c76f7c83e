"""What a read hands out: a stored slice's records decoded (``BatchDecoder``), a
run of them (``RecordRun``), and one record as the public ``ReadRecord``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Generic, Iterator, TypeVar

from .._protocol.kafka_batch import Record
from .._protocol.stored_batches import StoredBatches
from .._protocol.structs import ReadRecord

__all__ = ["BatchDecoder", "RecordRun", "all_records", "stored", "read_record", "records_of"]

T = TypeVar("T")
BatchDecoder = Callable[[StoredBatches], T]
"""Turns one entry's checked batches into records: :func:`all_records` (a
list of :class:`Record`, the default) or, for a bulk reader, anything else
(``StoredBatches`` themselves with :func:`stored`). Raises CorruptBatch."""


def all_records(batches: StoredBatches) -> list[Record]:
    return batches.all_records()


def stored(batches: StoredBatches) -> StoredBatches:
    return batches


@dataclass(frozen=True)
class RecordRun(Generic[T]):
    """Records ``first..last`` of one decoded batch whose first record is
    ``base_offset``: record ``o`` is item ``o - base_offset`` of ``records``."""

    topic: str
    partition: int
    base_offset: int
    first: int
    last: int
    records: T

    @property
    def count(self) -> int:
        return self.last - self.first + 1


def read_record(topic: str, partition: int, offset: int, r: Record) -> ReadRecord:
    return ReadRecord(topic, partition, offset, r.value, r.key, r.headers, r.timestamp_ms,  # type: ignore[arg-type]
                      r.timestamp_type)


def records_of(runs: Iterator[RecordRun[list[Record]]]) -> Iterator[ReadRecord]:
    for run in runs:
        records, base = run.records, run.base_offset
        for off in range(run.first, run.last + 1):
            yield read_record(run.topic, run.partition, off, records[off - base])
