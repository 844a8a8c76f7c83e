"""The Oxia client's channels: which calls carry a deadline, and the keepalive derived from it.

The behaviour against a paused Oxia server is in
``tests/integration/test_oxia_server.py``; these pin the rules."""

from __future__ import annotations

from typing import Any

import pytest

from server._storage.oxia_channel import NO_DEADLINE_METHODS, DeadlineChannel, channel_options

SERVICE = "/io.streamnative.oxia.proto.OxiaClient/"


class RecordingChannel:
    """A ``grpc.Channel`` stand-in whose multi-callables record their call's keyword arguments."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.closed = False

    def _callable(self, method: str) -> Any:
        def call(request: Any, **kwargs: Any) -> str:
            self.calls.append((method, kwargs))
            return f"answer to {request}"

        return call

    def unary_unary(self, method: str, *_: Any) -> Any:
        return self._callable(method)

    def unary_stream(self, method: str, *_: Any) -> Any:
        return self._callable(method)

    def close(self) -> None:
        self.closed = True


@pytest.mark.parametrize("kind, name", [
    ("unary_unary", "Write"), ("unary_unary", "CreateSession"), ("unary_unary", "KeepAlive"),
    ("unary_unary", "CloseSession"), ("unary_stream", "Read"), ("unary_stream", "List"),
])
def test_requests_carry_the_deadline(kind: str, name: str) -> None:
    raw = RecordingChannel()
    channel = DeadlineChannel(raw, 2.5)
    assert getattr(channel, kind)(SERVICE + name, None, None)("req") == "answer to req"
    assert raw.calls == [(SERVICE + name, {"timeout": 2.5})]


@pytest.mark.parametrize("name", ["GetShardAssignments", "GetNotifications", "GetSequenceUpdates", "RangeScan"])
def test_streams_as_long_as_their_consumer_have_none(name: str) -> None:
    assert SERVICE + name in NO_DEADLINE_METHODS
    raw = RecordingChannel()
    DeadlineChannel(raw, 2.5).unary_stream(SERVICE + name, None, None)("req")
    assert raw.calls == [(SERVICE + name, {})]


def test_a_callers_own_timeout_wins_and_the_rest_of_the_channel_is_the_channels() -> None:
    raw = RecordingChannel()
    channel = DeadlineChannel(raw, 2.5)
    channel.unary_unary(SERVICE + "Write", None, None)("req", timeout=9.0)
    assert raw.calls == [(SERVICE + "Write", {"timeout": 9.0})]
    channel.close()
    assert raw.closed


@pytest.mark.parametrize("timeout_ms, ping_ms, ack_ms", [(1_000, 10_000, 500), (10_000, 10_000, 5_000),
                                                         (30_000, 30_000, 15_000), (600_000, 600_000, 300_000)])
def test_keepalive_follows_the_request_timeout_within_what_oxia_servers_accept(
    timeout_ms: int, ping_ms: int, ack_ms: int
) -> None:
    options = dict(channel_options(timeout_ms))
    assert options["grpc.keepalive_time_ms"] == ping_ms  # Oxia's servers GOAWAY pings closer than 5 s
    # grpc's C core waits for a ping's ack for ping_timeout_ms (60 s unset), not keepalive_timeout_ms alone.
    assert options["grpc.keepalive_timeout_ms"] == options["grpc.http2.ping_timeout_ms"] == ack_ms
    assert options["grpc.keepalive_permit_without_calls"] == 1
    assert options["grpc.max_reconnect_backoff_ms"] == 5_000
