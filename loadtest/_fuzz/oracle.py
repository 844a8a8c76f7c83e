"""What a produce body asks to store, decoded without the broker's parser.

A 200 answer says the body was valid; the ledger needs the records it
stored, so the fuzzer decodes the bytes it sent itself, by the contract
(``server/HTTP_API.md``), not by calling ``server._protocol``: a parser bug
would otherwise agree with itself. A body this decoder refuses but the broker
answered 200 is a finding either way.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import struct
import zlib
from typing import Any

__all__ = ["Refused", "Batch", "decode_produce", "refusal_expected"]

BINARY = "application/vnd.llog.produce.v1"
_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")
_MAX_PARTITION = 2**31 - 1

Batch = tuple[str, int, list[bytes]]
"""``(topic, partition, payloads)``"""


class Refused(ValueError):
    """The body breaks the contract (the broker must answer it 4xx)."""


def decode_produce(body: bytes, content_type: str | None) -> tuple[list[Batch], bool]:
    """``(batches, flush)`` of a valid body; :class:`Refused` otherwise."""
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if media == BINARY:
        return _binary(body)
    return _json(body)


def refusal_expected(expect: frozenset[int], body: bytes, content_type: str | None) -> frozenset[int]:
    """``expect`` of a mutated produce, unless it says 400 for a body the
    contract accepts after all (a mutation that happened to stay valid):
    then nothing is expected and the ledger checks what was stored."""
    if expect != frozenset({400}):
        return expect
    try:
        decode_produce(body, content_type)
    except Refused:
        return expect
    return frozenset()


# -- JSON ------------------------------------------------------------------------------


def _no_constants(name: str) -> Any:
    raise Refused(f"{name} is not JSON")


def _json(body: bytes) -> tuple[list[Batch], bool]:
    try:
        doc = json.loads(body.decode("utf-8"), parse_constant=_no_constants)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise Refused(f"not UTF-8 JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise Refused("not an object")
    flush = doc.get("flush", False)
    if not isinstance(flush, bool):
        raise Refused("flush is not a boolean")
    items = doc.get("topic_partitions")
    if not isinstance(items, list) or (not items and not flush):
        raise Refused("topic_partitions is not a non-empty array")
    return [_json_batch(item) for item in items], flush


def _json_batch(item: Any) -> Batch:
    if not isinstance(item, dict):
        raise Refused("an item is not an object")
    topic, partition, records = item.get("topic"), item.get("partition"), item.get("records")
    if not isinstance(topic, str) or not _TOPIC.fullmatch(topic) or topic in (".", ".."):
        raise Refused(f"bad topic {topic!r}")
    if isinstance(partition, bool) or not isinstance(partition, int) or not 0 <= partition <= _MAX_PARTITION:
        raise Refused(f"bad partition {partition!r}")
    if not isinstance(records, list) or not records:
        raise Refused("records is not a non-empty array")
    _json_producer(item)
    return topic, partition, [_json_record(r) for r in records]


_PRODUCER_BOUNDS = {"producer_id": 2**63 - 1, "producer_epoch": 32767, "base_sequence": 2**31 - 1}


def _json_producer(item: dict) -> None:
    """An idempotent batch's fields (HTTP_API.md, POST /produce): all three or none, integers in range."""
    given = [name for name in _PRODUCER_BOUNDS if name in item]
    if given and len(given) < len(_PRODUCER_BOUNDS):
        raise Refused(f"producer fields {given} without the others")
    for name in given:
        value = item[name]
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _PRODUCER_BOUNDS[name]:
            raise Refused(f"bad {name} {value!r}")


def _json_record(record: Any) -> bytes:
    if isinstance(record, str):
        try:
            return record.encode("utf-8")
        except UnicodeEncodeError:
            raise Refused("a record with a lone surrogate") from None
    if isinstance(record, dict) and list(record) == ["base64"] and isinstance(record["base64"], str):
        try:
            return base64.b64decode(record["base64"], validate=True)
        except (binascii.Error, ValueError):
            raise Refused("invalid base64") from None
    raise Refused(f"a record is neither a string nor {{'base64': ...}}: {type(record).__name__}")


# -- binary ----------------------------------------------------------------------------


class _Cursor:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise Refused(f"the body ends inside a field at {self.pos}")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def u16(self) -> int:
        return struct.unpack(">H", self.take(2))[0]

    def u32(self) -> int:
        return struct.unpack(">I", self.take(4))[0]


def _binary(body: bytes) -> tuple[list[Batch], bool]:
    cur = _Cursor(body)
    if cur.take(4) != b"LLP1" or cur.u16() != 1:
        raise Refused("bad magic or version")
    flags, count = cur.u16(), cur.u32()
    if flags & ~1 or (count == 0 and not flags & 1):
        raise Refused("bad flags or batch_count")
    batches = [_binary_batch(cur) for _ in range(count)]
    if cur.pos != len(body):
        raise Refused("trailing bytes")
    return batches, bool(flags & 1)


def _binary_batch(cur: _Cursor) -> Batch:
    tlen = cur.u16()
    if not 1 <= tlen <= 249:
        raise Refused("bad topic_length")
    try:
        topic = cur.take(tlen).decode("utf-8")
    except UnicodeDecodeError:
        raise Refused("topic not UTF-8") from None
    if not _TOPIC.fullmatch(topic) or topic in (".", ".."):
        raise Refused("bad topic")
    partition = cur.u32()
    if partition > _MAX_PARTITION:
        raise Refused("bad partition")
    magic, version, flags, count, length, crc = struct.unpack(">4sHHIII", cur.take(20))
    if magic != b"LLB1" or version != 1 or flags != 0 or count == 0:
        raise Refused("bad batch header")
    records = cur.take(length)
    if zlib.crc32(records) != crc:
        raise Refused("bad CRC")
    payloads, pos = [], 0
    for _ in range(count):
        if pos + 4 > len(records):
            raise Refused("records end inside a length prefix")
        (n,) = struct.unpack_from(">I", records, pos)
        if pos + 4 + n > len(records):
            raise Refused("records end inside a record")
        payloads.append(records[pos + 4:pos + 4 + n])
        pos += 4 + n
    if pos != len(records):
        raise Refused("trailing bytes in a records section")
    return topic, partition, payloads
