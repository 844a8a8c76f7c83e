"""The binary /produce body: its codec (golden bytes, every malformed case a
400 naming the field and offset) and the broker answering it over the
in-memory stores, spliced records read back byte for byte."""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

import pytest

from server._protocol.produce_binary import (
    PRODUCE_BINARY_CONTENT_TYPE,
    encode_binary_produce,
    parse_binary_produce,
    parse_produce_body,
)
from server._protocol.http_json import InvalidField, TooLarge
from server._protocol.codec import EncodedRecords, decode_batch, encode_batch, join_payloads
from server.leaderless_log_reader import LeaderlessLogReader
from tests.unit.test_broker import OXIA, S3, Cluster, body, cluster, consume_body, doc  # noqa: F401 - fixture

EXAMPLES = Path(__file__).resolve().parents[2] / "leaderless-log-protocol" / "examples"
GOLDEN = EXAMPLES / "produce-body-2-batches.bin"


def one(topic: str = "t", partition: int = 0, payloads: tuple[bytes, ...] = (b"a", b"bc")) -> bytes:
    return encode_binary_produce([(topic, partition, payloads)])


# -- codec ----------------------------------------------------------------------------


def test_golden_body_decodes_to_its_description() -> None:
    raw = GOLDEN.read_bytes()
    described = json.loads((EXAMPLES / "produce-body-2-batches.json").read_text())
    request = parse_binary_produce(raw, max_records=100)
    assert [(g.topic, g.partition, list(g.payloads)) for g in request.groups] == [
        ("orders", 0, [b"alpha", b"", b"\x00\x01\xff"]), ("orders", 7, [b"c"]),
    ]
    assert (request.record_count, request.payload_bytes) == (4, 9)
    assert described["total_length"] == len(raw) == 101
    # The header, then each batch's topic, partition and a bytes-batch-v1 batch as stored.
    assert raw[:12] == b"LLP1" + bytes([0, 1, 0, 0, 0, 0, 0, 2])
    assert raw[12:20] == b"\x00\x06orders" and raw[20:24] == bytes(4)
    assert raw[24:64] == (EXAMPLES / "batch-3-records.bin").read_bytes()


def test_round_trip_and_splice_into_one_batch() -> None:
    raw = encode_binary_produce([("t", 0, (b"a", b"bc")), ("t", 0, (b"",)), ("u", 2**31 - 1, (b"z" * 1000,))])
    groups = parse_binary_produce(raw, max_records=10).groups
    assert all(isinstance(g.payloads, EncodedRecords) for g in groups)
    joined = join_payloads([groups[0].payloads, groups[1].payloads])
    assert isinstance(joined, EncodedRecords) and list(joined) == [b"a", b"bc", b""]
    assert (joined[1], joined[-1], joined[0:2]) == (b"bc", b"", [b"a", b"bc"])
    assert encode_batch(joined) == encode_batch([b"a", b"bc", b""])
    assert decode_batch(encode_batch(groups[2].payloads)) == [b"z" * 1000]
    with pytest.raises(IndexError):
        joined[3]
    mixed = join_payloads([groups[0].payloads, [b"x"]])
    assert mixed == [b"a", b"bc", b"x"]


def test_content_type_selects_the_format() -> None:
    raw = one()
    assert parse_produce_body(raw, f"{PRODUCE_BINARY_CONTENT_TYPE}; charset=binary", max_records=9).record_count == 2
    json_body = body(("t", 0, ["a"]))
    for ctype in (None, "application/json", "text/plain"):
        assert parse_produce_body(json_body, ctype, max_records=9).record_count == 1
    with pytest.raises(InvalidField) as err:
        parse_produce_body(raw, "application/json", max_records=9)
    assert err.value.field is None  # not JSON


def _corrupt(raw: bytes, offset: int, value: bytes) -> bytes:
    return raw[:offset] + value + raw[offset + len(value):]


