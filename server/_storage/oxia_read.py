"""Oxia's batched ``Read`` RPC, encoded and decoded in a few tight loops.

The ``oxia`` client (de)serializes through betterproto2, generic pure Python
that walks field metadata per value; a fetch of 64 partitions at their end
reads 64 control records in one ``Read``, and that walk was three quarters
of the broker's CPU for such a fetch. These two functions do the same wire
work for the one RPC on the read hot path (``MetadataStore.get_many``);
everything else still goes through the client.

Layout (protobuf wire format, proto3; the messages of Oxia's ``client.proto``,
as generated into ``oxia.internal.proto``)::

    ReadRequest   1 shard      int64, varint (always sent)
                  2 gets       GetRequest, length-delimited, repeated
    GetRequest    1 key        string, length-delimited (absent when empty)
                  2 include_value  bool, varint 1
                  3 comparison_type  enum; EQUAL is 0, the default, so absent
    ReadResponse  1 gets       GetResponse, length-delimited, repeated
    GetResponse   1 status     enum, varint (absent: 0, OK)
                  2 version    Version, length-delimited
                  3 value      bytes (absent: none)
                  4 key        string (absent: none)
                  5 secondary_index_key  string (read past)
    Version       1 version_id int64, varint (negative: ten bytes, two's
                               complement); fields 2-6 read past

A tag is ``field << 3 | wire type`` (0 varint, 1 fixed64, 2
length-delimited, 5 fixed32); a reader reads past any field it does not
know, of any wire type, as protobuf requires. ``tests/unit/test_oxia_read.py``
pins both directions against betterproto2's own encoding.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from .._errors import MetadataStoreError

__all__ = ["READ_METHOD", "STATUS_KEY_NOT_FOUND", "STATUS_OK", "GotKey", "decode_read_response", "encode_read_request"]

READ_METHOD = "/io.streamnative.oxia.proto.OxiaClient/Read"
STATUS_OK, STATUS_KEY_NOT_FOUND = 0, 1
_GET_TAIL = b"\x10\x01"  # include_value = true; comparison_type EQUAL left out (the default)


@dataclass(frozen=True, slots=True)
class GotKey:
    """One ``GetResponse``: its status, and for a found key its version, value and key."""

    status: int
    version_id: int | None
    value: bytes | None
    key: str | None


def _varint(n: int) -> bytes:
    if n < 0:
        n += 1 << 64
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def encode_read_request(shard: int, keys: Sequence[str]) -> bytes:
    """A ``ReadRequest`` for ``shard`` with an exact get, value included, of each key in order."""
    parts = [b"\x08", _varint(shard)]
    for key in keys:
        raw = key.encode()
        get = b"\x0a" + _varint(len(raw)) + raw + _GET_TAIL if raw else _GET_TAIL  # "" is the default: left out
        parts += (b"\x12", _varint(len(get)), get)
    return b"".join(parts)


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    b = data[pos]
    if b < 0x80:
        return b, pos + 1
    n, shift = 0, 0
    while True:
        b = data[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        if b < 0x80:
            return n, pos
        shift += 7
        if shift > 63:
            raise MetadataStoreError("Oxia answered a malformed Read response (varint longer than 10 bytes)")


def _fields(data: bytes, start: int, end: int):
    """Yield ``(field, wire type, value)``: an int for varints and fixed
    fields, ``(start, end)`` of the payload for length-delimited ones."""
    pos = start
    while pos < end:
        tag, pos = _read_varint(data, pos)
        field, wire = tag >> 3, tag & 7
        if wire == 0:
            value, pos = _read_varint(data, pos)
        elif wire == 2:
            size, pos = _read_varint(data, pos)
            value, pos = (pos, pos + size), pos + size
        elif wire == 1:
            value, pos = int.from_bytes(data[pos:pos + 8], "little"), pos + 8
        elif wire == 5:
            value, pos = int.from_bytes(data[pos:pos + 4], "little"), pos + 4
        else:
            raise MetadataStoreError(f"Oxia answered a malformed Read response (wire type {wire})")
        if pos > end:
            raise MetadataStoreError("Oxia answered a truncated Read response")
        yield field, wire, value


def _int64(n: int) -> int:
    return n - (1 << 64) if n >= 1 << 63 else n


def _get_response(data: bytes, start: int, end: int) -> GotKey:
    status, version_id, value, key = 0, None, None, None
    for field, wire, v in _fields(data, start, end):
        if field == 1 and wire == 0:
            status = v
        elif field == 2 and wire == 2:
            version_id = 0  # a Version without field 1 holds the default, 0
            for f, w, x in _fields(data, v[0], v[1]):
                if f == 1 and w == 0:
                    version_id = _int64(x)
        elif field == 3 and wire == 2:
            value = data[v[0]:v[1]]
        elif field == 4 and wire == 2:
            key = data[v[0]:v[1]].decode()
    return GotKey(status, version_id, value, key)


def decode_read_response(data: bytes) -> list[GotKey]:
    """The ``GetResponse`` s of one ``ReadResponse`` stream message, in order."""
    try:
        return [_get_response(data, v[0], v[1]) for field, wire, v in _fields(data, 0, len(data))
                if field == 1 and wire == 2]
    except (IndexError, UnicodeDecodeError) as exc:
        raise MetadataStoreError(f"Oxia answered a malformed Read response ({exc})") from exc
