"""``RecordSpan``: consecutive records of one partition as a slice of stored bytes.

A consume answer is made of runs of consecutive offsets that come, whole or
in part, from verified ``bytes-batch-v1`` records sections: a batch read
from S3, a segment of the tail cache, a binary produce body. A span keeps
such a section and the positions of its records (a
:class:`~server._protocol.codec.BatchBounds`) and names a range of them, so
the consume path moves, trims and budgets records without a Python object
per record:

- :func:`take_records` applies the byte limits with a binary search over
  the record positions, not a loop over the records;
- the binary consume answer (``consume_binary.py``) writes each span's
  records section as it is (one slice of the stored bytes);
- only the JSON answer turns a span into ``(offset, payload)`` pairs.

Record ``k`` of a span (``0 <= k < count``) is at offset ``first + k`` and is
record ``lo + k`` of its bounds.
"""

from __future__ import annotations

import array
import bisect
import itertools
import struct
from dataclasses import dataclass
from typing import Iterable, Iterator, Sequence

from .codec import BatchBounds, EncodedRecords

__all__ = ["RecordSpan", "spans_of", "take_records", "MAX_RECORDS_PER_LOOKUP"]

MAX_RECORDS_PER_LOOKUP = 100_000
"""Records one partition returns per lookup (bounds the work of a request)."""

_U32 = struct.Struct(">I")


@dataclass(frozen=True, slots=True)
class RecordSpan:
    """Records ``first .. first + count - 1``: records ``lo .. hi - 1`` of ``bounds``."""

    first: int
    """Offset of the span's first record."""
    bounds: BatchBounds
    lo: int
    hi: int

    @classmethod
    def whole(cls, first: int, bounds: BatchBounds) -> RecordSpan:
        """Every record of ``bounds``, the first at offset ``first``."""
        return cls(first, bounds, 0, bounds.count)

    @property
    def count(self) -> int:
        return self.hi - self.lo

    @property
    def last(self) -> int:
        """Offset of the last record (``first - 1`` when empty)."""
        return self.first + self.hi - self.lo - 1

    @property
    def payload_bytes(self) -> int:
        starts = self.bounds.starts
        return starts[self.hi] - starts[self.lo] - 4 * (self.hi - self.lo)

    def section(self) -> memoryview:
        """The span's records as a bytes-batch-v1 records section: ``count x
        (u32 length, payload)``, a view of the stored bytes."""
        starts = self.bounds.starts
        return self.bounds.records[starts[self.lo]:starts[self.hi]]

    def size(self, k: int) -> int:
        """Payload bytes of record ``k``."""
        starts = self.bounds.starts
        return starts[self.lo + k + 1] - starts[self.lo + k] - 4

    def since(self, offset: int) -> RecordSpan:
        """The records from ``offset`` on (``first <= offset <= last + 1``)."""
        if offset <= self.first:
            return self
        return RecordSpan(offset, self.bounds, self.lo + offset - self.first, self.hi)

    def head(self, n: int) -> RecordSpan:
        """The first ``n`` records."""
        return self if n >= self.count else RecordSpan(self.first, self.bounds, self.lo, self.lo + n)

    def fit(self, budget: int, skip: int = 0) -> int:
        """How many records from record ``skip`` on fit in ``budget`` payload bytes."""
        if budget < 0:
            return 0
        start = self.lo + skip
        starts = self.bounds.starts
        # starts[k] - 4k grows with k and differs between two positions by
        # exactly the payload bytes between them: bisect it.
        target = starts[start] - 4 * start + budget
        return bisect.bisect_right(range(start, self.hi + 1), target, key=lambda k: starts[k] - 4 * k) - 1

    def items(self) -> Iterator[tuple[int, bytes]]:
        """``(offset, payload)`` per record (the JSON answer's per-record view)."""
        starts = self.bounds.starts
        base = starts[self.lo]
        raw = self.section().tobytes()  # one copy, then bytes slices
        offset = self.first
        for k in range(self.lo, self.hi):
            yield offset, raw[starts[k] - base + 4:starts[k + 1] - base]
            offset += 1

    def __repr__(self) -> str:
        return f"RecordSpan({self.first}..{self.last}, {self.payload_bytes} payload bytes)"


def spans_of(first: int, payloads: Sequence[bytes]) -> list[RecordSpan]:
    """``payloads`` (offsets from ``first`` on) as spans: the sections of
    :class:`EncodedRecords` as they are, any other sequence packed once."""
    if isinstance(payloads, EncodedRecords):
        out = []
        for part in payloads.parts:
            if part.count:
                out.append(RecordSpan.whole(first, part))
                first += part.count
        return out
    if not payloads:
        return []
    starts = array.array("q", [0])
    starts.extend(itertools.accumulate(4 + len(p) for p in payloads))
    pack = _U32.pack
    section = b"".join(itertools.chain.from_iterable((pack(len(p)), p) for p in payloads))
    return [RecordSpan.whole(first, BatchBounds(memoryview(section), starts))]


def take_records(
    spans: Iterable[RecordSpan], limit: int, first_limit: int | None
) -> tuple[list[RecordSpan], int]:
    """The records of ``spans`` (consecutive, in offset order) while their
    payload bytes stay within ``limit``; the first one may instead be up to
    ``first_limit`` (None: any size), so a record larger than the limit is
    still returned alone. Returns ``(spans, bytes)``."""
    out: list[RecordSpan] = []
    total = taken = 0
    for span in spans:
        if not span.count:
            continue
        if out:
            n = span.fit(limit - total)
        else:
            size = span.size(0)
            if size > limit and first_limit is not None and size > first_limit:
                break
            n = 1 + span.fit(limit - size, 1)
        n = min(n, MAX_RECORDS_PER_LOOKUP - taken)
        if n <= 0:
            break
        part = span.head(n)
        out.append(part)
        total += part.payload_bytes
        taken += n
        if n < span.count:
            break
    return out, total
