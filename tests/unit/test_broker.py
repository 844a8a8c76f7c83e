"""The Broker built from parts over the in-memory stores: its route methods'
status mapping, the tail cache it fills, draining and role refusal.

Each test calls the real ``Broker`` route methods (``broker.produce(body)``
returns a ``Response``); no HTTP server runs. A flush that must stay
unresolved blocks on an Event the test releases afterwards.
"""

from __future__ import annotations

import json
import threading
from typing import Any, Callable

import pytest

from server._broker.broker import Broker
from server._broker.config import BrokerConfig
from server._broker.tail_cache import MemoryTailCache, NullTailCache, TailCache
from server._config import BatchConfig, OxiaConfig, S3Config
from server._errors import ConfigError, ProducerClosed
from server._storage.metastore import InMemoryMetadataStore
from server._storage.objectstore import InMemoryObjectStore
from server.leaderless_log_broker import Response
from server.leaderless_log_metrics import LlogMetrics
from server.leaderless_log_reader import LeaderlessLogReader
from server.leaderless_log_writer import BatchingProducer, LeaderlessLogWriter, SharedAppendGroup
from tests._records import stored_size
from tests._waiting import wait_until

from server._broker.topics import BrokerTopics
from server._catalogue.catalogue import TopicCatalogue
from server._catalogue.topic_config import TopicDefaults
from server._protocol.keys import LogLayout
from server._log.producer_ids import ProducerIds
from server._groups.offsets import GroupOffsets

OXIA = OxiaConfig("fake:1", root_prefix="llog")
S3 = S3Config("llog")


class BlockingWriter(LeaderlessLogWriter):
    """A writer whose flushes wait for ``release`` once ``block`` is set;
    ``entered`` is set when a flush is waiting."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.block = threading.Event()
        self.entered = threading.Event()
        self.release = threading.Event()

    def stage_shared(self, groups):
        if self.block.is_set():
            self.entered.set()
            assert self.release.wait(10), "the test never released the flush"
        return super().stage_shared(groups)


class Cluster:
    """One pair of in-memory stores, one writer, and the brokers built over them."""

    def __init__(self) -> None:
        self.meta, self.objs = InMemoryMetadataStore(), InMemoryObjectStore()
        self.writer = BlockingWriter(OXIA, S3, metadata_store=self.meta, object_store=self.objs)
        self.brokers: list[Broker] = []

    def broker(
        self, role: str = "both", *, batch: BatchConfig | None = None, cache: TailCache | None = None,
        topics: TopicDefaults | None = None, **config: Any,
    ) -> Broker:
        """``topics``: defaults of a topic catalogue over the cluster's store (none: any topic goes)."""
        metrics = LlogMetrics()
        cfg = BrokerConfig(role=role, port=0, **config)
        producer = reader = None
        if cfg.serves_produce:
            producer = BatchingProducer(self.writer, batch or BatchConfig(max_delay_ms=1), metrics=metrics)
        if cfg.serves_consume:
            reader = LeaderlessLogReader(OXIA, S3, metadata_store=self.meta, object_store=self.objs, metrics=metrics)
        if cache is None:
            cache = MemoryTailCache(1 << 20, metrics=metrics) if role == "both" else NullTailCache()
        catalogue = None
        if topics is not None:
            init = None if producer is None else (lambda tp: producer.ensure_initialized(tp.topic, tp.partition))
            catalogue = BrokerTopics(TopicCatalogue(self.meta, LogLayout("llog"), defaults=topics, initialize=init),
                                     cache_ms=cfg.topic_cache_ms)
        ids = ProducerIds(self.meta, LogLayout("llog")) if producer is not None else None
        broker = Broker(cfg, producer=producer, reader=reader, cache=cache, metrics=metrics, topics=catalogue,
                        producer_ids=ids, group_offsets=GroupOffsets(self.meta, LogLayout("llog")), meta=self.meta)
        self.brokers.append(broker)
        return broker

    def storage_reads(self) -> int:
        return sum(self.meta.calls.values()) + sum(self.objs.calls.get(k, 0) for k in ("get", "range_get"))

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.writer.release.set()  # a test that failed midway must not leave a flush waiting
        for b in self.brokers:
            b.close()
        self.writer.close()


