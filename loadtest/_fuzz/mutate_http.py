"""Cases at the HTTP layer, for both services: methods, paths, headers, the
request line, Content-Length and chunked framing, pipelining, GET bodies,
slow senders, dripping senders and connections reset mid-answer.

Builders take ``(rng, ctx, target)``; ``target`` is ``broker`` or ``compactor``.
"""

from __future__ import annotations

import json
import random
from dataclasses import replace
from typing import Callable

from .mutate_binary import BINARY_CASES
from .mutate_json import JSON_CASES
from .requests import (
    BROKER_GETS, COMPACTOR_GETS, Case, Ctx, ProduceSent, Req, consume_json, http_request, produce_json,
)

__all__ = ["HTTP_CASES", "COMPACTOR_ONLY", "valid_request"]

_ROUTES = {
    "broker": {**{p: "GET" for p in BROKER_GETS}, "/produce": "POST", "/consume": "POST"},
    "compactor": {p: "GET" for p in COMPACTOR_GETS},
}
_METHODS = ["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "HEAD", "CONNECT", "BREW", "PROPFIND",
            "get", "GeT", "X" * 100, "G\udcffT", "POST\x00"]


def _get(rng: random.Random, target: str) -> Req:
    path = rng.choice(BROKER_GETS if target == "broker" else COMPACTOR_GETS)
    return Req(http_request("GET", path), "GET", path)


def valid_request(rng: random.Random, ctx: Ctx, target: str, *, headers: tuple[tuple[str, str], ...] = (),
                  version: str = "HTTP/1.1") -> Req:
    """A request the service serves: a GET route, or (broker) a produce or a consume."""
    pick = rng.random() if target == "broker" else 0.0
    if pick < 0.4:
        path = rng.choice(BROKER_GETS if target == "broker" else COMPACTOR_GETS)
        return Req(http_request("GET", path, headers=headers, version=version), "GET", path)
    if pick < 0.8:
        _, _, sent = produce_json(rng, ctx)
        hdrs = (("Content-Type", "application/json"), *headers)
        return Req(http_request("POST", "/produce", sent.body, hdrs, version=version), "POST", "/produce", produce=sent)
    body = json.dumps(consume_json(rng, ctx)).encode()
    return Req(http_request("POST", "/consume", body, headers, version=version), "POST", "/consume")


def _one(kind: str, target: str, req: Req, mode: str = "send", **kw: object) -> Case:
    return Case(kind, target, mode, (req,), **kw)  # type: ignore[arg-type]


def get_routes(rng: random.Random, ctx: Ctx, target: str) -> Case:
    path = rng.choice(BROKER_GETS if target == "broker" else COMPACTOR_GETS)
    path += rng.choice(("", "", "?x=1", "?a=%00&b=../..", "?" + "q" * 3000, "#frag"))
    return _one("get-routes", target, Req(http_request("GET", path), "GET", path))


def method(rng: random.Random, ctx: Ctx, target: str) -> Case:
    path, served = rng.choice(list(_ROUTES[target].items()))
    verb = rng.choice([m for m in _METHODS if m != served])
    body = rng.choice((b"", b"", b'{"topic_partitions": []}', b"x" * rng.randrange(1, 3000)))
    data = http_request(verb, path, body)
    return _one("method", target, Req(data, verb, path, head=verb == "HEAD", expect=frozenset({405})))


def path(rng: random.Random, ctx: Ctx, target: str) -> Case:
    choices: list[tuple[str, frozenset[int]]] = [
        ("/..", frozenset({404})), ("/../health", frozenset({404})), ("/produce/../health", frozenset({404})),
        ("/%2e%2e/health", frozenset({404})), ("/%00", frozenset({404})), ("/health%00", frozenset({404})),
        ("/health\x00", frozenset({404})), ("//health", frozenset()), ("///metrics", frozenset()),
        ("/health?x=..", frozenset()), ("*", frozenset({404})), ("http://fuzz/health", frozenset()),
        ("http://[::1/health", frozenset({404})), ("/HEALTH", frozenset({404})), ("/health/", frozenset()),
        ("/produce/", frozenset({404})), ("/\u00e9\u6f22", frozenset({404})), ("/%ff%fe", frozenset({404})),
        ("/\udcff\udcfe", frozenset({404})), ("/.%2e/", frozenset({404})), ("\\health", frozenset({404})),
    ]
    target_path, expect = rng.choice(choices)
    verb = "GET" if target == "compactor" or rng.random() < 0.5 else "POST"
    if verb == "POST" and expect == frozenset():
        expect = frozenset({404, 405})
    if rng.random() < 0.25:  # a request line of 65536 bytes with its CRLF is the most
        target_path = "/" + "a" * (rng.choice((1000, 8000, 65000, 65521, 65522, 100000)) - 1)
        expect = frozenset({404})
    data = http_request(verb, target_path, b"{}" if verb == "POST" else b"")
    if data.index(b"\r\n") + 2 > 65536:
        expect = frozenset({414})
    return _one("path", target, Req(data, verb, target_path, expect=expect))


