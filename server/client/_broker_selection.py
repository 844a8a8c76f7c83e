"""Which broker gets a topic-partition: broker URLs, rendezvous order, health checks.

Each topic-partition has a stable preferred broker chosen by rendezvous
(highest-random-weight) hashing over the broker URLs, so every task of every
job sends a partition to the same broker and removing a broker only moves
that broker's partitions (see :mod:`server.client`).
"""

from __future__ import annotations

import hashlib
import http.client
import socket
from typing import NamedTuple, Sequence
from urllib.parse import urlsplit

from .._errors import ConfigError

__all__ = ["BrokerUrl", "parse_broker_list", "rendezvous_order", "check_brokers"]


class BrokerUrl(NamedTuple):
    """One broker: ``http[s]://host:port[/prefix]``."""

    url: str
    """The URL as given, without a trailing ``/`` (used in messages and hashing)."""
    scheme: str
    host: str
    port: int
    prefix: str
    """Path prefix before ``/produce`` (empty unless the broker sits behind a proxy path)."""

    @classmethod
    def parse(cls, text: str) -> BrokerUrl:
        raw = text.strip().rstrip("/")
        parts = urlsplit(raw)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"broker URL must look like http://host:port, got {text!r}")
        if parts.query or parts.fragment:
            raise ConfigError(f"broker URL must not have a query or fragment, got {text!r}")
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            raise ConfigError(f"broker URL has an invalid port: {text!r}") from None
        return cls(raw, parts.scheme, parts.hostname, port, parts.path)


def parse_broker_list(value: str | Sequence[str]) -> tuple[BrokerUrl, ...]:
    """Broker URLs from a comma-separated string or a sequence; at least one."""
    items = value.split(",") if isinstance(value, str) else list(value)
    urls = tuple(BrokerUrl.parse(u) for u in items if u and u.strip())
    if not urls:
        raise ConfigError("at least one broker URL is needed (e.g. http://127.0.0.1:8080)")
    if len({u.url for u in urls}) != len(urls):
        raise ConfigError(f"broker URLs must be distinct, got {[u.url for u in urls]}")
    return urls

def rendezvous_order(brokers: Sequence[BrokerUrl], topic: str, partition: int) -> list[BrokerUrl]:
    """Brokers in rendezvous order for a topic-partition: a stable, process-
    independent ranking (blake2b, not Python's salted ``hash``)."""

    def weight(b: BrokerUrl) -> bytes:
        return hashlib.blake2b(f"{b.url}\0{topic}\0{partition}".encode(), digest_size=8).digest()

    return sorted(brokers, key=weight, reverse=True)


def check_brokers(brokers: Sequence[BrokerUrl], timeout_s: float = 5.0) -> dict[str, str | None]:
    """``GET /health`` on each broker: url -> None when it answered ok, else the error."""
    out: dict[str, str | None] = {}
    for b in brokers:
        cls = http.client.HTTPSConnection if b.scheme == "https" else http.client.HTTPConnection
        conn = cls(b.host, b.port, timeout=timeout_s)
        try:
            conn.request("GET", b.prefix + "/health")
            resp = conn.getresponse()
            resp.read()
            out[b.url] = None if resp.status == 200 else f"GET /health answered {resp.status}"
        except (OSError, http.client.HTTPException, socket.timeout) as exc:
            out[b.url] = f"{type(exc).__name__}: {exc}"
        finally:
            conn.close()
    return out
