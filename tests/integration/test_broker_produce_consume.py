"""Produce and consume through real broker processes over the real Oxia and MinIO."""

from __future__ import annotations

import base64
import os
import random

import pytest

from tests._waiting import wait_until

from .conftest import value_bytes

pytestmark = pytest.mark.integration


def as_record(payload: bytes) -> object:
    """The produce encoding: text when it is UTF-8 and we feel like it, else base64."""
    try:
        text = payload.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(payload).decode()}
    return text if random.random() < 0.7 else {"base64": base64.b64encode(payload).decode()}


def sample_payloads(n: int, seed: int) -> list[bytes]:
    rnd = random.Random(seed)
    pool = [b"", b"alpha", "h\u00e9llo \u2713 \U0001f600".encode(), b"\x00\x01", b"\xff\xfe", b"{\"json\": true}"]
    return [rnd.choice(pool) + rnd.randbytes(rnd.randrange(0, 40)) if i % 3 else rnd.choice(pool) for i in range(n)]


def test_round_trip_strings_and_bytes_across_partitions_and_two_brokers(broker_factory) -> None:
    b1, b2 = broker_factory(), broker_factory()
    topic, partitions = "orders", 12
    expected: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    for round_ in range(3):
        for broker in (b1, b2):
            items, sent = [], []
            for p in range(partitions):
                payloads = sample_payloads(5, seed=hash((round_, broker.port, p)))
                items.append({"topic": topic, "partition": p, "records": [as_record(x) for x in payloads]})
                sent.append((p, payloads))
            reply = broker.client.produce(items)
            assert reply.status == 200, reply.body
            body = reply.json
            assert (body["success_count"], body["error_count"]) == (partitions, 0)
            for (p, payloads), res in zip(sent, body["results"]):
                assert (res["topic"], res["partition"], res["count"]) == (topic, p, len(payloads))
                assert res["start_offset"] == len(expected[p]) + 1
                assert res["end_offset"] == res["start_offset"] + len(payloads) - 1
                assert res["index_key"].endswith(f"/{topic}/partitions/{p}/index/{res['end_offset']:020d}")
                expected[p] += payloads
            # One request, one flush: every batch lives in the same shared WAL blob.
            assert len({r["wal_uri"] for r in body["results"]}) == 1
            assert body["results"][0]["wal_uri"].startswith("s3://")
    for broker in (b1, b2):
        for p in range(partitions):
            got = broker.client.consume_all(topic, p)
            assert [o for o, _ in got] == list(range(1, len(expected[p]) + 1))
            assert [x for _, x in got] == expected[p], f"partition {p} via {broker.info['broker_id']}"


def test_results_follow_request_order_including_repeated_partitions(client, unique_topic) -> None:
    items = [
        {"topic": unique_topic, "partition": 1, "records": ["a", "b"]},
        {"topic": unique_topic, "partition": 0, "records": ["c"]},
        {"topic": unique_topic, "partition": 1, "records": ["d"]},
    ]
    res = client.produce(items).json["results"]
    assert [(r["partition"], r["start_offset"], r["end_offset"]) for r in res] == [(1, 1, 2), (0, 1, 1), (1, 3, 3)]
    assert [x for _, x in client.consume_all(unique_topic, 1)] == [b"a", b"b", b"d"]


def test_utf8_values_come_back_as_strings_and_other_bytes_as_base64(client, unique_topic) -> None:
    client.produce([{"topic": unique_topic, "partition": 0, "records": [
        "plain", {"base64": base64.b64encode("caf\u00e9".encode()).decode()}, {"base64": "//4="}, "",
    ]}])
    reply = client.consume([{"topic": unique_topic, "partition": 0, "fetch_offset": 1}])
    values = [r["value"] for r in reply.json["results"][0]["records"]]
    assert values == ["plain", "caf\u00e9", {"base64": "//4="}, ""]


def test_a_read_broker_finds_records_written_through_another_broker(broker_factory) -> None:
    writer = broker_factory("write")
    reader = broker_factory("read")
    payloads = [os.urandom(100) for _ in range(20)]
    for i in range(0, 20, 5):
        writer.client.produce([{"topic": "t", "partition": 3, "records": [as_record(x) for x in payloads[i:i + 5]]}])
    assert [x for _, x in reader.client.consume_all("t", 3)] == payloads
    assert reader.client.counter("consume_storage_reads_total") >= 1


