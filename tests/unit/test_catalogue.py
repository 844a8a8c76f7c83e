"""The topic catalogue (SPEC 4.8) on the in-memory store: every operation,
every error naming its field, and races decided by conditional writes."""

from __future__ import annotations

import pytest

from server._catalogue.catalogue import TopicCatalogue
from server._catalogue.record import TopicRecord, TopicState
from server._catalogue.topic_config import TopicConfig, TopicDefaults
from server._errors import CorruptBatch, InvalidRequest, TopicAlreadyExists, UnknownTopic
from server._protocol.keys import TOPICS_PARTITION_KEY, LogLayout, TopicPartition, validate_topic
from server._storage.metastore import InMemoryMetadataStore

LAYOUT = LogLayout("llog")


@pytest.fixture
def meta():
    return InMemoryMetadataStore()


def catalogue(meta, **kw):
    return TopicCatalogue(meta, LAYOUT, **kw)


def test_create_describe_list_with_defaults_and_overrides(meta):
    inited: list[TopicPartition] = []
    c = catalogue(meta, defaults=TopicDefaults(partitions=3, retention_ms=1000), initialize=inited.append)
    orders = c.create("orders", config={"retention.bytes": "1048576"})
    assert (orders.partitions, orders.config.retention_ms, orders.config.retention_bytes) == (3, 1000, 1 << 20)
    assert inited == [TopicPartition("orders", p) for p in range(3)]
    c.create("audit", 1, {"message.timestamp.type": "LogAppendTime", "retention.ms": -1})
    assert [t.name for t in c.list()] == ["audit", "orders"]
    assert c.describe("orders") == orders
    assert c.describe("audit").config.to_kafka() == {
        "retention.ms": "-1", "retention.bytes": "-1", "message.timestamp.type": "LogAppendTime",
        "max.message.bytes": "1048588", "cleanup.policy": "delete"}
    assert orders.topic_id != c.describe("audit").topic_id


def test_the_record_is_one_oxia_value_under_the_reserved_prefix(meta):
    catalogue(meta).create("orders", 2)
    rec = meta.get("llog/__llog/topics/orders", TOPICS_PARTITION_KEY)
    topic = TopicRecord.decode(rec.value)
    assert rec.value.startswith(b'{"name":"orders","topic_id":') and topic.state is TopicState.ACTIVE
    with pytest.raises(InvalidRequest, match="__llog"):
        validate_topic("__llog")
    with pytest.raises(CorruptBatch):
        TopicRecord.decode(b'{"name":"x"}')


def test_create_refuses_duplicates_bad_names_counts_and_configs(meta):
    c = catalogue(meta)
    c.create("orders")
    with pytest.raises(TopicAlreadyExists, match="already exists"):
        c.create("orders", 5)
    for name, partitions, config, field in [
        ("bad/name", 1, None, "invalid topic"),
        ("t", 0, None, "partitions must be an integer 1..100000, got 0"),
        ("t", True, None, "partitions must be"),
        ("t", 1, {"retention.ms": "soon"}, "retention.ms must be an integer"),
        ("t", 1, {"retention.ms": -2}, "retention.ms must be an integer -1"),
        ("t", 1, {"message.timestamp.type": "Now"}, "message.timestamp.type must be one of"),
        ("t", 1, {"segment.msec": 1}, "unknown topic config 'segment.msec'"),
        ("t", 1, {"cleanup.policy": "shred"}, "cleanup.policy must be delete, compact or compact,delete"),
        ("t", 1, {"min.insync.replicas": ""}, "min.insync.replicas must be a string or an integer"),
    ]:
        with pytest.raises(InvalidRequest, match=field):
            c.create(name, partitions, config)
    assert [t.name for t in c.list()] == ["orders"]


