"""Idempotent producers on real Oxia + MinIO and broker processes (SPEC 7.12):
ids from any broker are unique, a batch sent again through another broker is
stored once and answered with its first offsets, a newer instance of a named
producer fences the older one, and a broker killed before it answers leaves a
batch that its retry through another broker settles, once."""

from __future__ import annotations

import http.client
import threading

import pytest

from tests._waiting import wait_until

pytestmark = pytest.mark.integration


def _item(topic: str, records: list[str], ident: dict, seq: int, partition: int = 0) -> dict:
    return {"topic": topic, "partition": partition, "records": records, "producer_id": ident["producer_id"],
            "producer_epoch": ident["producer_epoch"], "base_sequence": seq}


def _init(client, body: dict | None = None) -> dict:
    reply = client.request("POST", "/producers", body or {})
    assert reply.status == 200, reply.json
    return reply.json


def test_a_batch_resent_through_another_broker_is_stored_once(broker_factory, unique_topic):
    a, b = broker_factory().client, broker_factory().client
    ids = {_init(a)["producer_id"], _init(b)["producer_id"], _init(a)["producer_id"]}
    assert len(ids) == 3  # unique across brokers
    me = _init(b)
    first = a.produce([_item(unique_topic, ["x", "y"], me, 0)])
    assert first.status == 200, first.json
    again = b.produce([_item(unique_topic, ["x", "y"], me, 0), _item(unique_topic, ["z"], me, 2)])
    assert again.status == 200, again.json
    dup, nxt = again.json["results"]
    assert (dup["duplicate"], dup["start_offset"], dup["end_offset"]) == (True, 1, 2)
    assert (nxt.get("duplicate", False), nxt["start_offset"]) == (False, 3)
    assert [v for _, v in b.consume_all(unique_topic, 0)] == [b"x", b"y", b"z"]  # b wrote last: its tail is whole
    assert a.counter("writer_duplicate_batches_total") + b.counter("writer_duplicate_batches_total") == 1


def test_a_new_instance_of_a_named_producer_fences_the_old_one(broker_factory, unique_topic):
    a, b = broker_factory().client, broker_factory().client
    old = _init(a, {"name": f"{unique_topic}-loader"})
    assert a.produce([_item(unique_topic, ["old-0"], old, 0)]).status == 200
    new = _init(b, {"name": f"{unique_topic}-loader"})
    assert (new["producer_id"], new["producer_epoch"]) == (old["producer_id"], old["producer_epoch"] + 1)
    assert _init(a, {"name": f"{unique_topic}-loader", "resume": True}) == new
    assert b.produce([_item(unique_topic, ["new-0"], new, 0)]).status == 200
    zombie = a.produce([_item(unique_topic, ["old-1"], old, 1)])
    assert zombie.status == 409
    assert zombie.json["results"][0]["error_type"] == "ProducerFenced"
    gap = b.produce([_item(unique_topic, ["gap"], new, 5)])
    assert gap.status == 409 and gap.json["results"][0]["error_type"] == "OutOfOrderSequence"
    assert [v for _, v in b.consume_all(unique_topic, 0)] == [b"old-0", b"new-0"]


def test_a_batch_whose_broker_died_before_answering_is_settled_by_its_retry(broker_factory, unique_topic):
    """The broker holds the batch in its buffer (a long batch delay) and is
    killed: the client never learns the outcome. The retry through another
    broker appends it, once; a second retry is a duplicate."""
    slow = broker_factory(env={"LLOG_BATCH_MAX_DELAY_MS": "60000"})
    other = broker_factory().client
    me = _init(other)
    conn = slow.new_client()
    answers: list = []
    sender = threading.Thread(target=lambda: answers.append(_try(conn, [_item(unique_topic, ["q"], me, 0)])))
    sender.start()
    # The request is in the slow broker's buffer once its submit counter moves.
    wait_until(lambda: slow.client.counter("batcher_submits_total") >= 1, timeout_s=30,
               what="the produce to reach the slow broker's buffer")
    slow.kill()
    sender.join(30)
    assert answers and answers[0] is None  # no answer: the outcome is unknown to the client
    retry = other.produce([_item(unique_topic, ["q"], me, 0)])
    assert retry.status == 200 and not retry.json["results"][0].get("duplicate"), retry.json
    again = other.produce([_item(unique_topic, ["q"], me, 0)])
    assert again.json["results"][0]["duplicate"] is True
    assert again.json["results"][0]["start_offset"] == retry.json["results"][0]["start_offset"]
    assert [v for _, v in other.consume_all(unique_topic, 0)] == [b"q"]


def _try(client, items):
    try:
        return client.produce(items)
    except (OSError, http.client.HTTPException):
        return None
