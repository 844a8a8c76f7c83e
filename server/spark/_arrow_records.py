"""Records of the log as Arrow record batches of the ``llog`` data source's
schema, which is Kafka's source schema (Spark's ``format("kafka")``)::

    key binary, value binary, topic string, partition int, offset long,
    timestamp timestamp, timestampType int
    [, headers array<struct<key string, value binary>>]   (includeHeaders)

Kafka's columns need every record decoded. Each stored RecordBatch v2 batch
a read touches is decoded once (:meth:`StoredBatches.records`, one
:class:`Record` per record: most of a read task's Python time); per record,
Python then only sums its size and reads its fields into the lists from
which one ``pa.array`` each builds the key, value, timestamp, timestampType
and headers columns. The topic, partition and offset columns are built by
Arrow alone. ``offset`` is llog's offset (from 1);
``timestamp`` is the record's timestamp (a LogAppendTime batch's append
time) as microseconds in UTC, which is what Spark's TimestampType reads from
Arrow; ``headers`` is null for a record without headers, as in Kafka's source.
"""

from __future__ import annotations

import bisect
from itertools import accumulate
from typing import Iterable, Iterator, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from .._errors import InconsistentReadState
from .._log.reader import RecordRun
from .._protocol.kafka_records import Record
from .._protocol.stored_batches import StoredBatches

__all__ = ["SCHEMA", "HEADERS_SCHEMA", "arrow_schema", "record_batches", "row_bytes"]

_HEADERS = pa.list_(pa.field("element", pa.struct([("key", pa.string()), ("value", pa.binary())])))
"""Spark's ``array<struct<key string, value binary>>`` (``element`` is the item name Spark gives lists)."""
_MILLIS = pa.timestamp("ms", tz="UTC")
_MICROS = pa.timestamp("us", tz="UTC")