def _header_limits(data: bytes) -> frozenset[int]:
    """431 (or, when the client was still sending, a reset) for a header block
    over the limits: 100 lines, 64 KiB a line, 64 KiB in all; else anything."""
    head = data[:data.index(b"\r\n\r\n") + 4]
    block = head[head.index(b"\r\n") + 2:]
    lines = block.split(b"\r\n")[:-2]
    if len(lines) > 100 or len(block) > 65536 or any(len(line) + 2 > 65536 for line in lines):
        return frozenset({431, 0})
    return frozenset()


def headers(rng: random.Random, ctx: Ctx, target: str) -> Case:
    variant = rng.randrange(6)
    req = _get(rng, target)
    if variant == 0:  # many headers: at most 100
        n = rng.choice((10, 50, 98, 99, 100, 101, 150, 1000))
        extra: tuple[tuple[str, str], ...] = tuple((f"X-Fuzz-{i}", "v" * rng.randrange(0, 40)) for i in range(n))
    elif variant == 1:  # one huge header line: 65536 bytes with its CRLF is the most
        extra = (("X-Big", "b" * rng.choice((1000, 16000, 65000, 65515, 65516, 65527, 65528, 200000))),)
    elif variant == 2:  # many big headers: each line within its limit, megabytes in all
        extra = tuple((f"X-Big-{i}", "b" * rng.choice((3000, 60000))) for i in range(rng.choice((5, 20, 50))))
    if variant <= 2:
        data = http_request(req.method, req.path, headers=extra)
        return _one("headers", target, replace(req, data=data, expect=_header_limits(data)))
    if variant == 3:  # lines that are not quite headers
        line = rng.choice([("", "NoColon"), ("Bad Name", "x"), ("X-Nul", "a\x00b"), ("X-Fold", "a\r\n b"),
                           ("X-Raw", "\udcff\udcfe"), ("", ": empty-name"), ("Host", "again"), ("X-Utf8", "é漢🙂"),
                           ("Content-Type", "\x00"), ("Accept", ";;;q=nan,,"), ("Connection", "keep-alive, close")])
        req = valid_request(rng, ctx, target, headers=(line,))
        return _one("headers", target, req)
    if variant == 4:  # Expect: 100-continue: the interim 100 then the real answer
        return _one("headers", target, valid_request(rng, ctx, target, headers=(("Expect", "100-continue"),)))
    hdrs = rng.choice(((("Connection", "close"),), (), (("Connection", "keep-alive"),)))
    return _one("headers", target, valid_request(rng, ctx, target, headers=hdrs, version="HTTP/1.0"))


def request_line(rng: random.Random, ctx: Ctx, target: str) -> Case:
    path = rng.choice(BROKER_GETS if target == "broker" else COMPACTOR_GETS)
    none: frozenset[int] = frozenset()
    choices: list[tuple[bytes, frozenset[int]]] = [
        (b"\r\n\r\n", frozenset({0})), (b"GET\r\n\r\n", frozenset({400})),
        (f"GET {path} HTTP/1.1 extra\r\n\r\n".encode(), frozenset({400})),
        (f"GET {path} HTTP/2.0\r\n\r\n".encode(), frozenset({505})),
        (f"GET {path} HTTP/3.0\r\n\r\n".encode(), frozenset({505})),
        (f"GET {path} HTTP/1.2\r\nHost: x\r\n\r\n".encode(), none),
        (f"GET {path} HTTP/0.9\r\n\r\n".encode(), none), (f"GET {path} HTTP/1\r\n\r\n".encode(), frozenset({400})),
        (f"GET {path} HTTP/a.b\r\n\r\n".encode(), frozenset({400})),
        (f"GET {path} http/1.1\r\n\r\n".encode(), frozenset({400})),
        (f"GET {path} HTTP/1.1.1\r\n\r\n".encode(), frozenset({400})),
        (f"GET {path} HTTP/01.01\r\n\r\n".encode(), none),
        (f"GET {path} HTTP/99999999999.1\r\n\r\n".encode(), frozenset({400})),
        (f"GET {path}\r\n\r\n".encode(), none), (b"POST /produce\r\n\r\n", frozenset({400})),
        (f"GET\t{path}\tHTTP/1.1\r\n\r\n".encode(), none),
        (f"\r\nGET {path} HTTP/1.1\r\n\r\n".encode(), frozenset({0, 200})),
        (bytes(rng.choice(range(32, 256)) for _ in range(rng.randrange(1, 200))) + b"\r\n\r\n", none),
    ]
    data, expect = rng.choice(choices)
    return _one("request-line", target, Req(data, "GET", path, expect=expect), allow=frozenset({505}))


