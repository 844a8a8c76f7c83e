"""The binary /consume answer (version 2: each partition's stored RecordBatch
v2 batches with only baseOffset set): its codec (golden bytes, round trips,
every malformed answer named by field and offset, CRC damage, a fetch from
inside a batch, baseOffsets that follow each other), the Accept header that
selects it, and the broker answering it over the in-memory stores with
exactly the records the JSON answer holds."""

from __future__ import annotations

import base64
import json
import struct
from pathlib import Path

import pytest

from server._errors import OffsetOutOfRange
from server._protocol.consume_binary import (
    CONSUME_BINARY_CONTENT_TYPE,
    MalformedAnswer,
    accepts_binary_consume,
    encode_binary_consume,
    parse_binary_consume,
)
from server._protocol.http_json import ConsumedPartition
from server._protocol.kafka_batch import Record, TimestampType, crc32c, kafka_offset, with_base_offset
from server._protocol.record_spans import RecordSpan, spans_of
from server._protocol.stored_batches import StoredBatches
from tests._records import one_per_record, stored
from tests.unit.test_broker import Cluster, body, cluster, consume_body, doc  # noqa: F401 - fixture

EXAMPLES = Path(__file__).resolve().parents[2] / "leaderless-log-protocol" / "examples"
GOLDEN = EXAMPLES / "consume-answer-2-partitions.bin"


def answer(*parts: ConsumedPartition, waited_ms: int = 0) -> bytes:
    count = sum(p.record_count for p in parts)
    nbytes = sum(p.payload_bytes for p in parts)
    return b"".join(encode_binary_consume(parts, count, nbytes, waited_ms))


def consumed(topic: str, partition: int, spans: tuple[RecordSpan, ...], hw: int | None = None) -> ConsumedPartition:
    """A partition answering ``spans`` (consecutive, at least one record)."""
    first, last = spans[0].first, spans[-1].last
    return ConsumedPartition(
        topic, partition, first, last + 1, last if hw is None else hw, spans, sum(s.payload_bytes for s in spans),
    )


def part(topic: str, partition: int, first: int, payloads: list[bytes] | StoredBatches) -> ConsumedPartition:
    """``payloads`` (one batch, unless batches already) at offsets ``first ..``."""
    batches = payloads if isinstance(payloads, StoredBatches) else stored(payloads)
    return consumed(topic, partition, tuple(spans_of(first, batches)))


def _b64(b: bytes | None) -> str | None:
    return None if b is None else base64.b64encode(b).decode()


# -- codec ----------------------------------------------------------------------------


def test_golden_answer_decodes_to_its_description() -> None:
    raw = GOLDEN.read_bytes()
    described = json.loads((EXAMPLES / "consume-answer-2-partitions.json").read_text())
    batch = (EXAMPLES / "kafka-batch-v2-none.bin").read_bytes()
    parsed = parse_binary_consume(raw)
    assert described["total_length"] == len(raw)
    assert (parsed.record_count, parsed.payload_bytes, parsed.waited_ms) == (2, len(batch), 0)
    ok, missing = parsed.partitions
    # Offsets 11..13 fetched from 12: the whole batch comes, first_offset says where to start.
    assert (ok.topic, ok.partition, ok.high_watermark, ok.next_fetch_offset) == ("orders", 0, 13, 14)
    assert (ok.first_offset, ok.batch_base, ok.record_count) == (12, 11, 2)
    want = [(r["offset"], r["key_base64"], r["value_base64"], r["timestamp_ms"])
            for r in described["partitions"][0]["records"]]
    assert [(o, _b64(r.key), _b64(r.value), r.timestamp_ms) for o, r in ok.records()] == want
    assert ok.payloads() == [None, b"\x00\x01\xff"]  # a tombstone, then bytes
    assert (missing.ok, missing.high_watermark, missing.record_count, missing.batches.nbytes) == (False, None, 0, 0)
    assert missing.error is not None and missing.error.error_code == "UNKNOWN_TOPIC_OR_PARTITION"
    # The header, the first partition's fixed fields, then its batch: the
    # stored batch of kafka-batch-v2-none.bin with only baseOffset set.
    assert raw[:28] == b"LLC1" + struct.pack(">HHIIQI", 2, 0, 2, 2, len(batch), 0)
    assert raw[28:36] == b"\x00\x06orders" and raw[36:40] == bytes(4)
    assert raw[40:72] == struct.pack(">qqqq", 13, 1, 14, 12)
    assert raw[72:80] == struct.pack(">II", 0, len(batch))
    assert raw[80:80 + len(batch)] == with_base_offset(batch, kafka_offset(11))


