"""Long-poll consume and the Kafka-like byte limits, against real brokers.

Every test runs on a broker with the in-process tail cache and on one with
the cache disabled: the answers must be the same.
"""

from __future__ import annotations

import threading
import time

import pytest

pytestmark = pytest.mark.integration


@pytest.fixture(params=["memory", "off"])
def broker(request, session_broker):
    env = {} if request.param == "memory" else {"LLOG_TAIL_CACHE_MAX_BYTES": "0"}
    b = session_broker(**env)
    assert b.info["tail_cache"] == request.param
    return b


@pytest.fixture
def t(unique_topic: str) -> str:
    return unique_topic


def tp(topic: str, partition: int, offset: int, **kw) -> dict:
    return {"topic": topic, "partition": partition, "fetch_offset": offset, **kw}


def later(delay_s: float, fn) -> threading.Thread:
    t = threading.Timer(delay_s, fn)
    t.start()
    return t


def test_long_poll_returns_as_soon_as_a_record_arrives(broker, t) -> None:
    c = broker.client
    c.produce([{"topic": t, "partition": 0, "records": ["first"]}])
    acked: list[float] = []

    def produce() -> None:
        # A second connection: the client keeps one per thread.
        assert c.produce([{"topic": t, "partition": 0, "records": ["second"]}]).status == 200
        acked.append(time.monotonic())

    later(0.3, produce)
    started = time.monotonic()
    reply = c.consume([tp(t, 0, 2)], max_wait_ms=10_000)
    done = time.monotonic()
    assert [r["value"] for r in reply.json["results"][0]["records"]] == ["second"]
    assert 0.25 < done - started < 2.0
    time.sleep(0.05)
    assert acked and done - acked[0] < 0.5  # woken by the commit, not by a timeout


def test_long_poll_waits_max_wait_ms_when_nothing_arrives(broker, t) -> None:
    c = broker.client
    c.produce([{"topic": t, "partition": 0, "records": ["a"]}])
    for offset in (2, 50):  # at the tail, and beyond it
        started = time.monotonic()
        reply = c.consume([tp(t, 0, offset)], max_wait_ms=400)
        elapsed = time.monotonic() - started
        res = reply.json["results"][0]
        assert 0.39 <= elapsed < 1.5
        assert (res["ok"], res["records"], res["next_fetch_offset"], res["high_watermark"]) == (True, [], offset, 1)


def test_max_wait_ms_zero_answers_at_once(broker, t) -> None:
    c = broker.client
    c.produce([{"topic": t, "partition": 0, "records": ["a"]}])
    started = time.monotonic()
    reply = c.consume([tp(t, 0, 2)], max_wait_ms=0)
    assert time.monotonic() - started < 0.3 and reply.json["results"][0]["records"] == []


def test_min_bytes_waits_for_enough_bytes(broker, t) -> None:
    c = broker.client
    c.produce([{"topic": t, "partition": 0, "records": ["seed"]}])
    later(0.2, lambda: c.produce([{"topic": t, "partition": 0, "records": ["x" * 100]}]))
    later(0.6, lambda: c.produce([{"topic": t, "partition": 0, "records": ["y" * 200]}]))
    started = time.monotonic()
    reply = c.consume([tp(t, 0, 2)], max_wait_ms=10_000, min_bytes=250)
    elapsed = time.monotonic() - started
    assert [r["value"] for r in reply.json["results"][0]["records"]] == ["x" * 100, "y" * 200]
    assert 0.5 < elapsed < 3.0
    # Not enough by max_wait_ms: what there is comes back.
    started = time.monotonic()
    reply = c.consume([tp(t, 0, 1)], max_wait_ms=300, min_bytes=10_000)
    assert time.monotonic() - started >= 0.29
    assert reply.json["payload_bytes"] == 304 and reply.json["record_count"] == 3


def test_min_bytes_counts_across_partitions(broker, t) -> None:
    c = broker.client
    c.produce([{"topic": t, "partition": p, "records": ["s"]} for p in range(2)])
    later(0.2, lambda: c.produce([{"topic": t, "partition": 0, "records": ["a" * 60]}]))
    later(0.5, lambda: c.produce([{"topic": t, "partition": 1, "records": ["b" * 60]}]))
    started = time.monotonic()
    reply = c.consume([tp(t, 0, 2), tp(t, 1, 2)], max_wait_ms=10_000, min_bytes=100)
    assert 0.4 < time.monotonic() - started < 3.0
    assert [len(r["records"]) for r in reply.json["results"]] == [1, 1]


def test_partition_max_bytes_and_max_bytes(broker, t) -> None:
    c = broker.client
    c.produce([{"topic": t, "partition": p, "records": [str(p) * 100] * 10} for p in range(2)])
    reply = c.consume([tp(t, 0, 1, partition_max_bytes=250), tp(t, 1, 1, partition_max_bytes=450)])
    res = reply.json["results"]
    assert [len(r["records"]) for r in res] == [2, 4]
    assert [r["next_fetch_offset"] for r in res] == [3, 5]
    reply = c.consume([tp(t, 0, 1), tp(t, 1, 1)], max_bytes=350)
    res = reply.json["results"]
    assert [len(r["records"]) for r in res] == [3, 0]
    assert (res[1]["high_watermark"], res[1]["next_fetch_offset"]) == (10, 1)
    assert reply.json["payload_bytes"] == 300


def test_a_record_larger_than_the_limits_is_still_returned_alone(broker, t) -> None:
    c = broker.client
    c.produce([
        {"topic": t, "partition": 0, "records": ["A" * 5000, "a"]},
        {"topic": t, "partition": 1, "records": ["B" * 3000, "b"]},
    ])
    reply = c.consume([tp(t, 0, 1, partition_max_bytes=100)], max_bytes=100)
    assert [len(r["value"]) for r in reply.json["results"][0]["records"]] == [5000]
    # The second partition's oversized first record fits in what is left of max_bytes.
    reply = c.consume([tp(t, 0, 2), tp(t, 1, 1, partition_max_bytes=100)], max_bytes=10_000)
    assert [[len(r["value"]) for r in x["records"]] for x in reply.json["results"]] == [[1], [3000]]
    # ... and is left for the next request when it does not.
    reply = c.consume([tp(t, 0, 1), tp(t, 1, 1, partition_max_bytes=100)], max_bytes=6000)
    assert [[len(r["value"]) for r in x["records"]] for x in reply.json["results"]] == [[5000, 1], []]


def test_a_partition_with_data_answers_while_another_is_at_the_tail(broker, t) -> None:
    c = broker.client
    c.produce([{"topic": t, "partition": p, "records": ["x"]} for p in range(2)])
    started = time.monotonic()
    reply = c.consume([tp(t, 0, 2), tp(t, 1, 1)], max_wait_ms=5000)
    assert time.monotonic() - started < 1
    assert [len(r["records"]) for r in reply.json["results"]] == [0, 1]


def test_max_wait_ms_is_capped_by_the_server(session_broker, t) -> None:
    b = session_broker(LLOG_BROKER_MAX_WAIT_MS="300")
    b.client.produce([{"topic": t, "partition": 0, "records": ["a"]}])
    started = time.monotonic()
    reply = b.client.consume([tp(t, 0, 2)], max_wait_ms=60_000)
    assert 0.29 <= time.monotonic() - started < 2 and reply.status == 200