_T = one()
_BATCH_AT = 12 + 2 + 1 + 4  # header, topic length, "t", partition


@pytest.mark.parametrize("raw, field, words", [
    (b"", "header", "ends at byte 0"),
    (b"LLP1\x00\x01", "header", "inside this field"),
    (_corrupt(_T, 0, b"XXXX"), "header.magic", "offset 0"),
    (_corrupt(_T, 4, b"\x00\x02"), "header.version", "offset 4"),
    (_corrupt(_T, 6, b"\x00\x02"), "header.flags", "offset 6"),
    (_corrupt(_T, 6, b"\x80\x01"), "header.flags", "unknown bits"),
    (_corrupt(_T, 8, bytes(4)), "header.batch_count", "offset 8"),
    (_corrupt(_T, 8, struct.pack(">I", 2)), "batches[1].topic_length", "ends at byte"),
    (_corrupt(_T, 12, b"\x00\x00"), "batches[0].topic_length", "offset 12"),
    (_corrupt(_T, 12, b"\x01\x00"), "batches[0].topic_length", "offset 12"),
    (_corrupt(_T, 12, b"\x00\x50"), "batches[0].topic", "ends at byte"),
    (_corrupt(_T, 14, b"\xff"), "batches[0].topic", "not UTF-8"),
    (_corrupt(_T, 14, b"/"), "batches[0].topic", "invalid topic"),
    (_corrupt(_T, 15, b"\x80\x00\x00\x00"), "batches[0].partition", "offset 15"),
    (_T[:_BATCH_AT + 10], "batches[0].batch header", "ends at byte"),
    (_corrupt(_T, _BATCH_AT + 12, struct.pack(">I", 99)), "batches[0].batch", "runs past"),
    (_corrupt(_T, _BATCH_AT, b"LLB2"), "batches[0].batch", "bad batch magic"),
    (_corrupt(_T, _BATCH_AT + 4, b"\x00\x09"), "batches[0].batch", "unsupported batch version"),
    (_corrupt(_T, _BATCH_AT + 16, b"\x00\x00\x00\x00"), "batches[0].batch", "checksum mismatch"),
    (_corrupt(_T, _BATCH_AT + 8, struct.pack(">I", 3)), "batches[0].batch", "ends inside a length prefix"),
    (_corrupt(_T, _BATCH_AT + 8, struct.pack(">I", 1)), "batches[0].batch", "trailing bytes"),
    (_T + b"\x00", "batches", "1 trailing bytes at offset"),
])
def test_malformed_body_names_field_and_offset(raw: bytes, field: str, words: str) -> None:
    with pytest.raises(InvalidField) as err:
        parse_binary_produce(raw, max_records=100)
    assert not isinstance(err.value, TooLarge)
    assert err.value.field == field, err.value.message
    assert words in err.value.message


def test_the_flush_flag_is_bit_0_of_the_header_flags() -> None:
    raw = encode_binary_produce([("t", 0, (b"a",))], flush=True)
    assert raw[6:8] == b"\x00\x01"
    assert parse_binary_produce(raw, max_records=9).flush is True
    assert parse_binary_produce(one(), max_records=9).flush is False


def test_a_flush_only_body_has_no_batch_and_the_flush_flag() -> None:
    req = parse_binary_produce(encode_binary_produce([], flush=True), max_records=9)
    assert (req.groups, req.record_count, req.flush) == ((), 0, True)
    with pytest.raises(InvalidField, match="flush-only") as err:
        parse_binary_produce(encode_binary_produce([]), max_records=9)
    assert err.value.field == "header.batch_count"


