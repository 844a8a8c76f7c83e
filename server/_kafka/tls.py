"""TLS for the Kafka listener (Kafka's SSL and SASL_SSL listeners).

:func:`server_context` builds the listener's ``ssl.SSLContext`` from PEM
files (its certificate chain and key; optionally the authorities a client's
certificate must be signed by, Kafka's ``ssl.client.auth=required``).

:class:`TlsStream` carries one connection. The listener reads a connection
on one thread and writes it on another, and an OpenSSL connection object
must not be used by two threads at once (``SSLSocket`` would call
``SSL_read`` and ``SSL_write`` concurrently), so the stream drives an
``ssl.SSLObject`` over memory buffers itself: every call into it holds
``_tls``, and the socket I/O happens outside that lock. Ciphertext leaves in
the order the object produced it: only a holder of ``_send`` takes bytes
out of the outgoing buffer, and it sends them before it lets go. The reader
sends too, when reading made TLS produce bytes of its own (a TLS 1.3 key
update's answer).
"""

from __future__ import annotations

import io
import socket
import ssl
import threading

from .._errors import ConfigError, LlogError

__all__ = ["server_context", "TlsStream", "TlsRaw", "HandshakeFailed"]

_RECV = 1 << 16
_CHUNK = 1 << 18
"""Plaintext handed to TLS at a time: a fetch answer of many megabytes is encrypted and
sent in pieces, not held twice in memory."""


class HandshakeFailed(LlogError):
    """The client did not complete a TLS handshake (a plaintext client, an untrusted
    certificate, a protocol TLS does not know); the message says why."""


def server_context(cert: str, key: str | None = None, client_ca: str | None = None) -> ssl.SSLContext:
    """The listener's context: TLS 1.2 and later, ``cert`` (PEM, the chain) with ``key`` (PEM;
    None: in ``cert``'s file); with ``client_ca`` every client must present a certificate it signed."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"LLOG_KAFKA_TLS_CERT/LLOG_KAFKA_TLS_KEY: cannot load the certificate {cert!r} with the "
                          f"key {key or cert!r}: {exc} (both PEM; the key must be the certificate's, unencrypted)") \
            from exc
    if client_ca is not None:
        try:
            ctx.load_verify_locations(cafile=client_ca)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"LLOG_KAFKA_TLS_CLIENT_CA: cannot load the certificate authorities {client_ca!r}: "
                              f"{exc} (PEM)") from exc
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


class TlsStream:
    """One server-side TLS connection over ``sock``, safe to read on one thread while
    another writes (module docstring). ``sendall``/``sendmsg`` take plaintext."""

    def __init__(self, sock: socket.socket, context: ssl.SSLContext) -> None:
        self.sock = sock
        self._in = ssl.MemoryBIO()
        self._out = ssl.MemoryBIO()
        self._obj = context.wrap_bio(self._in, self._out, server_side=True)
        self._tls = threading.Lock()
        self._send = threading.Lock()

    def handshake(self) -> None:
        """Complete the handshake (on the reading thread, before any read). HandshakeFailed
        when the peer is not a TLS client or is refused; TimeoutError, OSError from the socket."""
        while True:
            try:
                with self._tls:
                    self._obj.do_handshake()
                self._flush()
                return
            except ssl.SSLWantReadError:
                self._flush()
                if not self._fill():
                    raise HandshakeFailed("the connection closed during the TLS handshake") from None
            except ssl.SSLError as exc:
                self._flush_quietly()  # the alert, so the client can say why
                raise HandshakeFailed(f"TLS handshake failed: {exc.reason or exc}") from exc

    @property
    def peer_subject(self) -> str | None:
        """The client certificate's subject (with a client CA), as ``CN=...,O=...``."""
        cert = self._obj.getpeercert()
        if not cert:
            return None
        return ",".join(f"{k}={v}" for rdn in cert.get("subject", ()) for k, v in rdn)

    def readinto(self, buffer: memoryview | bytearray) -> int:
        """Plaintext into ``buffer``; 0 at the end of the stream."""
        while True:
            try:
                with self._tls:
                    n = self._obj.read(len(buffer), buffer)
                return n
            except ssl.SSLWantReadError:
                pass
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                return 0
            except ssl.SSLError as exc:
                raise OSError(f"TLS: {exc.reason or exc}") from exc
            if self._out.pending:
                self._flush()
            if not self._fill():
                with self._tls:
                    self._in.write_eof()

    def sendall(self, data: bytes | bytearray | memoryview) -> None:
        self.sendmsg([data])

    def sendmsg(self, buffers: list) -> int:
        """Encrypt and send every buffer, in order; the plaintext byte count."""
        total = 0
        pending = bytearray()  # a fetch answer is many small buffers (a batch and its 8-byte offset):
        with self._send:       # gathered into pieces, so TLS makes full records and one send each
            for b in buffers:
                view = memoryview(b).cast("B")
                total += len(view)
                if len(pending) + len(view) < _CHUNK:
                    pending += view
                    continue
                if pending:
                    self._encrypt_and_send(pending)
                    pending = bytearray()
                for i in range(0, len(view), _CHUNK):
                    self._encrypt_and_send(view[i:i + _CHUNK])
            if pending:
                self._encrypt_and_send(pending)
        return total

    def _encrypt_and_send(self, plaintext: bytes | bytearray | memoryview) -> None:
        with self._tls:
            try:
                self._obj.write(plaintext)
            except ssl.SSLError as exc:
                raise OSError(f"TLS: {exc.reason or exc}") from exc
            data = self._out.read()
        self.sock.sendall(data)

    def _fill(self) -> bool:
        """Ciphertext from the socket into the object; False at the socket's end."""
        data = self.sock.recv(_RECV)
        if not data:
            return False
        with self._tls:
            self._in.write(data)
        return True

    def _flush(self) -> None:
        with self._send:
            with self._tls:
                data = self._out.read()
            if data:
                self.sock.sendall(data)

    def _flush_quietly(self) -> None:
        try:
            self._flush()
        except OSError:
            pass


class TlsRaw(io.RawIOBase):
    """A :class:`TlsStream`'s reading side as a raw stream, for ``io.BufferedReader``."""

    def __init__(self, stream: TlsStream) -> None:
        self._stream = stream

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[no-untyped-def, override]
        return self._stream.readinto(memoryview(buffer).cast("B"))
