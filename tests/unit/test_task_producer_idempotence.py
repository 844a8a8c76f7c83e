"""The idempotent TaskProducer (SPEC 7.12) against a real Broker over the in-memory
stores, served over HTTP: a task's batches are cut where only its records decide,
so a retried attempt fed the same records, however Spark chunks them, sends the
same batches with the same sequences, and the log stores none of them twice."""

from __future__ import annotations

import json
import random
import threading
from typing import Iterator

import pytest

from server._broker.http import BrokerHTTPServer
from server.client import ProducerConfig, TaskProducer, parse_broker_list
from server.client._produce_client import ProduceClient
from server.client._producer_id import init_task_producer, task_producer_name
from tests._waiting import wait_until
from tests.unit.test_broker import Cluster, consume_body, doc


@pytest.fixture
def served() -> Iterator[tuple[Cluster, object, str]]:
    with Cluster() as cluster:
        broker = cluster.broker()
        server = BrokerHTTPServer(broker)
        threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
        try:
            yield cluster, broker, f"http://127.0.0.1:{server.server_address[1]}"
        finally:
            server.shutdown()
            server.server_close()


@pytest.fixture(params=["binary", "json"])
def body(request: pytest.FixtureRequest) -> str:
    return request.param


ROWS = 1_500
PARTITIONS = 3


def _rows() -> tuple[list[str], list[int]]:
    rnd = random.Random(5)
    values = [f"r{i}-" + "x" * rnd.randint(0, 300) for i in range(ROWS)]
    return values, [rnd.randrange(PARTITIONS) for _ in range(ROWS)]


def _feed(tp: TaskProducer, values: list[str], parts: list[int], step: int, upto: int) -> None:
    for i in range(0, upto, step):
        tp.add(values[i:min(i + step, upto)], parts[i:min(i + step, upto)])


def _log(broker, partition: int) -> list[str]:
    out, offset = [], 1
    while True:
        answer = doc(broker.consume(consume_body("t", partition, offset), None))["results"][0]
        out += [r["value"] for r in answer["records"]]
        offset = answer["next_fetch_offset"]
        if offset > answer["high_watermark"]:
            return out


def test_a_retried_attempt_stores_only_what_the_failed_one_did_not(served, body):
    cluster, broker, url = served
    cfg = ProducerConfig(brokers=parse_broker_list([url]), body=body, max_batch_bytes=4096,
                         max_request_bytes=16_384, retry_backoff_initial_ms=1, retry_backoff_max_ms=5)
    name = task_producer_name("write-1", 0)
    first = init_task_producer(ProduceClient(cfg), name)
    values, parts = _rows()

    # The first attempt gets 60% through its rows in chunks of 50 and dies: what it sent stays.
    failed = TaskProducer("t", cfg, producer=first)
    _feed(failed, values, parts, 50, 900)
    wait_until(lambda: failed._inflight == 0, what="the failed attempt's requests to be answered")
    sent = failed.stats.records_acked
    failed.close()
    assert sent > 0

    # The retry resumes the producer and is fed the same rows in chunks of 137.
    again = init_task_producer(ProduceClient(cfg), name)
    assert again == first
    with TaskProducer("t", cfg, producer=again) as retry:
        _feed(retry, values, parts, 137, ROWS)
        stats = retry.flush()
    assert stats.duplicate_records == sent and stats.records_acked == ROWS
    for p in range(PARTITIONS):
        assert _log(broker, p) == [v for v, q in zip(values, parts) if q == p]
    assert cluster.writer.metrics.counter("writer_duplicate_batches_total") == stats.duplicate_batches > 0


def test_batches_are_cut_the_same_however_the_rows_arrive(served, body):
    _, _, url = served
    cfg = ProducerConfig(brokers=parse_broker_list([url]), body=body, max_batch_bytes=4096,
                         max_request_bytes=16_384)
    values, parts = _rows()
    cuts = []
    for n, step in enumerate((1, 37, ROWS)):
        ident = init_task_producer(ProduceClient(cfg), task_producer_name(f"write-{n + 2}", 0))
        sent: list[tuple[int, int, int]] = []
        with TaskProducer("t", cfg, producer=ident) as tp:
            real = tp.client.send

            def spy(batches, *args, **kw):
                sent.extend((b.partition, b.producer[2], b.count) for b in batches)
                return real(batches, *args, **kw)

            tp.client.send = spy  # type: ignore[method-assign]
            _feed(tp, values, parts, step, ROWS)
            tp.flush()
        cuts.append(sorted(sent))
    assert cuts[0] == cuts[1] == cuts[2]
    for p in range(PARTITIONS):  # sequences follow each other from 0
        mine = [c for c in cuts[0] if c[0] == p]
        assert [s for _, s, _ in mine] == [sum(n for _, _, n in mine[:i]) for i in range(len(mine))]


def test_the_producer_name_is_one_key_segment_with_the_batch():
    assert task_producer_name("w", 3) == "spark/w/part-3"
    assert task_producer_name("w", 3, "17") == "spark/w/batch-17/part-3"
    assert json.dumps(task_producer_name("w", 3))  # plain text
