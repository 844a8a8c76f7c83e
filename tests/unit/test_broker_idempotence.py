"""``POST /producers`` and idempotent batches through the broker's routes (SPEC 7.12),
over the in-memory stores: the JSON and binary bodies, the answers, the errors."""

from __future__ import annotations

import json

import pytest

from server._protocol.kafka_batch import Record, build_batch
from server._protocol.produce_binary import PRODUCE_BINARY_V2_CONTENT_TYPE, encode_binary_produce_v2
from tests.unit.test_broker import Cluster, consume_body, doc


@pytest.fixture
def cluster():
    with Cluster() as c:
        yield c


def _producers(broker, body: object = None):
    raw = b"" if body is None else json.dumps(body).encode()
    resp = broker.producers(raw)
    return resp.status, doc(resp)


def _idem(records, pid, epoch, seq, partition=0, topic="orders") -> dict:
    return {"topic": topic, "partition": partition, "records": records, "producer_id": pid,
            "producer_epoch": epoch, "base_sequence": seq}


def _produce(broker, *items):
    resp = broker.produce(json.dumps({"topic_partitions": list(items)}).encode())
    return resp.status, doc(resp)


def test_producers_hands_out_ids_and_epochs(cluster):
    b = cluster.broker()
    assert _producers(b) == (200, {"producer_id": 0, "producer_epoch": 0})
    assert _producers(b, {}) == (200, {"producer_id": 1, "producer_epoch": 0})
    assert _producers(b, {"name": "job-1"}) == (200, {"producer_id": 2, "producer_epoch": 0})
    assert _producers(b, {"name": "job-1"}) == (200, {"producer_id": 2, "producer_epoch": 1})
    assert _producers(b, {"name": "job-1", "resume": True}) == (200, {"producer_id": 2, "producer_epoch": 1})
    assert _producers(b, {"producer_id": 1, "producer_epoch": 0}) == (200, {"producer_id": 1, "producer_epoch": 1})


@pytest.mark.parametrize("body, field", [
    ({"name": 3}, "name"),
    ({"name": ""}, "name"),
    ({"resume": True}, "resume"),
    ({"name": "a", "resume": "yes"}, "resume"),
    ({"producer_id": 3}, "producer_epoch"),
    ({"producer_epoch": 3}, "producer_id"),
    ({"producer_id": -1, "producer_epoch": 0}, "producer_id"),
    ({"producer_id": 1, "producer_epoch": 99_999}, "producer_epoch"),
    ({"name": "a", "producer_id": 1, "producer_epoch": 0}, "producer_id"),
    ({"colour": "red"}, "colour"),
])
def test_a_bad_producers_body_is_a_400_naming_the_field(cluster, body, field):
    status, answer = _producers(cluster.broker(), body)
    assert status == 400, answer
    assert (answer["error_type"], answer["field"]) == ("InvalidRequest", field)


def test_a_read_broker_refuses_producers(cluster):
    status, answer = _producers(cluster.broker("read"))
    assert (status, answer["error_type"]) == (403, "RoleNotServed")


def test_a_json_batch_sent_twice_is_stored_once_and_answered_with_its_offsets(cluster):
    b = cluster.broker()
    pid = _producers(b)[1]["producer_id"]
    status, first = _produce(b, _idem(["a", "b"], pid, 0, 0))
    assert status == 200 and first["results"][0]["start_offset"] == 1 and "duplicate" not in first["results"][0]
    assert first["results"][0]["index_key"].endswith("/index/00000000000000000002")
    assert first["results"][0]["wal_uri"].startswith("s3://")
    status, again = _produce(b, _idem(["a", "b"], pid, 0, 0), _idem(["c"], pid, 0, 2))
    assert status == 200
    assert [(r["start_offset"], r["end_offset"], r.get("duplicate", False)) for r in again["results"]] == [
        (1, 2, True), (3, 3, False)]
    resp = b.consume(consume_body("orders", 0, 1), None)
    assert [r["value"] for r in doc(resp)["results"][0]["records"]] == ["a", "b", "c"]


def test_a_gap_and_a_stale_epoch_are_409s_naming_the_error(cluster):
    b = cluster.broker()
    _produce(b, _idem(["a"], 7, 1, 0))
    status, answer = _produce(b, _idem(["gap"], 7, 1, 5), _idem(["old"], 7, 0, 1), _idem(["x"], 8, 0, 0, partition=1))
    assert status == 409
    assert [r.get("error_type") for r in answer["results"]] == ["OutOfOrderSequence", "ProducerFenced", None]
    assert answer["results"][0]["retriable"] is True and answer["results"][1]["retriable"] is False


@pytest.mark.parametrize("item, field", [
    ({"producer_id": 1}, "topic_partitions[0].producer_epoch"),
    ({"producer_id": 1, "producer_epoch": 0}, "topic_partitions[0].base_sequence"),
    ({"producer_id": 1, "producer_epoch": 0, "base_sequence": -1}, "topic_partitions[0].base_sequence"),
    ({"producer_id": 1, "producer_epoch": 40_000, "base_sequence": 0}, "topic_partitions[0].producer_epoch"),
    ({"producer_id": "1", "producer_epoch": 0, "base_sequence": 0}, "topic_partitions[0].producer_id"),
])
def test_bad_producer_fields_are_400s_naming_the_field(cluster, item, field):
    resp = cluster.broker().produce(json.dumps({"topic_partitions": [
        {"topic": "orders", "partition": 0, "records": ["a"], **item}]}).encode())
    assert resp.status == 400
    assert doc(resp)["field"] == field


def _batch(pid: int, epoch: int, seq: int, *values: bytes) -> bytes:
    return build_batch([Record(v) for v in values], now_ms=1_000, producer_id=pid, producer_epoch=epoch,
                       base_sequence=seq)


def test_a_binary_batch_carries_its_producer_in_its_header(cluster):
    b = cluster.broker()
    body = encode_binary_produce_v2([("orders", 0, _batch(4, 0, 0, b"x", b"y"))])
    for want_duplicate in (False, True):
        resp = b.produce(body, PRODUCE_BINARY_V2_CONTENT_TYPE)
        (res,) = doc(resp)["results"]
        assert (resp.status, res["start_offset"], res.get("duplicate", False)) == (200, 1, want_duplicate)


def test_an_idempotent_binary_batch_must_be_alone_in_its_item(cluster):
    body = encode_binary_produce_v2([("orders", 0, _batch(4, 0, 0, b"x") + _batch(4, 0, 1, b"y"))])
    resp = cluster.broker().produce(body, PRODUCE_BINARY_V2_CONTENT_TYPE)
    assert resp.status == 400
    assert doc(resp)["field"] == "batches[0].batches" and "only batch" in doc(resp)["error"]


def test_a_binary_batch_with_a_bad_epoch_is_a_400_naming_the_batches(cluster):
    body = encode_binary_produce_v2([("orders", 0, _batch(4, -2, 0, b"x"))])
    resp = cluster.broker().produce(body, PRODUCE_BINARY_V2_CONTENT_TYPE)
    assert resp.status == 400
    assert doc(resp)["field"] == "batches[0].batches" and "producerEpoch -2" in doc(resp)["error"]