def test_round_trip_with_cut_spans_large_sections_records_and_errors() -> None:
    big = [bytes([i]) * 70_000 for i in range(5)]  # batches past the 64 KiB copy threshold
    spans = spans_of(10, one_per_record(big[:2])) + spans_of(12, one_per_record(big[2:]))
    cut = consumed("t", 3, (spans[0].since(11), spans[1].head(2)), hw=20)
    failed = ConsumedPartition(
        "u", 0, -4, -4, None, error=OffsetOutOfRange("below the log start", topic="u", partition=0, offset=-4)
    )
    records = [
        Record(b"v1", b"k1", (("h", b"x"), ("none", None)), 1_700_000_000_001),
        Record(None, b"k2", (), 1_700_000_000_002),  # a tombstone
        Record(b"", None, (), 1_700_000_000_003),
    ]
    full = part("r", 1, 7, StoredBatches.of_records(records, now_ms=0))
    edge = part("t" * 249, 2**31 - 1, 1, [b""])
    parts = (cut, failed, full, edge)
    chunks = encode_binary_consume(parts, 7, sum(p.payload_bytes for p in parts), 17)
    assert any(isinstance(c, memoryview) for c in chunks)  # big sections are written, not copied
    parsed = parse_binary_consume(b"".join(chunks))
    a, b, c, d = parsed.partitions
    assert (a.first_offset, a.next_fetch_offset, a.high_watermark, a.batch_base) == (11, 14, 20, 11)
    assert a.payloads() == big[1:4] and a.batches.batch_count == 3
    assert (b.ok, b.next_fetch_offset, b.first_offset, b.record_count) == (False, -4, -4, 0)
    assert b.error is not None
    assert (b.error.error_code, b.error.error_type) == ("OFFSET_OUT_OF_RANGE", "OffsetOutOfRange")
    assert [(o, r.value, r.key, r.headers, r.timestamp_ms, r.timestamp_type) for o, r in c.records()] == [
        (7 + i, r.value, r.key, r.headers, r.timestamp_ms, TimestampType.CREATE_TIME) for i, r in enumerate(records)
    ]
    assert (d.topic, d.partition, d.payloads()) == ("t" * 249, 2**31 - 1, [b""])
    assert (parsed.record_count, parsed.payload_bytes, parsed.waited_ms) == (7, sum(p.payload_bytes for p in parts), 17)


def test_a_fetch_inside_a_batch_gets_the_whole_batch_and_where_to_start() -> None:
    batch = stored([b"p", b"q", b"r"], ts=5)
    raw = answer(consumed("t", 0, (RecordSpan.whole(1, batch).since(3),)))
    (p,) = parse_binary_consume(raw).partitions
    assert (p.batch_base, p.first_offset, p.next_fetch_offset, p.record_count) == (1, 3, 4, 1)
    assert p.records() == [(3, batch[2])] and p.payloads() == [b"r"]
    assert p.batches.nbytes == batch.nbytes  # the batch, whole
    assert raw.endswith(with_base_offset(batch.data, kafka_offset(1)))  # as stored, but for baseOffset


def test_base_offsets_follow_each_other_across_spans_of_different_sources() -> None:
    """Spans from different stored runs (an S3 slice, then a tail-cache segment):
    each batch's baseOffset is the Kafka offset of its first record, so the
    batches of a partition follow each other without a gap."""
    first = spans_of(4, StoredBatches.join([stored([b"a", b"b"]), stored([b"c"])]))[0].since(5)
    second = spans_of(7, one_per_record([b"d", b"e"]))[0]
    (p,) = parse_binary_consume(answer(consumed("t", 0, (first, second)))).partitions
    bases = [p.batches.header(i).base_offset for i in range(p.batches.batch_count)]
    assert bases == [kafka_offset(o) for o in (4, 6, 7, 8)]
    assert (p.batch_base, p.first_offset, p.next_fetch_offset) == (4, 5, 9)
    assert p.records() == [(o, r) for o, r in zip(range(5, 9), first.batches[1:] + second.batches[:])]


@pytest.mark.parametrize("accept, binary", [
    (None, False),
    ("", False),
    ("application/json", False),
    ("*/*", False),
    (CONSUME_BINARY_CONTENT_TYPE, True),
    ("Application/VND.llog.consume.v2", True),
    (f"application/json;q=0.5, {CONSUME_BINARY_CONTENT_TYPE}", True),
    (f"{CONSUME_BINARY_CONTENT_TYPE}; q=0.9", True),
    (f"{CONSUME_BINARY_CONTENT_TYPE};q=0", False),
    (f"{CONSUME_BINARY_CONTENT_TYPE}; q=0.0, application/json", False),
    ("application/vnd.llog.consume.v1", False),  # no longer served: JSON
])
def test_accept_header_selects_the_binary_answer(accept: str | None, binary: bool) -> None:
    assert accepts_binary_consume(accept) is binary