@pytest.fixture
def cluster():
    with Cluster() as c:
        yield c


def body(*batches: tuple[str, int, list[str]]) -> bytes:
    return json.dumps({"topic_partitions": [
        {"topic": t, "partition": p, "records": records} for t, p, records in batches
    ]}).encode()


def consume_body(topic: str, partition: int, offset: int, **kw: Any) -> bytes:
    return json.dumps({"topic_partitions": [
        {"topic": topic, "partition": partition, "fetch_offset": offset}], **kw}).encode()


def doc(resp: Response) -> dict[str, Any]:
    return json.loads(resp.body)


def counter(broker: Broker, name: str) -> int:
    return sum(broker.metrics.snapshot()["counters"].get(name, {}).values())


def in_thread(call: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(call()), daemon=True)
    t.start()
    return t, out


# -- produce status mapping ---------------------------------------------------------


def test_200_when_every_batch_commits(cluster: Cluster) -> None:
    resp = cluster.broker().produce(body(("t", 0, ["a", "b"]), ("t", 1, ["c"])))
    assert resp.status == 200
    d = doc(resp)
    assert (d["success_count"], d["error_count"]) == (2, 0)
    assert [(r["ok"], r["start_offset"], r["end_offset"]) for r in d["results"]] == [(True, 1, 2), (True, 1, 1)]


@pytest.mark.parametrize("request_body, field", [
    (body(("t", -1, ["a"])), "topic_partitions[0].partition"),
    (body(("t", 0, [])), "topic_partitions[0].records"),
    (json.dumps({"topic_partitions": [{"partition": 0, "records": ["a"]}]}).encode(), "topic_partitions[0].topic"),
])
def test_400_names_the_bad_field(cluster: Cluster, request_body: bytes, field: str) -> None:
    broker = cluster.broker()
    resp = broker.produce(request_body)
    assert resp.status == 400
    assert doc(resp)["error_type"] == "InvalidRequest" and doc(resp)["field"] == field
    # Counted by field, without the indices (a bounded label).
    label = field.replace("[0]", "[]")
    assert broker.metrics.counter("http_validation_failures_total", path="/produce", field=label) == 1


def test_400_for_a_body_that_is_not_json(cluster: Cluster) -> None:
    broker = cluster.broker()
    resp = broker.produce(b"{not json")
    assert resp.status == 400 and doc(resp)["error_type"] == "InvalidRequest"
    assert broker.metrics.counter("http_validation_failures_total", path="/produce", field="body") == 1


def test_403_a_read_broker_refuses_produce_and_a_write_broker_consume(cluster: Cluster) -> None:
    read, write = cluster.broker("read"), cluster.broker("write")
    refused = [read.produce(body(("t", 0, ["a"]))), write.consume(consume_body("t", 0, 1))]
    assert [r.status for r in refused] == [403, 403]
    assert [(doc(r)["error_type"], doc(r)["role"]) for r in refused] == [
        ("RoleNotServed", "read"), ("RoleNotServed", "write"),
    ]
    assert cluster.meta.calls.get("put", 0) == 0  # nothing was written


def test_409_a_fenced_partition_next_to_an_open_one(cluster: Cluster) -> None:
    cluster.writer.initialize_partition("t", 1)
    cluster.writer.fence_partition("t", 1)
    broker = cluster.broker()
    resp = broker.produce(body(("t", 0, ["aa"]), ("t", 1, ["b"])))
    assert resp.status == 409
    d = doc(resp)
    assert d["error_type"] == "AppendFailed" and (d["success_count"], d["error_count"]) == (1, 1)
    ok, fenced = d["results"]
    assert ok["ok"] and ok["start_offset"] == 1
    assert not fenced["ok"] and fenced["error_type"] == "PartitionFenced"
    # The acknowledged batch counts (its bytes as stored) although the request as a whole got 409.
    assert (counter(broker, "produce_records_total"), counter(broker, "produce_payload_bytes_total")) == (
        1, stored_size([b"aa"]))


