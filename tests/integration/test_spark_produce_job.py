"""The produce job against real brokers, Oxia and S3 (Spark local[2])."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import uuid
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from server._errors import ConfigError
from server.client import BrokerUnreachable, parse_broker_list, rendezvous_order
from server.client._partitioner import partition_for_key
from server.spark.produce_job import ProduceJobFailed, ProduceOptions, run_produce_job

from ._spark_helpers import consume_partitions, dead_broker_url, records_every_way, spark, write_jsonl  # noqa: F401
from .conftest import REPO



def orders(n: int, customers: int = 40, seed: int = 7) -> list[dict]:
    rnd = random.Random(seed)
    return [
        {"order_id": i, "customer": f"cust-{rnd.randrange(customers)}", "amount": round(rnd.random() * 500, 2),
         "note": "épicerie" if i % 50 == 0 else "ok"}
        for i in range(n)
    ]


def produce_count(broker) -> float:
    return broker.client.counter("http_requests_total", path="/produce")


def test_cli_round_trip_every_row_once_and_keys_stay_together(broker_factory, llog_env, tmp_path: Path) -> None:
    """`python -m server.spark.produce_job` on JSON lines, two brokers: every
    line comes back through /consume exactly once, verbatim, and each key
    lives in exactly one partition, Kafka's murmur2 one."""
    b1, b2 = broker_factory(), broker_factory()
    rows = orders(3000)
    lines = write_jsonl(tmp_path / "orders.jsonl", rows)
    summary_path = tmp_path / "out" / "summary.json"
    brokers = parse_broker_list([b1.url, b2.url])
    topic = next(  # one where each broker is the rendezvous choice of some partition
        t for t in (f"orders-{uuid.uuid4().hex[:8]}" for _ in range(100))
        if len({rendezvous_order(brokers, t, p)[0].url for p in range(4)}) == 2
    )
    proc = subprocess.run(
        [sys.executable, "-m", "server.spark.produce_job", str(tmp_path / "*.jsonl"), "--topic", topic,
         "--partitions", "4", "--key-column", "customer", "--brokers", f"{b1.url},{b2.url}",
         "--max-request-records", "400", "--master", "local[2]", "--conf", "spark.ui.enabled=false",
         "--summary-json", str(summary_path), "--progress-interval-s", "1"],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO), "PYSPARK_PYTHON": sys.executable},
        capture_output=True, text=True, timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "records acknowledged 3,000" in proc.stdout
    summary = json.loads(summary_path.read_text())
    assert summary["rows_read"] == summary["records_acked"] == 3000
    assert summary["retries"] == 0 and summary["delivery"] == "exactly-once"
    assert summary["duplicate_records"] == 0  # nothing was sent twice
    # Acknowledged bytes are keys and values: the key column is stored with its record.
    assert summary["bytes_acked"] == sum(len(line.encode()) + len(str(r["customer"]).encode())
                                         for line, r in zip(lines, rows))

    got = consume_partitions(b1.client, topic, range(4))
    consumed = [v.decode() for recs in got.values() for _, v in recs]
    assert Counter(consumed) == Counter(lines)  # every row exactly once, byte for byte
    partitions_of = defaultdict(set)
    for p, recs in got.items():
        assert [o for o, _ in recs] == list(range(1, len(recs) + 1))
        assert summary["partitions"][str(p)] == {"first_offset": 1, "last_offset": len(recs), "records": len(recs)}
        for _, v in recs:
            partitions_of[json.loads(v)["customer"]].add(p)
    for customer, ps in partitions_of.items():
        assert ps == {partition_for_key(customer, 4)}
    # The key is the record's key, end to end.
    records = b1.client.consume([{"topic": topic, "partition": 0, "fetch_offset": 1}], max_wait_ms=0).json
    keyed = records["results"][0]["records"]
    assert keyed and all(r["key"] == str(json.loads(r["value"])["customer"]) for r in keyed)
    # Each partition went to its rendezvous broker: both brokers took writes.
    assert produce_count(b1) > 0 and produce_count(b2) > 0


