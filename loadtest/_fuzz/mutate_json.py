"""Cases built from valid JSON produce and consume requests (broker only).

Each builder takes ``(rng, ctx)`` and returns a :class:`~.requests.Case`.
A request whose outcome the contract fixes carries ``expect`` (a truncated
JSON body is a 400 whatever else is in it); one whose outcome depends on what
the mutation hit (a flipped byte, a number that may still be a valid
partition) carries none, and the ledger checks it by what it stored.
"""

from __future__ import annotations

import json
import random
from dataclasses import replace
from typing import Any, Callable

from .oracle import refusal_expected
from .requests import Case, Ctx, ProduceSent, Req, consume_json, http_request, produce_json

__all__ = ["JSON_CASES", "WRONG_VALUES"]

_400 = frozenset({400})
WRONG_VALUES = [None, True, False, 0, -1, 1.5, "", "x", "0", [], {}, [1], {"a": 1}, 2**80, -(2**80)]
_BAD_NUMBERS = [
    "1e400", "-1e400", "1e-400", "1.0", "1.5", "1e2", "-1", "NaN", "Infinity", "-Infinity", str(2**80),
    str(-(2**80)), "2147483648", "9" * 5000, "0x1", "01", "+1", ".5", "1.", "-", "1e", "--1", "null", "true",
]
_GOOD_NUMBERS = ["-0", "0", "1", " 2 ", "3"]
"""Partitions of the fuzz topic (4): a larger one parses but is past the topic's count (a 400 of its own)."""


def _produce(kind: str, body: bytes, sent: ProduceSent, *, expect: frozenset[int] = frozenset(),
             content_type: str = "application/json", extra: tuple[tuple[str, str], ...] = ()) -> Case:
    headers = (("Content-Type", content_type), *extra) if content_type else extra
    expect = refusal_expected(expect, body, content_type or None)
    req = Req(http_request("POST", "/produce", body, headers), "POST", "/produce",
              produce=replace(sent, body=body, content_type=content_type or None), expect=expect)
    return Case(kind, "broker", "send", (req,))


def _dumps(doc: Any, rng: random.Random) -> bytes:
    return json.dumps(doc, ensure_ascii=rng.random() < 0.5).encode()


def json_valid(rng: random.Random, ctx: Ctx) -> Case:
    _, doc, sent = produce_json(rng, ctx)
    return _produce("json-valid", sent.body, sent)


def json_unknown_fields(rng: random.Random, ctx: Ctx) -> Case:
    _, doc, sent = produce_json(rng, ctx)
    for _ in range(rng.randrange(1, 4)):
        where = doc if rng.random() < 0.5 else rng.choice(doc["topic_partitions"])
        where[rng.choice(["x", "extra", "__proto__", "topic ", "Partition", "records2", "ü"])] = rng.choice(WRONG_VALUES)
    return _produce("json-unknown-fields", _dumps(doc, rng), sent)


def _locations(doc: dict[str, Any]) -> list[tuple[Any, Any, list[Any]]]:
    """``(container, key, wrong values)`` of every field a wrong type can replace."""
    empty_ok = doc.get("flush") is True  # a flush-only request may name no partition
    out: list[tuple[Any, Any, list[Any]]] = [
        (doc, "topic_partitions", [v for v in WRONG_VALUES if not isinstance(v, list) or not (v or empty_ok)]),
        (doc, "flush", [v for v in WRONG_VALUES if not isinstance(v, bool)]),
    ]
    for item in doc["topic_partitions"]:
        out += [
            (item, "topic", [v for v in WRONG_VALUES if not isinstance(v, str)] + ["", "a/b", "..", "x" * 250, "é"]),
            (item, "partition", [v for v in WRONG_VALUES if isinstance(v, bool) or not isinstance(v, int) or v < 0 or v > 2**31]),
            (item, "records", [v for v in WRONG_VALUES if not isinstance(v, list) or not v]),
        ]
        for j, record in enumerate(item["records"]):
            out.append((item["records"], j, [v for v in WRONG_VALUES if not isinstance(v, str)]
                        + [{"base64": "AAE="}, {"base64": 5}, {"bytes": "AAE="}, {"base64": "AAE=", "x": 1}][1:]))
    return out


