"""RecordBatch v2 batches built a column at a time (numpy and Arrow kernels, no Python per record).

A record of a batch is ``length, attributes, timestampDelta, offsetDelta``
then its key, value and headers (``server/_protocol/kafka_batch.py``). The
tail (key, value, headers) does not depend on where the record lands, so
the producer encodes it once when the record is buffered
(``_record_chunks.py``); the head depends on the batch (the offset delta
counts from 0 in each batch, the timestamp delta from the batch's first
record), so it is made here when a request is built: the varints of a
whole batch as one uint8 matrix, the heads and tails joined element-wise by
Arrow, then the 61-byte header with its CRC-32C.
"""

from __future__ import annotations

import struct
from typing import Sequence

import google_crc32c
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .._protocol.kafka_batch import HEADER_SIZE, MAGIC

__all__ = ["varint_column", "varint_matrix", "HEAD_MAX_BYTES", "build_batches"]

HEAD_MAX_BYTES = 21
"""The most a record's head can take: length (5) + attributes (1) + timestampDelta (10) + offsetDelta (5)."""
_HEADER = struct.Struct(">qiibIhiqqqhii")
_CRC_START = 21
_WIDTHS = np.array([1 << (7 * k) for k in range(1, 10)], dtype=np.uint64)


def varint_matrix(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Zigzag varints of int64 ``values``: a ``(n, w)`` uint8 matrix whose row ``i``
    holds value ``i``'s bytes in its first ``lengths[i]`` columns, and the lengths."""
    x = values.astype(np.int64)
    z = ((x << 1) ^ (x >> 63)).view(np.uint64)
    lengths = 1 + (z[:, None] >= _WIDTHS[None, :]).sum(axis=1)
    width = int(lengths.max()) if len(lengths) else 1
    cols = np.arange(width)
    matrix = ((z[:, None] >> (7 * cols).astype(np.uint64)[None, :]) & np.uint64(0x7F)).astype(np.uint8)
    matrix |= ((cols[None, :] < (lengths - 1)[:, None]) * 0x80).astype(np.uint8)
    return matrix, lengths


def _flatten(pieces: Sequence[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Rows of several varint matrices side by side, each row's used bytes only:
    the bytes (row after row) and each row's total length."""
    matrix = np.hstack([m for m, _ in pieces])
    mask = np.hstack([np.arange(m.shape[1])[None, :] < n[:, None] for m, n in pieces])
    return matrix[mask], sum(n for _, n in pieces)


def varint_column(values: np.ndarray) -> pa.Array:
    """Zigzag varints of int64 ``values`` as an Arrow binary column."""
    data, lengths = _flatten([varint_matrix(values)])
    offsets = np.zeros(len(values) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    return pa.Array.from_buffers(pa.binary(), len(values), [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def build_batches(
    tails: bytes | memoryview, tail_ends: np.ndarray, timestamps: np.ndarray, max_batch_bytes: int
) -> list[bytes]:
    """Batches of the records whose tails are ``tails`` (record ``i`` ends at
    ``tail_ends[i]``) stamped ``timestamps`` (ms, int64), each at most
    ``max_batch_bytes`` (a record larger than that goes alone)."""
    n = len(tail_ends)
    starts = np.concatenate(([0], tail_ends[:-1])).astype(np.int64)
    sizes = tail_ends - starts + HEAD_MAX_BYTES
    out, i = [], 0
    cumulative = np.cumsum(sizes)
    while i < n:
        floor = cumulative[i - 1] if i else 0
        j = max(i + 1, int(np.searchsorted(cumulative, floor + max_batch_bytes - HEADER_SIZE, side="right")))
        out.append(_batch(tails, starts[i:j], tail_ends[i:j], timestamps[i:j]))
        i = j
    return out


def _batch(tails: bytes | memoryview, starts: np.ndarray, ends: np.ndarray, timestamps: np.ndarray) -> bytes:
    n = len(ends)
    base_ts = int(timestamps[0])
    ts = varint_matrix(timestamps - base_ts)
    deltas = varint_matrix(np.arange(n, dtype=np.int64))
    tail_lengths = ends - starts
    length = varint_matrix(1 + ts[1] + deltas[1] + tail_lengths)
    attributes = (np.zeros((n, 1), dtype=np.uint8), np.ones(n, dtype=np.int64))
    head_bytes, head_lengths = _flatten([length, attributes, ts, deltas])
    head_offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(head_lengths, out=head_offsets[1:])
    heads = pa.Array.from_buffers(pa.large_binary(), n, [None, pa.py_buffer(head_offsets), pa.py_buffer(head_bytes)])
    tail_offsets = np.concatenate(([starts[0]], ends)).astype(np.int64)
    body = pa.Array.from_buffers(pa.large_binary(), n, [None, pa.py_buffer(tail_offsets), pa.py_buffer(tails)])
    joined = pc.binary_join_element_wise(heads, body, pa.scalar(b"", pa.large_binary()))
    records = _values_buffer(joined)
    header = bytearray(HEADER_SIZE)
    _HEADER.pack_into(header, 0, 0, HEADER_SIZE + len(records) - 12, -1, MAGIC, 0, 0, n - 1, base_ts,
                      int(timestamps.max()), -1, -1, -1, n)
    struct.pack_into(">I", header, 17, google_crc32c.extend(google_crc32c.value(bytes(header[_CRC_START:])), records))
    return bytes(header) + records


def _values_buffer(col: pa.Array) -> bytes:
    """The value bytes of a large_binary column, exactly (its buffer may be longer)."""
    offsets = np.frombuffer(col.buffers()[1], dtype=np.int64, count=len(col) + 1, offset=col.offset * 8)
    data = col.buffers()[2]
    return bytes(memoryview(data)[int(offsets[0]):int(offsets[-1])]) if data is not None else b""
