"""The broker's topic catalogue (server/_broker/topics.py) over the in-memory
stores: the /topics routes with their errors, produce auto-creating and
checking partitions, consume refusing unknown topics, adoption of logs
written before the catalogue, and /topics/{name}/delete-records."""

from __future__ import annotations

import json

import pytest

from server._catalogue.topic_config import TopicDefaults
from tests.unit.test_broker import Cluster, body, consume_body, doc


@pytest.fixture
def cluster():
    with Cluster() as c:
        yield c


def route(broker, method, name=None, payload=None):
    resp = broker.topics_route(b"" if payload is None else json.dumps(payload).encode(), method, name)
    return resp.status, doc(resp)


def test_create_list_describe_alter_grow_and_delete(cluster):
    b = cluster.broker(topics=TopicDefaults(partitions=2))
    status, created = route(b, "POST", payload={"name": "orders", "partitions": 3,
                                                "config": {"retention.ms": "60000"}})
    assert status == 201 and created["topic"]["partitions"] == 3
    assert created["topic"]["config"]["retention.ms"] == "60000" and created["topic"]["state"] == "ACTIVE"
    assert route(b, "POST", payload={"name": "audit"})[1]["topic"]["partitions"] == 2
    assert [t["name"] for t in route(b, "GET")[1]["topics"]] == ["audit", "orders"]
    assert route(b, "GET", "orders")[1]["topic"] == created["topic"]
    status, altered = route(b, "PATCH", "orders", {"config": {"retention.bytes": 1024}, "partitions": 5})
    assert status == 200 and altered["topic"]["partitions"] == 5
    assert altered["topic"]["config"]["retention.bytes"] == "1024"
    status, deleted = route(b, "DELETE", "orders")
    assert status == 200 and deleted["topic"]["state"] == "DELETING"
    assert route(b, "GET", "orders")[0] == 404
    assert [t["name"] for t in route(b, "GET")[1]["topics"]] == ["audit"]


@pytest.mark.parametrize("method, name, payload, field", [
    ("POST", None, {"partitions": 1}, "name"),
    ("POST", None, {"name": "a/b"}, "name"),
    ("POST", None, {"name": "t", "partitions": "3"}, "partitions"),
    ("POST", None, {"name": "t", "partitions": 0}, "partitions"),
    ("POST", None, {"name": "t", "colour": "red"}, "colour"),
    ("POST", None, {"name": "t", "config": ["retention.ms"]}, "config"),
    ("POST", None, {"name": "t", "config": {"retention.ms": "soon"}}, "config.retention.ms"),
    ("POST", None, {"name": "t", "config": {"segment.msec": 1}}, "config.segment.msec"),
    ("PATCH", "orders", {}, None),
    ("PATCH", "orders", {"partitions": 1}, "partitions"),
])
def test_bad_requests_are_400_naming_the_field(cluster, method, name, payload, field):
    b = cluster.broker(topics=TopicDefaults())
    route(b, "POST", payload={"name": "orders", "partitions": 2})
    status, answer = route(b, method, name, payload)
    assert status == 400 and answer["error_type"] == "InvalidRequest", answer
    assert answer.get("field") == field, answer


def test_unknown_topics_answer_404_and_a_duplicate_409(cluster):
    b = cluster.broker(topics=TopicDefaults())
    for method, payload in (("GET", None), ("PATCH", {"config": {"retention.ms": 1}}), ("DELETE", None)):
        status, answer = route(b, method, "nope", payload)
        assert (status, answer["error_type"]) == (404, "UnknownTopic"), answer
    route(b, "POST", payload={"name": "orders"})
    status, answer = route(b, "POST", payload={"name": "orders"})
    assert (status, answer["error_type"]) == (409, "TopicAlreadyExists") and "already exists" in answer["error"]


def delete_records(broker, name, payload):
    resp = broker.delete_records_route(json.dumps(payload).encode(), name)
    return resp.status, doc(resp)


def consumed(broker, topic, partition, offset=1):
    (res,) = doc(broker.consume(consume_body(topic, partition, offset, max_wait_ms=0)))["results"]
    return res