def test_a_cached_tail_is_checked_against_oxia_so_records_from_another_broker_are_found(broker_factory) -> None:
    b1, b2 = broker_factory(), broker_factory()
    b1.client.produce([{"topic": "t", "partition": 0, "records": [f"a{i}" for i in range(10)]}])
    assert len(b1.client.consume_all("t", 0)) == 10  # b1's cache knows 1..10
    b2.client.produce([{"topic": "t", "partition": 0, "records": [f"b{i}" for i in range(10)]}])  # 11..20 elsewhere
    reply = b1.client.consume([{"topic": "t", "partition": 0, "fetch_offset": 11}], max_wait_ms=10_000)
    res = reply.json["results"][0]
    assert [r["offset"] for r in res["records"]] == list(range(11, 21))
    assert reply.json["waited_ms"] < 1000  # found at once, not after max_wait_ms
    assert b1.client.counter("tail_cache_validations_total", result="behind") == 1
    # b1 writes 21: a gap in its cache (11..20 came from b2); reads still line up.
    b1.client.produce([{"topic": "t", "partition": 0, "records": ["a10"]}])
    got = b1.client.consume_all("t", 0)
    assert [x.decode() for _, x in got] == [f"a{i}" for i in range(10)] + [f"b{i}" for i in range(10)] + ["a10"]


def test_a_cache_hit_touches_neither_oxia_nor_s3(broker_factory) -> None:
    broker = broker_factory(env={"LLOG_BROKER_LOG_START_REFRESH_MS": "60000"})  # no refresh due during the test
    c = broker.client
    c.produce([{"topic": "t", "partition": p, "records": [f"r{p}-{i}" for i in range(5)]} for p in range(3)])
    # A partition's first consume reads its log start (once per LLOG_BROKER_LOG_START_REFRESH_MS, 1 s).
    c.consume([{"topic": "t", "partition": p, "fetch_offset": 6} for p in range(3)])
    before = c.storage_ops()
    reply = c.consume([{"topic": "t", "partition": p, "fetch_offset": 2} for p in range(3)])
    assert [len(r["records"]) for r in reply.json["results"]] == [4, 4, 4]
    assert c.storage_ops() == before
    assert c.counter("tail_cache_lookups_total", result="hit") == 3


@pytest.mark.parametrize("role", ["read", "both-uncached"])
def test_partitions_of_one_shared_blob_are_fetched_with_one_get(broker_factory, role: str) -> None:
    writer = broker_factory("write")
    reader = broker_factory("read") if role == "read" else broker_factory(env={"LLOG_TAIL_CACHE_MAX_BYTES": "0"})
    writer.client.produce([{"topic": "t", "partition": p, "records": [f"x{p}"] * 3} for p in range(6)])
    gets = lambda: reader.client.counter("s3_operations_total", op="range_get") + reader.client.counter(  # noqa: E731
        "s3_operations_total", op="get"
    )
    before = gets()
    reply = reader.client.consume([{"topic": "t", "partition": p, "fetch_offset": 1} for p in range(6)])
    assert [r["records"][0]["value"] for r in reply.json["results"]] == [f"x{p}" for p in range(6)]
    assert gets() - before == 1


def test_consume_errors_are_per_partition(client, unique_topic) -> None:
    client.produce([{"topic": unique_topic, "partition": 0, "records": ["a"]}])
    reply = client.consume([
        {"topic": unique_topic, "partition": 0, "fetch_offset": 0},
        {"topic": unique_topic, "partition": 99, "fetch_offset": 1},  # past its 64 partitions
        {"topic": unique_topic + "x", "partition": 0, "fetch_offset": -3},
    ], max_wait_ms=5000)
    assert reply.status == 200
    a, b, c = reply.json["results"]
    assert (a["ok"], a["error_code"], a["error_type"]) == (False, "OFFSET_OUT_OF_RANGE", "OffsetOutOfRange")
    assert (a["next_fetch_offset"], a["high_watermark"]) == (0, None)
    assert (b["ok"], b["error_code"], b["error_type"]) == (False, "UNKNOWN_TOPIC_OR_PARTITION", "UnknownTopic")
    assert (c["ok"], c["error_code"]) == (False, "UNKNOWN_TOPIC_OR_PARTITION")  # a topic never created
    assert reply.json["waited_ms"] == 0  # errors answer at once


def test_binary_produce_body_round_trips_beside_json(broker_factory) -> None:
    """A binary body (application/vnd.llog.produce.v1) gets the same JSON
    answer as a JSON body (checked against openapi.yaml), its records read
    back byte for byte from the tail cache and, through a fresh read-role
    broker, from S3; a malformed one is a 400 naming the field."""
    from server._protocol.produce_binary import PRODUCE_BINARY_CONTENT_TYPE, encode_binary_produce

    writer = broker_factory()
    binary = {"Content-Type": PRODUCE_BINARY_CONTENT_TYPE}
    topic = "binary"
    expected: dict[int, list[bytes]] = {p: [] for p in range(4)}
    groups = [(topic, p, tuple(sample_payloads(7, seed=p))) for p in range(4)] + [(topic, 0, (b"\xff", b""))]
    reply = writer.client.request("POST", "/produce", encode_binary_produce(groups), headers=binary)
    assert reply.status == 200, reply.body
    assert reply.json["success_count"] == 5
    for (_, p, payloads), res in zip(groups, reply.json["results"]):
        assert res["start_offset"] == len(expected[p]) + 1 and res["count"] == len(payloads)
        expected[p] += payloads
    reply = writer.client.produce([{"topic": topic, "partition": 1, "records": ["json after binary"]}])
    assert reply.status == 200 and reply.json["results"][0]["start_offset"] == len(expected[1]) + 1
    expected[1].append(b"json after binary")

    reader = broker_factory("read")
    for broker in (writer, reader):
        for p, payloads in expected.items():
            assert [v for _, v in broker.client.consume_all(topic, p)] == payloads

    bad = encode_binary_produce([(topic, 0, (b"a",))])[:-1]
    reply = writer.client.request("POST", "/produce", bad, headers=binary)
    assert reply.status == 400
    assert reply.json["field"] == "batches[0].batch" and "offset" in reply.json["error"]