def _produce_req(rng: random.Random, ctx: Ctx) -> tuple[bytes, ProduceSent]:
    _, _, sent = produce_json(rng, ctx)
    return sent.body, sent


def content_length(rng: random.Random, ctx: Ctx, target: str) -> Case:
    if target == "broker":
        body, sent = _produce_req(rng, ctx)
        verb, route = "POST", "/produce"
    else:
        body, sent = b'{"a": 1}', None
        verb, route = rng.choice((("POST", "/health"), ("GET", "/metrics")))
    broker = target == "broker"
    variant = rng.randrange(5)
    head = http_request(verb, route, headers=[("Content-Type", "application/json")], content_length=False)[:-2]
    if variant == 0:  # no Content-Length at all
        return _one("content-length", target, _req(head + b"\r\n" + body, verb, route, sent, {411} if broker else set(), False))
    if variant == 1:
        token = rng.choice(("abc", "-1", "1.5", "+12", "0x10", "1e3", "\u0661\u0662", "", "12abc", "1 2",
                            f"{len(body)}, {len(body) + 1}"))
        data = head + f"Content-Length: {token}\r\n\r\n".encode() + body
        return _one("content-length", target, _req(data, verb, route, sent, {400} if broker else set(), False))
    if variant == 2:  # repeated, or padded with blanks: one value after all, so valid
        value = rng.choice((f"{len(body)}\r\nContent-Length: {len(body)}", f"  {len(body)}  "))
        data = head + f"Content-Length: {value}\r\n\r\n".encode() + body
        return _one("content-length", target, _req(data, verb, route, sent, set(), True))
    if variant == 3:  # shorter than the body: the rest would be the next request
        cut = rng.randrange(0, len(body))
        data = head + f"Content-Length: {cut}\r\n\r\n".encode() + body
        sent2 = replace(sent, body=body[:cut]) if sent else None
        return _one("content-length", target, _req(data, verb, route, sent2, {400} if broker else set(), True))
    data = head + f"Content-Length: {len(body) + rng.randrange(1, 100)}\r\n\r\n".encode() + body
    return _one("content-length", target, _req(data, verb, route, sent, {400} if broker else set(), False), mode="shut")


def _req(data: bytes, verb: str, route: str, sent: ProduceSent | None, expect: set[int], complete: bool) -> Req:
    produce = replace(sent, complete=complete) if sent else None
    return Req(data, verb, route, produce=produce, expect=frozenset(expect))


def chunked(rng: random.Random, ctx: Ctx, target: str) -> Case:
    body, sent = _produce_req(rng, ctx) if target == "broker" else (b'{"a": 1}', None)
    verb, route = ("POST", "/produce") if target == "broker" else rng.choice((("GET", "/health"), ("POST", "/metrics")))
    cut = rng.randrange(1, len(body))
    chunks = {
        "valid": b"%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n" % (cut, body[:cut], len(body) - cut, body[cut:]),
        "bad-size": b"zz\r\n" + body + b"\r\n0\r\n\r\n",
        "no-end": b"%x\r\n%s\r\n" % (len(body), body),
        "wrong-size": b"%x\r\n%s\r\n0\r\n\r\n" % (len(body) + 5, body),
    }
    te = rng.choice(("chunked", "Chunked", "gzip, chunked", "identity", "chunked, chunked"))
    extra = [("Transfer-Encoding", te)] + ([("Content-Length", str(len(body)))] if rng.random() < 0.3 else [])
    data = http_request(verb, route, headers=extra, content_length=False) + chunks[rng.choice(list(chunks))]
    return _one("chunked", target, _req(data, verb, route, sent, {411} if target == "broker" else set(), False))


def pipeline(rng: random.Random, ctx: Ctx, target: str) -> Case:
    reqs = []
    for _ in range(rng.randrange(2, 7)):
        pick = rng.random()
        if target == "broker" and pick < 0.5:
            pool = {**JSON_CASES, **BINARY_CASES}
            kind = rng.choice(sorted(pool))
            reqs.append(pool[kind][1](rng, ctx).requests[0])
        elif pick < 0.7:
            reqs.append(method(rng, ctx, target).requests[0])
        elif pick < 0.8:
            reqs.append(valid_request(rng, ctx, target, headers=(("Connection", "close"),)))
        else:
            reqs.append(valid_request(rng, ctx, target))
    return Case("pipeline", target, "send", tuple(reqs))


