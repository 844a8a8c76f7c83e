"""The valid requests every fuzz case starts from, and what a case is.

Every record a produce carries has a unique marker at the start of its value,
``FZ<tag>.<request>.<index>.``, so a record found in the log names the
request that sent it (``ledger.py``). A binary body is built as a list of
named fields (``header.batch_count``, ``batches[0].records_length`` ...) so a
mutation can change exactly one of them; joined unchanged they are exactly
what ``encode_binary_produce`` makes (checked once per run).
"""

from __future__ import annotations

import base64
import json
import random
import re
import struct
import zlib
from dataclasses import dataclass
from typing import Any, Sequence

from server._protocol.produce_binary import PRODUCE_BINARY_CONTENT_TYPE, encode_binary_produce

__all__ = [
    "BINARY", "Ctx", "ProduceSent", "Req", "Case", "http_request", "produce_json", "produce_binary",
    "binary_fields", "join_fields", "consume_json", "marker_re",
]

BINARY = PRODUCE_BINARY_CONTENT_TYPE
BROKER_GETS = ("/health", "/metrics", "/metrics/prometheus")
COMPACTOR_GETS = ("/health", "/metrics", "/metrics/prometheus")
_FILLER = "abcdefghijklmnopqrstuvwxyz0123456789 -_~ÄéßΩ漢字🙂"


@dataclass(frozen=True)
class ProduceSent:
    """A produce request as sent: its body (possibly mutated) and what the
    unmutated request carried (its records' markers and topic-partitions)."""

    req_id: int
    body: bytes
    content_type: str | None
    markers: tuple[bytes, ...]
    tps: tuple[tuple[str, int], ...]
    complete: bool = True
    """False: the body never reached the server whole (a stalled or cut-off sender)."""


@dataclass(frozen=True)
class Req:
    """One request on the wire."""

    data: bytes
    method: str
    path: str
    head: bool = False
    produce: ProduceSent | None = None
    expect: frozenset[int] = frozenset()
    """Statuses this request must get (empty: any the checks allow)."""


@dataclass(frozen=True)
class Case:
    """One fuzz case: requests for one service, and how they are sent.

    ``mode``: ``send`` (the requests, one or several pipelined, on a fresh
    connection; the answers read in order), ``shut`` (send, then half-close),
    ``drip`` (sent in pieces with pauses), ``stall`` (send ``prefix`` and go
    silent: the server's read timeout must end it), ``abort`` (send, read
    ``read_bytes`` of the answer, reset)."""

    kind: str
    target: str
    mode: str
    requests: tuple[Req, ...]
    prefix: bytes = b""
    read_bytes: int = 0
    drip: tuple[int, ...] = ()
    """``drip``: the offsets where the sender pauses."""
    drip_pause_s: float = 0.0
    allow: frozenset[int] = frozenset()
    """Statuses allowed beyond the documented ones (505 for an unsupported HTTP version)."""


@dataclass
class Ctx:
    """What the case builders share: the run's topic and marker tag, the
    services' limits, and the request counter."""

    tag: str
    topic: str
    partitions: int
    max_request_bytes: int
    max_records: int
    next_id: int = 0

    def req_id(self) -> int:
        self.next_id += 1
        return self.next_id

    def marker(self, req_id: int, index: int) -> bytes:
        return f"FZ{self.tag}.{req_id}.{index}.".encode()


def marker_re(tag: str) -> re.Pattern[bytes]:
    """Finds a marker in a stored value: groups request id, record index."""
    return re.compile(rb"FZ" + re.escape(tag.encode()) + rb"\.(\d+)\.(\d+)\.")


def http_request(
    method: str, path: str, body: bytes = b"", headers: Sequence[tuple[str, str]] = (), *,
    version: str = "HTTP/1.1", content_length: bool | None = None,
) -> bytes:
    """One request's bytes; ``Content-Length`` is added when there is a body
    (or when ``content_length`` says so)."""
    lines = [f"{method} {path} {version}".rstrip(), "Host: fuzz"]
    lines += [f"{k}: {v}" if k else v for k, v in headers]  # an empty name: the value is the whole line
    if content_length or (content_length is None and (body or method in ("POST", "PUT", "PATCH"))):
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8", "surrogateescape") + body


# -- records ---------------------------------------------------------------------------


def _text_value(rng: random.Random, marker: bytes) -> str:
    return marker.decode() + "".join(rng.choice(_FILLER) for _ in range(rng.randrange(0, 48)))


def _bytes_value(rng: random.Random, marker: bytes) -> bytes:
    return marker + rng.randbytes(rng.randrange(0, 48))


def _groups(rng: random.Random, ctx: Ctx, req_id: int) -> list[tuple[str, int, list[bytes], list[Any]]]:
    """``(topic, partition, payloads, json_records)`` per batch of a valid request."""
    out = []
    index = 0
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        payloads, records = [], []
        for _ in range(rng.randrange(1, 5)):
            marker = ctx.marker(req_id, index)
            index += 1
            if rng.random() < 0.3:
                data = _bytes_value(rng, marker)
                records.append({"base64": base64.b64encode(data).decode()})
            else:
                text = _text_value(rng, marker)
                data = text.encode()
                records.append(text)
            payloads.append(data)
        out.append((ctx.topic, rng.randrange(ctx.partitions), payloads, records))
    return out


