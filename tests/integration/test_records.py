"""Kafka's record model end to end on real Oxia, MinIO and broker processes: a key,
headers and a timestamp produced through JSON, the binary v2 body and the
library read back identical through the library, /consume JSON and the binary
answer, from the tail cache and from S3, and after a compaction."""

from __future__ import annotations

import base64

import pytest

from server._protocol.kafka_batch import Record, TimestampType, build_batch
from server._protocol.produce_binary import PRODUCE_BINARY_V2_CONTENT_TYPE, encode_binary_produce_v2

from .conftest import value_bytes

pytestmark = pytest.mark.integration

TS = 1_760_000_000_000
RECORDS = [
    Record(b"order-1", b"customer-42", (("source", b"web"), ("trace", None)), TS),
    Record(None, b"customer-42", (), TS + 5),  # a tombstone
    Record(b"\xff\x00binary", None, (("\u00e9t\u00e9", b"\x00"),), TS - 10),  # null key, an earlier time
    Record(b"", b"", (("dup", b"1"), ("dup", b"2")), TS + 7),  # empty key and value, a repeated header
]


def _bytes_json(b: bytes | None) -> object:
    if b is None:
        return None
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(b).decode()}


def as_json(r: Record) -> dict:
    return {"value": _bytes_json(r.value), "key": _bytes_json(r.key),
            "headers": [{"key": k, "value": _bytes_json(v)} for k, v in r.headers], "timestamp_ms": r.timestamp_ms}


def _nullable(v: object) -> bytes | None:
    return None if v is None else value_bytes(v)


def from_json(doc: dict) -> tuple:
    return (_nullable(doc["value"]), _nullable(doc["key"]),
            tuple((h["key"], _nullable(h["value"])) for h in doc["headers"]), doc["timestamp_ms"])


def fields(r) -> tuple:
    value = r.value if hasattr(r, "value") else r.payload
    return (value, r.key, tuple(r.headers), r.timestamp_ms)


WANT = [fields(r) for r in RECORDS]


def consume_json(broker, topic: str, partition: int, fetch_offset: int = 1) -> list[dict]:
    reply = broker.client.consume([{"topic": topic, "partition": partition, "fetch_offset": fetch_offset}],
                                  max_wait_ms=0)
    assert reply.status == 200, reply.body
    (res,) = reply.json["results"]
    assert res["ok"], res
    return res["records"]


def consume_binary(broker, topic: str, partition: int, fetch_offset: int = 1):
    from server._protocol.consume_binary import CONSUME_BINARY_CONTENT_TYPE, parse_binary_consume

    request = {"topic_partitions": [{"topic": topic, "partition": partition, "fetch_offset": fetch_offset}],
               "max_wait_ms": 0}
    reply = broker.client.request("POST", "/consume", request, headers={"Accept": CONSUME_BINARY_CONTENT_TYPE})
    assert reply.status == 200 and reply.headers["Content-Type"] == CONSUME_BINARY_CONTENT_TYPE
    (part,) = parse_binary_consume(reply.body).partitions
    assert part.ok, part.error
    return part.records()


def check_everywhere(brokers, reader, topic: str, partition: int, want: list[tuple], first: int = 1) -> None:
    """``want`` (from offset ``first``) through every broker's JSON and binary answers and the library."""
    offsets = list(range(first, first + len(want)))
    for broker in brokers:
        got = consume_json(broker, topic, partition, first)
        assert [r["offset"] for r in got] == offsets
        assert [from_json(r) for r in got] == want
        assert {r["timestamp_type"] for r in got} == {"CreateTime"}
        binary = consume_binary(broker, topic, partition, first)
        assert [o for o, _ in binary] == offsets and [fields(r) for _, r in binary] == want
    assert [fields(r) for r in reader.read_range(topic, partition, first, first + len(want) - 1)] == want
    assert [(r.offset, fields(r)) for r in reader.iter_from(topic, partition, first)] == list(zip(offsets, want))


def test_records_from_json_and_the_binary_body_read_back_identical_everywhere(broker_factory, reader, llog_env):
    writer = broker_factory()
    topic = "records"
    reply = writer.client.produce([{"topic": topic, "partition": 0, "records": [as_json(r) for r in RECORDS]}])
    assert reply.status == 200, reply.body
    body = encode_binary_produce_v2([(topic, 1, build_batch(RECORDS[:2]) + build_batch(RECORDS[2:]))])
    reply = writer.client.request("POST", "/produce", body, headers={"Content-Type": PRODUCE_BINARY_V2_CONTENT_TYPE})
    assert reply.status == 200, reply.body
    assert reply.json["results"][0]["count"] == len(RECORDS)
    fresh = broker_factory("read")  # no tail cache: from S3
    for partition in (0, 1):
        check_everywhere([writer, fresh], reader, topic, partition, WANT)
        # A fetch inside a stored batch: the JSON answer starts at the offset,
        # the binary one skips the batch's earlier records for the client.
        check_everywhere([writer, fresh], reader, topic, partition, WANT[2:], first=3)

    # Compaction rewrites the WAL slices into one object: the same records come back.
    from server.leaderless_log_compactor import LeaderlessLogCompactor

    with LeaderlessLogCompactor.from_env(llog_env) as compactor:
        for partition in (0, 1):
            assert compactor.compact_once(topic, partition).outcome.value == "compacted"
    check_everywhere([broker_factory("read")], reader, topic, partition, WANT)


def test_a_log_append_time_topic_stamps_the_brokers_time(broker_factory, reader):
    broker = broker_factory()
    reply = broker.client.request("POST", "/topics", {"name": "stamped", "partitions": 1,
                                                      "config": {"message.timestamp.type": "LogAppendTime"}})
    assert reply.status == 201, reply.body
    reply = broker.client.produce([{"topic": "stamped", "partition": 0, "records": [as_json(r) for r in RECORDS]}])
    assert reply.status == 200, reply.body
    got = consume_json(broker, "stamped", 0)
    assert {r["timestamp_type"] for r in got} == {"LogAppendTime"}
    stamps = {r["timestamp_ms"] for r in got}
    assert len(stamps) == 1 and stamps.pop() > TS + 10**6  # the broker's clock, not the producer's
    assert [(r.timestamp_type, r.key) for r in reader.read_range("stamped", 0, 1, 4)] == [
        (TimestampType.LOG_APPEND_TIME, r.key) for r in RECORDS]


def test_bad_records_are_refused_with_the_field_named(broker_factory):
    broker = broker_factory()
    cases = [
        ({"value": "v", "extra": 1}, "topic_partitions[0].records[0]"),
        ({"value": "v", "headers": [{"key": 7}]}, "topic_partitions[0].records[0].headers[0]"),
        ({"value": "v", "timestamp_ms": -1}, "topic_partitions[0].records[0].timestamp_ms"),
        ({"key": {"base64": "!!"}}, "topic_partitions[0].records[0].key.base64"),
    ]
    for record, field in cases:
        reply = broker.client.produce([{"topic": "bad", "partition": 0, "records": [record]}])
        assert (reply.status, reply.json["field"]) == (400, field), reply.body
    reply = broker.client.request("POST", "/topics", {"name": "small", "partitions": 1,
                                                      "config": {"max.message.bytes": 100}})
    assert reply.status == 201, reply.body
    reply = broker.client.produce([{"topic": "small", "partition": 0, "records": ["x" * 101]}])
    assert reply.status == 413 and reply.json["field"] == "topic_partitions[0].records", reply.body
    assert broker.client.produce([{"topic": "small", "partition": 0, "records": ["x" * 100]}]).status == 200