def _corrupt(raw: bytes, offset: int, value: bytes) -> bytes:
    return raw[:offset] + value + raw[offset + len(value):]


_A = answer(part("t", 0, 5, [b"ab", b"c"]))  # one batch, offsets 5..6
_FIXED_AT = 28 + 2 + 1  # header, topic length, "t"
_ERROR_AT = _FIXED_AT + 40  # partition, four offsets, error_length
_BATCH_AT = _ERROR_AT + 4  # batches_length (no error), then the batch
_E = answer(ConsumedPartition("t", 0, 0, 0, None, error=OffsetOutOfRange("below", offset=0)))
_AB = answer(part("t", 0, 5, one_per_record([b"ab", b"c"])))  # two batches
_SECOND_AT = _BATCH_AT + stored([b"ab"]).nbytes


def _recrc(raw: bytes, offset: int, value: bytes, batch_at: int = _BATCH_AT) -> bytes:
    """``raw`` with ``value`` written at ``offset`` inside the batch at
    ``batch_at`` and that batch's CRC-32C made right again (so only the
    changed field is wrong)."""
    out = bytearray(_corrupt(raw, offset, value))
    (length,) = struct.unpack_from(">i", out, batch_at + 8)
    end = batch_at + 12 + length
    struct.pack_into(">I", out, batch_at + 17, crc32c(bytes(out[batch_at + 21:end])))
    return bytes(out)


@pytest.mark.parametrize("raw, field, words", [
    (b"", "header", "ends at byte 0"),
    (_A[:20], "header", "inside this field"),
    (_corrupt(_A, 0, b"LLP1"), "header.magic", "offset 0"),
    (_corrupt(_A, 4, b"\x00\x01"), "header.version", "offset 4"),  # a v1 answer is not read as v2
    (_corrupt(_A, 6, b"\x00\x01"), "header.flags", "offset 6"),
    (_corrupt(_A, 8, struct.pack(">I", 2)), "partitions[1].topic_length", "ends at byte"),
    (_corrupt(_A, 8, struct.pack(">I", 0)), "partitions", "trailing bytes at offset 28"),
    (_corrupt(_A, 12, struct.pack(">I", 1)), "header.record_count", "do not match"),
    (_corrupt(_A, 16, struct.pack(">Q", 2)), "header.payload_bytes", "do not match"),
    (_corrupt(_A, 28, b"\x00\x00"), "partitions[0].topic_length", "offset 28"),
    (_corrupt(_A, 28, b"\x01\x00"), "partitions[0].topic_length", "offset 28"),
    (_corrupt(_A, 28, b"\x00\xf9"), "partitions[0].topic", "ends at byte"),
    (_corrupt(_A, 30, b"\xff"), "partitions[0].topic", "not UTF-8"),
    (_corrupt(_A, 30, b"/"), "partitions[0].topic", "invalid topic"),
    (_A[:_FIXED_AT + 10], "partitions[0].partition", "ends at byte"),
    (_corrupt(_A, _FIXED_AT, b"\x80\x00\x00\x00"), "partitions[0].partition", f"offset {_FIXED_AT}"),
    (_corrupt(_A, _FIXED_AT + 4, struct.pack(">q", -2)), "partitions[0].high_watermark", "below -1"),
    (_corrupt(_A, _FIXED_AT + 20, struct.pack(">q", 9)), "partitions[0].first_offset", "next_fetch_offset 9"),
    (_corrupt(_A, _FIXED_AT + 28, struct.pack(">q", 4)), "partitions[0].first_offset", "first_offset 4"),
    (_corrupt(_A, _FIXED_AT + 28, struct.pack(">q", 7)), "partitions[0].first_offset", "first_offset 7"),
    (_corrupt(_A, _ERROR_AT - 4, struct.pack(">I", 9999)), "partitions[0].error", "ends at byte"),
    (_corrupt(_E, _ERROR_AT, b"["), "partitions[0].error", "not UTF-8 JSON"),
    (_corrupt(_E, _ERROR_AT + 2, b"x"), "partitions[0].error", "must be an object"),
    (_A[:_ERROR_AT + 2], "partitions[0].batches_length", "ends at byte"),
    (_corrupt(_A, _ERROR_AT, struct.pack(">I", 9999)), "partitions[0].batches_length", "runs past"),
    (_corrupt(_A, _ERROR_AT, struct.pack(">I", len(_A) - _BATCH_AT - 1)), "partitions[0].batches", "does not fit"),
    (_corrupt(_A, _BATCH_AT + 8, struct.pack(">i", 3)), "partitions[0].batches", "batchLength 3"),
    (_corrupt(_A, _BATCH_AT + 16, b"\x01"), "partitions[0].batches", "magic is 1"),
    (_corrupt(_A, _BATCH_AT + 17, bytes(4)), "partitions[0].batches", f"offset {_BATCH_AT}: batch CRC-32C mismatch"),
    (_recrc(_A, _BATCH_AT + 57, struct.pack(">i", 3)), "partitions[0].batches", "recordsCount 3"),
    (_recrc(_A, _BATCH_AT + 21, struct.pack(">h", 7)), "partitions[0].batches", "unknown compression"),
    (_corrupt(_AB, _SECOND_AT, struct.pack(">q", kafka_offset(5))), "partitions[0].batches", "does not follow"),
    (_corrupt(_AB, _SECOND_AT, struct.pack(">q", kafka_offset(7))), "partitions[0].batches", "does not follow"),
    (_A + b"\x00", "partitions", "1 trailing bytes at offset"),
])
def test_malformed_answer_names_field_and_offset(raw: bytes, field: str, words: str) -> None:
    with pytest.raises(MalformedAnswer) as err:
        parse_binary_consume(raw)
    assert err.value.field == field, err.value.message
    assert words in err.value.message


