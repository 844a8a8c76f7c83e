"""Cases against the broker's admin routes: topics, delete-records, group offsets, producers.

Each case starts from a valid request of ``server/HTTP_API.md`` and mutates
its body (a field of a wrong type, an unknown field, a cut or a flipped byte,
JSON that is not an object) or its path (names no route may take). What
every answer must satisfy is ``checks.py``'s: a documented 4xx with the JSON
error body or a 2xx, never a 5xx; the cases whose outcome the contract fixes
(an unknown top-level field, a body that is not JSON) carry it.

The destructive requests (PATCH and DELETE of a topic, delete-records) name
only the run's scratch topics, ``fzadm-<tag>-<n>``, never the topic the
ledger reads back: the fuzzer must not delete acknowledged records itself.
Valid partition counts stay small (a create initializes every partition
before it answers).
"""

from __future__ import annotations

import json
import random
from typing import Any, Callable
from urllib.parse import quote

from .mutate_json import WRONG_VALUES
from .requests import Case, Ctx, Req, http_request

__all__ = ["ADMIN_CASES"]

_400 = frozenset({400})
_SCRATCH = 4
_CONFIG = [("retention.ms", ("-1", "86400000", 3_600_000)), ("retention.bytes", ("-1", "1048576")),
           ("cleanup.policy", ("delete", "compact")), ("message.timestamp.type", ("CreateTime", "LogAppendTime")),
           ("max.message.bytes", ("1048588", 65536)), ("segment.bytes", ("1073741824",))]
_BAD_NAMES = ["", ".", "..", "%2e%2e", "a%2Fb", "%00", "x" * 250, "x" * 5000, "%C3%A9", "%ff", "a b", "a%20b",
              "~", "a;b", "%", "%%", "-", "_", "fzadm-" + "9" * 40]
_QUERIES = ["", "?topic=", "?topic=%00", "?topic=a&topic=b", "?x=1", "?topic=" + "t" * 3000, "?=", "?topic"]


def _scratch(rng: random.Random, ctx: Ctx) -> str:
    return f"fzadm-{ctx.tag}-{rng.randrange(_SCRATCH)}"


def _config(rng: random.Random) -> dict[str, Any]:
    picked = rng.sample(_CONFIG, rng.randrange(0, 3))
    return {key: rng.choice(values) for key, values in picked}


def valid_admin(rng: random.Random, ctx: Ctx) -> tuple[str, str, dict[str, Any] | None]:
    """``(method, path, body)`` of a request the broker serves (``body`` None: none sent)."""
    name = _scratch(rng, ctx)
    group = f"fzgroup-{ctx.tag}-{rng.randrange(3)}"
    kind = rng.randrange(10)
    if kind == 0:
        return "GET", rng.choice(("/topics", f"/topics/{name}", f"/topics/{ctx.topic}", "/groups")), None
    if kind == 1:
        return "POST", "/topics", {"name": name, "partitions": rng.randrange(1, 5), "config": _config(rng)}
    if kind == 2:
        body: dict[str, Any] = ({"config": _config(rng) or {"retention.ms": None}} if rng.random() < 0.7
                                else {"partitions": rng.randrange(1, 9)})
        return "PATCH", f"/topics/{name}", body
    if kind == 3:
        return "DELETE", f"/topics/{name}", None
    if kind in (4, 5):
        parts = [{"partition": p} if rng.random() < 0.2 else {"partition": p, "before_offset": rng.randrange(1, 6)}
                 for p in rng.sample(range(4), rng.randrange(1, 4))]
        return "POST", f"/topics/{name}/delete-records", {"partitions": parts}
    if kind == 6:
        offsets = [{"topic": ctx.topic, "partition": rng.randrange(ctx.partitions), "offset": rng.randrange(1, 4),
                    **({"metadata": "fz"} if rng.random() < 0.5 else {})} for _ in range(rng.randrange(1, 3))]
        body = {"offsets": offsets}
        if rng.random() < 0.3:
            body["generation"] = rng.randrange(0, 3)
        return "POST", f"/groups/{group}/offsets", body
    if kind == 7:
        return "GET", f"/groups/{group}/offsets" + rng.choice(("", f"?topic={ctx.topic}")), None
    doc = rng.choice(({}, {"name": f"fzprod-{ctx.tag}-{rng.randrange(3)}"},
                      {"name": f"fzprod-{ctx.tag}-0", "resume": True}, {"producer_id": 1, "producer_epoch": 0}))
    return "POST", "/producers", doc


def _request(kind: str, method: str, path: str, body: bytes | None, expect: frozenset[int] = frozenset()) -> Case:
    headers = (("Content-Type", "application/json"),) if body is not None else ()
    data = http_request(method, path, body or b"", headers)
    return Case(kind, "broker", "send", (Req(data, method, path, expect=expect),))