def test_dataframe_with_binary_value_and_int_key(spark, broker_factory) -> None:
    broker = broker_factory()
    topic = f"bin-{uuid.uuid4().hex[:8]}"
    data = [(i % 13, bytes([i % 256, 0, 255]) + str(i).encode()) for i in range(500)]
    df = spark.createDataFrame(data, "k int, payload binary").repartition(2)
    summary = run_produce_job(
        spark, df, ProduceOptions(topic=topic, brokers=(broker.url,), partitions=3, key_column="k",
                                  value_column="payload", progress_interval_s=0.5),
        progress=lambda line: None,
    )
    assert summary.rows_read == summary.stats.records_acked == 500 and summary.tasks == 2
    got = consume_partitions(broker.client, topic, range(3))
    assert Counter(v for recs in got.values() for _, v in recs) == Counter(v for _, v in data)
    expected = {k: partition_for_key(str(k), 3) for k in range(13)}  # int keys hash their string form
    for p, recs in got.items():
        for _, v in recs:
            assert expected[int(v[3:])  % 13] == p


def test_key_timestamp_headers_and_partition_columns_are_stored_with_each_record(
    spark, broker_factory, reader, llog_env, tmp_path: Path,
) -> None:
    """JSON lines with the job's column flags: each record keeps its key,
    timestamp (integer ms) and headers (a map), in the partition its row names."""
    broker = broker_factory()
    topic = f"cols-{uuid.uuid4().hex[:8]}"
    rows = [{"id": i, "who": f"c{i % 4}", "at": 1_700_000_000_000 + i, "meta": {"src": f"s{i}"}, "part": i % 2}
            for i in range(20)]
    lines = write_jsonl(tmp_path / "rows.jsonl", rows)
    summary = run_produce_job(
        spark, str(tmp_path / "rows.jsonl"),
        ProduceOptions(topic=topic, brokers=(broker.url,), partitions=2, key_column="who", timestamp_column="at",
                       headers_column="meta", partition_column="part", progress_interval_s=0.5),
        progress=lambda line: None,
    )
    assert summary.stats.records_acked == 20
    for p in (0, 1):
        got = [(r.value.decode(), r.key, r.timestamp_ms, r.headers) for r in reader.iter_from(topic, p, 1)]
        assert got == [(line, row["who"].encode(), row["at"], (("src", row["meta"]["src"].encode()),))
                       for line, row in zip(lines, rows) if row["part"] == p]
    # ... identical through /consume, spark.read and readStream.
    ways = records_every_way(spark, llog_env, broker, topic, (0, 1))
    assert len(ways["library"]) == 20 and all(got == ways["library"] for got in ways.values()), ways.keys()


def test_csv_and_parquet_inputs_send_rows_as_json(spark, broker_factory, tmp_path: Path) -> None:
    broker = broker_factory()
    (tmp_path / "in.csv").write_text("cust.id,amount,note\nc1,5,\nc2,7,hi\n")
    csv_topic = f"csv-{uuid.uuid4().hex[:8]}"
    s = run_produce_job(spark, str(tmp_path / "in.csv"),
                        ProduceOptions(topic=csv_topic, brokers=(broker.url,), key_column="cust.id"),
                        progress=lambda line: None)
    assert s.rows_read == 2
    got = consume_partitions(broker.client, csv_topic, [0])[0]
    assert [json.loads(v) for _, v in got] == [
        {"cust.id": "c1", "amount": "5", "note": None}, {"cust.id": "c2", "amount": "7", "note": "hi"},
    ]
    pq = tmp_path / "pq"
    spark.createDataFrame([(1, "a"), (2, None)], "id int, tag string").coalesce(1).write.parquet(str(pq))
    pq_topic = f"pq-{uuid.uuid4().hex[:8]}"
    run_produce_job(spark, str(pq), ProduceOptions(topic=pq_topic, brokers=(broker.url,), input_format="parquet"),
                    progress=lambda line: None)
    got = consume_partitions(broker.client, pq_topic, [0])[0]
    assert sorted(json.loads(v)["id"] for _, v in got) == [1, 2]
    assert {json.dumps(json.loads(v), sort_keys=True) for _, v in got} == {
        '{"id": 1, "tag": "a"}', '{"id": 2, "tag": null}',
    }