def test_the_corruptions_above_damage_a_valid_answer() -> None:
    """The cases above start from answers that parse (so each names what it broke)."""
    assert [p.payloads() for p in parse_binary_consume(_A).partitions] == [[b"ab", b"c"]]
    assert [p.payloads() for p in parse_binary_consume(_AB).partitions] == [[b"ab", b"c"]]
    assert parse_binary_consume(_E).partitions[0].error is not None
    assert parse_binary_consume(_recrc(_A, _BATCH_AT + 12, struct.pack(">i", 42))).record_count == 2  # epoch: free


def test_every_truncation_is_refused() -> None:
    raw = answer(part("t", 0, 1, one_per_record([b"x" * 30, b"y"])),
                 ConsumedPartition("t", 1, 0, 0, None, error=OffsetOutOfRange("no")))
    for n in range(len(raw)):
        with pytest.raises(MalformedAnswer):
            parse_binary_consume(raw[:n])
    assert parse_binary_consume(raw).record_count == 2


@pytest.mark.parametrize("where", ["value", "key", "header", "timestamp"])
def test_the_parser_checks_the_records_crc_not_just_the_header(where: str) -> None:
    record = Record(b"the-value", b"the-key", (("the-header", b"hv"),), 1_700_000_000_000)
    raw = answer(part("t", 0, 1, StoredBatches.of_records([record], now_ms=0)))
    at = {
        "value": raw.index(b"the-value"),
        "key": raw.index(b"the-key"),
        "header": raw.index(b"the-header"),
        "timestamp": _BATCH_AT + 27 + 7,  # baseTimestamp's last byte
    }[where]
    with pytest.raises(MalformedAnswer, match="CRC-32C mismatch") as err:
        parse_binary_consume(_corrupt(raw, at, bytes([raw[at] ^ 1])))
    assert err.value.field == "partitions[0].batches"


# -- broker -----------------------------------------------------------------------------


def _both(broker, request: bytes) -> tuple[dict, object, bytes]:
    j = doc(broker.consume(request))
    resp = broker.consume(request, CONSUME_BINARY_CONTENT_TYPE)
    assert resp.status == 200 and resp.content_type == CONSUME_BINARY_CONTENT_TYPE
    raw = resp.body
    return j, parse_binary_consume(raw), raw


_TIMESTAMP_TYPES = {TimestampType.CREATE_TIME: "CreateTime", TimestampType.LOG_APPEND_TIME: "LogAppendTime"}


def _json_bytes(v: object) -> bytes | None:
    if v is None:
        return None
    return v.encode() if isinstance(v, str) else base64.b64decode(v["base64"])  # type: ignore[index]


