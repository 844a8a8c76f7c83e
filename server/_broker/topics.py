"""The topic catalogue as a broker uses it: checks on produce and consume, auto-creation,
adoption of logs written before the catalogue, and the ``/topics`` routes.

- **Checks.** A produce or consume names topic-partitions; each must be a
  partition of a live topic. Records are cached for ``LLOG_BROKER_TOPIC_CACHE_MS``
  (a positive answer only: a miss or a partition past the cached count is read
  again at once, so a new topic or new partitions are seen at once; a deletion
  by another broker within the cache time). While Oxia cannot be read, a topic
  read before keeps its last record (stale, not refused): Kafka's Metadata
  answers from the broker's cache too, and a consumer group's leader that
  sees no partitions assigns none (a static group keeps that assignment
  until something rebalances it).
- **Auto-creation** (``LLOG_AUTO_CREATE_TOPICS``, on by default): a produce to an
  unknown topic creates it with ``LLOG_TOPIC_DEFAULT_PARTITIONS`` partitions, as
  Kafka does (not as many as the request names: one request must not make a
  topic of 100,000 partitions). A consume never creates.
- **Adoption.** A topic whose partitions were written before the catalogue
  existed (or through the library, which does not use it) has no record: the
  first produce or consume of it creates one with as many partitions as it
  has (highest initialized + 1) and ``retention.ms`` -1, so nothing written
  before retention existed is ever dropped by it.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Iterable, Mapping

from .._catalogue.catalogue import TopicCatalogue
from .._catalogue.record import TopicRecord
from .._catalogue.topic_config import TopicConfig
from .._errors import InvalidRequest, MetadataStoreError, TopicAlreadyExists, UnknownTopic
from .._http_server import Response
from .._protocol.http_json import InvalidField, only_fields, parse_json_body
from .._protocol.keys import TopicPartition, is_valid, validate_topic

__all__ = ["BrokerTopics"]

ListPartitions = Callable[[str], Iterable[int]]


class BrokerTopics:
    """See the module docstring. Thread-safe."""

    def __init__(
        self,
        catalogue: TopicCatalogue,
        *,
        cache_ms: int = 1_000,
        auto_create: bool | None = None,
        list_partitions: ListPartitions | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.catalogue = catalogue
        self.cache_ms = cache_ms
        self.auto_create = catalogue.defaults.auto_create if auto_create is None else auto_create
        self._list_partitions = list_partitions or catalogue.initialized_partitions
        self._clock = clock
        self._cache: dict[str, tuple[TopicRecord, float]] = {}
        self._lock = threading.Lock()

    # -- checks ------------------------------------------------------------------------------------
    def check_produce(self, tps: Iterable[TopicPartition]) -> dict[str, TopicConfig]:
        """Every partition a produce names exists, creating or adopting topics as the module docstring says;
        returns each topic's config. Raises UnknownTopic (a topic that does not exist and may not be
        created) or InvalidField (a partition past its topic's count)."""
        configs: dict[str, TopicConfig] = {}
        wanted: dict[str, int] = {}
        for tp in tps:
            wanted[tp.topic] = max(wanted.get(tp.topic, 0), tp.partition)
        for name, highest in wanted.items():
            topic = self._topic(name, highest, create=self.auto_create)
            if highest >= topic.partitions:
                raise InvalidField(
                    f"topic {name!r} has {topic.partitions} partition{'s' if topic.partitions != 1 else ''} "
                    f"(0-{topic.partitions - 1}); partition {highest} does not exist (add partitions with "
                    f"PATCH /topics/{name})", "partition", topic=name, partition=highest,
                )
            configs[name] = topic.config
        return configs

    def check_consume(self, tp: TopicPartition) -> None:
        """UnknownTopic unless ``tp`` is a partition of a live topic (adopting an old one)."""
        topic = self._topic(tp.topic, tp.partition, create=False)
        if tp.partition >= topic.partitions:
            raise UnknownTopic(f"topic {tp.topic!r} has {topic.partitions} partitions, not partition {tp.partition}",
                               topic=tp.topic, partition=tp.partition)

    def live_partition(self, topic: str, partition: int) -> TopicPartition:
        """``topic``:``partition`` when it names a partition of a live topic, else UnknownTopic (a name
        that is not a topic's, or a negative partition, too): what a request naming one by its parts asks."""
        if not is_valid(validate_topic, topic) or partition < 0:
            raise UnknownTopic(f"no topic-partition {topic!r}:{partition}", topic=topic)
        tp = TopicPartition(topic, partition)
        self.check_consume(tp)
        return tp

    def describe(self, name: str, *, create: bool = False) -> TopicRecord:
        """A live topic (adopting an old one; creating it when ``create`` and auto-creation is on), else
        UnknownTopic. What Kafka's Metadata asks."""
        return self._topic(name, 0, create=create and self.auto_create)

    def create(self, name: str, partitions: int | None = None, config: Mapping[str, Any] | None = None) -> TopicRecord:
        topic = self.catalogue.create(name, partitions, config)
        self._remember(topic)
        return topic

    def add_partitions(self, name: str, total: int) -> TopicRecord:
        topic = self.catalogue.add_partitions(name, total)
        self._remember(topic)
        return topic

    def alter_config(self, name: str, changes: Mapping[str, Any]) -> TopicRecord:
        topic = self.catalogue.alter_config(name, changes)
        self._remember(topic)
        return topic

    def delete(self, name: str) -> TopicRecord:
        topic = self.catalogue.delete(name)
        self._forget(name)
        return topic

    def _topic(self, name: str, partition: int, *, create: bool) -> TopicRecord:
        with self._lock:
            hit = self._cache.get(name)
        if hit is not None and self._clock() - hit[1] < self.cache_ms / 1000 and partition < hit[0].partitions:
            return hit[0]
        try:
            topic = self.catalogue.get(name) or self._adopt(name)
        except MetadataStoreError:
            if hit is not None and partition < hit[0].partitions:
                return hit[0]  # Oxia is away: the record last read stands, as Kafka answers from its cache
            raise
        if topic is None and create:
            count = self.catalogue.defaults.partitions
            if partition >= count:  # refused before anything is written, the topic included
                raise InvalidField(
                    f"topic {name!r} does not exist, and auto-creation gives it {count} partition"
                    f"{'s' if count != 1 else ''} (LLOG_TOPIC_DEFAULT_PARTITIONS): partition {partition} would not "
                    f"exist; create the topic with POST /topics first", "partition", topic=name, partition=partition)
            topic = self._create(name, count)
        if topic is None:
            raise UnknownTopic(f"unknown topic {name!r}" + ("" if self.auto_create else
                               " (LLOG_AUTO_CREATE_TOPICS is off: create it with POST /topics)"), topic=name)
        self._remember(topic)
        return topic

    def _adopt(self, name: str) -> TopicRecord | None:
        existing = sorted(self._list_partitions(name))
        if not existing:
            return None
        return self._create(name, existing[-1] + 1, {"retention.ms": -1})

    def _create(self, name: str, count: int, config: Mapping[str, Any] | None = None) -> TopicRecord | None:
        try:
            return self.catalogue.create(name, count, config)
        except TopicAlreadyExists:  # created meanwhile (or being deleted)
            return self.catalogue.get(name)

    def _remember(self, topic: TopicRecord) -> None:
        with self._lock:
            self._cache[topic.name] = (topic, self._clock())

    def _forget(self, name: str) -> None:
        with self._lock:
            self._cache.pop(name, None)

    # -- routes ------------------------------------------------------------------------------------
    def list_route(self) -> Response:
        return Response(200, {"topics": [t.to_json() for t in self.catalogue.list()]})

    def create_route(self, body: bytes) -> Response:
        doc = parse_json_body(body)
        only_fields(doc, ("name", "partitions", "config"))
        name = doc.get("name")
        if not isinstance(name, str):
            raise InvalidField("name must be a string", "name")
        valid_topic_name(name)
        partitions = doc.get("partitions")
        if partitions is not None and (isinstance(partitions, bool) or not isinstance(partitions, int)):
            raise InvalidField(f"partitions must be an integer, got {partitions!r}", "partitions")
        topic = self.create(name, partitions, _config(doc))
        return Response(201, {"topic": topic.to_json()})

    def get_route(self, name: str) -> Response:
        valid_topic_name(name)
        return Response(200, {"topic": self.catalogue.describe(name).to_json()})

    def patch_route(self, name: str, body: bytes) -> Response:
        valid_topic_name(name)
        doc = parse_json_body(body)
        only_fields(doc, ("partitions", "config"))
        if not doc:
            raise InvalidField("give partitions (a larger count) or config (keys to change)", None)
        partitions = doc.get("partitions")
        topic = None
        if "config" in doc:
            topic = self.catalogue.alter_config(name, _config(doc))
        if partitions is not None:
            if isinstance(partitions, bool) or not isinstance(partitions, int):
                raise InvalidField(f"partitions must be an integer, got {partitions!r}", "partitions")
            topic = self.catalogue.add_partitions(name, partitions)
        topic = topic or self.catalogue.describe(name)
        self._remember(topic)
        return Response(200, {"topic": topic.to_json()})

    def delete_route(self, name: str) -> Response:
        valid_topic_name(name)
        topic = self.delete(name)
        return Response(200, {"topic": topic.to_json()})


def valid_topic_name(name: str) -> None:
    """InvalidField naming ``name`` (the path's topic) unless it is a valid topic name."""
    try:
        validate_topic(name)
    except InvalidRequest as exc:
        raise InvalidField(exc.message, "name") from None


def _config(doc: Mapping[str, Any]) -> dict[str, Any] | None:
    config = doc.get("config")
    if config is None:
        return None
    if not isinstance(config, dict):
        raise InvalidField("config must be an object of Kafka topic config keys", "config")
    for key, value in config.items():
        if value is not None and not isinstance(value, (str, int)) or isinstance(value, bool):
            raise InvalidField(f"config.{key} must be a string or an integer", f"config.{key}")
    return config
