"""Record-to-partition mapping: Kafka's murmur2 partitioner and an even spread.

Keyed records go where a Kafka producer's default partitioner would put
them: ``toPositive(murmur2(key_bytes)) % partitions``, with ``murmur2`` the
32-bit MurmurHash2 variant of ``org.apache.kafka.common.utils.Utils.murmur2``
(seed ``0x9747b28c``, little-endian 4-byte blocks, the tail mixed in the
order 3-2-1) and ``toPositive(h) = h & 0x7fffffff`` (not ``abs``, which
would fold ``Integer.MIN_VALUE``). So a topic fed by this job and by Kafka
clients, or read by tools that know Kafka's mapping, agrees on where a key
lives. Key bytes: a ``str`` key is hashed as its UTF-8 bytes (Kafka's
``StringSerializer``), ``bytes`` as is.

Records without a key (no key column, or a null key) are spread evenly:
round-robin over the partitions, each task starting at a different
partition so that many small tasks do not all favour partition 0.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Iterable

import numpy as np

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["murmur2", "murmur2_column", "to_positive", "partition_for_key", "KeyPartitioner", "check_partition_column"]

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF
_BLOCKS = struct.Struct("<I")


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2(data)``: a signed 32-bit int, exactly as Java returns it."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    n4 = length & ~3
    for (k,) in _BLOCKS.iter_unpack(data[:n4]):
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    rest = length & 3
    if rest:
        # Java's switch falls through: case 3, then 2, then 1 (which multiplies).
        if rest == 3:
            h ^= data[n4 + 2] << 16
        if rest >= 2:
            h ^= data[n4 + 1] << 8
        h ^= data[n4]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - 0x100000000 if h & 0x80000000 else h


def murmur2_column(keys: pa.Array) -> np.ndarray:
    """:func:`murmur2` of every value of a string or binary Arrow column, as
    uint32 (the bits Java returns), computed over the column's buffers a
    4-byte block position at a time: no Python object per key. Null slots
    get a meaningless value; callers mask them."""
    from ._record_chunks import binary_view, value_data, value_offsets

    col = binary_view(keys)
    offsets = value_offsets(col)
    data = np.frombuffer(value_data(col), dtype=np.uint8)
    starts, lengths = offsets[:-1], np.diff(offsets)
    m = np.uint32(_M)
    h = (np.uint32(_SEED) ^ lengths.astype(np.uint32))
    blocks = lengths >> 2
    for j in range(int(blocks.max()) if len(blocks) else 0):
        live = np.flatnonzero(blocks > j)
        at = starts[live] + 4 * j
        k = (data[at].astype(np.uint32) | (data[at + 1].astype(np.uint32) << 8)
             | (data[at + 2].astype(np.uint32) << 16) | (data[at + 3].astype(np.uint32) << 24))
        k *= m
        k ^= k >> np.uint32(24)
        k *= m
        h[live] = (h[live] * m) ^ k
    rest, tail = lengths & 3, starts + (blocks << 2)
    for width, shift in ((3, 16), (2, 8)):
        sel = np.flatnonzero(rest >= width)
        h[sel] ^= data[tail[sel] + width - 1].astype(np.uint32) << np.uint32(shift)
    sel = np.flatnonzero(rest >= 1)
    h[sel] ^= data[tail[sel]].astype(np.uint32)
    h[sel] *= m
    h ^= h >> np.uint32(13)
    h *= m
    h ^= h >> np.uint32(15)
    return h


def to_positive(h: int) -> int:
    """Kafka's ``Utils.toPositive``: clear the sign bit."""
    return h & 0x7FFFFFFF


def partition_for_key(key: bytes | str, partitions: int) -> int:
    """The partition Kafka's default partitioner picks for ``key``."""
    if isinstance(key, str):
        key = key.encode("utf-8")
    return to_positive(murmur2(key)) % partitions


class KeyPartitioner:
    """Maps a column of keys (``None`` = no key) to partitions.

    Keyed records use :func:`partition_for_key`; keyless ones go round-robin
    starting at ``start % partitions``. One instance per task: the
    round-robin position carries over from one call to the next.
    """

    def __init__(self, partitions: int, start: int = 0) -> None:
        if partitions < 1:
            raise ValueError(f"partitions must be >= 1, got {partitions}")
        self.partitions = partitions
        self._next = start % partitions

    def assign(self, keys: Iterable[bytes | str | None]) -> list[int]:
        n = self.partitions
        out = []
        for key in keys:
            if key is None:
                out.append(self._next)
                self._next = (self._next + 1) % n
            else:
                out.append(partition_for_key(key, n))
        return out

    def assign_column(self, keys: pa.Array) -> np.ndarray:
        """:meth:`assign` over an Arrow column of keys, vectorized (int64)."""
        out = (murmur2_column(keys) & np.uint32(0x7FFFFFFF)).astype(np.int64) % self.partitions
        if keys.null_count:
            nulls = np.flatnonzero(keys.is_null().to_numpy(zero_copy_only=False))
            out[nulls] = self.spread_array(len(nulls))
        return out

    def spread_array(self, count: int) -> np.ndarray:
        """:meth:`spread` as an int64 array."""
        n, first = self.partitions, self._next
        self._next = (first + count) % n
        return (first + np.arange(count, dtype=np.int64)) % n

    def spread(self, count: int) -> list[int]:
        """Partitions for ``count`` keyless records."""
        n, first = self.partitions, self._next
        self._next = (first + count) % n
        return [(first + i) % n for i in range(count)]


def check_partition_column(col: pa.Array, partitions: int | None, first_row: int = 0) -> np.ndarray:
    """An explicit partition column as int64; ValueError naming the first null,
    negative or (when ``partitions`` is known) out-of-range value, counting
    rows from ``first_row``."""
    from ._record_chunks import first_null

    parts = col.to_numpy(zero_copy_only=False)
    bad = first_null(col)
    if bad is None:
        wrong = (parts < 0) | (parts >= partitions) if partitions is not None else parts < 0
        found = np.flatnonzero(wrong)
        bad = int(found[0]) if len(found) else None
    if bad is not None:
        bound = f"0..{partitions - 1}" if partitions is not None else ">= 0"
        raise ValueError(f"row {first_row + bad} of the task has partition {col[bad].as_py()!r}; it must be {bound}")
    return parts.astype(np.int64)