def test_back_pressure_503_is_retried_and_nothing_is_lost_or_duplicated(spark, broker_factory) -> None:
    """A broker with a 32 KiB producer buffer, a 300 ms flush delay and no
    wait for room answers 503 to the third concurrent 12 KiB request; the
    job retries until done."""
    broker = broker_factory(env={
        "LLOG_BATCH_MAX_BYTES": "32768", "LLOG_BATCH_MAX_BUFFER_BYTES": "32768", "LLOG_BATCH_MAX_DELAY_MS": "300",
        "LLOG_BATCH_MAX_BLOCK_MS": "0",
    })
    topic = f"bp-{uuid.uuid4().hex[:8]}"
    values = [f"{i:05d}-" + "x" * 194 for i in range(800)]  # 160 KB
    df = spark.createDataFrame([(v,) for v in values], "value string").repartition(2)
    summary = run_produce_job(
        spark, df, ProduceOptions(topic=topic, brokers=(broker.url,), partitions=2, value_column="value",
                                  max_request_bytes=12288, max_retries=200, max_in_flight=4),
        progress=lambda line: None,
    )
    assert summary.stats.retries > 0 and summary.stats.retried_batches > 0
    assert broker.client.counter("http_requests_total", path="/produce", status=503) > 0
    assert summary.stats.records_acked == 800
    got = consume_partitions(broker.client, topic, range(2))
    # 503 means nothing of the request was written, so retries cannot duplicate.
    assert Counter(v.decode() for recs in got.values() for _, v in recs) == Counter(values)


def test_a_broker_down_at_the_start_is_skipped(spark, broker_factory) -> None:
    live = broker_factory()
    dead = dead_broker_url()
    brokers = parse_broker_list([dead, live.url])
    # A topic for which the dead broker is the preferred one of some partitions.
    topic = next(
        t for t in (f"fb-{uuid.uuid4().hex[:8]}" for _ in range(100))
        if any(rendezvous_order(brokers, t, p)[0].url == dead for p in range(4))
    )
    values = [f"v{i}" for i in range(400)]
    df = spark.createDataFrame([(v,) for v in values], "value string").repartition(2)
    summary = run_produce_job(
        spark, df, ProduceOptions(topic=topic, brokers=(dead, live.url), partitions=4, value_column="value"),
        progress=lambda line: None,
    )
    assert summary.stats.records_acked == 400
    assert summary.stats.retries >= 1  # each task's first request to the dead broker, then the fallback
    got = consume_partitions(live.client, topic, range(4))
    assert Counter(v.decode() for recs in got.values() for _, v in recs) == Counter(values)


def test_all_brokers_down_fails_before_reading(spark) -> None:
    df = spark.createDataFrame([("a",)], "value string")
    with pytest.raises(BrokerUnreachable, match="no broker answers GET /health"):
        run_produce_job(spark, df, ProduceOptions(topic="t", brokers=(dead_broker_url(), dead_broker_url())))