def _dumps(doc: Any) -> bytes:
    return json.dumps(doc).encode()


def _with_body(rng: random.Random, ctx: Ctx) -> tuple[str, str, dict[str, Any]]:
    while True:
        method, path, doc = valid_admin(rng, ctx)
        if doc is not None:
            return method, path, doc


def admin_valid(rng: random.Random, ctx: Ctx) -> Case:
    method, path, doc = valid_admin(rng, ctx)
    return _request("admin-valid", method, path, None if doc is None else _dumps(doc))


def _slots(doc: Any) -> list[tuple[Any, Any]]:
    """``(container, key)`` of every value inside ``doc``."""
    out: list[tuple[Any, Any]] = []
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else ()
    for key, value in items:
        out.append((doc, key))
        out += _slots(value)
    return out


def admin_wrong_type(rng: random.Random, ctx: Ctx) -> Case:
    """One value replaced by a value of another type, or removed."""
    method, path, doc = _with_body(rng, ctx)
    slots = _slots(doc)
    if slots:
        container, key = rng.choice(slots)
        if rng.random() < 0.2 and isinstance(container, dict):
            del container[key]
        else:
            container[key] = rng.choice(WRONG_VALUES)
    return _request("admin-wrong-type", method, path, _dumps(doc))


def admin_unknown_field(rng: random.Random, ctx: Ctx) -> Case:
    """An unknown field at the top level (a 400 naming it), or inside (whatever the route says)."""
    method, path, doc = _with_body(rng, ctx)
    top = rng.random() < 0.6
    nested = [c for c, k in _slots(doc) if isinstance(c, dict)] if not top else []
    where = rng.choice(nested) if nested else doc
    where[rng.choice(["x", "Name", "name ", "__proto__", "ü", "partitions2", "offsets_"])] = rng.choice(WRONG_VALUES)
    return _request("admin-unknown-field", method, path, _dumps(doc), _400 if where is doc else frozenset())


def admin_body_bytes(rng: random.Random, ctx: Ctx) -> Case:
    """A body cut short, with flipped bytes, not an object, or not UTF-8."""
    method, path, doc = _with_body(rng, ctx)
    body = _dumps(doc)
    variant = rng.randrange(4)
    if variant == 0:
        return _request("admin-body-bytes", method, path, body[:rng.randrange(len(body))], _400)
    if variant == 1:
        raw = bytearray(body)
        for _ in range(rng.randrange(1, 4)):
            raw[rng.randrange(len(raw))] = rng.randrange(256)
        return _request("admin-body-bytes", method, path, bytes(raw))
    if variant == 2:
        other = rng.choice((b"[]", b"null", b"1", b'"x"', b"[{}]", b"true"))
        return _request("admin-body-bytes", method, path, other, _400)
    return _request("admin-body-bytes", method, path, b'{"name": "\xff\xfe"}', _400)


def admin_paths(rng: random.Random, ctx: Ctx) -> Case:
    """A topic or group name no route may take, or a query the route ignores or refuses."""
    bad = rng.choice(_BAD_NAMES)
    variant = rng.randrange(5)
    if variant == 0:
        method, path = rng.choice((("GET", "/topics/{}"), ("PATCH", "/topics/{}"), ("DELETE", "/topics/{}"),
                                   ("POST", "/topics/{}/delete-records")))
        body = b'{"partitions": [{"partition": 0}]}' if path.endswith("records") else (
            b'{"config": {}}' if method == "PATCH" else None)
        return _request("admin-paths", method, path.format(bad), body)
    if variant == 1:
        body = _dumps({"name": rng.choice(("", ".", "..", "a/b", "x" * 250, "é", " ", "a\x00b"))})
        return _request("admin-paths", "POST", "/topics", body, _400)
    if variant == 2:
        method = rng.choice(("GET", "POST"))
        body = _dumps({"offsets": []}) if method == "POST" else None
        return _request("admin-paths", method, f"/groups/{bad}/offsets", body)
    if variant == 3:
        query = rng.choice(_QUERIES)
        return _request("admin-paths", "GET", f"/groups/fzgroup-{ctx.tag}-0/offsets{query}", None)
    name = quote(_scratch(rng, ctx))
    path = rng.choice((f"/topics/{name}/", f"/topics/{name}/delete-records/", f"/topics/{name}/x",
                       "/topics//delete-records", "/groups//offsets", "/groups/g/offsets/x", "/groups/"))
    return _request("admin-paths", rng.choice(("GET", "POST")), path, b"{}")


ADMIN_CASES: dict[str, tuple[float, Callable[[random.Random, Ctx], Case]]] = {
    "admin-valid": (3, admin_valid),
    "admin-wrong-type": (3, admin_wrong_type),
    "admin-unknown-field": (2, admin_unknown_field),
    "admin-body-bytes": (2, admin_body_bytes),
    "admin-paths": (2, admin_paths),
}
