"""Raw-socket HTTP helpers: malformed requests the standard library refuses
before any route runs, for the broker's and the compactor service's tests."""

from __future__ import annotations

import socket

import pytest


def raw_until_closed(host: str, port: int, data: bytes, timeout_s: float = 10.0) -> bytes:
    """Send raw bytes on a fresh connection and read until the server closes it."""
    with socket.create_connection((host, port), timeout=timeout_s) as s:
        s.sendall(data)
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    return answer


def parse_answer(answer: bytes) -> tuple[int, dict[str, str], bytes]:
    head, sep, body = answer.partition(b"\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 ") and sep, f"not an HTTP answer: {answer[:200]!r}"
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
    return int(lines[0].split()[1]), headers, body


# What the standard library refuses before any route runs, and the status it picks.
MALFORMED_REQUESTS = [
    pytest.param(b"GARBAGE\r\n\r\n", 400, id="one-word-request-line"),
    pytest.param(b"GET /health HTTP/1.1 extra\r\n\r\n", 400, id="four-words"),
    pytest.param(b"GET /health HTTP/x.y\r\n\r\n", 400, id="bad-version"),
    pytest.param(b"POST /produce\r\n\r\n", 400, id="http-0.9-post"),
    pytest.param(b"GET /x HTTP/9.9\r\n\r\n", 505, id="http-9.9"),
    pytest.param(b"GET /x HTTP/2.0\r\n\r\n", 505, id="http-2.0"),
    # Exactly 65537 bytes and no line end: the stdlib's limit, nothing left unread.
    pytest.param(b"GET /" + b"a" * (65537 - 5), 414, id="request-line-too-long"),
    pytest.param(b"GET /health HTTP/1.1\r\nX-Big: " + b"a" * (65537 - 7), 431, id="header-line-too-long"),
]
