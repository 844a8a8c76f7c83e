"""The tail cache across processes: a write broker and a read broker sharing
LLOG_TAIL_CACHE_DIR, eviction, and a disabled cache giving the same answers."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests._waiting import wait_until
from tests.integration._long_poll import start_long_poll

pytestmark = pytest.mark.integration


def tp(topic: str, partition: int, offset: int, **kw) -> dict:
    return {"topic": topic, "partition": partition, "fetch_offset": offset, **kw}


@pytest.fixture
def split(broker_factory, tmp_path: Path):
    """A write-role and a read-role broker sharing one cache directory."""
    cache_dir = tmp_path / "tail-cache"
    # The read process trusts a topic's catalogue record for a minute: the reads below count storage calls.
    env = {"LLOG_TAIL_CACHE_DIR": str(cache_dir), "LLOG_TAIL_CACHE_POLL_MS": "10", "LLOG_BROKER_TOPIC_CACHE_MS": "60000"}
    writer = broker_factory("write", env=env)
    reader = broker_factory("read", env=env)
    assert writer.info["tail_cache"] == reader.info["tail_cache"] == "file"
    return writer, reader, cache_dir


def test_a_read_process_serves_records_published_by_a_write_process(split) -> None:
    writer, reader, cache_dir = split
    writer.client.produce([{"topic": "t", "partition": p, "records": [f"v{p}-{i}" for i in range(5)]} for p in range(3)])
    # The write process publishes after the commit and before it answers; the
    # file write is asynchronous: its publisher counts the records once they
    # are on disk.
    wait_until(lambda: writer.client.counter("tail_cache_published_records_total") == 15, 10,
               "the write process to publish the 15 records to the shared directory")
    reader.client.consume([tp("t", p, 6) for p in range(3)], max_wait_ms=0)  # looks the topic up, once
    before = reader.client.storage_ops()
    reply = reader.client.consume([tp("t", p, 1) for p in range(3)])
    assert [[r["value"] for r in x["records"]] for x in reply.json["results"]] == [
        [f"v{p}-{i}" for i in range(5)] for p in range(3)
    ]
    assert reader.client.storage_ops() == before  # served from the shared directory
    assert reader.client.counter("tail_cache_lookups_total", result="hit") == 3
    # Only validated topic names ever become directories.
    assert sorted(p.name for p in cache_dir.glob("v2/*/*")) == ["t"]


def test_a_read_process_long_poll_is_woken_by_the_write_process(split) -> None:
    writer, reader, _ = split
    writer.client.produce([{"topic": "t", "partition": 0, "records": ["a"]}])
    assert [x for _, x in reader.client.consume_all("t", 0)] == [b"a"]
    with ThreadPoolExecutor(1) as pool:
        poll = start_long_poll(pool, reader, [tp("t", 0, 2)], max_wait_ms=30_000)
        writer.client.produce([{"topic": "t", "partition": 0, "records": ["b"]}])
        reply = poll.result(timeout=10)  # long before its 30 s max_wait_ms ...
    assert [r["value"] for r in reply.json["results"][0]["records"]] == ["b"]
    assert reader.client.counter("consume_wakeups_total") >= 1  # ... woken by the file poller


def test_the_read_process_falls_back_when_the_cache_is_gone(split) -> None:
    writer, reader, cache_dir = split
    writer.client.produce([{"topic": "t", "partition": 0, "records": ["a", "b"]}])
    wait_until(lambda: writer.client.counter("tail_cache_published_records_total") == 2, 10,
               "the write process to publish to the shared directory")
    for f in cache_dir.rglob("*.seg"):
        f.unlink()
    assert [x for _, x in reader.client.consume_all("t", 0)] == [b"a", b"b"]
    for f in cache_dir.rglob("state"):
        f.write_text("not a state file")
    assert [x for _, x in reader.client.consume_all("t", 0)] == [b"a", b"b"]


def test_a_write_process_that_restarts_leaves_nothing_stale(broker_factory, tmp_path: Path) -> None:
    env = {"LLOG_TAIL_CACHE_DIR": str(tmp_path / "c")}
    w1 = broker_factory("write", env=env)
    w1.client.produce([{"topic": "t", "partition": 0, "records": ["a"]}])
    w1.stop()
    w2 = broker_factory("write", env=env)
    reader = broker_factory("read", env=env)
    w2.client.produce([{"topic": "t", "partition": 0, "records": ["b"]}])
    assert [x for _, x in reader.client.consume_all("t", 0)] == [b"a", b"b"]


def test_eviction_keeps_answers_right(broker_factory) -> None:
    b = broker_factory(env={"LLOG_TAIL_CACHE_MAX_BYTES": "3000"})
    for i in range(10):
        b.client.produce([{"topic": "t", "partition": 0, "records": [f"{i}" * 500]}])
    assert b.client.counter("tail_cache_evictions_total") >= 4
    got = b.client.consume_all("t", 0)
    assert [x.decode() for _, x in got] == [f"{i}" * 500 for i in range(10)]
    assert b.client.counter("consume_storage_reads_total") >= 1  # the evicted head came from S3


def test_a_disabled_cache_gives_the_same_answers(broker_factory) -> None:
    cached = broker_factory()
    uncached = broker_factory(env={"LLOG_TAIL_CACHE_MAX_BYTES": "0"})
    assert uncached.info["tail_cache"] == "off"
    for i in range(4):
        for b in (cached, uncached):
            b.client.produce([
                {"topic": "t", "partition": p, "records": [f"{b.port}-{i}-{j}" * (p + 1) for j in range(3)]}
                for p in range(3)
            ])
    requests = [
        dict(topic_partitions=[tp("t", p, 1) for p in range(3)]),
        dict(topic_partitions=[tp("t", p, 5, partition_max_bytes=60) for p in range(3)]),
        dict(topic_partitions=[tp("t", 0, 3), tp("t", 2, 20)], max_bytes=200),
        dict(topic_partitions=[tp("t", 1, 24), tp("t", 0, 0), tp("t", 7, 1)], max_wait_ms=100),
    ]

    def answer(b, req) -> list:
        res = b.client.request("POST", "/consume", req).json["results"]
        return [(r["ok"], r.get("error_code"), r["next_fetch_offset"], r["records"]) for r in res]

    for req in requests:
        assert answer(cached, req) == answer(uncached, req), req
    assert uncached.client.counter("tail_cache_lookups_total", result="hit") == 0