def test_delete_records_moves_each_log_start_and_answers_each_partition(cluster):
    b = cluster.broker(topics=TopicDefaults(partitions=4))
    route(b, "POST", payload={"name": "orders", "partitions": 4})
    for p in (0, 1):
        assert b.produce(body(("orders", p, [f"r{i}" for i in range(10)]))).status == 200
    status, answer = delete_records(b, "orders", {"partitions": [
        {"partition": 0, "before_offset": 4}, {"partition": 1}, {"partition": 2, "before_offset": 1},
        {"partition": 3, "before_offset": 2}, {"partition": 9, "before_offset": 1}]})
    assert status == 200 and answer["topic"] == "orders", answer
    ok0, ok1, ok2, past_end, unknown = answer["results"]
    assert ok0 == {"partition": 0, "ok": True, "log_start_offset": 4, "high_watermark": 10}
    assert ok1 == {"partition": 1, "ok": True, "log_start_offset": 11, "high_watermark": 10}
    assert ok2 == {"partition": 2, "ok": True, "log_start_offset": 1, "high_watermark": 0}
    assert (past_end["ok"], past_end["error_code"], past_end["log_start_offset"], past_end["high_watermark"]) == (
        False, "OFFSET_OUT_OF_RANGE", 1, 0), past_end
    assert (unknown["ok"], unknown["error_code"], unknown["error_type"]) == (
        False, "UNKNOWN_TOPIC_OR_PARTITION", "UnknownTopic"), unknown
    # The broker that moved a start refuses reads below it at once, and serves from it.
    below = consumed(b, "orders", 0, 3)
    assert (below["ok"], below["error_code"], below["log_start_offset"]) == (False, "OFFSET_OUT_OF_RANGE", 4)
    assert [r["offset"] for r in consumed(b, "orders", 0, 4)["records"]] == list(range(4, 11))
    assert consumed(b, "orders", 1, 11)["records"] == []
    # A start never moves back: an offset below it answers the start as it is.
    status, again = delete_records(b, "orders", {"partitions": [{"partition": 0, "before_offset": 2}]})
    assert again["results"] == [{"partition": 0, "ok": True, "log_start_offset": 4, "high_watermark": 10}]


@pytest.mark.parametrize("payload, field", [
    ({}, "partitions"),
    ({"partitions": []}, "partitions"),
    ({"partitions": [0]}, "partitions[0]"),
    ({"partitions": [{"before_offset": 3}]}, "partitions[0].partition"),
    ({"partitions": [{"partition": -1}]}, "partitions[0].partition"),
    ({"partitions": [{"partition": True}]}, "partitions[0].partition"),
    ({"partitions": [{"partition": 2**31}]}, "partitions[0].partition"),
    ({"partitions": [{"partition": 0, "before_offset": 2**63}]}, "partitions[0].before_offset"),
    ({"partitions": [{"partition": 0, "before_offset": 0}]}, "partitions[0].before_offset"),
    ({"partitions": [{"partition": 0, "before_offset": "5"}]}, "partitions[0].before_offset"),
    ({"partitions": [{"partition": 0, "offset": 5}]}, "partitions[0].offset"),
    ({"partitions": [{"partition": 0}, {"partition": 0}]}, "partitions[1].partition"),
    ({"partitions": [{"partition": 0}], "all": True}, "all"),
])
def test_delete_records_bad_requests_are_400_naming_the_field_and_move_nothing(cluster, payload, field):
    b = cluster.broker(topics=TopicDefaults())
    route(b, "POST", payload={"name": "orders", "partitions": 1})
    assert b.produce(body(("orders", 0, ["a", "b"]))).status == 200
    status, answer = delete_records(b, "orders", payload)
    assert (status, answer["error_type"], answer.get("field")) == (400, "InvalidRequest", field), answer
    assert consumed(b, "orders", 0)["log_start_offset"] == 1


def test_delete_records_of_an_unknown_or_invalid_topic(cluster):
    b = cluster.broker(topics=TopicDefaults())
    status, answer = delete_records(b, "nope", {"partitions": [{"partition": 0}]})
    assert (status, answer["error_type"]) == (404, "UnknownTopic"), answer
    status, answer = delete_records(b, "a..b/c", {"partitions": [{"partition": 0}]})
    assert (status, answer.get("field")) == (400, "name"), answer
    plain = cluster.broker()  # no catalogue: nothing names the topics it could delete from
    assert plain.delete_records_route(b'{"partitions": [{"partition": 0}]}', "orders").status == 404