def test_409_names_a_batch_whose_outcome_is_unknown(cluster: Cluster) -> None:
    broker = cluster.broker()
    assert broker.producer is not None
    for p in (0, 1):
        broker.producer.ensure_initialized("t", p)
    # Partition 1's reservation lands, its reply is lost and cannot be re-read.
    cluster.meta.lose_reply_next("put", key_contains="/t/partitions/1/meta/control")
    cluster.meta.fail_next("get", key_contains="/t/partitions/1/meta/control")
    resp = broker.produce(body(("t", 0, ["a"]), ("t", 1, ["b"])))
    assert resp.status == 409
    d = doc(resp)
    assert d["error_type"] == "AppendFailed"
    assert [r.get("error_type") for r in d["results"]] == [None, "OutcomeUnknown"]
    assert d["results"][1]["retriable"] is True


def test_413_more_records_than_the_cap(cluster: Cluster) -> None:
    resp = cluster.broker(max_records_per_request=2).produce(body(("t", 0, ["a", "b", "c"])))
    assert resp.status == 413
    assert (doc(resp)["error_type"], doc(resp)["field"]) == ("RequestTooLarge", "topic_partitions")


def test_413_more_payload_than_the_producer_buffer(cluster: Cluster) -> None:
    cap = stored_size([b"1234", b"5678"])  # the buffer counts the records as stored batches
    broker = cluster.broker(batch=BatchConfig(max_bytes=cap, max_delay_ms=1, max_buffer_bytes=cap))
    resp = broker.produce(body(("t", 0, ["12345", "6789"])))  # one byte more
    assert resp.status == 413
    assert doc(resp)["error_type"] == "RequestTooLarge" and "LLOG_BATCH_MAX_BUFFER_BYTES" in doc(resp)["error"]
    assert f"take {cap + 1} bytes as stored batches" in doc(resp)["error"]
    assert broker.produce(body(("t", 0, ["1234", "5678"]))).status == 200  # at the cap: accepted


def test_503_when_back_pressure_refuses_every_batch(cluster: Cluster) -> None:
    # Room for the first request and one byte less than either batch of the second.
    cap = stored_size([b"12345"]) + stored_size([b"12"]) - 1
    broker = cluster.broker(batch=BatchConfig(max_bytes=cap, max_delay_ms=1, max_buffer_bytes=cap, max_block_ms=0))
    cluster.writer.block.set()
    first, answers = in_thread(lambda: broker.produce(body(("t", 0, ["12345"]))))
    assert cluster.writer.entered.wait(10)  # the first batch's bytes are in flight
    resp = broker.produce(body(("t", 0, ["12"]), ("t", 1, ["34"])))
    assert resp.status == 503 and ("Retry-After", "1") in resp.headers
    d = doc(resp)
    assert d["error_type"] == "BackPressureRejected" and d["error_count"] == 2
    assert {r["error_type"] for r in d["results"]} == {"BackPressureRejected"}
    cluster.writer.release.set()
    first.join(10)
    assert answers[0].status == 200


def test_a_flush_only_request_flushes_what_the_broker_holds(cluster: Cluster) -> None:
    """With a one-minute batch delay a produce waits at the broker until a
    flush-only request (no records, flush) starts its flush; that request is
    answered at once with no results and writes nothing itself."""
    broker = cluster.broker(batch=BatchConfig(max_delay_ms=60_000))
    waiting, answer = in_thread(lambda: broker.produce(body(("t", 0, ["a", "b"]))))
    wait_until(lambda: broker.producer.inflight_bytes == stored_size([b"a", b"b"]), what="the produce buffered")
    resp = broker.produce(json.dumps({"topic_partitions": [], "flush": True}).encode())
    assert resp.status == 200 and doc(resp) == {"results": [], "success_count": 0, "error_count": 0}
    waiting.join(10)
    assert answer[0].status == 200 and [r["end_offset"] for r in doc(answer[0])["results"]] == [2]
    assert broker.producer.metrics.counter("batcher_flush_requests_total") == 1
    assert broker.producer.metrics.counter("batcher_flushes_total") == 1


