"""The Oxia client's gRPC channels, with a deadline per request and keepalive pings.

Why: ``oxia==0.2.1`` opens its channels with no options and sends every
request with no deadline. After an Oxia server is lost or paused (SIGSTOP,
a network partition: no RST reaches us) a call to it waits for good: the
write batcher's ``Write``, a fetch's ``Read``, a range scan, the session
keepalive. Brokers that hold such calls never recover on their own.

What we do, as Oxia's own Go client does (``common/rpc/client_pool.go``,
``oxia/options_client.go``):

- every request but the long-lived streams carries a deadline of
  ``LLOG_OXIA_REQUEST_TIMEOUT_MS``; a request past it fails with
  DEADLINE_EXCEEDED, which the metadata store turns into a retriable
  :class:`MetadataStoreError`. A write whose answer never came may have
  been applied: the writer already resolves that outcome (SPEC 7.3 C3).
- the long-lived streams (shard assignments, notifications, sequence
  updates) and range scans (their length is the consumer's pace) have no
  deadline; keepalive pings find a dead or paused peer for them instead:
  a ping after ``max(request timeout, 10 s)`` without traffic (Oxia's
  servers refuse pings more often than every 5 s), unanswered for half the
  request timeout, closes the connection and fails every call on it with UNAVAILABLE.
- reconnection backoff is capped at 5 s (grpc's default cap is 120 s), so a
  server back from a pause or restart is used again within seconds.

:func:`connect` builds a client like ``oxia.Client(...)`` but on these
channels; nothing else of the client changes.
"""

from __future__ import annotations

from typing import Any

__all__ = ["NO_DEADLINE_METHODS", "channel_options", "connect"]

_SERVICE = "/io.streamnative.oxia.proto.OxiaClient/"
NO_DEADLINE_METHODS = frozenset(
    _SERVICE + name for name in ("GetShardAssignments", "GetNotifications", "GetSequenceUpdates", "RangeScan")
)
"""Streams that live as long as their consumer wants: watched by keepalive, not a deadline."""

SERVER_MIN_PING_INTERVAL_MS = 5_000
"""Oxia's servers answer pings more frequent than this with GOAWAY (``grpc_server.go``)."""

MAX_RECONNECT_BACKOFF_MS = 5_000


def channel_options(request_timeout_ms: int) -> list[tuple[str, int]]:
    """gRPC channel arguments: keepalive derived from the request timeout.

    Pings at twice the server's minimum interval at least, so timer jitter
    never earns a "too many pings" GOAWAY. grpc's C core waits for a ping's
    answer ``grpc.http2.ping_timeout_ms`` (60 s unless set), not only
    ``grpc.keepalive_timeout_ms``: both are set."""
    ack_ms = max(request_timeout_ms // 2, 500)
    return [
        ("grpc.keepalive_time_ms", max(request_timeout_ms, 2 * SERVER_MIN_PING_INTERVAL_MS)),
        ("grpc.keepalive_timeout_ms", ack_ms),
        ("grpc.http2.ping_timeout_ms", ack_ms),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_pings_without_data", 0),
        ("grpc.max_reconnect_backoff_ms", MAX_RECONNECT_BACKOFF_MS),
        ("grpc.initial_reconnect_backoff_ms", 1_000),
    ]


class _Timed:
    """A multi-callable whose calls carry ``timeout`` unless the caller gave one."""

    __slots__ = ("_call", "_timeout")

    def __init__(self, call: Any, timeout: float) -> None:
        self._call = call
        self._timeout = timeout

    def __call__(self, request: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("timeout", self._timeout)
        return self._call(request, **kwargs)


class DeadlineChannel:
    """A ``grpc.Channel`` whose unary requests (and bounded streams) get a deadline."""

    def __init__(self, channel: Any, timeout_s: float) -> None:
        self._channel = channel
        self._timeout = timeout_s

    def unary_unary(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return _Timed(self._channel.unary_unary(method, *args, **kwargs), self._timeout)

    def unary_stream(self, method: str, *args: Any, **kwargs: Any) -> Any:
        call = self._channel.unary_stream(method, *args, **kwargs)
        return call if method in NO_DEADLINE_METHODS else _Timed(call, self._timeout)

    def __getattr__(self, name: str) -> Any:  # stream_stream, subscribe, close ...
        return getattr(self._channel, name)


def connect(
    service_address: str, *, namespace: str, session_timeout_ms: int, client_identifier: str | None,
    request_timeout_ms: int,
) -> Any:
    """An ``oxia.Client`` (0.2.1) whose channels are made here: what ``Client.__init__`` does, with our pool."""
    import grpc
    import oxia
    from oxia.internal.connection_pool import ConnectionPool
    from oxia.internal.proto.io.streamnative.oxia.proto import OxiaClientStub
    from oxia.internal.service_discovery import ServiceDiscovery
    from oxia.internal.sessions import SessionManager

    options = channel_options(request_timeout_ms)
    timeout_s = request_timeout_ms / 1000

    class Pool(ConnectionPool):
        closed = False

        def get(self, address: str) -> OxiaClientStub:
            with self._lock:
                if self.closed:  # a closed client's threads must not open channels again
                    raise ValueError("the Oxia client is closed")
                hit = self.connections.get(address)
                if hit is None:
                    channel = grpc.insecure_channel(address, options=options)
                    hit = self.connections[address] = (channel, OxiaClientStub(DeadlineChannel(channel, timeout_s)))
                return hit[1]

        def close(self) -> None:
            with self._lock:
                self.closed = True
            super().close()

    client = oxia.Client.__new__(oxia.Client)
    client._closed = False
    client._connections = Pool()
    try:
        client._service_discovery = ServiceDiscovery(service_address, client._connections, namespace)
    except BaseException:
        client._connections.close()
        raise
    client._session_manager = SessionManager(client._service_discovery, session_timeout_ms, client_identifier)
    return client
