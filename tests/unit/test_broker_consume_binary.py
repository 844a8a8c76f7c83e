"""The binary /consume answer: its codec (golden bytes, round trips, every
malformed answer named by field and offset), the Accept header that selects
it, and the broker answering it over the in-memory stores with exactly the
records the JSON answer holds."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from server._protocol.http_json import ConsumedPartition
from server._protocol.consume_binary import (
    CONSUME_BINARY_CONTENT_TYPE,
    MalformedAnswer,
    accepts_binary_consume,
    encode_binary_consume,
    parse_binary_consume,
)
from server._protocol.record_spans import spans_of
from server._errors import OffsetOutOfRange
from server._protocol.codec import encode_batch
from tests.unit.test_broker import Cluster, body, cluster, consume_body, doc  # noqa: F401 - fixture

EXAMPLES = Path(__file__).resolve().parents[2] / "leaderless-log-protocol" / "examples"
GOLDEN = EXAMPLES / "consume-answer-2-partitions.bin"


def answer(*parts: ConsumedPartition, waited_ms: int = 0) -> bytes:
    count = sum(p.record_count for p in parts)
    nbytes = sum(p.payload_bytes for p in parts)
    return b"".join(encode_binary_consume(parts, count, nbytes, waited_ms))


def part(topic: str, partition: int, first: int, payloads: list[bytes], hw: int | None = None) -> ConsumedPartition:
    spans = tuple(spans_of(first, payloads))
    return ConsumedPartition(
        topic, partition, first, first + len(payloads), hw if hw is not None else first + len(payloads) - 1,
        spans, sum(len(p) for p in payloads),
    )


# -- codec ----------------------------------------------------------------------------


def test_golden_answer_decodes_to_its_description() -> None:
    raw = GOLDEN.read_bytes()
    described = json.loads((EXAMPLES / "consume-answer-2-partitions.json").read_text())
    parsed = parse_binary_consume(raw)
    assert (parsed.record_count, parsed.payload_bytes, parsed.waited_ms) == (3, 8, 0)
    ok, missing = parsed.partitions
    assert (ok.topic, ok.partition, ok.high_watermark, ok.next_fetch_offset, ok.first_offset) == ("orders", 0, 3, 4, 1)
    assert ok.ok and ok.payloads() == [b"alpha", b"", b"\x00\x01\xff"]
    assert (missing.ok, missing.high_watermark, missing.record_count) == (False, None, 0)
    assert missing.error is not None and missing.error.error_code == "UNKNOWN_TOPIC_OR_PARTITION"
    assert described["total_length"] == len(raw)
    assert [p["payloads_base64"] for p in described["partitions"]] == [["YWxwaGE=", "", "AAH/"], []]
    # The header, the first partition's fixed fields, then its records: the
    # stored batch of batch-3-records.bin as it is.
    assert raw[:28] == b"LLC1" + struct.pack(">HHIIQI", 1, 0, 2, 3, 8, 0)
    assert raw[28:36] == b"\x00\x06orders" and raw[36:40] == bytes(4)
    batch = (EXAMPLES / "batch-3-records.bin").read_bytes()
    assert raw[76:76 + len(batch)] == batch


def test_round_trip_with_cut_spans_large_sections_and_errors() -> None:
    big = [bytes([i]) * 40_000 for i in range(5)]  # sections past the copy threshold
    spans = spans_of(10, big[:2]) + spans_of(12, big[2:])
    cut = ConsumedPartition("t", 3, 11, 14, 20, (spans[0].since(11), spans[1].head(2)), 120_000)
    failed = ConsumedPartition(
        "u", 0, -4, -4, None, error=OffsetOutOfRange("below the log start", topic="u", partition=0, offset=-4)
    )
    chunks = encode_binary_consume((cut, failed, part("t" * 249, 2**31 - 1, 1, [b""])), 4, 120_000, 17)
    assert any(isinstance(c, memoryview) for c in chunks)  # big sections are written, not copied
    parsed = parse_binary_consume(b"".join(chunks))
    a, b, c = parsed.partitions
    assert (a.first_offset, a.next_fetch_offset, a.high_watermark) == (11, 14, 20)
    assert a.payloads() == big[1:4]
    assert (b.ok, b.next_fetch_offset, b.first_offset, b.record_count) == (False, -4, -4, 0)
    assert b.error is not None and (b.error.error_code, b.error.error_type) == ("OFFSET_OUT_OF_RANGE", "OffsetOutOfRange")
    assert (c.topic, c.partition, c.payloads()) == ("t" * 249, 2**31 - 1, [b""])
    assert (parsed.record_count, parsed.payload_bytes, parsed.waited_ms) == (4, 120_000, 17)


@pytest.mark.parametrize("accept, binary", [
    (None, False),
    ("", False),
    ("application/json", False),
    ("*/*", False),
    (CONSUME_BINARY_CONTENT_TYPE, True),
    ("Application/VND.llog.consume.v1", True),
    (f"application/json;q=0.5, {CONSUME_BINARY_CONTENT_TYPE}", True),
    (f"{CONSUME_BINARY_CONTENT_TYPE}; q=0.9", True),
    (f"{CONSUME_BINARY_CONTENT_TYPE};q=0", False),
    (f"{CONSUME_BINARY_CONTENT_TYPE}; q=0.0, application/json", False),
    ("application/vnd.llog.consume.v2", False),
])
def test_accept_header_selects_the_binary_answer(accept: str | None, binary: bool) -> None:
    assert accepts_binary_consume(accept) is binary


def _corrupt(raw: bytes, offset: int, value: bytes) -> bytes:
    return raw[:offset] + value + raw[offset + len(value):]


_A = answer(part("t", 0, 5, [b"ab", b"c"]))
_FIXED_AT = 28 + 2 + 1  # header, topic length, "t"
_ERROR_AT = _FIXED_AT + 40  # partition, four offsets, error_length
_E = answer(ConsumedPartition("t", 0, 0, 0, None, error=OffsetOutOfRange("below", offset=0)))
_ELEN = struct.unpack_from(">I", _E, _ERROR_AT - 4)[0]


@pytest.mark.parametrize("raw, field, words", [
    (b"", "header", "ends at byte 0"),
    (_A[:20], "header", "inside this field"),
    (_corrupt(_A, 0, b"LLP1"), "header.magic", "offset 0"),
    (_corrupt(_A, 4, b"\x00\x02"), "header.version", "offset 4"),
    (_corrupt(_A, 6, b"\x00\x01"), "header.flags", "offset 6"),
    (_corrupt(_A, 8, struct.pack(">I", 2)), "partitions[1].topic_length", "ends at byte"),
    (_corrupt(_A, 8, struct.pack(">I", 0)), "partitions", "trailing bytes at offset 28"),
    (_corrupt(_A, 12, struct.pack(">I", 1)), "header.record_count", "do not match"),
    (_corrupt(_A, 16, struct.pack(">Q", 2)), "header.record_count", "do not match"),
    (_corrupt(_A, 28, b"\x00\x00"), "partitions[0].topic_length", "offset 28"),
    (_corrupt(_A, 28, b"\x01\x00"), "partitions[0].topic_length", "offset 28"),
    (_corrupt(_A, 28, b"\x00\x50"), "partitions[0].topic", "ends at byte"),
    (_corrupt(_A, 30, b"\xff"), "partitions[0].topic", "not UTF-8"),
    (_corrupt(_A, 30, b"/"), "partitions[0].topic", "invalid topic"),
    (_A[:_FIXED_AT + 10], "partitions[0].partition", "ends at byte"),
    (_corrupt(_A, _FIXED_AT, b"\x80\x00\x00\x00"), "partitions[0].partition", f"offset {_FIXED_AT}"),
    (_corrupt(_A, _FIXED_AT + 4, struct.pack(">q", -2)), "partitions[0].high_watermark", "below -1"),
    (_corrupt(_A, _FIXED_AT + 20, struct.pack(">q", 9)), "partitions[0].next_fetch_offset", "first_offset 5"),
    (_corrupt(_A, _ERROR_AT - 4, struct.pack(">I", 9999)), "partitions[0].error", "ends at byte"),
    (_corrupt(_E, _ERROR_AT, b"["), "partitions[0].error", "not UTF-8 JSON"),
    (_corrupt(_E, _ERROR_AT + 2, b"x"), "partitions[0].error", "must be an object"),
    (_A[:_ERROR_AT + 10], "partitions[0].batch header", "ends at byte"),
    (_corrupt(_A, _ERROR_AT + 12, struct.pack(">I", 99)), "partitions[0].batch", "runs past"),
    (_corrupt(_A, _ERROR_AT, b"LLB2"), "partitions[0].batch", "bad batch magic"),
    (_corrupt(_A, _ERROR_AT + 16, bytes(4)), "partitions[0].batch", "checksum mismatch"),
    (_corrupt(_A, _ERROR_AT + 8, struct.pack(">I", 3)), "partitions[0].batch", "ends inside a length prefix"),
    (_A + b"\x00", "partitions", "1 trailing bytes at offset"),
])
def test_malformed_answer_names_field_and_offset(raw: bytes, field: str, words: str) -> None:
    with pytest.raises(MalformedAnswer) as err:
        parse_binary_consume(raw)
    assert err.value.field == field, err.value.message
    assert words in err.value.message


def test_every_truncation_is_refused() -> None:
    raw = answer(part("t", 0, 1, [b"x" * 30, b"y"]), ConsumedPartition("t", 1, 0, 0, None, error=OffsetOutOfRange("no")))
    for n in range(len(raw)):
        with pytest.raises(MalformedAnswer):
            parse_binary_consume(raw[:n])
    assert parse_binary_consume(raw).record_count == 2


def test_the_parser_checks_the_records_crc_not_just_the_header() -> None:
    raw = answer(part("t", 0, 1, [b"abc"]))
    at = raw.index(encode_batch([b"abc"])) + 20 + 4  # the payload of the one record
    with pytest.raises(MalformedAnswer, match="checksum"):
        parse_binary_consume(_corrupt(raw, at, b"X"))


# -- broker -----------------------------------------------------------------------------


def _both(broker, request: bytes) -> tuple[dict, object]:
    j = doc(broker.consume(request))
    resp = broker.consume(request, CONSUME_BINARY_CONTENT_TYPE)
    assert resp.status == 200 and resp.content_type == CONSUME_BINARY_CONTENT_TYPE
    return j, parse_binary_consume(resp.body)


def _same(j: dict, b) -> None:
    """The binary answer holds exactly what the JSON one does."""
    assert (j["record_count"], j["payload_bytes"]) == (b.record_count, b.payload_bytes)
    for r, p in zip(j["results"], b.partitions, strict=True):
        assert (r["topic"], r["partition"], r["ok"], r["high_watermark"], r["next_fetch_offset"]) == (
            p.topic, p.partition, p.ok, p.high_watermark, p.next_fetch_offset,
        )
        values = [v.encode() if isinstance(v, str) else v for v in (x["value"] for x in r["records"])]
        assert all(isinstance(v, bytes) for v in values), "a test payload came back as base64"
        assert values == p.payloads()
        assert [x["offset"] for x in r["records"]] == list(range(p.first_offset, p.first_offset + p.record_count))
        if not r["ok"]:
            assert p.error is not None and (r["error_code"], r["error"], r["retriable"]) == (
                p.error.error_code, p.error.error, p.error.retriable,
            )


def test_broker_answers_binary_from_the_cache_and_from_storage(cluster: Cluster) -> None:  # noqa: F811
    writer = cluster.broker()
    writer.produce(body(("t", 0, ["a", "bb", "ccc"]), ("t", 1, ["x"])))
    writer.produce(body(("t", 0, ["dddd"])))
    reader = cluster.broker("read")  # no tail cache: Oxia and S3
    request = json.dumps({"topic_partitions": [
        {"topic": "t", "partition": 0, "fetch_offset": 2, "partition_max_bytes": 6},
        {"topic": "t", "partition": 1, "fetch_offset": 1},
        {"topic": "t", "partition": 7, "fetch_offset": 1},
        {"topic": "t", "partition": 2, "fetch_offset": -1},
    ], "max_wait_ms": 0}).encode()
    for broker in (writer, reader):
        j, b = _both(broker, request)
        _same(j, b)
        assert [p.payloads() for p in b.partitions] == [[b"bb", b"ccc"], [b"x"], [], []]
        assert [p.error.error_code if p.error else None for p in b.partitions] == [
            None, None, "UNKNOWN_TOPIC_OR_PARTITION", "OFFSET_OUT_OF_RANGE",
        ]


def test_bad_requests_are_json_errors_whatever_the_accept_header(cluster: Cluster) -> None:  # noqa: F811
    broker = cluster.broker()
    resp = broker.consume(b'{"topic_partitions": [{"topic": "t", "partition": -1, "fetch_offset": 1}]}',
                          CONSUME_BINARY_CONTENT_TYPE)
    assert resp.status == 400 and resp.content_type == "application/json"
    assert doc(resp)["field"] == "topic_partitions[0].partition"
    assert broker.consume(consume_body("t", 0, 1), "application/json").content_type == "application/json"