def test_a_produce_over_a_full_buffer_waits_for_room_then_commits(cluster: Cluster) -> None:
    """Within LLOG_BATCH_MAX_BLOCK_MS a full buffer delays a produce instead
    of refusing it: it is answered 200 once the flush in the way commits."""
    cap = stored_size([b"12345"]) + stored_size([b"6789"]) - 1  # room for either request, not both
    broker = cluster.broker(
        batch=BatchConfig(max_bytes=cap, max_delay_ms=1, max_buffer_bytes=cap, max_block_ms=10_000)
    )
    cluster.writer.block.set()
    first, first_answer = in_thread(lambda: broker.produce(body(("t", 0, ["12345"]))))
    assert cluster.writer.entered.wait(10)  # the first batch's bytes are in flight
    second, second_answer = in_thread(lambda: broker.produce(body(("t", 0, ["6789"]))))
    metrics = broker.producer.metrics
    wait_until(lambda: metrics.counter("batcher_backpressure_waits_total") == 1, what="the second produce waiting")
    assert not second_answer
    cluster.writer.release.set()
    first.join(10)
    second.join(10)
    assert first_answer[0].status == 200 and second_answer[0].status == 200
    assert [r["start_offset"] for r in doc(second_answer[0])["results"]] == [2]
    assert metrics.counter("batcher_backpressure_rejections_total") == 0


def test_504_when_no_flush_outcome_arrives_in_time_and_the_late_commit_still_fills_the_cache(
    cluster: Cluster,
) -> None:
    broker = cluster.broker(produce_timeout_ms=50)
    cluster.writer.block.set()
    resp = broker.produce(body(("t", 0, ["late"])))
    assert resp.status == 504
    assert (doc(resp)["error_type"], doc(resp)["retriable"]) == ("OutcomeUnknown", True)
    assert counter(broker, "produce_timeouts_total") == 1
    cluster.writer.release.set()
    assert broker.producer is not None
    broker.producer.flush(10)
    (part,) = doc(broker.consume(consume_body("t", 0, 1)))["results"]
    assert part["records"][0]["value"] == "late"


# -- the tail cache -------------------------------------------------------------------


def test_a_produced_batch_is_consumed_from_the_cache_without_storage_reads(cluster: Cluster) -> None:
    broker = cluster.broker(log_start_refresh_ms=60_000)  # no refresh due while the test runs
    assert broker.produce(body(("t", 0, ["a", "b", "c"]))).status == 200
    # The first consume of a partition reads its log start (once per LLOG_BROKER_LOG_START_REFRESH_MS).
    assert broker.consume(consume_body("t", 0, 3)).status == 200
    before = cluster.storage_reads()
    resp = broker.consume(consume_body("t", 0, 2))
    assert resp.status == 200
    (part,) = doc(resp)["results"]
    assert [(r["offset"], r["value"]) for r in part["records"]] == [(2, "b"), (3, "c")]
    assert cluster.storage_reads() == before
    assert counter(broker, "consume_storage_reads_total") == 0


# -- draining -------------------------------------------------------------------------


def test_close_answers_an_accepted_produce_then_refuses_with_503(cluster: Cluster) -> None:
    broker = cluster.broker()
    cluster.writer.block.set()
    accepted, answers = in_thread(lambda: broker.produce(body(("t", 0, ["kept"]))))
    assert cluster.writer.entered.wait(10)  # accepted, its flush under way
    closer, _ = in_thread(broker.close)
    cluster.writer.release.set()
    closer.join(10)
    accepted.join(10)
    assert not closer.is_alive() and broker.draining
    assert answers[0].status == 200
    with LeaderlessLogReader(OXIA, S3, metadata_store=cluster.meta, object_store=cluster.objs) as r:
        assert [x.payload for x in r.iter_from("t", 0, 1)] == [b"kept"]
    resp = broker.produce(body(("t", 0, ["too late"])))
    assert resp.status == 503 and ("Retry-After", "1") in resp.headers
    assert doc(resp)["error_type"] == "ProducerClosed"