def test_kafkas_other_topic_configs_are_kept_and_compact_keeps_every_record(meta):
    """What Kafka Streams gives its repartition and changelog topics, and ops scripts their
    topics: kept in the record and described, acting on nothing; ``compact`` alone turns
    retention off (no key compaction), ``compact,delete`` retains as ``delete``."""
    c = catalogue(meta)
    streams = {"cleanup.policy": "compact", "segment.bytes": 52428800, "min.insync.replicas": "2",
               "message.timestamp.type": "CreateTime", "min.compaction.lag.ms": "0"}
    changelog = c.create("app-store-changelog", 1, streams)
    assert changelog.config.kept == (("min.compaction.lag.ms", "0"), ("min.insync.replicas", "2"),
                                     ("segment.bytes", "52428800"))
    assert c.describe("app-store-changelog").config.to_kafka() == {
        "retention.ms": "604800000", "retention.bytes": "-1", "message.timestamp.type": "CreateTime",
        "max.message.bytes": "1048588", "cleanup.policy": "compact", "min.compaction.lag.ms": "0",
        "min.insync.replicas": "2", "segment.bytes": "52428800"}
    assert not changelog.config.retains
    altered = c.alter_config("app-store-changelog", {"cleanup.policy": "delete, compact", "segment.bytes": None})
    assert altered.config.retains and altered.config.cleanup_policy == "compact,delete"
    assert dict(altered.config.kept) == {"min.compaction.lag.ms": "0", "min.insync.replicas": "2"}


def test_alter_config_and_restore_a_default(meta):
    c = catalogue(meta)
    c.create("orders", config={"retention.ms": 5})
    assert c.alter_config("orders", {"retention.ms": "60000", "max.message.bytes": 10}).config == TopicConfig(
        retention_ms=60000, max_message_bytes=10)
    assert c.alter_config("orders", {"retention.ms": None}).config.retention_ms == TopicConfig.retention_ms
    with pytest.raises(InvalidRequest, match="at least one key"):
        c.alter_config("orders", {})
    with pytest.raises(UnknownTopic):
        c.alter_config("nope", {"retention.ms": 1})


def test_partitions_only_grow_and_new_ones_are_initialized(meta):
    inited: list[TopicPartition] = []
    c = catalogue(meta, initialize=inited.append)
    c.create("orders", 2)
    assert c.add_partitions("orders", 5).partitions == 5
    assert inited[2:] == [TopicPartition("orders", p) for p in (2, 3, 4)]
    with pytest.raises(InvalidRequest, match="has 5; a new count must be larger, got 5"):
        c.add_partitions("orders", 5)
    assert c.check_partition("orders", 4).partitions == 5
    with pytest.raises(UnknownTopic, match=r"'orders' has 5 partitions \(0-4\), not partition 5"):
        c.check_partition("orders", 5)


def test_a_deleted_topic_is_invisible_at_once_and_its_name_blocked_until_forgotten(meta):
    c = catalogue(meta)
    first = c.create("orders", 3)
    deleting = c.delete("orders")
    assert deleting.state is TopicState.DELETING and deleting.deleted_at_ms is not None
    assert c.get("orders") is None and c.list() == [] and c.list(include_deleting=True) == [deleting]
    with pytest.raises(UnknownTopic):
        c.check_partition("orders", 0)
    with pytest.raises(UnknownTopic):
        c.delete("orders")
    with pytest.raises(TopicAlreadyExists, match="still being deleted"):
        c.create("orders")
    assert c.forget(deleting)
    again = c.create("orders", 1)
    assert again.topic_id != first.topic_id and again.partitions == 1
    assert not c.forget(deleting)  # the name's new topic is not that deletion


def test_racing_alters_both_land_and_a_lost_race_is_retried(meta):
    c = catalogue(meta)
    c.create("orders")
    other = catalogue(meta)
    real_put = meta.put
    raced = []

    def put(key, value, pk, expected_version=None):
        if not raced and key.endswith("/orders") and expected_version not in (None, -1):
            raced.append(1)
            other.alter_config("orders", {"retention.bytes": 99})  # lands between our read and our write
        return real_put(key, value, pk, expected_version=expected_version)

    meta.put = put
    topic = c.alter_config("orders", {"retention.ms": 7})
    assert (topic.config.retention_ms, topic.config.retention_bytes) == (7, 99)


def test_the_openapi_config_keys_are_the_ones_the_catalogue_takes():
    from pathlib import Path

    import yaml

    from server._catalogue.topic_config import KEPT_KEYS, KNOWN_KEYS

    doc = yaml.safe_load((Path(__file__).parents[2] / "server" / "openapi.yaml").read_text())
    schemas = doc["components"]["schemas"]
    assert schemas["TopicConfigChanges"]["propertyNames"]["enum"] == [*KNOWN_KEYS, *sorted(KEPT_KEYS)]
    assert set(schemas["TopicDescription"]["properties"]["config"]["required"]) == set(KNOWN_KEYS)