def get_with_body(rng: random.Random, ctx: Ctx, target: str) -> Case:
    """A request whose body is itself a request: it must never be answered."""
    smuggled = http_request("GET", f"/smuggled-{ctx.req_id()}")
    route = rng.choice(BROKER_GETS if target == "broker" else COMPACTOR_GETS)
    verb = rng.choice(("GET", "GET", "POST", "DELETE"))
    if rng.random() < 0.25:
        frame = [("Transfer-Encoding", "chunked")]
        body = b"%x\r\n%s\r\n0\r\n\r\n" % (len(smuggled), smuggled)
    else:
        frame, body = [("Content-Length", str(len(smuggled)))], smuggled
    first = Req(http_request(verb, route, headers=frame, content_length=False) + body, verb, route,
                expect=frozenset() if verb == "GET" else frozenset({405}))
    second = _get(rng, target)
    return Case("get-with-body", target, "send", (first, replace(second, expect=frozenset({200}))))


def slow(rng: random.Random, ctx: Ctx, target: str) -> Case:
    """A sender that goes silent: the server's read timeout must end the connection."""
    variant = rng.randrange(5)
    if variant < 3:
        full = http_request("GET", "/health", headers=[("X-Slow", "1")])
        prefix = (b"", full[:8], full[:30])[variant]
        return _one("slow", target, Req(full, "GET", "/health", expect=frozenset({0})), "stall", prefix=prefix)
    if target == "broker":
        body, sent = _produce_req(rng, ctx)
        hdrs = [("Expect", "100-continue")] if variant == 4 else []
        data = http_request("POST", "/produce", body, hdrs)
        prefix = data[:len(data) - len(body)] + (b"" if variant == 4 else body[:rng.randrange(len(body))])
        req = Req(data, "POST", "/produce", produce=replace(sent, complete=False), expect=frozenset({408}))
        return _one("slow", target, req, "stall", prefix=prefix)
    verb, route = rng.choice((("POST", "/health"), ("GET", "/metrics")))
    data = http_request(verb, route, b'{"slow": true}')
    expect = frozenset({405, 0}) if verb == "POST" else frozenset({200, 0})
    return _one("slow", target, Req(data, verb, route, expect=expect), "stall", prefix=data[:-5])


def drip(rng: random.Random, ctx: Ctx, target: str) -> Case:
    """A valid request sent in pieces, each well within the read timeout."""
    req = valid_request(rng, ctx, target)
    cuts = tuple(sorted(rng.sample(range(1, len(req.data)), min(len(req.data) - 1, rng.randrange(1, 6)))))
    return _one("drip", target, req, "drip", drip=cuts, drip_pause_s=rng.uniform(0.01, 0.1))


def abort(rng: random.Random, ctx: Ctx, target: str) -> Case:
    """The client resets the connection before, or while, the answer is written."""
    variant = rng.randrange(3)
    if variant == 0:
        return _one("abort", target, valid_request(rng, ctx, target), "abort")
    if variant == 1:
        req = Req(http_request("GET", "/metrics/prometheus"), "GET", "/metrics/prometheus")
        return _one("abort", target, req, "abort", read_bytes=rng.randrange(1, 2000))
    req = valid_request(rng, ctx, target)
    cut = rng.randrange(len(req.data))
    produce = replace(req.produce, complete=False) if req.produce else None
    return _one("abort", target, replace(req, data=req.data[:cut], produce=produce), "abort")


def post_body(rng: random.Random, ctx: Ctx, target: str) -> Case:
    """A body sent to a GET-only path: 405, the body skipped (or the connection closed past 1 MiB)."""
    route = rng.choice(COMPACTOR_GETS)
    size = rng.choice((0, 10, 1000, 100_000, (1 << 20) + 1))
    body = b'{"x": "' + b"y" * size + b'"}'
    verb = rng.choice(("POST", "PUT", "PATCH"))
    return _one("post-body", target, Req(http_request(verb, route, body), verb, route, expect=frozenset({405})))


Builder = Callable[[random.Random, Ctx, str], Case]
HTTP_CASES: dict[str, tuple[float, float, Builder]] = {
    # kind: (broker weight, compactor weight, builder)
    "get-routes": (2, 3, get_routes),
    "method": (3, 4, method),
    "path": (3, 3, path),
    "headers": (3, 3, headers),
    "request-line": (2, 2, request_line),
    "content-length": (4, 2, content_length),
    "chunked": (3, 2, chunked),
    "pipeline": (4, 3, pipeline),
    "get-with-body": (2, 2, get_with_body),
    "slow": (1.5, 1, slow),
    "drip": (2, 1, drip),
    "abort": (2, 1, abort),
    "post-body": (0, 2, post_body),
}
COMPACTOR_ONLY = ("post-body",)
