"""The broker's JSON edge: validation of every field, record encoding, config."""

from __future__ import annotations

import base64
import json

import pytest

from server._protocol.http_json import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_WAIT_MS,
    DEFAULT_MIN_BYTES,
    DEFAULT_PARTITION_MAX_BYTES,
    InvalidField,
    TooLarge,
    decode_record,
    encode_value,
    error_code,
    parse_consume,
    parse_json_body,
    parse_produce,
)
from server._broker.config import BrokerConfig
from server._errors import (
    ConfigError,
    CorruptBatch,
    LlogError,
    ObjectStoreError,
    OffsetOutOfRange,
    PartitionNotInitialized,
)


def produce_doc(**item: object) -> dict:
    return {"topic_partitions": [{"topic": "orders", "partition": 0, "records": ["a"], **item}]}


def consume_doc(item: dict | None = None, **top: object) -> dict:
    return {"topic_partitions": [{"topic": "orders", "partition": 0, "fetch_offset": 1, **(item or {})}], **top}


# -- JSON ---------------------------------------------------------------------------------


@pytest.mark.parametrize("body", [b"", b"{", b"[1]", b'"x"', b"null", b"\xff\xfe{", b'{"a": NaN}', b"[" * 100_000])
def test_malformed_bodies(body: bytes) -> None:
    with pytest.raises(InvalidField) as info:
        parse_json_body(body)
    assert info.value.field is None


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-be", "utf-8-sig"])
def test_a_body_in_another_encoding_than_utf8_is_refused(encoding: str) -> None:
    # json.loads(bytes) would detect these and accept them; the contract is UTF-8 JSON text.
    body = json.dumps(produce_doc()).encode(encoding)
    with pytest.raises(InvalidField) as info:
        parse_json_body(body)
    assert info.value.field is None


# -- produce ---------------------------------------------------------------------------------


def test_produce_parses_strings_and_base64() -> None:
    req = parse_produce(
        {"topic_partitions": [
            {"topic": "orders", "partition": 0, "records": ["alpha", "", "é✓", {"base64": "AAE="}]},
            {"topic": "orders", "partition": 0, "records": [{"base64": ""}]},
        ]},
        max_records=10,
    )
    assert [g.payloads for g in req.groups] == [(b"alpha", b"", "é✓".encode(), b"\x00\x01"), (b"",)]
    assert (req.record_count, req.payload_bytes) == (5, 5 + 5 + 2)


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        ({}, "topic_partitions"),
        ({"topic_partitions": None}, "topic_partitions"),
        ({"topic_partitions": {}}, "topic_partitions"),
        ({"topic_partitions": []}, "topic_partitions"),
        ({"topic_partitions": ["x"]}, "topic_partitions[0]"),
        (produce_doc(topic=None), "topic_partitions[0].topic"),
        (produce_doc(topic=7), "topic_partitions[0].topic"),
        (produce_doc(topic=""), "topic_partitions[0].topic"),
        (produce_doc(topic="a/b"), "topic_partitions[0].topic"),
        (produce_doc(topic=".."), "topic_partitions[0].topic"),
        (produce_doc(topic="."), "topic_partitions[0].topic"),
        (produce_doc(topic="a b"), "topic_partitions[0].topic"),
        (produce_doc(topic="x" * 250), "topic_partitions[0].topic"),
        (produce_doc(partition=True), "topic_partitions[0].partition"),
        (produce_doc(partition=1.5), "topic_partitions[0].partition"),
        (produce_doc(partition=1.0), "topic_partitions[0].partition"),
        (produce_doc(partition=-1), "topic_partitions[0].partition"),
        (produce_doc(partition="1"), "topic_partitions[0].partition"),
        (produce_doc(partition=None), "topic_partitions[0].partition"),
        (produce_doc(partition=2**31), "topic_partitions[0].partition"),
        (produce_doc(records="x"), "topic_partitions[0].records"),
        (produce_doc(records=[]), "topic_partitions[0].records"),
        (produce_doc(records=None), "topic_partitions[0].records"),
        (produce_doc(records=[1]), "topic_partitions[0].records[0]"),
        (produce_doc(records=["a", None]), "topic_partitions[0].records[1]"),
        (produce_doc(records=[["a"]]), "topic_partitions[0].records[0]"),
        (produce_doc(records=[{"base64": "!!"}]), "topic_partitions[0].records[0].base64"),
        (produce_doc(records=[{"base64": "AAE"}]), "topic_partitions[0].records[0].base64"),
        (produce_doc(records=[{"base64": 5}]), "topic_partitions[0].records[0].base64"),
        (produce_doc(records=[{"b64": "AA=="}]), "topic_partitions[0].records[0]"),
        (produce_doc(records=[{"base64": "AA==", "x": 1}]), "topic_partitions[0].records[0]"),
        (produce_doc(records=[{}]), "topic_partitions[0].records[0]"),
        (produce_doc(records=["\ud800"]), "topic_partitions[0].records[0]"),
        ({**produce_doc(), "flush": "yes"}, "flush"),
        ({**produce_doc(), "flush": 1}, "flush"),
        ({**produce_doc(), "flush": None}, "flush"),
    ],
)
def test_produce_validation_names_the_field(doc: dict, field: str) -> None:
    with pytest.raises(InvalidField) as info:
        parse_produce(doc, max_records=100)
    assert info.value.field == field
    assert not isinstance(info.value, TooLarge)


