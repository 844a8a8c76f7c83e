"""Records of the log as Arrow record batches of the ``llog`` data source's
schema, built a batch at a time from the stored bytes.

Per record, Python does no more than find where it starts (the codec's
:func:`~server._protocol.codec.decode_batch_bounds`); the payload column is cut from
the stored records section by one Arrow kernel (``binary_slice`` drops each
record's 4-byte length prefix), and the topic, partition and offset columns
are filled by Arrow too. That keeps a Spark task's Python worker several
times cheaper per record than building ``bytes`` objects, which matters on
small machines where the worker, the JVM and the S3 server share the cores.
"""

from __future__ import annotations

import bisect
from typing import Iterable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from .._errors import InconsistentReadState
from .._log.reader import RecordRun
from .._protocol.codec import BatchBounds

__all__ = ["SCHEMA", "record_batches"]

SCHEMA = pa.schema([
    ("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()), ("value", pa.binary()),
])
_PREFIX = 4  # each stored record starts with its u32 length
_NO_STOP = 1 << 32  # past any record's end (a record is at most 2**32-1 bytes)


def _payloads(bounds: BatchBounds, i0: int, i1: int) -> pa.Array:
    """Payloads of records ``i0..i1-1`` of one batch as an Arrow binary array."""
    # The section viewed as large_binary with each element = prefix + payload
    # (zero copy: the positions are its offsets), then the prefixes cut off.
    framed = pa.Array.from_buffers(
        pa.large_binary(), i1 - i0, [None, pa.py_buffer(bounds.starts), pa.py_buffer(bounds.records)], 0, i0,
    )
    return pc.binary_slice(framed, _PREFIX, _NO_STOP).cast(pa.binary())


def _pieces(run: RecordRun[BatchBounds], max_records: int, max_bytes: int) -> Iterator[tuple[int, int, int]]:
    """``(i0, i1, stored bytes)`` index ranges of the run, each within both limits (at least one record)."""
    starts = run.records.starts
    i = run.first - run.base_offset
    end = run.last - run.base_offset + 1
    while i < end:
        j = min(end, i + max_records, max(i + 1, bisect.bisect_right(starts, starts[i] + max_bytes, i + 1) - 1))
        yield i, j, starts[j] - starts[i]
        i = j


class _Builder:
    """Collects payload pieces of consecutive offsets into one record batch."""

    def __init__(self, topic: str, partition: int) -> None:
        self.topic = pa.scalar(topic, pa.string())
        self.partition = pa.scalar(partition, pa.int32())
        self.first = 0
        self.count = 0
        self.bytes = 0
        self.values: list[pa.Array] = []

    def add(self, first: int, values: pa.Array, nbytes: int) -> None:
        if not self.values:
            self.first = first
        self.values.append(values)
        self.count += len(values)
        self.bytes += nbytes

    def take(self) -> pa.RecordBatch:
        n = self.count
        values = self.values[0] if len(self.values) == 1 else pa.concat_arrays(self.values)
        batch = pa.RecordBatch.from_arrays([
            pa.repeat(self.topic, n),
            pa.repeat(self.partition, n),
            pc.add(_offsets(n), pa.scalar(self.first, pa.int64())),
            values,
        ], schema=SCHEMA)
        self.values, self.count, self.bytes = [], 0, 0
        return batch


_arange = pa.array([], pa.int64())


def _offsets(n: int) -> pa.Array:
    """0..n-1 as int64 (grown and kept, so each batch's offsets are one Arrow add)."""
    global _arange
    if len(_arange) < n:
        _arange = pa.array(range(max(n, 2 * len(_arange))), pa.int64())
    return _arange.slice(0, n)


def record_batches(
    runs: Iterable[RecordRun[BatchBounds]], topic: str, partition: int, start: int, end: int,
    *, max_records: int, max_bytes: int,
) -> Iterator[pa.RecordBatch]:
    """Offsets ``start..end`` (inclusive) of one topic-partition as record
    batches of at most ``max_records`` records and about ``max_bytes``
    payload bytes (a bigger single record gets a batch of its own). A stored
    batch of at least a quarter of either limit becomes a record batch of its
    own, without a copy; smaller ones are gathered up to that size.

    ``runs`` comes from ``LeaderlessLogReader.iter_runs(...,
    decode=decode_batch_bounds)``; a gap or a short read raises
    InconsistentReadState rather than yielding a hole."""
    out = _Builder(topic, partition)
    expected = start
    for run in runs:
        if run.first != expected:
            raise InconsistentReadState(
                f"expected offset {expected}, read {run.first}", topic=topic, partition=partition, offset=expected,
            )
        expected = run.last + 1
        for i0, i1, nbytes in _pieces(run, max_records, max_bytes):
            big = 4 * (i1 - i0) >= max_records or 4 * nbytes >= max_bytes
            if out.count and (big or out.count + i1 - i0 > max_records or out.bytes + nbytes > max_bytes):
                yield out.take()
            out.add(run.base_offset + i0, _payloads(run.records, i0, i1), nbytes)
            if 4 * out.count >= max_records or 4 * out.bytes >= max_bytes:
                yield out.take()  # big enough: sending it alone saves concatenating it
    if out.count:
        yield out.take()
    if expected != end + 1:
        raise InconsistentReadState(
            f"read offsets {start}..{expected - 1}, wanted up to {end}", topic=topic, partition=partition,
        )