def json_wrong_type(rng: random.Random, ctx: Ctx) -> Case:
    _, doc, sent = produce_json(rng, ctx)
    container, key, values = rng.choice(_locations(doc))
    if rng.random() < 0.1 and isinstance(container, dict) and key in container:
        del container[key]  # missing instead of wrong
        expect = frozenset() if key == "flush" else _400
    else:
        container[key] = rng.choice(values)
        expect = _400
    return _produce("json-wrong-type", _dumps(doc, rng), sent, expect=expect)


_PRODUCER_FIELDS = ("producer_id", "producer_epoch", "base_sequence")
_PRODUCER_OUT_OF_RANGE = {"producer_id": [-1, 2**63], "producer_epoch": [-1, 32768], "base_sequence": [-1, 2**31]}


def json_producer_fields(rng: random.Random, ctx: Ctx) -> Case:
    """An item's idempotence fields (SPEC 7.12) partial, of a wrong type or out of range: a 400."""
    _, doc, sent = produce_json(rng, ctx)
    item = rng.choice(doc["topic_partitions"])
    fields: dict[str, Any] = {"producer_id": rng.randrange(0, 2**40), "producer_epoch": rng.randrange(0, 32768),
                              "base_sequence": rng.randrange(0, 2**31)}
    how = rng.choice(("partial", "type", "range"))
    if how == "partial":
        for name in rng.sample(_PRODUCER_FIELDS, rng.randint(1, 2)):
            del fields[name]
    else:
        name = rng.choice(_PRODUCER_FIELDS)
        fields[name] = (rng.choice([v for v in WRONG_VALUES if isinstance(v, bool) or not isinstance(v, int)])
                        if how == "type" else rng.choice(_PRODUCER_OUT_OF_RANGE[name]))
    item.update(fields)
    return _produce("json-producer-fields", _dumps(doc, rng), sent, expect=_400)


def json_number_edge(rng: random.Random, ctx: Ctx) -> Case:
    _, doc, sent = produce_json(rng, ctx)
    item = rng.choice(doc["topic_partitions"])
    good = rng.random() < 0.2
    item["partition"] = "__NUMBER__"
    token = rng.choice(_GOOD_NUMBERS if good else _BAD_NUMBERS)
    body = _dumps(doc, rng).replace(b'"__NUMBER__"', token.encode())
    return _produce("json-number-edge", body, sent, expect=frozenset() if good else frozenset({400, 413}))


def _nested(rng: random.Random, depth: int) -> str:
    opener, closer = rng.choice([("[", "]"), ('{"a":', "}"), ("[[", "]]")])
    return opener * depth + "1" + closer * depth


def json_deep_nesting(rng: random.Random, ctx: Ctx) -> Case:
    _, doc, sent = produce_json(rng, ctx)
    depth = rng.choice((50, 500, 990, 1000, 5000, 20000, 100000))
    where = rng.choice(("body", "record", "partition", "unknown"))
    if where == "body":
        return _produce("json-deep-nesting", _nested(rng, depth).encode(), sent, expect=frozenset({400, 413}))
    target = rng.choice(doc["topic_partitions"])
    if where == "record":
        target["records"][0] = "__NESTED__"
    elif where == "partition":
        target["partition"] = "__NESTED__"
    else:
        doc["nested"] = "__NESTED__"
    body = _dumps(doc, rng).replace(b'"__NESTED__"', _nested(rng, depth).encode())
    return _produce("json-deep-nesting", body, sent, expect=frozenset() if where == "unknown" else frozenset({400, 413}))


_BAD_UTF8 = [b"\xff", b"\xfe\xff", b"\xc3\x28", b"\xc0\xaf", b"\xe0\x80\xaf", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80",
             b"\xf4\x90\x80\x80", b"\xe2\x82", b"\x80", b"\xc3"]