def test_produce_missing_fields() -> None:
    for key in ("topic", "partition", "records"):
        item = {"topic": "t", "partition": 0, "records": ["a"]}
        del item[key]
        with pytest.raises(InvalidField) as info:
            parse_produce({"topic_partitions": [item]}, max_records=10)
        assert info.value.field == f"topic_partitions[0].{key}"


def test_too_many_records() -> None:
    doc = {"topic_partitions": [{"topic": "t", "partition": p, "records": ["a"] * 3} for p in range(2)]}
    assert parse_produce(doc, max_records=6).record_count == 6
    with pytest.raises(TooLarge) as info:
        parse_produce(doc, max_records=5)
    assert info.value.field == "topic_partitions"


def test_a_surrogate_from_real_json_is_rejected() -> None:
    doc = parse_json_body(b'{"topic_partitions":[{"topic":"t","partition":0,"records":["\\ud800"]}]}')
    with pytest.raises(InvalidField):
        parse_produce(doc, max_records=10)


# -- records ------------------------------------------------------------------------------


@pytest.mark.parametrize("payload", [b"", b"alpha", "é✓".encode(), b"\x00\x01", b"\xff\xfe", bytes(range(256))])
def test_record_round_trip(payload: bytes) -> None:
    value = json.loads(json.dumps(encode_value(payload)))
    assert decode_record(value, "r") == payload
    assert isinstance(value, str) == _is_utf8(payload)


def _is_utf8(b: bytes) -> bool:
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def test_base64_is_standard_and_padded() -> None:
    assert encode_value(b"\xff\xfe\xfd") == {"base64": base64.b64encode(b"\xff\xfe\xfd").decode()}
    with pytest.raises(InvalidField):
        decode_record({"base64": "-_8="}, "r")  # urlsafe alphabet


# -- consume ----------------------------------------------------------------------------------


def test_consume_defaults_and_cap() -> None:
    req = parse_consume(consume_doc(), max_wait_ms_cap=30_000)
    assert (req.max_wait_ms, req.min_bytes, req.max_bytes) == (DEFAULT_MAX_WAIT_MS, DEFAULT_MIN_BYTES, DEFAULT_MAX_BYTES)
    assert req.partitions[0].partition_max_bytes == DEFAULT_PARTITION_MAX_BYTES
    assert parse_consume(consume_doc(max_wait_ms=60_000), max_wait_ms_cap=1000).max_wait_ms == 1000
    assert parse_consume(consume_doc({"fetch_offset": -5}), max_wait_ms_cap=0).partitions[0].fetch_offset == -5


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        (consume_doc({"fetch_offset": None}), "topic_partitions[0].fetch_offset"),
        (consume_doc({"fetch_offset": "1"}), "topic_partitions[0].fetch_offset"),
        (consume_doc({"fetch_offset": 1.5}), "topic_partitions[0].fetch_offset"),
        (consume_doc({"fetch_offset": True}), "topic_partitions[0].fetch_offset"),
        (consume_doc({"fetch_offset": 2**63}), "topic_partitions[0].fetch_offset"),
        (consume_doc({"partition": False}), "topic_partitions[0].partition"),
        (consume_doc({"topic": "../x"}), "topic_partitions[0].topic"),
        (consume_doc({"partition_max_bytes": 0}), "topic_partitions[0].partition_max_bytes"),
        (consume_doc({"partition_max_bytes": "1"}), "topic_partitions[0].partition_max_bytes"),
        (consume_doc(max_wait_ms=-1), "max_wait_ms"),
        (consume_doc(max_wait_ms=1.5), "max_wait_ms"),
        (consume_doc(min_bytes="x"), "min_bytes"),
        (consume_doc(min_bytes=-1), "min_bytes"),
        (consume_doc(max_bytes=0), "max_bytes"),
        ({"topic_partitions": [{"topic": "t", "partition": 0, "fetch_offset": 1}] * 2}, "topic_partitions[1]"),
    ],
)
def test_consume_validation_names_the_field(doc: dict, field: str) -> None:
    with pytest.raises(InvalidField) as info:
        parse_consume(doc, max_wait_ms_cap=1000)
    assert info.value.field == field


