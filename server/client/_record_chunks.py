"""Records of one partition encoded for a ``/produce`` body, built a column at a time.

A :class:`RecordChunk` is a run of records of one partition in the form the
request body takes them, plus where each record ends, so a request can take
any prefix of it without re-encoding:

- ``binary`` (``application/vnd.llog.produce.v2``, ``server/_protocol/produce_binary.py``):
  ``data`` holds each record's RecordBatch v2 *tail* (key, value, headers;
  ``server/_protocol/kafka_records.py``), built by Arrow kernels (the length
  varints as columns, joined element-wise to the keys and values, then
  ``take`` in partition order): no Python object per record, which is what
  lets one Spark task feed hundreds of thousands of small records a second.
  The request adds each record's head (its offset and timestamp deltas)
  when it cuts the records into batches (``_kafka_wire.py``). Headers are
  encoded per record in Python (they are rare).
- ``json``: ``data`` is the records' JSON fragments (a string or
  ``{"base64": ...}`` for a plain value, a record object when there is a
  key, headers, a timestamp or a null value), each followed by a comma; the
  request drops the last comma. One Python string per record: this body is
  for brokers of the reference system, which accept JSON only.

A null value is a tombstone (Kafka's meaning), never a dropped record.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from json.encoder import encode_basestring_ascii
from typing import Any, Literal, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .._protocol.kafka_records import varint
from ._kafka_wire import varint_column

__all__ = [
    "Body", "BODIES", "RecordChunk", "RecordColumns", "encode_by_partition", "binary_view", "first_null",
    "value_offsets", "value_data",
]

Body = Literal["binary", "json"]
BODIES: tuple[Body, ...] = ("binary", "json")
NO_TIMESTAMP = -1
"""A record without a timestamp of its own: the request stamps it with the time it is built."""


@dataclass(frozen=True)
class RecordChunk:
    """Records of one partition in their body form.

    ``ends[i]`` is where record ``i`` ends in ``data`` and ``payload_ends[i]``
    the key and value bytes of records ``0..i`` (both cumulative, int64).
    Binary body: ``timestamps`` is each record's time in ms or NO_TIMESTAMP,
    and ``body_ends[i]`` bounds the body bytes of records ``0..i`` with the
    heads the request adds (:func:`_head_bound`)."""

    data: memoryview
    ends: np.ndarray
    payload_ends: np.ndarray
    timestamps: np.ndarray | None = None
    body_ends: np.ndarray | None = None

    @property
    def count(self) -> int:
        return len(self.ends)

    @property
    def _sizes(self) -> np.ndarray:
        return self.ends if self.body_ends is None else self.body_ends

    @property
    def nbytes(self) -> int:
        """Bytes in the body (at most, for the binary body)."""
        return int(self._sizes[-1])

    @property
    def payload_bytes(self) -> int:
        return int(self.payload_ends[-1])

    def fitting(self, room: int, max_records: int) -> int:
        """How many leading records fit in ``room`` body bytes (at most ``max_records``)."""
        return min(int(np.searchsorted(self._sizes, room, side="right")), max_records)

    def split(self, k: int) -> tuple[RecordChunk, RecordChunk | None]:
        """The first ``k`` records (1 <= k <= count) and the rest (None when empty)."""
        if k >= self.count:
            return self, None
        cut = int(self.ends[k - 1])
        paid = int(self.payload_ends[k - 1])
        ts, body = self.timestamps, self.body_ends
        head = RecordChunk(self.data[:cut], self.ends[:k], self.payload_ends[:k], None if ts is None else ts[:k],
                           None if body is None else body[:k])
        tail = RecordChunk(self.data[cut:], self.ends[k:] - cut, self.payload_ends[k:] - paid,
                           None if ts is None else ts[k:], None if body is None else body[k:] - int(body[k - 1]))
        return head, tail


@dataclass(frozen=True)
class RecordColumns:
    """A task's records as columns: ``values`` (string or binary, nulls are
    tombstones) and, each optional, ``keys`` (string or binary, nullable),
    ``headers`` (per record a list of ``(str, bytes | None)`` or None) and
    ``timestamps`` (int64 ms; NO_TIMESTAMP where unset)."""

    values: pa.Array
    keys: pa.Array | None = None
    headers: Sequence[Sequence[tuple[str, bytes | None]] | None] | None = None
    timestamps: np.ndarray | None = None

    def __post_init__(self) -> None:
        n = len(self.values)
        for name in ("keys", "headers", "timestamps"):
            col = getattr(self, name)
            if col is not None and len(col) != n:
                raise ValueError(f"{n} values but {len(col)} {name}")


def first_null(col: pa.Array) -> int | None:
    """The index of the column's first null, or None."""
    if not col.null_count:
        return None
    return int(np.flatnonzero(col.is_null().to_numpy(zero_copy_only=False))[0])