def test_binary_consume_answer_holds_what_the_json_one_does(broker_factory) -> None:
    """Accept: application/vnd.llog.consume.v1 gets the binary answer over
    real HTTP (large record sections written as views, then the next request
    on the same keep-alive connection) with the records, offsets and
    watermarks of the JSON answer, from the tail cache and from S3; a bad
    request is still a JSON 400."""
    from server._protocol.produce_binary import PRODUCE_BINARY_CONTENT_TYPE, encode_binary_produce
    from server._protocol.consume_binary import CONSUME_BINARY_CONTENT_TYPE, parse_binary_consume

    writer = broker_factory()
    topic = "binanswer"
    groups = [(topic, p, tuple(sample_payloads(40, seed=p)) + (b"\x00" * 70_000,)) for p in range(3)]
    reply = writer.client.request(
        "POST", "/produce", encode_binary_produce(groups), headers={"Content-Type": PRODUCE_BINARY_CONTENT_TYPE}
    )
    assert reply.status == 200, reply.body
    binary = {"Accept": CONSUME_BINARY_CONTENT_TYPE}
    request = {"topic_partitions": [{"topic": topic, "partition": p, "fetch_offset": 3} for p in range(4)]
               + [{"topic": topic, "partition": 9, "fetch_offset": 0}], "max_wait_ms": 0}
    reader = broker_factory("read")
    for broker in (writer, reader):
        for _ in range(2):  # the second on the same connection: the first answer's length was exact
            got = broker.client.request("POST", "/consume", request, headers=binary)
            assert got.status == 200 and got.headers["Content-Type"] == CONSUME_BINARY_CONTENT_TYPE
            answer = parse_binary_consume(got.body)
            want = broker.client.request("POST", "/consume", request).json
            assert (answer.record_count, answer.payload_bytes) == (want["record_count"], want["payload_bytes"])
            for part, res in zip(answer.partitions, want["results"], strict=True):
                assert (part.partition, part.ok, part.high_watermark, part.next_fetch_offset) == (
                    res["partition"], res["ok"], res["high_watermark"], res["next_fetch_offset"],
                )
                assert part.payloads() == [value_bytes(r["value"]) for r in res["records"]]
                assert [r["offset"] for r in res["records"]] == list(
                    range(part.first_offset, part.first_offset + part.record_count)
                )
                assert part.error is None or part.error.error_code == res["error_code"]
            assert [p.payloads() for p in answer.partitions[:3]] == [list(g[2][2:]) for g in groups]
    bad = writer.client.request("POST", "/consume", {"topic_partitions": []}, headers=binary)
    assert bad.status == 400 and bad.json["field"] == "topic_partitions"


def test_a_flush_only_request_cuts_the_batch_delay_short_json_and_binary(broker_factory) -> None:
    """With a one-minute batch delay a produce is answered once a flush-only
    request (empty, with flush; JSON or the binary body with no batch) makes
    the broker flush; the flush-only answer has no results."""
    from concurrent.futures import ThreadPoolExecutor

    from server._protocol.produce_binary import PRODUCE_BINARY_CONTENT_TYPE, encode_binary_produce

    b = broker_factory(env={"LLOG_BATCH_MAX_DELAY_MS": "60000"})
    flush_only = [
        lambda: b.client.produce([], flush=True),
        lambda: b.client.request("POST", "/produce", encode_binary_produce([], flush=True),
                                 {"Content-Type": PRODUCE_BINARY_CONTENT_TYPE}),
    ]
    with ThreadPoolExecutor(1) as pool:
        for i, send_flush in enumerate(flush_only):
            pending = pool.submit(b.new_client().produce, [{"topic": "fo", "partition": 0, "records": [f"r{i}"]}])
            wait_until(lambda: b.client.counter("batcher_submits_total") == i + 1, 10, "the produce to be buffered")
            reply = send_flush()
            assert reply.status == 200 and reply.json == {"results": [], "success_count": 0, "error_count": 0}
            answer = pending.result(10)
            assert answer.status == 200 and answer.json["results"][0]["end_offset"] == i + 1
    assert b.client.counter("batcher_flush_requests_total") == 2
    empty = b.client.produce([])
    assert empty.status == 400 and empty.json["field"] == "topic_partitions"
