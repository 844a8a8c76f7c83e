"""``ensure_topic``: make sure a topic exists with at least the partitions a producer will write to.

A writer that spreads records over ``partitions`` partitions calls it once
before it starts (the Spark writer does, on the driver): ``POST /topics``
creates the topic; when it exists with fewer partitions, ``PATCH`` grows it
(counts only grow; more partitions than asked are left alone). A broker
without a topic catalogue (404 on ``/topics``) accepts any partition, so
there is nothing to do. Brokers are tried in order until one answers.
"""

from __future__ import annotations

import http.client
import json
from typing import Any, Sequence

from .._errors import ConfigError, InvalidRequest
from .._protocol.outcomes import NOT_FOUND
from ._broker_selection import BrokerUrl

__all__ = ["ensure_topic"]


def _call(broker: BrokerUrl, method: str, path: str, doc: Any, timeout_s: float) -> tuple[int, dict[str, Any]]:
    cls = http.client.HTTPSConnection if broker.scheme == "https" else http.client.HTTPConnection
    conn = cls(broker.host, broker.port, timeout=timeout_s)
    try:
        body = None if doc is None else json.dumps(doc).encode()
        headers = {} if body is None else {"Content-Type": "application/json"}
        conn.request(method, broker.prefix + path, body=body, headers=headers)
        resp = conn.getresponse()
        raw = resp.read()
        try:
            answer = json.loads(raw) if raw else {}
        except ValueError:
            answer = {"error": raw[:200].decode("utf-8", "replace")}
        return resp.status, answer if isinstance(answer, dict) else {}
    finally:
        conn.close()


def ensure_topic(brokers: Sequence[BrokerUrl], topic: str, partitions: int, *, timeout_s: float = 30.0) -> int:
    """The topic's partition count once it has at least ``partitions`` (creating or growing it);
    ``partitions`` when the brokers keep no catalogue. Raises InvalidRequest when a broker refuses
    (the message is the broker's), ConfigError when no broker answers."""
    failures = []
    for broker in brokers:
        try:
            return _ensure(broker, topic, partitions, timeout_s)
        except OSError as exc:  # connection refused, reset, timed out: try the next broker
            failures.append(f"{broker.url}: {exc}")
    raise ConfigError(f"no broker answered while making sure topic {topic!r} exists: {'; '.join(failures)}")


def _ensure(broker: BrokerUrl, topic: str, partitions: int, timeout_s: float) -> int:
    status, answer = _call(broker, "POST", "/topics", {"name": topic, "partitions": partitions}, timeout_s)
    if status == 201:
        return int(answer["topic"]["partitions"])
    if status == 404 and answer.get("error_type") == NOT_FOUND.error_type:
        return partitions  # a broker without a topic catalogue
    if status != 409:
        raise InvalidRequest(f"creating topic {topic!r} with {partitions} partitions at {broker.url}: "
                             f"HTTP {status}: {answer.get('error', answer)}", topic=topic)
    status, answer = _call(broker, "GET", f"/topics/{topic}", None, timeout_s)
    if status != 200:
        raise InvalidRequest(f"topic {topic!r} exists but {broker.url} could not describe it: HTTP {status}: "
                             f"{answer.get('error', answer)}", topic=topic)
    have = int(answer["topic"]["partitions"])
    if have >= partitions:
        return have
    status, answer = _call(broker, "PATCH", f"/topics/{topic}", {"partitions": partitions}, timeout_s)
    if status == 200:
        return int(answer["topic"]["partitions"])
    if status == 400 and "must be larger" in str(answer.get("error")):
        return _ensure(broker, topic, partitions, timeout_s)  # grown meanwhile: look again
    raise InvalidRequest(f"growing topic {topic!r} to {partitions} partitions at {broker.url}: HTTP {status}: "
                         f"{answer.get('error', answer)}", topic=topic)