def test_close_closes_the_parts_it_was_given_but_not_what_they_hold(cluster: Cluster) -> None:
    cluster.writer.initialize_partition("t", 0)
    broker = cluster.broker()
    broker.close()
    broker.close()  # idempotent
    assert broker.producer is not None
    with pytest.raises(ProducerClosed):
        broker.producer.submit([SharedAppendGroup("t", 0, [b"x"])])
    # The producer does not own the writer (owns_writer=False): it stays usable.
    (res,) = cluster.writer.append_shared_results([SharedAppendGroup("t", 0, [b"x"])])
    assert res.ok


# -- roles ----------------------------------------------------------------------------


@pytest.mark.parametrize("role, give_producer, give_reader", [
    ("both", False, True),
    ("both", True, False),
    ("read", True, True),
    ("write", True, True),
])
def test_the_parts_must_match_the_role(cluster: Cluster, role: str, give_producer: bool, give_reader: bool) -> None:
    producer = BatchingProducer(cluster.writer, BatchConfig(max_delay_ms=1)) if give_producer else None
    reader = LeaderlessLogReader(OXIA, S3, metadata_store=cluster.meta, object_store=cluster.objs) if give_reader else None
    try:
        with pytest.raises(ConfigError, match=f"role '{role}'"):
            Broker(BrokerConfig(role=role), producer=producer, reader=reader, cache=NullTailCache(),
                   metrics=LlogMetrics())
    finally:
        for part in (producer, reader):
            if part is not None:
                part.close()


def test_a_produce_request_id_is_logged_on_the_flush_it_joined(cluster: Cluster, caplog) -> None:
    """At debug, every produce logs an id, and the flush that carried it lists
    that id: a slow request can be followed from the broker into its flush."""
    import logging
    import re


    caplog.set_level(logging.DEBUG, logger="server")
    # Flushes are cut by size only (the batches of "a" and "b" together; the
    # delay never comes): the long first record fills the first, and "a" with
    # "b" the second, however the threads interleave.
    size = stored_size([b"a"]) + stored_size([b"b"])
    long = "x" * 80
    assert stored_size([long.encode()]) >= size
    broker = cluster.broker(batch=BatchConfig(max_bytes=size, max_delay_ms=60_000))
    cluster.writer.block.set()
    first, _ = in_thread(lambda: broker.produce(body(("t", 0, [long]))))
    assert cluster.writer.entered.wait(10)  # the first flush is held while the next two requests arrive
    a, out_a = in_thread(lambda: broker.produce(body(("t", 0, ["a"]))))
    b, out_b = in_thread(lambda: broker.produce(body(("t", 1, ["b"]))))
    def ids() -> list[str]:
        return re.findall(r"produce (\w{12}): ", caplog.text)

    buffered = stored_size([long.encode()]) + size
    wait_until(lambda: len(ids()) == 3 and broker.producer.inflight_bytes >= buffered, 10, "both requests buffered")
    cluster.writer.block.clear()
    cluster.writer.release.set()
    for t in (first, a, b):
        t.join(10)
    assert out_a[0].status == out_b[0].status == 200
    produce_ids = ids()
    flushes = [line for line in caplog.text.splitlines() if "flush of" in line]
    assert len(flushes) == 2
    assert produce_ids[0] in flushes[0]
    assert produce_ids[1] in flushes[1] and produce_ids[2] in flushes[1]
    assert re.search(r"produce \w{12} answered in [\d.]+ ms: 1 of 1 batches committed", caplog.text)
