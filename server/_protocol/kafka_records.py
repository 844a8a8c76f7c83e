"""Records inside a RecordBatch v2 batch: the record type, varints, and the
records section's encoding and parsing (layout in ``kafka_batch.py``; this
module knows nothing of the 61-byte header)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import NamedTuple, Sequence

from .._errors import CorruptBatch

__all__ = [
    "TimestampType", "Record", "RecordColumns", "varint", "record_parts", "value_parts", "parse_columns",
    "parse_records",
]


class TimestampType(IntEnum):
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


@dataclass(frozen=True, slots=True)
class Record:
    """One record: what a producer sends and a consumer reads."""

    value: bytes | None
    key: bytes | None = None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    timestamp_ms: int | None = None
    """None: stamped with the writer's clock when the batch is built."""
    offset_delta: int = 0
    """Position in its batch (decoded records only)."""
    timestamp_type: TimestampType = TimestampType.CREATE_TIME
    """Its batch's timestamp type (decoded records only)."""


def _zigzag_bytes(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


_SMALL_VARINTS = tuple(_zigzag_bytes(n) for n in range(1 << 13))
"""Encoded varints of 0 .. 8191 (lengths and offset deltas are mostly small): a lookup, not a loop."""
_NULL = _zigzag_bytes(-1)


def varint(n: int) -> bytes:
    """The zigzag varint of ``n``."""
    return _SMALL_VARINTS[n] if 0 <= n < 8192 else _zigzag_bytes(n)


def _get_varint(buf: bytes, pos: int, raw: bool = False) -> tuple[int, int]:
    """The varint at ``pos`` (zigzag-decoded; ``raw``: not) and where the next field begins."""
    shift = z = 0
    while True:
        if pos >= len(buf):
            raise CorruptBatch("a record ends inside a varint")
        b = buf[pos]
        pos += 1
        z |= (b & 0x7F) << shift
        if not b & 0x80:
            return (z if raw else (z >> 1) ^ -(z & 1)), pos
        shift += 7
        if shift > 63:
            raise CorruptBatch("a varint is longer than 10 bytes")


def record_parts(records: Sequence[Record], stamps: Sequence[int], base_ts: int) -> list[bytes]:
    parts: list[bytes] = []
    add = parts.append
    for delta, r in enumerate(records):
        fields = [b"\x00", varint(stamps[delta] - base_ts), varint(delta)]
        key, value = r.key, r.value
        if key is None:
            fields.append(_NULL)
        else:
            fields += (varint(len(key)), key)
        if value is None:
            fields.append(_NULL)
        else:
            fields += (varint(len(value)), value)
        fields.append(varint(len(r.headers)))
        for hkey, hvalue in r.headers:
            k = hkey.encode("utf-8")
            fields += (varint(len(k)), k)
            if hvalue is None:
                fields.append(_NULL)
            else:
                fields += (varint(len(hvalue)), hvalue)
        body = b"".join(fields)
        add(varint(len(body)))
        add(body)
    return parts


def value_parts(values: Sequence[bytes]) -> list[bytes]:
    """The records of value-only records (null key, no headers, timestamp delta 0)."""
    parts: list[bytes] = []
    add = parts.append
    small = _SMALL_VARINTS
    for delta, value in enumerate(values):
        n = len(value)
        mid = b"\x00\x00" + (small[delta] if delta < 8192 else varint(delta)) + _NULL
        vlen = small[n] if n < 8192 else varint(n)
        add(varint(len(mid) + len(vlen) + n + 1))
        add(mid)
        add(vlen)
        add(value)
        add(b"\x00")
    return parts


class RecordColumns(NamedTuple):
    """The records of a batch as columns (record ``i`` is item ``i`` of each)."""

    values: list[bytes | None]
    keys: list[bytes | None]
    timestamps: list[int]
    headers: list[tuple[tuple[str, bytes | None], ...]]
    offset_deltas: list[int]


def parse_columns(data: bytes, count: int, base_ts: int, log_append: int | None) -> RecordColumns:
    """The ``count`` records of a batch's (decompressed) records section, as columns;
    with ``log_append`` set (a LogAppendTime batch) every record reads as that time.
    The per-record loop is the read path's hottest Python: varints of one or two
    bytes (values up to 8191: lengths of records up to 8 KiB, deltas of a batch
    up to 8192 records) are decoded inline, longer ones by :func:`_get_varint`."""
    values: list[bytes | None] = []
    keys: list[bytes | None] = []
    stamps: list[int] = []
    headers: list[tuple[tuple[str, bytes | None], ...]] = []
    deltas: list[int] = []
    no_headers: tuple[tuple[str, bytes | None], ...] = ()
    size = len(data)
    p = 0
    try:
        for _ in range(count):
            b = data[p]
            if b < 0x80:
                z, p = b, p + 1
            elif data[p + 1] < 0x80:
                z, p = (b & 0x7F) | (data[p + 1] << 7), p + 2
            else:
                z, p = _get_varint(data, p, raw=True)
            length = (z >> 1) ^ -(z & 1)
            end = p + length
            if length < 1 or end > size:
                raise CorruptBatch("a record's length runs past the end of its batch")
            b = data[p + 1]  # after the attributes byte: the timestamp delta
            if b < 0x80:
                z, p = b, p + 2
            else:
                z, p = _get_varint(data, p + 1, raw=True)
            stamps.append(base_ts + ((z >> 1) ^ -(z & 1)) if log_append is None else log_append)
            b = data[p]
            if b < 0x80:
                z, p = b, p + 1
            elif data[p + 1] < 0x80:
                z, p = (b & 0x7F) | (data[p + 1] << 7), p + 2
            else:
                z, p = _get_varint(data, p, raw=True)
            deltas.append((z >> 1) ^ -(z & 1))
            for column in (keys, values):
                b = data[p]
                if b < 0x80:
                    z, p = b, p + 1
                elif data[p + 1] < 0x80:
                    z, p = (b & 0x7F) | (data[p + 1] << 7), p + 2
                else:
                    z, p = _get_varint(data, p, raw=True)
                n = (z >> 1) ^ -(z & 1)
                if n < 0:
                    if n != -1:
                        raise CorruptBatch(f"a key or value length of {n}")
                    column.append(None)
                else:
                    if p + n > end:
                        raise CorruptBatch("a key, value or header runs past the end of its record")
                    column.append(data[p:p + n])
                    p += n
            b = data[p]
            if b == 0:  # no headers: the common case
                p += 1
                headers.append(no_headers)
                if p != end:
                    raise CorruptBatch("a record's fields do not fill its length")
            else:
                nh, p = _get_varint(data, p)
                headers.append(_get_headers(data, p, end, nh))
                p = end
    except IndexError:
        raise CorruptBatch("a record runs past the end of its batch") from None
    if p != size:
        raise CorruptBatch(f"{size - p} bytes left after recordsCount {count} records")
    return RecordColumns(values, keys, stamps, headers, deltas)


def parse_records(data: bytes, count: int, base_ts: int, log_append: int | None) -> list[Record]:
    """The ``count`` records of a batch's (decompressed) records section (see :func:`parse_columns`)."""
    c = parse_columns(data, count, base_ts, log_append)
    if log_append is None:
        return [Record(v, k, h, t, d) for v, k, h, t, d in zip(c.values, c.keys, c.headers, c.timestamps,
                                                                c.offset_deltas)]
    kind = TimestampType.LOG_APPEND_TIME
    return [Record(v, k, h, t, d, kind) for v, k, h, t, d in zip(c.values, c.keys, c.headers, c.timestamps,
                                                                  c.offset_deltas)]


def _get_headers(data: bytes, p: int, end: int, count: int) -> tuple[tuple[str, bytes | None], ...]:
    if count < 0:
        raise CorruptBatch(f"negative header count {count}")
    headers = []
    for _ in range(count):
        hkey, p = _get_bytes(data, p, end)
        hvalue, p = _get_bytes(data, p, end)
        if hkey is None:
            raise CorruptBatch("a header has a null key")
        try:
            headers.append((hkey.decode("utf-8"), hvalue))
        except UnicodeDecodeError:
            raise CorruptBatch("a header key is not UTF-8") from None
    if p != end:
        raise CorruptBatch("a record's fields do not fill its length")
    return tuple(headers)


def _get_bytes(data: bytes, pos: int, end: int) -> tuple[bytes | None, int]:
    b = data[pos]
    if b < 0x80:
        n, pos = (b >> 1) ^ -(b & 1), pos + 1
    else:
        n, pos = _get_varint(data, pos)
    if n == -1:
        return None, pos
    if n < 0 or pos + n > end:
        raise CorruptBatch("a key, value or header runs past the end of its record")
    return data[pos:pos + n], pos + n
