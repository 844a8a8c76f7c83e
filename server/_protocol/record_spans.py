"""``RecordSpan``: consecutive records of one partition as whole stored batches.

A consume answer is made of runs of consecutive offsets that come from
checked RecordBatch v2 batches (:class:`~server._protocol.stored_batches.StoredBatches`):
a slice read from S3, a segment of the tail cache, a produced group. A span
keeps such a run and names a range of its batches, so the consume path
moves, trims and budgets records without a Python object per record:

- the unit is the batch, as in Kafka: a fetch that starts inside a batch
  gets the whole batch, and the records before the fetch offset are skipped
  by whoever decodes them (the JSON answer here, the client for the binary
  answer);
- :func:`take_records` applies the byte limits to batch sizes with a binary
  search over the batch positions, not a loop over the records;
- the binary consume answer writes each batch as stored, with only its
  ``baseOffset`` set (``consume_binary.py``);
- only the JSON answer decodes records (:meth:`RecordSpan.items`).

The span's records are offsets ``first .. last``; its batches may begin
before ``first`` (``batch_base``).
"""

from __future__ import annotations

import bisect
import struct
from itertools import repeat
from dataclasses import dataclass
from typing import Iterable, Iterator

from .kafka_batch import Record, kafka_offset
from .stored_batches import StoredBatches

__all__ = ["RecordSpan", "spans_of", "take_records", "MAX_RECORDS_PER_LOOKUP"]

MAX_RECORDS_PER_LOOKUP = 100_000
"""Records one partition returns per lookup (bounds the work of a request)."""

_I64 = struct.Struct(">q")


@dataclass(frozen=True, slots=True)
class RecordSpan:
    """Records ``first .. last``: batches ``lo .. hi - 1`` of ``batches``, whose
    record 0 is at offset ``base``."""

    first: int
    """Offset of the span's first record (inside batch ``lo``, or ``last + 1`` when empty)."""
    batches: StoredBatches
    base: int
    lo: int
    hi: int

    @classmethod
    def whole(cls, base: int, batches: StoredBatches) -> RecordSpan:
        """Every record of ``batches``, the first at offset ``base``."""
        return cls(base, batches, base, 0, batches.batch_count)

    @classmethod
    def covering(cls, batches: StoredBatches, base: int, first: int, last: int) -> RecordSpan:
        """The batches of ``batches`` (record 0 at ``base``) that hold ``first .. last``."""
        lo = batches.batch_of(first - base)
        hi = batches.batch_of(last - base) + 1
        return cls(first, batches, base, lo, hi)

    @property
    def last(self) -> int:
        """Offset of the last record (``first - 1`` when empty)."""
        return self.base + self.batches.record_starts[self.hi] - 1

    @property
    def count(self) -> int:
        return self.last - self.first + 1

    @property
    def batch_base(self) -> int:
        """Offset of the first record of batch ``lo`` (``<= first``)."""
        return self.base + self.batches.record_starts[self.lo]

    @property
    def payload_bytes(self) -> int:
        """Bytes of the span's batches as stored (the unit of the byte limits)."""
        starts = self.batches.byte_starts
        return starts[self.hi] - starts[self.lo]

    def batch_size(self, i: int) -> int:
        """Bytes of the span's ``i``-th batch."""
        starts = self.batches.byte_starts
        return starts[self.lo + i + 1] - starts[self.lo + i]

    def since(self, offset: int) -> RecordSpan:
        """The records from ``offset`` on (``first <= offset <= last + 1``)."""
        if offset <= self.first:
            return self
        if offset > self.last:
            return RecordSpan(offset, self.batches, self.base, self.hi, self.hi)
        return RecordSpan(offset, self.batches, self.base, self.batches.batch_of(offset - self.base), self.hi)

    def head(self, n: int) -> RecordSpan:
        """The first ``n`` batches."""
        return self if self.lo + n >= self.hi else RecordSpan(self.first, self.batches, self.base, self.lo, self.lo + n)

    def fit(self, budget: int, skip: int = 0) -> int:
        """How many batches from the span's ``skip``-th on fit in ``budget`` bytes."""
        if budget < 0:
            return 0
        starts = self.batches.byte_starts
        start = self.lo + skip
        return bisect.bisect_right(starts, starts[start] + budget, start, self.hi + 1) - 1 - start

    def kafka_batches(self) -> Iterator[bytes | memoryview]:
        """The span's batches as buffers to write in order, each batch's
        ``baseOffset`` set to the Kafka offset of its first record (the rest
        of each batch is a view of the stored bytes)."""
        batches, base = self.batches, self.base
        rstarts, bstarts = batches.record_starts, batches.byte_starts
        view = memoryview(batches.data)
        for i in range(self.lo, self.hi):
            yield _I64.pack(kafka_offset(base + rstarts[i]))
            yield view[bstarts[i] + 8:bstarts[i + 1]]

    def rows(self) -> Iterator[tuple[int, bytes | None, bytes | None, tuple, int, int]]:
        """``(offset, key, value, headers, timestamp_ms, timestamp_type)`` per record from
        ``first`` on, from each batch's columns (no Record object: the JSON answer's loop)."""
        batches, first = self.batches, self.first
        for i in range(self.lo, self.hi):
            base = self.base + batches.record_starts[i]
            cols, kind = batches.columns(i)
            skip = max(0, first - base)
            kinds = repeat(int(kind))
            yield from zip(range(base + skip, base + len(cols.values)), cols.keys[skip:], cols.values[skip:],
                           cols.headers[skip:], cols.timestamps[skip:], kinds)

    def items(self) -> Iterator[tuple[int, Record]]:
        """``(offset, record)`` per record from ``first`` on (the JSON answer's view)."""
        batches, first = self.batches, self.first
        for i in range(self.lo, self.hi):
            offset = self.base + batches.record_starts[i]
            for r in batches.records(i):
                if offset >= first:
                    yield offset, r
                offset += 1

    def __repr__(self) -> str:
        return f"RecordSpan({self.first}..{self.last}, {self.hi - self.lo} batches of {self.payload_bytes} bytes)"


def spans_of(first: int, batches: StoredBatches) -> list[RecordSpan]:
    """``batches`` (record 0 at offset ``first``) as spans."""
    return [RecordSpan.whole(first, batches)] if len(batches) else []


def take_records(
    spans: Iterable[RecordSpan], limit: int, first_limit: int | None
) -> tuple[list[RecordSpan], int]:
    """Whole batches of ``spans`` (consecutive, in offset order) while their
    bytes stay within ``limit``; the first one may instead be up to
    ``first_limit`` (None: any size), so a batch larger than the limit is
    still returned alone. Returns ``(spans, bytes)``."""
    out: list[RecordSpan] = []
    total = taken = 0
    for span in spans:
        if span.count <= 0:
            continue
        if out:
            n = span.fit(limit - total)
        else:
            size = span.batch_size(0)
            if size > limit and first_limit is not None and size > first_limit:
                break
            n = 1 + span.fit(limit - size, 1)
        if n <= 0:
            break
        part = span.head(n)
        if taken and taken + part.count > MAX_RECORDS_PER_LOOKUP:
            break  # keeps one lookup's work bounded; the first span always goes
        out.append(part)
        total += part.payload_bytes
        taken += part.count
        if part.hi < span.hi:
            break
    return out, total
