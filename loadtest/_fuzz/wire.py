"""A raw-socket HTTP/1.1 client: it sends exactly the bytes it is given.

``http.client`` would fix a malformed request before sending it; the fuzzer
needs the wrong ``Content-Length``, the broken chunk and the half-sent body
on the wire as they are. Answers are read by their ``Content-Length`` (both
services always send one), 1xx interim answers skipped, every read bounded by
a deadline, so a server that never answers shows up as ``hung`` rather than
as a fuzzer that waits forever.
"""

from __future__ import annotations

import socket
import struct
import time
from dataclasses import dataclass
from typing import Sequence

__all__ = ["Answer", "Outcome", "exchange", "stall", "abort"]

_MAX_HEAD_BYTES = 1 << 20
_RESET = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends a reset


@dataclass(frozen=True)
class Answer:
    """One final answer (status >= 200)."""

    status: int
    headers: tuple[tuple[str, str], ...]
    """Header names lower-cased, in the order sent."""
    body: bytes

    def header(self, name: str) -> str | None:
        for key, value in self.headers:
            if key == name:
                return value
        return None

    @property
    def closes(self) -> bool:
        return (self.header("connection") or "").lower() == "close"


@dataclass(frozen=True)
class Outcome:
    """What came back on one connection."""

    answers: tuple[Answer, ...]
    closed: bool
    """The server closed the connection (or reset it)."""
    hung: bool
    """The deadline passed while an answer (or the close) was still owed."""
    elapsed_s: float
    error: str | None = None
    """An answer that is not well-formed HTTP (no status line, no Content-Length ...)."""


class _Malformed(Exception):
    pass


class _Reader:
    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self.sock = sock
        self.deadline = deadline
        self.buf = b""
        self.eof = False

    def _fill(self) -> None:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        self.sock.settimeout(left)
        try:
            chunk = self.sock.recv(1 << 16)
        except ConnectionError:
            chunk = b""
        if not chunk:
            self.eof = True
        self.buf += chunk

    def answer(self, head: bool) -> Answer | None:
        """The next final answer; None at a clean end of the connection."""
        while True:
            while b"\r\n\r\n" not in self.buf:
                if self.eof:
                    if self.buf:
                        raise _Malformed(f"the connection ended inside an answer's head: {self.buf[:80]!r}")
                    return None
                if len(self.buf) > _MAX_HEAD_BYTES:
                    raise _Malformed("an answer head over 1 MiB")
                self._fill()
            top, _, self.buf = self.buf.partition(b"\r\n\r\n")
            status, headers = _parse_head(top)
            if status >= 200:
                break  # 1xx (100 Continue) is interim: the final answer follows
        length = 0 if head or status in (204, 304) else _content_length(headers)
        while len(self.buf) < length:
            if self.eof:
                raise _Malformed(f"the connection ended {length - len(self.buf)} bytes before the body's end")
            self._fill()
        body, self.buf = self.buf[:length], self.buf[length:]
        return Answer(status, headers, body)

    def until_closed(self) -> None:
        """Read until the server closes (bytes after the last answer are an error)."""
        while not self.eof:
            self._fill()
        if self.buf:
            raise _Malformed(f"{len(self.buf)} bytes after the last answer: {self.buf[:80]!r}")


def _parse_head(top: bytes) -> tuple[int, tuple[tuple[str, str], ...]]:
    lines = top.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise _Malformed(f"not an HTTP status line: {lines[0][:80]!r}")
    headers = []
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep:
            raise _Malformed(f"not a header line: {line[:80]!r}")
        headers.append((name.strip().lower(), value.strip()))
    return int(parts[1]), tuple(headers)


def _content_length(headers: tuple[tuple[str, str], ...]) -> int:
    values = [v for k, v in headers if k == "content-length"]
    if len(values) != 1 or not values[0].isdigit():
        raise _Malformed(f"an answer without one valid Content-Length: {values}")
    return int(values[0])


def _connect(addr: tuple[str, int], deadline: float) -> socket.socket:
    sock = socket.create_connection(addr, timeout=max(0.1, deadline - time.monotonic()))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _send(sock: socket.socket, data: bytes, drip: Sequence[int], drip_pause_s: float) -> None:
    """All of ``data``; with ``drip``, in pieces that end at those offsets, pausing between them."""
    start = 0
    for end in [*drip, len(data)]:
        if end > start:
            sock.sendall(data[start:end])
            start = end
            if drip_pause_s and end < len(data):
                time.sleep(drip_pause_s)


def exchange(
    addr: tuple[str, int], data: bytes, heads: Sequence[bool], timeout_s: float, *,
    shut_write: bool = False, drip: Sequence[int] = (), drip_pause_s: float = 0.0,
) -> Outcome:
    """Send ``data`` (one request or several pipelined) and read one answer
    per entry of ``heads`` (True: the answer to a HEAD, no body), stopping at
    an answer that closes the connection or at its end."""
    started = time.monotonic()
    deadline = started + timeout_s
    answers: list[Answer] = []
    try:
        with _connect(addr, deadline) as sock:
            reader = _Reader(sock, deadline)
            try:
                _send(sock, data, drip, drip_pause_s)
                if shut_write:
                    sock.shutdown(socket.SHUT_WR)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the server answered early and closed: read what it sent
            for head in heads:
                answer = reader.answer(head)
                if answer is None:
                    break
                answers.append(answer)
                if answer.closes:
                    reader.until_closed()
                    break
            return Outcome(tuple(answers), reader.eof, False, time.monotonic() - started)
    except TimeoutError:
        return Outcome(tuple(answers), False, True, time.monotonic() - started)
    except _Malformed as exc:
        return Outcome(tuple(answers), True, False, time.monotonic() - started, str(exc))


def stall(addr: tuple[str, int], prefix: bytes, timeout_s: float, head: bool = False) -> Outcome:
    """Send ``prefix`` (part of a request) and nothing more; read until the
    server closes the connection, keeping the answer it may send first. The
    time counts from the end of the prefix: from there on the server waits."""
    started = time.monotonic()
    answers: list[Answer] = []
    try:
        with _connect(addr, started + timeout_s) as sock:
            if prefix:
                sock.sendall(prefix)
            started = time.monotonic()
            reader = _Reader(sock, started + timeout_s)
            answer = reader.answer(head)
            if answer is not None:
                answers.append(answer)
                reader.until_closed()
            return Outcome(tuple(answers), True, False, time.monotonic() - started)
    except TimeoutError:
        return Outcome(tuple(answers), False, True, time.monotonic() - started)
    except _Malformed as exc:
        return Outcome(tuple(answers), True, False, time.monotonic() - started, str(exc))


def abort(addr: tuple[str, int], data: bytes, read_bytes: int, timeout_s: float = 5.0) -> float:
    """Send ``data``, read at most ``read_bytes`` of the answer (0: none),
    then reset the connection; returns the seconds it took."""
    started = time.monotonic()
    with _connect(addr, started + timeout_s) as sock:
        try:
            sock.sendall(data)
            got = 0
            while got < read_bytes:
                chunk = sock.recv(read_bytes - got)
                if not chunk:
                    break
                got += len(chunk)
        except (OSError, TimeoutError):
            pass
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET)
    return time.monotonic() - started