def test_produce_auto_creates_with_the_default_count_then_checks_partitions(cluster):
    b = cluster.broker(topics=TopicDefaults(partitions=4))
    resp = b.produce(body(("fresh", 3, ["a"])))
    assert resp.status == 200, doc(resp)
    assert route(b, "GET", "fresh")[1]["topic"]["partitions"] == 4
    resp = b.produce(body(("fresh", 4, ["b"]), ("fresh", 0, ["c"])))
    answer = doc(resp)
    assert resp.status == 400 and answer["field"] == "partition"
    assert "'fresh' has 4 partitions (0-3); partition 4 does not exist" in answer["error"]
    # A partition past the default count is refused before anything is written, the topic included.
    resp = b.produce(body(("huge", 99_999, ["x"])))
    assert resp.status == 400 and "POST /topics" in doc(resp)["error"] and route(b, "GET", "huge")[0] == 404


def test_without_auto_create_an_unknown_topic_is_refused_and_nothing_written(cluster):
    b = cluster.broker(topics=TopicDefaults(auto_create=False))
    resp = b.produce(body(("nope", 0, ["a"])))
    assert resp.status == 404 and "POST /topics" in doc(resp)["error"]
    assert not cluster.meta.list_keys("llog/nope/", "llog/nope/~/")


def test_consume_of_an_unknown_topic_or_partition_is_that_partitions_error(cluster):
    b = cluster.broker(topics=TopicDefaults())
    route(b, "POST", payload={"name": "orders", "partitions": 1})
    assert doc(b.consume(consume_body("orders", 0, 1)))["results"][0]["ok"] is True
    for topic, partition in (("nope", 0), ("orders", 1)):
        part = doc(b.consume(consume_body(topic, partition, 1)))["results"][0]
        assert (part["ok"], part["error_code"], part["error_type"]) == (False, "UNKNOWN_TOPIC_OR_PARTITION",
                                                                         "UnknownTopic"), part
    assert route(b, "GET", "nope")[0] == 404  # a consume never creates


def test_logs_written_before_the_catalogue_are_adopted_and_keep_everything(cluster):
    cluster.writer.initialize_partition("legacy", 0)
    cluster.writer.initialize_partition("legacy", 6)
    b = cluster.broker(topics=TopicDefaults(retention_ms=1000))
    assert doc(b.consume(consume_body("legacy", 6, 1)))["results"][0]["ok"] is True
    topic = route(b, "GET", "legacy")[1]["topic"]
    assert topic["partitions"] == 7 and topic["config"]["retention.ms"] == "-1"


def test_a_deleted_topic_is_refused_by_the_broker_that_deleted_it_at_once(cluster):
    b = cluster.broker(topics=TopicDefaults(auto_create=False))
    route(b, "POST", payload={"name": "orders", "partitions": 1})
    assert b.produce(body(("orders", 0, ["a"]))).status == 200
    route(b, "DELETE", "orders")
    assert b.produce(body(("orders", 0, ["b"]))).status == 404
    part = doc(b.consume(consume_body("orders", 0, 1)))["results"][0]
    assert part["error_type"] == "UnknownTopic"


def test_a_known_topic_keeps_its_last_record_while_oxia_cannot_be_read():
    """Stale, not refused: Metadata (and the produce and consume checks) keep answering a topic
    read before; an unknown topic, or a partition past the known count, still needs Oxia."""
    from server._broker.topics import BrokerTopics
    from server._catalogue.catalogue import TopicCatalogue
    from server._errors import MetadataStoreError
    from server._protocol.keys import LogLayout, TopicPartition
    from server._storage.metastore import InMemoryMetadataStore

    meta, now = InMemoryMetadataStore(), [0.0]
    topics = BrokerTopics(TopicCatalogue(meta, LogLayout("llog"), defaults=TopicDefaults()), cache_ms=1_000,
                          clock=lambda: now[0])
    topics.create("orders", 3)
    assert topics.describe("orders").partitions == 3
    now[0] += 60  # long past the cache time: the next look reads Oxia
    meta.fail_next("get", times=10)
    assert topics.describe("orders").partitions == 3
    topics.check_consume(TopicPartition("orders", 2))
    with pytest.raises(MetadataStoreError):
        topics.check_consume(TopicPartition("orders", 3))
    with pytest.raises(MetadataStoreError):
        topics.describe("never-seen")