def test_error_codes() -> None:
    assert error_code(OffsetOutOfRange("x")) == "OFFSET_OUT_OF_RANGE"
    assert error_code(PartitionNotInitialized("x")) == "UNKNOWN_TOPIC_OR_PARTITION"
    assert error_code(CorruptBatch("x")) == "CORRUPT_MESSAGE"
    assert error_code(ObjectStoreError("x")) == "STORAGE_ERROR"
    assert error_code(LlogError("x")) == "UNKNOWN_SERVER_ERROR"


# -- config ---------------------------------------------------------------------------------------


def test_broker_config_from_env_and_overrides() -> None:
    c = BrokerConfig.from_env({
        "LLOG_BROKER_ROLE": "read", "LLOG_BROKER_ID": "b1", "LLOG_BROKER_PORT": "9000",
        "LLOG_BROKER_MAX_REQUEST_BYTES": "2048", "LLOG_BROKER_MAX_RECORDS_PER_REQUEST": "7",
        "LLOG_BROKER_MAX_WAIT_MS": "100", "LLOG_TAIL_CACHE_DIR": "/tmp/x", "LLOG_TAIL_CACHE_MAX_BYTES": "0",
    })
    assert (c.role, c.broker_id, c.port, c.max_request_bytes) == ("read", "b1", 9000, 2048)
    assert (c.max_records_per_request, c.max_wait_ms_cap, c.tail_cache_mode) == (7, 100, "off")
    assert (c.serves_produce, c.serves_consume) == (False, True)
    c = BrokerConfig.from_env({"LLOG_BROKER_ROLE": "read"}, role="write", port=0, tail_cache_dir=None)
    assert (c.role, c.port, c.tail_cache_mode) == ("write", 0, "memory")
    assert BrokerConfig.from_env({}).broker_id.startswith("broker-")
    assert BrokerConfig.from_env({"LLOG_TAIL_CACHE_DIR": "/d"}).tail_cache_mode == "file"


@pytest.mark.parametrize(
    ("env", "name"),
    [
        ({"LLOG_BROKER_ROLE": "leader"}, "LLOG_BROKER_ROLE"),
        ({"LLOG_BROKER_PORT": "70000"}, "LLOG_BROKER_PORT"),
        ({"LLOG_BROKER_PORT": "x"}, "LLOG_BROKER_PORT"),
        ({"LLOG_BROKER_MAX_REQUEST_BYTES": "10"}, "LLOG_BROKER_MAX_REQUEST_BYTES"),
        ({"LLOG_BROKER_MAX_RECORDS_PER_REQUEST": "0"}, "LLOG_BROKER_MAX_RECORDS_PER_REQUEST"),
        ({"LLOG_BROKER_MAX_WAIT_MS": "-1"}, "LLOG_BROKER_MAX_WAIT_MS"),
        ({"LLOG_TAIL_CACHE_MAX_BYTES": "-1"}, "LLOG_TAIL_CACHE_MAX_BYTES"),
        ({"LLOG_TAIL_CACHE_POLL_MS": "0"}, "LLOG_TAIL_CACHE_POLL_MS"),
    ],
)
def test_broker_config_errors_name_the_variable(env: dict, name: str) -> None:
    with pytest.raises(ConfigError, match=name):
        BrokerConfig.from_env(env)


def test_produce_flush_is_an_optional_boolean() -> None:
    assert parse_produce(produce_doc(), max_records=100).flush is False
    assert parse_produce({**produce_doc(), "flush": True}, max_records=100).flush is True
    assert parse_produce({**produce_doc(), "flush": False}, max_records=100).flush is False


def test_a_flush_only_request_has_no_topic_partitions_and_flush_true() -> None:
    req = parse_produce({"topic_partitions": [], "flush": True}, max_records=100)
    assert (req.groups, req.record_count, req.flush) == ((), 0, True)
    for doc in ({"topic_partitions": []}, {"topic_partitions": [], "flush": False}):
        with pytest.raises(InvalidField, match="flush-only") as err:
            parse_produce(doc, max_records=100)
        assert err.value.field == "topic_partitions"
