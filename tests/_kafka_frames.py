"""Raw Kafka frames for the fuzz tests: damaging a request, and one connection that sends
frames and reads the answers, opened again whenever the listener closes it."""

from __future__ import annotations

import random
import socket
import ssl
import struct
from typing import Callable

from server._kafka.codec import APIS

__all__ = ["FrameConnection", "mutate_frame"]


def mutate_frame(rng: random.Random, frame: bytes) -> bytes:
    """``frame`` (a request without its size) damaged one of seven ways, chosen by ``rng``."""
    data = bytearray(frame)
    kind = rng.randrange(7)
    if kind == 0:  # bit flips
        for _ in range(rng.randint(1, 8)):
            i = rng.randrange(len(data))
            data[i] ^= 1 << rng.randrange(8)
    elif kind == 1:  # cut
        del data[rng.randrange(len(data)):]
    elif kind == 2:  # extend
        data += rng.randbytes(rng.randint(1, 64))
    elif kind == 3:  # another API key
        struct.pack_into(">h", data, 0, rng.choice([*APIS, -1, 57, 99, 32767]))
    elif kind == 4:  # another version
        struct.pack_into(">h", data, 2, rng.randint(-2, 40))
    elif kind == 5:  # noise
        data = bytearray(rng.randbytes(rng.randint(0, 200)))
    else:  # overwrite a run with 0xff (lengths of -1 and huge counts)
        i = rng.randrange(len(data))
        data[i:i + 4] = b"\xff\xff\xff\xff"
    return bytes(data)


class FrameConnection:
    """One connection to a Kafka listener (``connect`` opens it: plain or TLS), opened again
    after the listener closes it."""

    def __init__(self, connect: Callable[[], socket.socket]) -> None:
        self.connect = connect
        self.sock: socket.socket | None = None

    def exchange(self, payload: bytes, size: int | None = None) -> bytes | None:
        """The response frame, or None when the listener closed the connection."""
        if self.sock is None:
            self.sock = self.connect()
        s = self.sock
        try:
            s.sendall(struct.pack(">i", len(payload) if size is None else size) + payload)
        except (ConnectionError, ssl.SSLError):  # closed by the listener after the last answer
            self.close()
            return None
        if size is not None and size > len(payload):
            s.shutdown(socket.SHUT_WR)  # a frame that says more than it has: the listener sees the end
        head = self._read(4)
        if head is None:
            return None
        (n,) = struct.unpack(">i", head)
        body = self._read(n)
        assert body is not None, f"the listener closed mid-answer (of {n} bytes)"
        if size is not None:
            self.close()
        return body

    def _read(self, n: int) -> bytes | None:
        out = b""
        while len(out) < n:
            try:
                chunk = self.sock.recv(n - len(out)) if self.sock is not None else b""
            except (ConnectionError, ssl.SSLError):  # a reset, or a TLS connection cut short
                chunk = b""
            if not chunk:
                self.close()
                return None
            out += chunk
        return out

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None