def test_a_task_failure_names_broker_partition_and_error(spark, broker_factory) -> None:
    """A request the broker refuses for good (413: larger than its buffer)
    fails the job with a message that names the broker and topic-partition."""
    broker = broker_factory(env={"LLOG_BATCH_MAX_BYTES": "1024", "LLOG_BATCH_MAX_BUFFER_BYTES": "2048"})
    df = spark.createDataFrame([("y" * 5000,)], "value string").coalesce(1)
    with pytest.raises(ProduceJobFailed) as info:
        run_produce_job(spark, df, ProduceOptions(topic="big", brokers=(broker.url,)), progress=lambda line: None)
    msg = str(info.value)
    assert "ProduceFailed" in msg and broker.url in msg and "big:0" in msg and "RequestTooLarge" in msg


def test_bad_options_fail_before_any_write(spark, broker_factory, tmp_path: Path) -> None:
    broker = broker_factory()
    good = tmp_path / "good.jsonl"
    write_jsonl(good, orders(20))
    bad_json = tmp_path / "bad.jsonl"
    bad_json.write_text('{"a": 1}\nnot json\n')
    opts = dict(topic="t", brokers=(broker.url,))

    with pytest.raises(ConfigError, match="unknown input format 'xml'"):
        ProduceOptions(**opts, input_format="xml")
    with pytest.raises(ConfigError, match="invalid topic"):
        ProduceOptions(topic="", brokers=(broker.url,))
    with pytest.raises(ConfigError, match="cannot read the input .*missing"):
        run_produce_job(spark, str(tmp_path / "missing" / "*.jsonl"), ProduceOptions(**opts))
    with pytest.raises(ConfigError, match="cannot infer the input format"):
        run_produce_job(spark, str(tmp_path), ProduceOptions(**opts))
    with pytest.raises(ConfigError, match="cannot read the input .*Malformed"):
        run_produce_job(spark, str(bad_json), ProduceOptions(**opts))
    with pytest.raises(ConfigError, match="--key-column 'nope' is not a field of the JSON input"):
        run_produce_job(spark, str(good), ProduceOptions(**opts, key_column="nope"))
    with pytest.raises(ConfigError, match="--value-column 'nope' is not a column"):
        run_produce_job(spark, spark.createDataFrame([(1,)], "a int"), ProduceOptions(**opts, value_column="nope"))
    with pytest.raises(ConfigError, match="need structured input"):
        run_produce_job(spark, str(good), ProduceOptions(**opts, input_format="text", key_column="customer"))
    assert produce_count(broker) == 0


def test_quick_run_warm_up_runs_the_produce_path_and_sends_nothing(spark, broker_factory, tmp_path: Path) -> None:
    """The Spark warm-up of quick_run reads, parses and hands a sample to
    Python workers (the discard source), then runs the llog writer on no
    rows: the broker sees no produce request, and the session it returns
    still produces."""
    from loadtest._spark_warmup import SparkWarmup

    broker = broker_factory()
    warmup = SparkWarmup(tmp_path, sample_rows=4_000)
    warmup.broker_ready(broker.url)
    session = warmup.result(300)
    assert warmup.warmup_s > 0
    assert produce_count(broker) == 0
    topic = f"warm-{uuid.uuid4().hex[:8]}"
    df = session.createDataFrame([(f"v{i}",) for i in range(10)], "value string")
    summary = run_produce_job(session, df, ProduceOptions(topic=topic, brokers=(broker.url,), partitions=2),
                              progress=lambda line: None)
    assert summary.stats.records_acked == 10 and produce_count(broker) > 0


def test_the_job_session_splits_one_input_file_evenly_over_two_cores(spark, tmp_path: Path) -> None:
    """With Spark's default 4 MiB open cost a 6 MB file on local[2] splits
    5 + 1 MB (the job waits for the larger task); the produce job's session
    splits it within a few percent."""
    path = tmp_path / "even.jsonl"
    line = json.dumps({"k": "x" * 100}) + "\n"
    path.write_text(line * 60_000)  # 6.1 MB
    sizes = spark.read.text(str(path)).rdd.glom().map(len).collect()
    assert len(sizes) == 2 and min(sizes) / max(sizes) > 0.9, sizes