# Every field is nullable, like Kafka's source schema: Spark checks a Python
# source's first Arrow batch against the declared schema, nullability included.
SCHEMA = pa.schema([
    ("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()), ("partition", pa.int32()),
    ("offset", pa.int64()), ("timestamp", _MICROS), ("timestampType", pa.int32()),
])
HEADERS_SCHEMA = SCHEMA.append(pa.field("headers", _HEADERS))

_FIXED_ROW_BYTES = 36
"""Arrow bytes of a row besides its key, value, headers and topic: three
4-byte offsets (key, value, topic), partition 4, offset 8, timestamp 8,
timestampType 4."""


def arrow_schema(include_headers: bool) -> pa.Schema:
    return HEADERS_SCHEMA if include_headers else SCHEMA


def row_bytes(r: Record, topic_bytes: int) -> int:
    """What a record adds to an Arrow batch (about): what the byte limit counts."""
    return _row_bytes(r.key, r.value, r.headers, topic_bytes)


def _row_bytes(key: bytes | None, value: bytes | None, headers: tuple, topic_bytes: int) -> int:
    n = _FIXED_ROW_BYTES + topic_bytes
    if key is not None:
        n += len(key)
    if value is not None:
        n += len(value)
    for k, v in headers:
        n += 12 + len(k) + (len(v) if v is not None else 0)  # + its offsets (string, binary, list)
    return n


class _Slice(NamedTuple):
    """Records of one stored batch as columns, from offset ``first``."""

    first: int
    keys: list
    values: list
    timestamps: list
    headers: list
    timestamp_type: int

    def cut(self, i: int, j: int) -> _Slice:
        return _Slice(self.first + i, self.keys[i:j], self.values[i:j], self.timestamps[i:j], self.headers[i:j],
                      self.timestamp_type)


class _Builder:
    """Collects records of consecutive offsets into one record batch, as columns."""

    def __init__(self, topic: str, partition: int, include_headers: bool) -> None:
        self.topic = pa.scalar(topic, pa.string())
        self.partition = pa.scalar(partition, pa.int32())
        self.topic_bytes = len(topic.encode())
        self.schema = arrow_schema(include_headers)
        self.include_headers = include_headers
        self._reset()

    def _reset(self) -> None:
        self.first = 0
        self.bytes = 0
        self.count = 0
        self.keys: list = []
        self.values: list = []
        self.timestamps: list = []
        self.types: list = []
        self.headers: list = []

    def add(self, piece: _Slice, nbytes: int) -> None:
        if not self.count:
            self.first = piece.first
        n = len(piece.values)
        self.keys += piece.keys
        self.values += piece.values
        self.timestamps += piece.timestamps
        self.types += [piece.timestamp_type] * n
        if self.include_headers:
            self.headers += piece.headers
        self.count += n
        self.bytes += nbytes

    def take(self) -> pa.RecordBatch:
        n = self.count
        columns = [
            pa.array(self.keys, pa.binary()),
            pa.array(self.values, pa.binary()),
            pa.repeat(self.topic, n),
            pa.repeat(self.partition, n),
            pc.add(_offsets(n), pa.scalar(self.first, pa.int64())),
            pa.array(self.timestamps, _MILLIS).cast(_MICROS),
            pa.array(self.types, pa.int32()),
        ]
        if self.include_headers:
            columns.append(pa.array([h or None for h in self.headers], _HEADERS))
        self._reset()
        return pa.RecordBatch.from_arrays(columns, schema=self.schema)


_arange = pa.array([], pa.int64())


def _offsets(n: int) -> pa.Array:
    """0..n-1 as int64 (grown and kept, so each batch's offsets are one Arrow add)."""
    global _arange
    if len(_arange) < n:
        _arange = pa.array(range(max(n, 2 * len(_arange))), pa.int64())
    return _arange.slice(0, n)


def _slices(run: RecordRun[StoredBatches]) -> Iterator[_Slice]:
    """Each stored batch of the run as columns, trimmed to ``run.first..run.last``."""
    stored = run.records
    starts = stored.record_starts
    i, end = run.first - run.base_offset, run.last - run.base_offset + 1
    b = stored.batch_of(i)
    while i < end:
        lo, hi = starts[b], starts[b + 1]
        cols, kind = stored.columns(b)
        piece = _Slice(run.base_offset + lo, cols.keys, cols.values, cols.timestamps, cols.headers, int(kind))
        if i > lo or end < hi:
            piece = piece.cut(i - lo, min(end, hi) - lo)
        yield piece
        i = min(end, hi)
        b += 1


def record_batches(
    runs: Iterable[RecordRun[StoredBatches]], topic: str, partition: int, start: int, end: int,
    *, max_records: int, max_bytes: int, include_headers: bool = False,
) -> Iterator[pa.RecordBatch]:
    """Offsets ``start..end`` (inclusive) of one topic-partition as record
    batches of :func:`arrow_schema` (``include_headers``), each of at most
    ``max_records`` records and about ``max_bytes`` Arrow bytes
    (:func:`row_bytes`; a bigger single record gets a batch of its own).
    Batches are filled in offset order regardless of where stored batches
    begin and end.

    ``runs`` comes from ``LeaderlessLogReader.iter_runs(..., decode=stored)``;
    a gap or a short read raises InconsistentReadState rather than yielding a hole."""
    out = _Builder(topic, partition, include_headers)
    expected = start
    for run in runs:
        if run.first != expected:
            raise InconsistentReadState(
                f"expected offset {expected}, read {run.first}", topic=topic, partition=partition, offset=expected,
            )
        expected = run.last + 1
        for piece in _slices(run):
            tb = out.topic_bytes
            sizes = list(accumulate(_row_bytes(k, v, h, tb) for k, v, h in zip(piece.keys, piece.values, piece.headers)))
            pos = used = 0  # records of the slice taken, and their bytes
            count = len(piece.values)
            while pos < count:
                # The most records that fit both limits (bisect over the running byte sums).
                stop = min(count, pos + max_records - out.count)
                j = bisect.bisect_right(sizes, used + max_bytes - out.bytes, pos, stop)
                if j == pos:
                    if out.count:
                        yield out.take()
                        continue
                    j = pos + 1  # one record above max_bytes: a batch of its own
                out.add(piece.cut(pos, j), sizes[j - 1] - used)
                pos, used = j, sizes[j - 1]
                if out.count >= max_records:
                    yield out.take()
    if out.count:
        yield out.take()
    if expected != end + 1:
        raise InconsistentReadState(
            f"read offsets {start}..{expected - 1}, wanted up to {end}", topic=topic, partition=partition,
        )