def binary_view(values: pa.Array) -> pa.Array:
    """A string or binary column (plain or large) as binary of the same width,
    zero-copy; nulls stay nulls."""
    if pa.types.is_string(values.type):
        return values.cast(pa.binary())
    if pa.types.is_large_string(values.type):
        return values.cast(pa.large_binary())
    if pa.types.is_binary(values.type) or pa.types.is_large_binary(values.type):
        return values
    if pa.types.is_null(values.type):
        return values.cast(pa.binary())
    raise ValueError(f"a record key or value must be string or binary, got {values.type}")


def value_offsets(col: pa.Array) -> np.ndarray:
    """The column's value offsets (count + 1), int64, relative to its data buffer."""
    width = np.int64 if pa.types.is_large_binary(col.type) else np.int32
    buf = col.buffers()[1]
    return np.frombuffer(buf, dtype=width, count=len(col) + 1, offset=col.offset * width().itemsize).astype(np.int64)


def value_data(col: pa.Array) -> memoryview:
    """The column's value bytes (its data buffer; empty when it has none)."""
    buf = col.buffers()[2]
    return memoryview(buf) if buf is not None else memoryview(b"")


def encode_by_partition(records: RecordColumns, partitions: np.ndarray, body: Body) -> dict[int, RecordChunk]:
    """The records grouped by ``partitions`` (one int per row), each group in
    row order and in ``body``'s form."""
    n = len(records.values)
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
        return _binary_groups(records, order, groups)
    return _json_groups(records, order, groups)


def _lengths(col: pa.Array) -> np.ndarray:
    """Each element's byte length, -1 for a null (the varint of a null key or value)."""
    lengths = np.diff(value_offsets(col))
    if col.null_count:
        lengths[col.is_null().to_numpy(zero_copy_only=False)] = -1
    return lengths


def _constant(byte: bytes, n: int) -> pa.Array:
    return pa.FixedSizeBinaryArray.from_buffers(pa.binary(1), n, [None, pa.py_buffer(byte * n)]).cast(pa.large_binary())


def _headers_column(headers: Sequence[Sequence[tuple[str, bytes | None]] | None]) -> pa.Array:
    out = []
    for hs in headers:
        hs = hs or ()
        parts = [varint(len(hs))]
        for k, v in hs:
            kb = k.encode("utf-8")
            parts += [varint(len(kb)), kb]
            v = v.encode("utf-8") if isinstance(v, str) else v
            parts += [varint(-1)] if v is None else [varint(len(v)), bytes(v)]
        out.append(b"".join(parts))
    return pa.array(out, pa.large_binary())


def _tails(records: RecordColumns) -> tuple[pa.Array, np.ndarray]:
    """Each record's tail (key, value, headers) and its key + value bytes."""
    values = binary_view(records.values)
    n = len(values)
    vlen = _lengths(values)
    columns = []
    payload = np.maximum(vlen, 0)
    if records.keys is None:
        columns.append(_constant(b"\x01", n))  # zigzag(-1): a null key
    else:
        keys = binary_view(records.keys)
        klen = _lengths(keys)
        payload = payload + np.maximum(klen, 0)
        columns += [varint_column(klen).cast(pa.large_binary()), keys.cast(pa.large_binary()).fill_null(b"")]
    columns += [varint_column(vlen).cast(pa.large_binary()), values.cast(pa.large_binary()).fill_null(b"")]
    columns.append(_constant(b"\x00", n) if records.headers is None else _headers_column(records.headers))
    tails = pc.binary_join_element_wise(*columns, pa.scalar(b"", pa.large_binary()))
    return tails, payload