def test_a_batch_whose_length_prefix_lies_is_refused_even_with_a_good_crc() -> None:
    records = struct.pack(">I", 9) + b"ab"  # the prefix claims 9 bytes, 2 follow
    batch = struct.pack(">4sHHIII", b"LLB1", 1, 0, 1, len(records), zlib.crc32(records)) + records
    raw = struct.pack(">4sHHI", b"LLP1", 1, 0, 1) + b"\x00\x01t" + bytes(4) + batch
    with pytest.raises(InvalidField, match="ends inside a record") as err:
        parse_binary_produce(raw, max_records=100)
    assert err.value.field == "batches[0].batch"


def test_a_forged_record_count_is_refused_before_anything_is_sized_by_it() -> None:
    records = struct.pack(">I", 1) + b"a"
    batch = struct.pack(">4sHHIII", b"LLB1", 1, 0, 2**32 - 1, len(records), zlib.crc32(records)) + records
    raw = struct.pack(">4sHHI", b"LLP1", 1, 0, 1) + b"\x00\x01t" + bytes(4) + batch
    with pytest.raises(InvalidField, match="ends inside a length prefix"):
        parse_binary_produce(raw, max_records=100)


def test_a_batch_of_no_records_is_refused() -> None:
    raw = struct.pack(">4sHHI", b"LLP1", 1, 0, 1) + b"\x00\x01t" + bytes(4) + encode_batch([])
    with pytest.raises(InvalidField, match="holds no records"):
        parse_binary_produce(raw, max_records=100)


def test_record_limit_is_413_field() -> None:
    with pytest.raises(TooLarge) as err:
        parse_binary_produce(encode_binary_produce([("t", 0, (b"a",) * 3), ("t", 1, (b"b",) * 3)]), max_records=5)
    assert err.value.field == "batches"


# -- broker -----------------------------------------------------------------------------


def test_broker_commits_a_binary_body_and_reads_it_back(cluster: Cluster) -> None:  # noqa: F811
    broker = cluster.broker()
    payloads = (b"\x00\xff binary", "é".encode(), b"")
    raw = encode_binary_produce([("t", 0, payloads), ("t", 1, (b"x",)), ("t", 0, (b"after",))])
    resp = broker.produce(raw, PRODUCE_BINARY_CONTENT_TYPE)
    assert resp.status == 200 and resp.content_type == "application/json"
    d = doc(resp)
    assert (d["success_count"], d["error_count"]) == (3, 0)
    assert [(r["partition"], r["start_offset"], r["end_offset"]) for r in d["results"]] == [(0, 1, 3), (1, 1, 1), (0, 4, 4)]
    # A JSON body to the same partition lands after it, in the same log.
    assert doc(broker.produce(body(("t", 0, ["json"]))))["results"][0]["start_offset"] == 5
    got = doc(broker.consume(consume_body("t", 0, 1)))["results"][0]["records"]
    assert [r["value"] for r in got] == [{"base64": "AP8gYmluYXJ5"}, "é", "", "after", "json"]
    # Read from storage too, past the tail cache: the spliced batch is a valid stored batch.
    reader = LeaderlessLogReader(OXIA, S3, metadata_store=cluster.meta, object_store=cluster.objs)
    try:
        assert [r.payload for r in reader.read_range("t", 0, 1, 5)] == [*payloads, b"after", b"json"]
    finally:
        reader.close()


@pytest.mark.parametrize("raw, status, field", [
    (b"LLP1", 400, "header"),
    (_corrupt(_T, _BATCH_AT + 16, b"\x00\x00\x00\x00"), 400, "batches[0].batch"),
    (encode_binary_produce([("t", 0, (b"a",) * 6)]), 413, "batches"),
])
def test_broker_answers_bad_binary_bodies(cluster: Cluster, raw: bytes, status: int, field: str) -> None:  # noqa: F811
    broker = cluster.broker(max_records_per_request=5)
    resp = broker.produce(raw, PRODUCE_BINARY_CONTENT_TYPE)
    assert resp.status == status
    assert doc(resp)["field"] == field
    assert doc(resp)["error_type"] == ("RequestTooLarge" if status == 413 else "InvalidRequest")
