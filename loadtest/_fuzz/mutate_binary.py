"""Cases built from valid binary produce bodies (``application/vnd.llog.produce.v1``).

The body is a list of named fields (``requests.binary_fields``), so each
mutation changes exactly the field it names: every length field one off in
each direction (``header.batch_count``, ``topic_length``, ``record_count``,
``records_length``, each record's length prefix, with and without the CRC
recomputed over the changed records), wrong magic, version, flags and CRC,
counts that lie by far, truncation, trailing bytes, and the body sent under
the wrong Content-Type. Each is a 400 whatever the batch held (the layout
leaves no slack: a changed length always lands inside or after another field).
"""

from __future__ import annotations

import random
import re
import struct
import zlib
from typing import Any, Callable

from .oracle import refusal_expected
from .requests import BINARY, Case, Ctx, Req, binary_sent, http_request, join_fields, produce_binary

__all__ = ["BINARY_CASES"]

_400 = frozenset({400})
_SIZES = {2: ">H", 4: ">I"}


def _case(kind: str, body: bytes, req_id: int, groups: Any, *, expect: frozenset[int] = _400,
          content_type: str | None = BINARY) -> Case:
    headers = [("Content-Type", content_type)] if content_type is not None else []
    sent = binary_sent(req_id, body, content_type, groups)
    expect = refusal_expected(expect, body, content_type)
    req = Req(http_request("POST", "/produce", body, headers), "POST", "/produce", produce=sent, expect=expect)
    return Case(kind, "broker", "send", (req,))


def _field(fields: list[list[Any]], name: str) -> list[Any]:
    return next(f for f in fields if f[0] == name)


def _set_int(fields: list[list[Any]], name: str, value: int) -> None:
    f = _field(fields, name)
    size = len(f[1])
    f[1] = struct.pack(_SIZES[size], value % (1 << (8 * size)))


def _get_int(fields: list[list[Any]], name: str) -> int:
    f = _field(fields, name)
    return struct.unpack(_SIZES[len(f[1])], f[1])[0]


def _recompute_crc(fields: list[list[Any]], batch: str) -> None:
    records = b"".join(f[1] for f in fields if f[0].startswith(f"{batch}.records["))
    _set_int(fields, f"{batch}.batch.crc32", zlib.crc32(records))


_LENGTHS = re.compile(r"header\.batch_count|batches\[\d+\]\.(topic_length|batch\.record_count|batch\.records_length"
                      r"|records\[\d+\]\.length)")


def binary_valid(rng: random.Random, ctx: Ctx) -> Case:
    req_id, fields, groups = produce_binary(rng, ctx)
    ctype = rng.choice((BINARY, BINARY, BINARY.upper(), BINARY + "; charset=binary", " " + BINARY + " ;x=y"))
    return _case("binary-valid", join_fields(fields), req_id, groups, expect=frozenset(), content_type=ctype)


def binary_off_by_one(rng: random.Random, ctx: Ctx) -> Case:
    req_id, fields, groups = produce_binary(rng, ctx)
    name = rng.choice([f[0] for f in fields if _LENGTHS.fullmatch(f[0])])
    _set_int(fields, name, _get_int(fields, name) + rng.choice((-1, 1)))
    if ".records[" in name and rng.random() < 0.5:
        _recompute_crc(fields, name.split(".records[")[0])  # the CRC agrees: only the length is wrong
    return _case("binary-off-by-one", join_fields(fields), req_id, groups)


_HEADER_VALUES: dict[str, list[Any]] = {
    "header.magic": [b"LLP0", b"LLP2", b"PLL1", b"\x00" * 4, b"llp1", b"LLB1"],
    "header.version": [0, 2, 0xFFFF, 0x0100],
    "header.flags": [2, 3, 0x8000, 0xFFFF, 0x0100],
    "batch.magic": [b"LLB0", b"LLB2", b"LLP1", b"\xff" * 4],
    "batch.version": [0, 2, 0xFFFF],
    "batch.flags": [1, 2, 0x8000],
}


def binary_header(rng: random.Random, ctx: Ctx) -> Case:
    req_id, fields, groups = produce_binary(rng, ctx)
    what = rng.choice([*_HEADER_VALUES, "batch.crc32"])
    name = what if what.startswith("header") else f"batches[{rng.randrange(len(groups))}].{what}"
    if what == "batch.crc32":
        _set_int(fields, name, _get_int(fields, name) ^ (1 << rng.randrange(32)))
    else:
        value = rng.choice(_HEADER_VALUES[what])
        if isinstance(value, bytes):
            _field(fields, name)[1] = value
        else:
            _set_int(fields, name, value)
    return _case("binary-header", join_fields(fields), req_id, groups)


def binary_count_lies(rng: random.Random, ctx: Ctx) -> Case:
    req_id, fields, groups = produce_binary(rng, ctx)
    b = f"batches[{rng.randrange(len(groups))}]"
    name, value = rng.choice([
        ("header.batch_count", 2**32 - 1), ("header.batch_count", 1000), ("header.batch_count", 0),
        (f"{b}.batch.record_count", 2**32 - 1), (f"{b}.batch.record_count", 2**31), (f"{b}.batch.record_count", 0),
        (f"{b}.batch.records_length", 2**32 - 1), (f"{b}.batch.records_length", 0),
        (f"{b}.records[0].length", 2**32 - 1), (f"{b}.topic_length", 0), (f"{b}.topic_length", 0xFFFF),
        (f"{b}.partition", 2**31), (f"{b}.partition", 2**32 - 1),
    ])
    _set_int(fields, name, value)
    if name == "header.batch_count" and value == 0:
        _set_int(fields, "header.flags", 0)  # no FLUSH: a batch_count of 0 is refused
    return _case("binary-count-lies", join_fields(fields), req_id, groups)


def binary_framing(rng: random.Random, ctx: Ctx) -> Case:
    req_id, fields, groups = produce_binary(rng, ctx)
    body = join_fields(fields)
    variant = rng.randrange(6)
    if variant == 0:
        return _case("binary-framing", body[:rng.randrange(len(body))], req_id, groups)
    if variant == 1:
        return _case("binary-framing", body + rng.randbytes(rng.randrange(1, 30)), req_id, groups)
    if variant == 2:  # a binary body read as JSON
        ctype = rng.choice(("application/json", None, "application/vnd.llog.produce.v2", "text/plain"))
        return _case("binary-framing", body, req_id, groups, content_type=ctype)
    if variant == 3:  # a JSON body read as binary
        return _case("binary-framing", b'{"topic_partitions": []}', req_id, groups)
    if variant == 4:  # a flush-only request: no batch, FLUSH set
        return _case("binary-framing", b"LLP1\x00\x01\x00\x01\x00\x00\x00\x00", req_id, groups, expect=frozenset({200}))
    insert_at = rng.randrange(1, len(fields))
    fields.insert(insert_at, ["junk", rng.randbytes(rng.randrange(1, 5))])
    return _case("binary-framing", join_fields(fields), req_id, groups)


BINARY_CASES: dict[str, tuple[float, Callable[[random.Random, Ctx], Case]]] = {
    "binary-valid": (4, binary_valid),
    "binary-off-by-one": (6, binary_off_by_one),
    "binary-header": (4, binary_header),
    "binary-count-lies": (3, binary_count_lies),
    "binary-framing": (3, binary_framing),
}