def json_invalid_utf8(rng: random.Random, ctx: Ctx) -> Case:
    _, doc, sent = produce_json(rng, ctx)
    text = json.dumps(doc, ensure_ascii=False)
    variant = rng.randrange(4)
    if variant == 0:
        body = text.encode(rng.choice(("utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-be")))
    elif variant == 1:
        body = b"\xef\xbb\xbf" + text.encode()  # a BOM: the contract says UTF-8 JSON text
    else:
        raw = text.encode()
        quote = [i for i in range(len(raw)) if raw[i:i + 1] == b'"'] if variant == 2 else list(range(len(raw) + 1))
        at = rng.choice(quote) + (1 if variant == 2 else 0)
        body = raw[:at] + rng.choice(_BAD_UTF8) + raw[at:]
    return _produce("json-invalid-utf8", body, sent, expect=_400)


_ESCAPES = [(r"\ud800", True), (r"\udc00", True), (r"\ud800\ud800", True), (r"\q", True), (r"\u12", True),
            (r"\u0000", False), (r"\ud83d\ude00", False), (r"\/", False), ("\t", True), ("\x01", True)]


def json_escape(rng: random.Random, ctx: Ctx) -> Case:
    _, doc, sent = produce_json(rng, ctx)
    escape, bad = rng.choice(_ESCAPES)
    item = rng.choice(doc["topic_partitions"])
    j = rng.randrange(len(item["records"]))
    item["records"][j] = "__ESC__"
    body = _dumps(doc, rng).replace(b"__ESC__", sent.markers[0] + escape.encode())
    return _produce("json-escape", body, sent, expect=_400 if bad else frozenset())


_BASE64 = [("AAE", True), ("A", True), ("!!!!", True), ("AA==AA==", True), (" AAE=", True), ("AAE=\n", True),
           ("====", True), ("AAE=A", True), ("", False), ("AAECAw==", False), ("-_8=", True)]


def json_bad_base64(rng: random.Random, ctx: Ctx) -> Case:
    _, doc, sent = produce_json(rng, ctx)
    text, bad = rng.choice(_BASE64)
    rng.choice(doc["topic_partitions"])["records"].append({"base64": text})
    return _produce("json-bad-base64", _dumps(doc, rng), sent, expect=_400 if bad else frozenset())


def json_truncated(rng: random.Random, ctx: Ctx) -> Case:
    _, _, sent = produce_json(rng, ctx)
    return _produce("json-truncated", sent.body[:rng.randrange(len(sent.body))], sent, expect=_400)


def json_byte_flip(rng: random.Random, ctx: Ctx) -> Case:
    _, _, sent = produce_json(rng, ctx)
    body = bytearray(sent.body)
    for _ in range(rng.randrange(1, 5)):
        at = rng.randrange(len(body))
        op = rng.randrange(3)
        if op == 0:
            body[at] = rng.randrange(256)
        elif op == 1:
            body.insert(at, rng.choice(b'{}[]",:\\0-e.\x00\xff'))
        elif len(body) > 1:
            del body[at]
    return _produce("json-byte-flip", bytes(body), sent)