def produce_json(rng: random.Random, ctx: Ctx) -> tuple[int, dict[str, Any], ProduceSent]:
    """A valid JSON produce: ``(request id, document, ProduceSent of its body)``."""
    req_id = ctx.req_id()
    groups = _groups(rng, ctx, req_id)
    doc: dict[str, Any] = {"topic_partitions": [
        {"topic": t, "partition": p, "records": records} for t, p, _, records in groups
    ]}
    if rng.random() < 0.15:
        doc["flush"] = True
    body = json.dumps(doc, ensure_ascii=rng.random() < 0.5).encode()
    return req_id, doc, _sent(req_id, body, "application/json", groups)


def _sent(req_id: int, body: bytes, content_type: str | None, groups: Sequence[tuple[str, int, list[bytes], Any]]) -> ProduceSent:
    markers = tuple(m.group(0) for _, _, payloads, _ in groups for p in payloads
                    for m in [re.match(rb"FZ[^.]+\.\d+\.\d+\.", p)] if m)
    return ProduceSent(req_id, body, content_type, markers, tuple(sorted({(t, p) for t, p, _, _ in groups})))


def binary_fields(groups: Sequence[tuple[str, int, Sequence[bytes]]], flush: bool = False) -> list[list[Any]]:
    """A binary produce body as ``[name, bytes]`` fields (lists, so a mutation can edit one)."""
    fields: list[list[Any]] = [
        ["header.magic", b"LLP1"], ["header.version", struct.pack(">H", 1)],
        ["header.flags", struct.pack(">H", 1 if flush else 0)], ["header.batch_count", struct.pack(">I", len(groups))],
    ]
    for i, (topic, partition, payloads) in enumerate(groups):
        name = topic.encode()
        records = b"".join(struct.pack(">I", len(p)) + p for p in payloads)
        b = f"batches[{i}]"
        fields += [
            [f"{b}.topic_length", struct.pack(">H", len(name))], [f"{b}.topic", name],
            [f"{b}.partition", struct.pack(">I", partition)], [f"{b}.batch.magic", b"LLB1"],
            [f"{b}.batch.version", struct.pack(">H", 1)], [f"{b}.batch.flags", struct.pack(">H", 0)],
            [f"{b}.batch.record_count", struct.pack(">I", len(payloads))],
            [f"{b}.batch.records_length", struct.pack(">I", len(records))],
            [f"{b}.batch.crc32", struct.pack(">I", zlib.crc32(records))],
        ]
        for j, p in enumerate(payloads):
            fields += [[f"{b}.records[{j}].length", struct.pack(">I", len(p))], [f"{b}.records[{j}].payload", p]]
    return fields


def join_fields(fields: Sequence[Sequence[Any]]) -> bytes:
    return b"".join(f[1] for f in fields)


def produce_binary(rng: random.Random, ctx: Ctx) -> tuple[int, list[list[Any]], list[tuple[str, int, list[bytes], Any]]]:
    """A valid binary produce: ``(request id, its fields, its groups)``."""
    req_id = ctx.req_id()
    groups = _groups(rng, ctx, req_id)
    for _, _, payloads, _ in groups:
        for k, p in enumerate(payloads):
            if rng.random() < 0.5:  # the binary body carries any bytes: make some non-UTF-8
                payloads[k] = p + b"\xff\xfe" + rng.randbytes(rng.randrange(0, 8))
    flush = rng.random() < 0.15
    fields = binary_fields([(t, p, pl) for t, p, pl, _ in groups], flush)
    return req_id, fields, groups


def binary_sent(req_id: int, body: bytes, content_type: str | None, groups: Sequence[Any], complete: bool = True) -> ProduceSent:
    sent = _sent(req_id, body, content_type, groups)
    return sent if complete else ProduceSent(sent.req_id, body, content_type, sent.markers, sent.tps, False)


def check_binary_encoding(rng: random.Random, ctx: Ctx) -> None:
    """The field builder agrees with the server's encoder on valid bodies."""
    for _ in range(20):
        _, fields, groups = produce_binary(rng, ctx)
        flush = fields[2][1] != b"\x00\x00"
        expected = encode_binary_produce([(t, p, pl) for t, p, pl, _ in groups], flush=flush)
        if join_fields(fields) != expected:
            raise AssertionError("loadtest._fuzz.requests.binary_fields disagrees with encode_binary_produce")


def consume_json(rng: random.Random, ctx: Ctx) -> dict[str, Any]:
    """A valid consume of 1-3 distinct partitions, answered at once or after a short wait."""
    parts = rng.sample(range(ctx.partitions), rng.randrange(1, min(3, ctx.partitions) + 1))
    doc: dict[str, Any] = {"topic_partitions": [
        {"topic": ctx.topic, "partition": p, "fetch_offset": rng.randrange(1, 40)}
        for p in parts
    ]}
    if rng.random() < 0.5:
        doc["max_wait_ms"] = rng.choice((0, 0, 10, 50))
    if rng.random() < 0.3:
        doc["max_bytes"] = rng.randrange(1, 1 << 16)
    if rng.random() < 0.3:
        doc["topic_partitions"][0]["partition_max_bytes"] = rng.randrange(1, 1 << 12)
    return doc
