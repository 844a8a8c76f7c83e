"""Long-poll consume and the Kafka-like byte limits, against real brokers.

Every test runs on a broker with the in-process tail cache and on one with
the cache disabled: the answers must be the same.

Records meant to wake a long poll are produced once the broker has looked
at the request's partitions (``start_long_poll``), never after a sleep. The
only clock readings left are a long poll's own ``max_wait_ms``: it never
answers before it (a timed wait cannot end early, and the test's clock
starts first), and an upper bound far above it, which only catches a
request that is not answered when its time is up.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests._records import stored_size
from tests.integration._long_poll import start_long_poll

pytestmark = pytest.mark.integration
LATE_S = 10.0
"""Well past any max_wait_ms these tests use, on a loaded machine too."""


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


def test_long_poll_returns_as_soon_as_a_record_arrives(broker, t) -> None:
    c = broker.client
    c.produce([{"topic": t, "partition": 0, "records": ["first"]}])
    wakeups = c.counter("consume_wakeups_total")
    with ThreadPoolExecutor(1) as pool:
        poll = start_long_poll(pool, broker, [tp(t, 0, 2)], max_wait_ms=30_000)
        assert c.produce([{"topic": t, "partition": 0, "records": ["second"]}]).status == 200
        # Answered long before its 30 s max_wait_ms ran out ...
        reply = poll.result(timeout=LATE_S)
    assert [r["value"] for r in reply.json["results"][0]["records"]] == ["second"]
    assert c.counter("consume_wakeups_total") == wakeups + 1  # ... because the commit woke it


def test_long_poll_waits_max_wait_ms_when_nothing_arrives(broker, t) -> None:
    c = broker.client
    c.produce([{"topic": t, "partition": 0, "records": ["a"]}])
    for offset in (2, 50):  # at the tail, and beyond it
        started = time.monotonic()
        reply = c.consume([tp(t, 0, offset)], max_wait_ms=400)
        elapsed = time.monotonic() - started
        res = reply.json["results"][0]
        assert 0.39 <= elapsed < LATE_S  # see the module docstring
        assert (res["ok"], res["records"], res["next_fetch_offset"], res["high_watermark"]) == (True, [], offset, 1)


def test_max_wait_ms_zero_answers_at_once(broker, t) -> None:
    c = broker.client
    c.produce([{"topic": t, "partition": 0, "records": ["a"]}])
    reply = c.consume([tp(t, 0, 2)], max_wait_ms=0)
    assert reply.json["waited_ms"] == 0 and reply.json["results"][0]["records"] == []


def test_min_bytes_waits_for_enough_bytes(broker, t) -> None:
    c = broker.client
    c.produce([{"topic": t, "partition": 0, "records": ["seed"]}])
    with ThreadPoolExecutor(1) as pool:
        poll = start_long_poll(pool, broker, [tp(t, 0, 2)], max_wait_ms=30_000, min_bytes=250)
        c.produce([{"topic": t, "partition": 0, "records": ["x" * 100]}])  # wakes it: not enough
        c.produce([{"topic": t, "partition": 0, "records": ["y" * 200]}])
        reply = poll.result(timeout=LATE_S)
    # Had it answered at the first wake-up, "x" would be alone.
    assert [r["value"] for r in reply.json["results"][0]["records"]] == ["x" * 100, "y" * 200]
    # Not enough by max_wait_ms: what there is comes back.
    started = time.monotonic()
    reply = c.consume([tp(t, 0, 1)], max_wait_ms=300, min_bytes=10_000)
    assert 0.29 <= time.monotonic() - started < LATE_S  # see the module docstring
    # Byte limits count the stored batches: one per produce here.
    batches = sum(stored_size([v]) for v in (b"seed", b"x" * 100, b"y" * 200))
    assert reply.json["payload_bytes"] == batches and reply.json["record_count"] == 3


def test_min_bytes_counts_across_partitions(broker, t) -> None:
    c = broker.client
    c.produce([{"topic": t, "partition": p, "records": ["s"]} for p in range(2)])
    with ThreadPoolExecutor(1) as pool:
        one = stored_size([b"a" * 60])
        poll = start_long_poll(pool, broker, [tp(t, 0, 2), tp(t, 1, 2)], max_wait_ms=30_000, min_bytes=one + 1)
        c.produce([{"topic": t, "partition": 0, "records": ["a" * 60]}])  # one batch: not enough
        c.produce([{"topic": t, "partition": 1, "records": ["b" * 60]}])
        reply = poll.result(timeout=LATE_S)
    assert [len(r["records"]) for r in reply.json["results"]] == [1, 1]


def test_partition_max_bytes_and_max_bytes(broker, t) -> None:
    c = broker.client
    # Ten one-record batches per partition (items are batches): the limits take whole batches.
    c.produce([{"topic": t, "partition": p, "records": [str(p) * 100]} for _ in range(10) for p in range(2)])
    z = stored_size([b"0" * 100])
    reply = c.consume([tp(t, 0, 1, partition_max_bytes=2 * z + 10), tp(t, 1, 1, partition_max_bytes=4 * z + 10)])
    res = reply.json["results"]
    assert [len(r["records"]) for r in res] == [2, 4]
    assert [r["next_fetch_offset"] for r in res] == [3, 5]
    reply = c.consume([tp(t, 0, 1), tp(t, 1, 1)], max_bytes=3 * z + 10)
    res = reply.json["results"]
    assert [len(r["records"]) for r in res] == [3, 0]
    assert (res[1]["high_watermark"], res[1]["next_fetch_offset"]) == (10, 1)
    assert reply.json["payload_bytes"] == 3 * z


def test_a_record_larger_than_the_limits_is_still_returned_alone(broker, t) -> None:
    c = broker.client
    c.produce([  # one batch per item
        {"topic": t, "partition": 0, "records": ["A" * 5000]}, {"topic": t, "partition": 0, "records": ["a"]},
        {"topic": t, "partition": 1, "records": ["B" * 3000]}, {"topic": t, "partition": 1, "records": ["b"]},
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
    reply = c.consume([tp(t, 0, 2), tp(t, 1, 1)], max_wait_ms=5000)
    assert reply.json["waited_ms"] == 0  # answered without waiting
    assert [len(r["records"]) for r in reply.json["results"]] == [0, 1]


def test_max_wait_ms_is_capped_by_the_server(session_broker, t) -> None:
    b = session_broker(LLOG_BROKER_MAX_WAIT_MS="300")
    b.client.produce([{"topic": t, "partition": 0, "records": ["a"]}])
    started = time.monotonic()
    reply = b.client.consume([tp(t, 0, 2)], max_wait_ms=60_000)
    # At the 300 ms cap (see the module docstring), long before the 60 s asked for.
    assert 0.29 <= time.monotonic() - started < LATE_S and reply.status == 200