def _same(j: dict, b) -> None:
    """The binary answer holds exactly what the JSON one does."""
    assert (j["record_count"], j["payload_bytes"]) == (b.record_count, b.payload_bytes)
    for r, p in zip(j["results"], b.partitions, strict=True):
        assert (r["topic"], r["partition"], r["ok"], r["high_watermark"], r["next_fetch_offset"]) == (
            p.topic, p.partition, p.ok, p.high_watermark, p.next_fetch_offset,
        )
        from_json = [
            (x["offset"], _json_bytes(x["value"]), _json_bytes(x["key"]),
             tuple((h["key"], _json_bytes(h["value"])) for h in x["headers"]), x["timestamp_ms"], x["timestamp_type"])
            for x in r["records"]
        ]
        from_binary = [
            (o, rec.value, rec.key, rec.headers, rec.timestamp_ms, _TIMESTAMP_TYPES[rec.timestamp_type])
            for o, rec in p.records()
        ]
        assert from_json == from_binary
        assert [x[0] for x in from_json] == list(range(p.first_offset, p.first_offset + p.record_count))
        if not r["ok"]:
            assert p.error is not None and (r["error_code"], r["error"], r["retriable"]) == (
                p.error.error_code, p.error.error, p.error.retriable,
            )


def test_broker_answers_binary_from_the_cache_and_from_storage(cluster: Cluster) -> None:  # noqa: F811
    writer = cluster.broker()
    rich = {"value": "x", "key": "k", "headers": [{"key": "h", "value": "hv"}, {"key": "n", "value": None}],
            "timestamp_ms": 1_700_000_000_000}
    writer.produce(body(("t", 0, ["a", "bb", "ccc"]), ("t", 1, [rich, {"key": "gone"}])))
    writer.produce(body(("t", 0, ["dddd"])))
    reader = cluster.broker("read")  # no tail cache: Oxia and S3
    request = json.dumps({"topic_partitions": [
        # From inside the first batch, a limit smaller than it: that batch alone, whole.
        {"topic": "t", "partition": 0, "fetch_offset": 2, "partition_max_bytes": 6},
        {"topic": "t", "partition": 1, "fetch_offset": 1},
        {"topic": "t", "partition": 7, "fetch_offset": 1},
        {"topic": "t", "partition": 2, "fetch_offset": -1},
    ], "max_wait_ms": 0}).encode()
    answers = []
    for broker in (writer, reader):
        j, b, raw = _both(broker, request)
        _same(j, b)
        answers.append(raw)
        assert [p.payloads() for p in b.partitions] == [[b"bb", b"ccc"], [b"x", None], [], []]
        assert [p.error.error_code if p.error else None for p in b.partitions] == [
            None, None, "UNKNOWN_TOPIC_OR_PARTITION", "OFFSET_OUT_OF_RANGE",
        ]
        t0 = b.partitions[0]
        assert (t0.batch_base, t0.first_offset, t0.next_fetch_offset, t0.batches.batch_count) == (1, 2, 4, 1)
        (_, key_and_headers), (_, tombstone) = b.partitions[1].records()
        assert (key_and_headers.key, key_and_headers.headers, key_and_headers.timestamp_ms) == (
            b"k", (("h", b"hv"), ("n", None)), 1_700_000_000_000)
        assert (tombstone.key, tombstone.value) == (b"gone", None)
    assert answers[0] == answers[1]  # the cache holds the very batches S3 does


def test_broker_batches_follow_each_other_across_produces(cluster: Cluster) -> None:  # noqa: F811
    writer = cluster.broker()
    for records in (["a", "b"], ["c"], ["d", "e", "f"]):
        writer.produce(body(("t", 0, records)))
    for broker in (writer, cluster.broker("read")):
        j, b, _ = _both(broker, consume_body("t", 0, 2, max_wait_ms=0))
        _same(j, b)
        (p,) = b.partitions
        bases = [p.batches.header(i).base_offset for i in range(p.batches.batch_count)]
        assert bases == [kafka_offset(o) for o in (1, 3, 4)]
        assert p.payloads() == [b"b", b"c", b"d", b"e", b"f"] and p.next_fetch_offset == 7


def test_bad_requests_are_json_errors_whatever_the_accept_header(cluster: Cluster) -> None:  # noqa: F811
    broker = cluster.broker()
    resp = broker.consume(b'{"topic_partitions": [{"topic": "t", "partition": -1, "fetch_offset": 1}]}',
                          CONSUME_BINARY_CONTENT_TYPE)
    assert resp.status == 400 and resp.content_type == "application/json"
    assert doc(resp)["field"] == "topic_partitions[0].partition"
    assert broker.consume(consume_body("t", 0, 1), "application/json").content_type == "application/json"
    assert broker.consume(consume_body("t", 0, 1), "application/vnd.llog.consume.v1").content_type == (
        "application/json"
    )
