"""Records inside a RecordBatch v2 batch: the record type, varints, and the
records section's encoding and parsing (layout in ``kafka_batch.py``; this
module knows nothing of the 61-byte header)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Sequence

from .._errors import CorruptBatch

__all__ = ["TimestampType", "Record", "varint", "record_parts", "value_parts", "parse_records"]


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


def _get_varint(buf: bytes, pos: int) -> tuple[int, int]:
    shift = z = 0
    while True:
        if pos >= len(buf):
            raise CorruptBatch("a record ends inside a varint")
        b = buf[pos]
        pos += 1
        z |= (b & 0x7F) << shift
        if not b & 0x80:
            return (z >> 1) ^ -(z & 1), pos
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


def parse_records(data: bytes, count: int, base_ts: int, log_append: int | None) -> list[Record]:
    """The ``count`` records of a batch's (decompressed) records section; with
    ``log_append`` set (a LogAppendTime batch) every record reads as that time."""
    out: list[Record] = []
    add = out.append
    size = len(data)
    p = 0
    try:
        for _ in range(count):
            # Single-byte varints (values -64 .. 63) inline: most lengths of
            # small records, every delta and count of a plain batch.
            b = data[p]
            if b < 0x80:
                length, p = (b >> 1) ^ -(b & 1), p + 1
            else:
                length, p = _get_varint(data, p)
            end = p + length
            if length < 1 or end > size:
                raise CorruptBatch("a record's length runs past the end of its batch")
            p += 1  # attributes
            b = data[p]
            if b < 0x80:
                ts_delta, p = (b >> 1) ^ -(b & 1), p + 1
            else:
                ts_delta, p = _get_varint(data, p)
            b = data[p]
            if b < 0x80:
                offset_delta, p = (b >> 1) ^ -(b & 1), p + 1
            else:
                offset_delta, p = _get_varint(data, p)
            key, p = _get_bytes(data, p, end)
            value, p = _get_bytes(data, p, end)
            b = data[p]
            if b < 0x80:
                count, p = (b >> 1) ^ -(b & 1), p + 1
            else:
                count, p = _get_varint(data, p)
            headers: tuple[tuple[str, bytes | None], ...] = ()
            if count:
                headers = _get_headers(data, p, end, count)
                p = end
            elif p != end:
                raise CorruptBatch("a record's fields do not fill its length")
            if log_append is None:
                add(Record(value, key, headers, base_ts + ts_delta, offset_delta))
            else:
                add(Record(value, key, headers, log_append, offset_delta, TimestampType.LOG_APPEND_TIME))
    except IndexError:
        raise CorruptBatch("a record runs past the end of its batch") from None
    if p != size:
        raise CorruptBatch(f"{size - p} bytes left after recordsCount {count} records")
    return out




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