def _head_bound(tail_lengths: np.ndarray, stamps: np.ndarray) -> np.ndarray:
    """The most each record's head can take: its length varint, attributes, a
    1-byte timestamp delta (10 bytes for a record with its own timestamp) and
    up to 3 bytes of offset delta (a batch holds fewer than 2**20 records)."""
    body = tail_lengths + 14
    length = 1 + (body >= 64) + (body >= 8192) + (body >= 1 << 20) + (body >= 1 << 27)
    return length + 1 + np.where(stamps == NO_TIMESTAMP, 1, 10) + 3


def _binary_groups(
    records: RecordColumns, order: np.ndarray | None, groups: list[tuple[int, int, int]]
) -> dict[int, RecordChunk]:
    tails, payload = _tails(records)
    n = len(tails)
    stamps = records.timestamps if records.timestamps is not None else np.full(n, NO_TIMESTAMP, dtype=np.int64)
    if order is not None:
        tails = pc.take(tails, pa.array(order))
        payload, stamps = payload[order], stamps[order]
    offsets, data = value_offsets(tails), value_data(tails)
    out = {}
    for p, start, count in groups:
        base = int(offsets[start])
        ends = offsets[start + 1:start + count + 1] - base
        ts = np.asarray(stamps[start:start + count], dtype=np.int64)
        body_ends = ends + np.cumsum(_head_bound(np.diff(ends, prepend=0), ts))
        out[p] = RecordChunk(data[base:int(ends[-1]) + base], ends, np.cumsum(payload[start:start + count]), ts,
                             body_ends)
    return out


def _json_value(v: Any) -> Any:
    if v is None or isinstance(v, str):
        return v
    try:
        return bytes(v).decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(v).decode("ascii")}


def _json_groups(
    records: RecordColumns, order: np.ndarray | None, groups: list[tuple[int, int, int]]
) -> dict[int, RecordChunk]:
    values = records.values
    text = pa.types.is_string(values.type) or pa.types.is_large_string(values.type)
    items = values.to_pylist()
    plain = records.keys is None and records.headers is None and records.timestamps is None and not values.null_count
    keys = records.keys.to_pylist() if records.keys is not None else None
    lengths = np.maximum(_lengths(binary_view(values)), 0)
    if keys is not None:
        lengths = lengths + np.maximum(_lengths(binary_view(records.keys)), 0)  # type: ignore[arg-type]
    idx = list(range(len(items))) if order is None else order.tolist()
    if order is not None:
        lengths = lengths[order]
    out = {}
    for p, start, count in groups:
        rows = idx[start:start + count]
        if plain:
            frags = [encode_basestring_ascii(items[i]) for i in rows] if text else [
                '{"base64":"' + base64.b64encode(items[i]).decode("ascii") + '"}' for i in rows]
        else:
            frags = [json.dumps(_record_object(records, items, keys, i), separators=(",", ":")) for i in rows]
        data = (",".join(frags) + ",").encode("ascii")
        ends = np.cumsum(np.fromiter((len(f) + 1 for f in frags), dtype=np.int64, count=count))
        out[p] = RecordChunk(memoryview(data), ends, np.cumsum(lengths[start:start + count]))
    return out


def _record_object(records: RecordColumns, items: list, keys: list | None, i: int) -> dict[str, Any]:
    doc: dict[str, Any] = {"value": _json_value(items[i])}
    if keys is not None:
        doc["key"] = _json_value(keys[i])
    if records.headers is not None and records.headers[i]:
        doc["headers"] = [{"key": k, "value": _json_value(v)} for k, v in records.headers[i]]
    if records.timestamps is not None and records.timestamps[i] != NO_TIMESTAMP:
        doc["timestamp_ms"] = int(records.timestamps[i])
    return doc
