"""Records of one partition encoded for a ``/produce`` body, built a column at a time.

A :class:`RecordChunk` is a run of records of one partition already in the
wire form of the request body, plus where each record ends, so a request can
take any prefix of it without re-encoding:

- ``binary`` (``application/vnd.llog.produce.v1``, ``server/_protocol/produce_binary.py``):
  ``data`` is a ``bytes-batch-v1`` records section, ``N x (u32 length, payload)``,
  exactly what the broker checks and stores. It is built by Arrow kernels
  (the length prefixes as one fixed-size binary column, joined element-wise
  to the values, then ``take`` in partition order): no Python object per
  record, which is what lets one Spark task feed hundreds of thousands of
  small records a second.
- ``json``: ``data`` is the records' JSON fragments (a string, or
  ``{"base64": ...}`` for binary values), each followed by a comma; the
  request drops the last comma. One Python string per record: this body is
  for brokers of the reference system, which accept JSON only.

A null value is a ValueError naming the row: a record is never dropped.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from json.encoder import encode_basestring_ascii
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = [
    "Body", "BODIES", "RecordChunk", "encode_by_partition", "as_binary_column", "binary_view", "first_null",
    "value_offsets", "value_data",
]

Body = Literal["binary", "json"]
BODIES: tuple[Body, ...] = ("binary", "json")
_PREFIX = 4  # a stored record's u32 length


@dataclass(frozen=True)
class RecordChunk:
    """Records of one partition in their wire form.

    ``ends[i]`` is where record ``i`` ends in ``data`` and ``payload_ends[i]``
    the payload bytes of records ``0..i`` (both cumulative, int64)."""

    data: memoryview
    ends: np.ndarray
    payload_ends: np.ndarray

    @property
    def count(self) -> int:
        return len(self.ends)

    @property
    def nbytes(self) -> int:
        return int(self.ends[-1])

    @property
    def payload_bytes(self) -> int:
        return int(self.payload_ends[-1])

    def fitting(self, room: int, max_records: int) -> int:
        """How many leading records fit in ``room`` wire bytes (at most ``max_records``)."""
        return min(int(np.searchsorted(self.ends, room, side="right")), max_records)

    def split(self, k: int) -> tuple[RecordChunk, RecordChunk | None]:
        """The first ``k`` records (1 <= k <= count) and the rest (None when empty)."""
        if k >= self.count:
            return self, None
        cut = int(self.ends[k - 1])
        paid = int(self.payload_ends[k - 1])
        head = RecordChunk(self.data[:cut], self.ends[:k], self.payload_ends[:k])
        tail = RecordChunk(self.data[cut:], self.ends[k:] - cut, self.payload_ends[k:] - paid)
        return head, tail


def first_null(col: pa.Array) -> int | None:
    """The index of the column's first null, or None."""
    if not col.null_count:
        return None
    return int(np.flatnonzero(col.is_null().to_numpy(zero_copy_only=False))[0])


def as_binary_column(values: pa.Array) -> pa.Array:
    """``values`` (string or binary, plain or large) as binary of the same width,
    a zero-copy view; raises ValueError naming the first null row."""
    first = first_null(values)
    if first is not None:
        raise ValueError(f"record {first} of the batch is null; a record value must be a string or bytes")
    return binary_view(values)


def binary_view(values: pa.Array) -> pa.Array:
    """A string or binary column (plain or large) as binary of the same width,
    zero-copy; nulls stay nulls."""
    if pa.types.is_string(values.type):
        return values.cast(pa.binary())
    if pa.types.is_large_string(values.type):
        return values.cast(pa.large_binary())
    if pa.types.is_binary(values.type) or pa.types.is_large_binary(values.type):
        return values
    raise ValueError(f"a record value must be string or binary, got {values.type}")


def value_offsets(col: pa.Array) -> np.ndarray:
    """The column's value offsets (count + 1), int64, relative to its data buffer."""
    width = np.int64 if pa.types.is_large_binary(col.type) else np.int32
    buf = col.buffers()[1]
    return np.frombuffer(buf, dtype=width, count=len(col) + 1, offset=col.offset * width().itemsize).astype(np.int64)


def value_data(col: pa.Array) -> memoryview:
    """The column's value bytes (its data buffer; empty when it has none)."""
    buf = col.buffers()[2]
    return memoryview(buf) if buf is not None else memoryview(b"")


def encode_by_partition(values: pa.Array, partitions: np.ndarray, body: Body) -> dict[int, RecordChunk]:
    """The records of ``values`` grouped by ``partitions`` (one int per row), each
    group in row order and in ``body``'s wire form."""
    col = as_binary_column(values)
    n = len(col)
    if n == 0:
        return {}
    parts = np.asarray(partitions, dtype=np.int64)
    if len(parts) != n:
        raise ValueError(f"{n} values but {len(parts)} partitions")
    first = int(parts[0])
    if bool((parts == first).all()):
        order, groups = None, [(first, 0, n)]
    else:
        order = np.argsort(parts, kind="stable")
        keys, starts, counts = np.unique(parts[order], return_index=True, return_counts=True)
        groups = [(int(p), int(s), int(c)) for p, s, c in zip(keys, starts, counts)]
    if body == "binary":
        return _binary_groups(col, order, groups)
    return _json_groups(values, col, order, groups)


def _binary_groups(col: pa.Array, order: np.ndarray | None, groups: list[tuple[int, int, int]]) -> dict[int, RecordChunk]:
    lengths = np.diff(value_offsets(col))
    prefixes = pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(_PREFIX), len(col), [None, pa.py_buffer(lengths.astype(">u4").tobytes())]
    )
    wide = pa.types.is_large_binary(col.type)
    width = pa.large_binary() if wide else pa.binary()
    joined = pc.binary_join_element_wise(prefixes.cast(width), col, pa.scalar(b"", width))
    if order is not None:
        joined = pc.take(joined, pa.array(order))
        lengths = lengths[order]
    offsets, data = value_offsets(joined), value_data(joined)
    out = {}
    for p, start, count in groups:
        base = int(offsets[start])
        ends = offsets[start + 1:start + count + 1] - base
        payload_ends = np.cumsum(lengths[start:start + count])
        out[p] = RecordChunk(data[base:int(ends[-1]) + base], ends, payload_ends)
    return out


def _json_groups(
    values: pa.Array, col: pa.Array, order: np.ndarray | None, groups: list[tuple[int, int, int]]
) -> dict[int, RecordChunk]:
    text = pa.types.is_string(values.type) or pa.types.is_large_string(values.type)
    items = values.to_pylist()
    if order is not None:
        items = [items[i] for i in order.tolist()]
    lengths = np.diff(value_offsets(col))
    if order is not None:
        lengths = lengths[order]
    out = {}
    for p, start, count in groups:
        part = items[start:start + count]
        frags = [encode_basestring_ascii(v) for v in part] if text else [
            '{"base64":"' + base64.b64encode(v).decode("ascii") + '"}' for v in part
        ]
        data = (",".join(frags) + ",").encode("ascii")
        ends = np.cumsum(np.fromiter((len(f) + 1 for f in frags), dtype=np.int64, count=count))
        out[p] = RecordChunk(memoryview(data), ends, np.cumsum(lengths[start:start + count]))
    return out
