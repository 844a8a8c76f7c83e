"""Fetch answers sent without copying their records.

A Fetch answer is mostly records: stored batches, tens of MB of them. Encoded
the plain way they are copied twice in Python (joined per partition, then into
the answer's buffer). Here a partition's ``records`` field is a
:class:`RecordParts`, the batches as buffers (per batch, its rewritten 8-byte
``baseOffset`` and a view of the stored rest). :func:`encode_gathered` has the
generated codec encode the answer with each records field standing in as a
24-byte marker, then cuts the markers out and puts the buffers in their place:
the answer is a list of buffers that :func:`send_parts` hands to ``sendmsg``,
so the kernel copies the records once, from the stored bytes.

The records field (Kafka's RECORDS and COMPACT_RECORDS types)::

    non-flexible versions   int32 length, then the bytes
    flexible versions       unsigned varint (length + 1), then the bytes

A marker is 16 random bytes (one draw per answer) and the field's index. The
markers must occur in the encoded answer exactly once each, in order, each
after the length prefix the codec wrote for it; otherwise (not seen: the other
fields would have to hold those 16 bytes) the answer is encoded the plain way.
The frame's size is fixed up for the real lengths.
"""

from __future__ import annotations

import socket
from typing import Any, Callable, Iterable, Sequence

from kafka.protocol.schemas.fields.codecs.types import Int32, UnsignedVarInt32

from .codec import SIZE, encode_framed

__all__ = ["RecordParts", "encode_gathered", "send_parts", "Answer"]

Answer = memoryview | list
"""A framed answer: one buffer, or buffers to send in order (``encode_gathered``)."""

_IOV_MAX = 1024
"""Buffers per ``sendmsg`` (Linux's IOV_MAX)."""


class RecordParts:
    """A Fetch partition's records as buffers, written by reference.

    Given to kafka-python as the ``records`` value: its encoder calls ``encode()``
    on a value that is not bytes, which answers the marker while
    :func:`encode_gathered` runs, and the records joined otherwise (the plain
    encoding, e.g. kafka-python's own ``encode()``)."""

    __slots__ = ("parts", "nbytes", "marker")

    def __init__(self, parts: Iterable[bytes | memoryview]) -> None:
        self.parts = [p for p in parts if len(p)]
        self.nbytes = sum(len(p) for p in self.parts)
        self.marker: bytes | None = None

    def __len__(self) -> int:
        return self.nbytes

    def encode(self) -> bytes:
        return self.marker if self.marker is not None else b"".join(self.parts)


def encode_gathered(response: Any, version: int, correlation_id: int, records: Sequence[RecordParts],
                    flexible: bool, nonce: bytes) -> Answer:
    """``response`` framed, as buffers, with ``records`` (every RecordParts of the
    answer, in the order the codec writes them) in place of their markers.
    ``nonce``: 16 random bytes; ``flexible``: whether ``version`` is."""
    if not records:
        return encode_framed(response, version, correlation_id)
    for i, r in enumerate(records):
        r.marker = nonce + i.to_bytes(8, "big")
    try:
        skeleton = encode_framed(response, version, correlation_id, 0).tobytes()
    finally:
        for r in records:
            r.marker = None
    cuts = _find_markers(skeleton, records, flexible, nonce)
    if cuts is None:
        return encode_framed(response, version, correlation_id, sum(r.nbytes for r in records) + 4096)
    out: list[Any] = []
    at, size = 4, len(skeleton) - 4
    for (start, end), r in zip(cuts, records):
        prefix = _prefix(r.nbytes, flexible)
        out.append(memoryview(skeleton)[at:start])
        out.append(prefix)
        out.extend(r.parts)
        size += len(prefix) + r.nbytes - (end - start)
        at = end
    out.append(memoryview(skeleton)[at:])
    out.insert(0, SIZE.pack(size))
    return out


def _find_markers(skeleton: bytes, records: Sequence[RecordParts], flexible: bool,
                  nonce: bytes) -> list[tuple[int, int]] | None:
    """``(start, end)`` of each marker with its length prefix, or None if they are not as written."""
    if skeleton.count(nonce) != len(records):
        return None
    cuts, at = [], 0
    marker_prefix = _prefix(24, flexible)
    for i in range(len(records)):
        pos = skeleton.find(nonce + i.to_bytes(8, "big"), at)
        start = pos - len(marker_prefix)
        if pos < 0 or start < at or skeleton[start:pos] != marker_prefix:
            return None
        cuts.append((start, pos + 24))
        at = pos + 24
    return cuts


def _prefix(n: int, flexible: bool) -> bytes:
    """The records field's length prefix, as kafka-python's own ``Bytes`` codec writes it."""
    return UnsignedVarInt32.encode(n + 1) if flexible else Int32.encode(n)


def send_parts(sock: socket.socket, answer: Answer, sendmsg: Callable[[list], int] | None = None) -> None:
    """Send ``answer`` whole: ``sendall`` for one buffer, ``sendmsg`` of up to
    IOV_MAX buffers at a time (short writes resumed) for a list."""
    if not isinstance(answer, list):
        sock.sendall(answer)
        return
    send = sendmsg or sock.sendmsg
    views = [memoryview(b).cast("B") for b in answer if len(b)]
    i = 0
    while i < len(views):
        sent = send(views[i:i + _IOV_MAX])
        while sent:
            n = len(views[i])
            if sent >= n:
                sent -= n
                i += 1
            else:
                views[i] = views[i][sent:]
                sent = 0