def json_structure(rng: random.Random, ctx: Ctx) -> Case:
    _, doc, sent = produce_json(rng, ctx)
    item = doc["topic_partitions"][0]
    choices: list[tuple[bytes, frozenset[int]]] = [
        (b"", _400), (b"[]", _400), (b"null", _400), (b"0", _400), (b'"x"', _400), (b"{}", _400),
        (b'{"topic_partitions": null}', _400), (b'{"topic_partitions": []}', _400),
        (b'{"topic_partitions": [], "flush": true}', frozenset({200})), (b'{"topic_partitions": {}}', _400),
        (json.dumps({**doc, "topic_partitions": [{**item, "records": []}]}).encode(), _400),
        (json.dumps({"topic_partitions": [item] * (ctx.max_records // len(item["records"]) + 1)}).encode(),
         frozenset({413})),
        (b'{"topic_partitions": [], "topic_partitions": ' + json.dumps(doc["topic_partitions"]).encode() + b"}",
         frozenset()),
        (json.dumps(doc).encode() + b" ", frozenset()), (json.dumps(doc).encode() + b" {}", _400),
        (b"\n\t " + json.dumps(doc).encode(), frozenset()),
    ]
    body, expect = rng.choice(choices)
    return _produce("json-structure", body, sent, expect=expect)


def body_oversized(rng: random.Random, ctx: Ctx) -> Case:
    _, doc, sent = produce_json(rng, ctx)
    if rng.random() < 0.5:
        doc["topic_partitions"][0]["records"].append("x" * (ctx.max_request_bytes + rng.randrange(1, 5000)))
        return _produce("body-oversized", json.dumps(doc).encode(), sent, expect=frozenset({413}))
    length = rng.choice((ctx.max_request_bytes + 1, 10**12, 2**63 - 1, 10**30))
    data = http_request("POST", "/produce", headers=[("Content-Length", str(length))], content_length=False)
    return Case("body-oversized", "broker", "send", (Req(data, "POST", "/produce", expect=frozenset({413})),))


# -- consume ---------------------------------------------------------------------------


def _consume(kind: str, body: bytes, expect: frozenset[int] = frozenset(), accept: str | None = None) -> Case:
    headers = [("Content-Type", "application/json")] + ([("Accept", accept)] if accept else [])
    return Case(kind, "broker", "send", (Req(http_request("POST", "/consume", body, headers), "POST", "/consume", expect=expect),))


def consume_valid(rng: random.Random, ctx: Ctx) -> Case:
    accept = rng.choice((None, None, "application/vnd.llog.consume.v1", "application/vnd.llog.consume.v1;q=0", "*/*"))
    return _consume("consume-valid", json.dumps(consume_json(rng, ctx)).encode(), accept=accept)


def consume_mutated(rng: random.Random, ctx: Ctx) -> Case:
    doc = consume_json(rng, ctx)
    item = rng.choice(doc["topic_partitions"])
    key = rng.choice(("fetch_offset", "partition", "topic", "partition_max_bytes", "max_wait_ms", "min_bytes",
                      "max_bytes", "topic_partitions", "duplicate", "token"))
    expect = _400
    if key == "duplicate":
        doc["topic_partitions"].append(dict(item))
    elif key == "token":
        item["fetch_offset"] = "__N__"
        token = rng.choice(_BAD_NUMBERS + _GOOD_NUMBERS + ["-5", str(-(2**63) + 1), str(2**63)])
        body = json.dumps(doc).encode().replace(b'"__N__"', token.encode())
        return _consume("consume-mutated", body)
    elif key in ("max_wait_ms", "min_bytes", "max_bytes"):
        doc[key] = rng.choice(WRONG_VALUES + [10**9])
        expect = frozenset()
    elif key == "topic_partitions":
        doc[key] = rng.choice([None, [], {}, "x", [1]])
    else:
        item[key] = rng.choice(WRONG_VALUES)
        expect = frozenset()
    return _consume("consume-mutated", json.dumps(doc).encode(), expect)


JSON_CASES: dict[str, tuple[float, Callable[[random.Random, Ctx], Case]]] = {
    "json-valid": (8, json_valid),
    "json-unknown-fields": (3, json_unknown_fields),
    "json-wrong-type": (6, json_wrong_type),
    "json-number-edge": (5, json_number_edge),
    "json-producer-fields": (3, json_producer_fields),
    "json-deep-nesting": (2, json_deep_nesting),
    "json-invalid-utf8": (4, json_invalid_utf8),
    "json-escape": (2, json_escape),
    "json-bad-base64": (2, json_bad_base64),
    "json-truncated": (3, json_truncated),
    "json-byte-flip": (4, json_byte_flip),
    "json-structure": (3, json_structure),
    "body-oversized": (2, body_oversized),
    "consume-valid": (3, consume_valid),
    "consume-mutated": (3, consume_mutated),
}
