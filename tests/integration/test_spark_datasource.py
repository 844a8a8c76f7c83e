"""The ``llog`` Spark data source against real Oxia, S3 and brokers (Spark local[2])."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

from server.client import parse_broker_list, rendezvous_order
from server.client._partitioner import partition_for_key
from tests._waiting import wait_until

from ._spark_helpers import consume_partitions, llog_options, records_every_way, spark  # noqa: F401



def fill(client, topic: str, counts: dict[int, int], tag: str = "r") -> dict[int, list[bytes]]:
    """Produce ``counts[p]`` records to each partition (in two requests, so
    the index has several entries); returns the values per partition."""
    values = {p: [f"{tag}-{p}-{i}".encode() for i in range(n)] for p, n in counts.items()}
    for half in (0, 1):
        tps = []
        for p, vs in values.items():
            part = vs[: len(vs) // 2] if half == 0 else vs[len(vs) // 2:]
            if part:
                tps.append({"topic": topic, "partition": p, "records": [v.decode() for v in part]})
        if tps:
            reply = client.produce(tps)
            assert reply.status == 200, reply.body
    return values


def read(spark, env, **options):
    return spark.read.format("llog").options(**llog_options(env), **options).load()


KAFKA_COLUMNS = (
    "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,timestamp:timestamp,timestampType:int"
)
HEADERS_COLUMN = "headers:array<struct<key:string,value:binary>>"


def test_batch_read_whole_topic_bounds_and_chunks(spark, broker_factory, llog_env) -> None:
    broker = broker_factory()
    topic = f"br-{uuid.uuid4().hex[:8]}"
    values = fill(broker.client, topic, {0: 25, 1: 10, 2: 3})

    df = read(spark, llog_env, topic=topic)
    assert df.schema.simpleString() == KAFKA_COLUMNS + ">"
    rows = df.selectExpr("*", "unix_millis(timestamp) AS ms").collect()
    assert sorted((r.partition, r.offset, r.value) for r in rows) == sorted(
        (p, i + 1, v) for p, vs in values.items() for i, v in enumerate(vs)
    )
    assert {r.topic for r in rows} == {topic}
    assert {r.key for r in rows} == {None} and {r.timestampType for r in rows} == {0}  # CreateTime
    assert all(abs(r.ms - time.time() * 1000) < 600_000 for r in rows)  # stamped by the broker at produce

    # One input partition per chunk of at most 4 offsets: 7 + 3 + 1.
    chunked = read(spark, llog_env, topic=topic, maxRecordsPerPartition="4")
    assert chunked.rdd.getNumPartitions() == 11
    assert sorted((r.partition, r.offset) for r in chunked.collect()) == sorted((r.partition, r.offset) for r in rows)

    bounded = read(
        spark, llog_env, topic=topic, maxRecordsPerPartition="3",
        startingOffsets='{"0": 5, "2": "latest"}', endingOffsets='{"0": 12, "1": 4}',
    )
    got = sorted((r.partition, r.offset, r.value) for r in bounded.collect())
    assert got == [(0, o, values[0][o - 1]) for o in range(5, 13)] + [(1, o, values[1][o - 1]) for o in range(1, 5)]

    only = read(spark, llog_env, topic=topic, partitions="1,2", startingOffsets="latest")
    assert only.count() == 0

    # DeleteRecords puts partition 0's log start inside its first entry (1-12): earliest starts there.
    assert delete_below(llog_env, topic, 0, 5).log_start_offset == 5
    after = read(spark, llog_env, topic=topic, partitions="0")
    assert sorted((r.offset, r.value) for r in after.collect()) == [(o, values[0][o - 1]) for o in range(5, 26)]


def delete_below(env, topic: str, partition: int, before: int):
    """Kafka's DeleteRecords through the library: the log start of ``topic:partition`` moves to ``before``."""
    from server._config import OxiaConfig
    from server._log.log_start import delete_records
    from server._protocol.keys import LogLayout, TopicPartition
    from server._storage.metastore import OxiaMetadataStore

    oxia = OxiaConfig.from_env(env)
    meta = OxiaMetadataStore(oxia)
    try:
        return delete_records(meta, LogLayout(oxia.root_prefix).keys(TopicPartition(topic, partition)), before)
    finally:
        meta.close()


def test_keys_headers_and_timestamps_come_back_in_kafkas_columns(spark, broker_factory, llog_env) -> None:
    broker = broker_factory()
    topic = f"kc-{uuid.uuid4().hex[:8]}"
    records = [
        {"value": "v0", "key": "k0", "headers": [{"key": "trace", "value": "t0"}, {"key": "empty", "value": None}],
         "timestamp_ms": 1_700_000_000_001},
        {"value": None, "key": "k0", "timestamp_ms": 1_700_000_000_002},  # a tombstone
        {"value": {"base64": "AP8="}, "headers": [{"key": "bin", "value": {"base64": "AAE="}}],
         "timestamp_ms": 1_700_000_000_003},
        "plain",  # value only: no key, no headers, the broker's time
    ]
    reply = broker.client.produce([{"topic": topic, "partition": 1, "records": records}])
    assert reply.status == 200, reply.body

    df = read(spark, llog_env, topic=topic, partitions="1", includeHeaders="true")
    assert df.schema.simpleString() == f"{KAFKA_COLUMNS},{HEADERS_COLUMN}>"
    rows = df.orderBy("offset").selectExpr("*", "unix_millis(timestamp) AS ms").collect()
    assert [(r.offset, r.key, r.value, r.timestampType) for r in rows] == [
        (1, b"k0", b"v0", 0), (2, b"k0", None, 0), (3, None, b"\x00\xff", 0), (4, None, b"plain", 0),
    ]
    assert [r.ms for r in rows[:3]] == [1_700_000_000_001, 1_700_000_000_002, 1_700_000_000_003]
    assert [None if r.headers is None else [(h.key, h.value) for h in r.headers] for r in rows] == [
        [("trace", b"t0"), ("empty", None)], None, [("bin", b"\x00\x01")], None,
    ]
    assert "headers" not in read(spark, llog_env, topic=topic, partitions="1").columns  # Kafka's default

    # The same records as a binary v2 body to partition 2: the library, /consume, spark.read and
    # readStream all give both partitions back identical.
    from server._protocol.kafka_batch import Record, build_batch
    from server._protocol.produce_binary import PRODUCE_BINARY_V2_CONTENT_TYPE, encode_binary_produce_v2

    binary = [Record(b"v0", b"k0", (("trace", b"t0"), ("empty", None)), 1_700_000_000_001),
              Record(None, b"k0", (), 1_700_000_000_002), Record(b"\x00\xff", None, (("bin", b"\x00\x01"),),
                                                                1_700_000_000_003)]
    body = encode_binary_produce_v2([(topic, 2, build_batch(binary))])
    reply = broker.client.request("POST", "/produce", body, headers={"Content-Type": PRODUCE_BINARY_V2_CONTENT_TYPE})
    assert reply.status == 200, reply.body
    ways = records_every_way(spark, llog_env, broker, topic, (1, 2))
    assert len(ways["library"]) == 7 and all(got == ways["library"] for got in ways.values())
    assert [ways["library"][(2, o)] for o in (1, 2, 3)] == [
        (r.key, r.value, r.headers, r.timestamp_ms) for r in binary]

    # A LogAppendTime topic: every record reads as the broker's append time, timestampType 1.
    appended = f"{topic}-append"
    created = broker.client.request("POST", "/topics", {
        "name": appended, "partitions": 1, "config": {"message.timestamp.type": "LogAppendTime"},
    })
    assert created.status == 201, created.body
    before = int(time.time() * 1000)
    reply = broker.client.produce([{"topic": appended, "partition": 0, "records": [
        {"value": "a", "key": "k", "timestamp_ms": 5}, {"value": "b", "timestamp_ms": 6},
    ]}])
    assert reply.status == 200, reply.body
    rows = read(spark, llog_env, topic=appended).selectExpr("timestampType", "unix_millis(timestamp) AS ms").collect()
    assert {r.timestampType for r in rows} == {1}
    assert len({r.ms for r in rows}) == 1 and before - 1000 <= rows[0].ms <= time.time() * 1000 + 1000


def kafka_style_counts(stream_or_batch):
    """A query as written for Spark's ``format("kafka")`` source: only the
    reader's format (and its topic options) differ."""
    from pyspark.sql import functions as F

    events = stream_or_batch.selectExpr(
        "CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value", "topic", "partition", "offset", "timestamp",
        "timestampType",
    )
    return (events.where("key IS NOT NULL AND timestampType = 0")
            .groupBy("key").agg(F.count("*").alias("n"), F.max("timestamp").alias("last_ts"),
                                F.max(F.length("value")).alias("longest")))


def test_a_query_written_for_kafkas_source_runs_unchanged(spark, broker_factory, llog_env) -> None:
    broker = broker_factory()
    topic = f"kq-{uuid.uuid4().hex[:8]}"
    base_ms = 1_700_000_000_000
    records = [{"value": f"order-{i}", "key": f"customer-{i % 3}", "timestamp_ms": base_ms + i} for i in range(30)]
    records += [{"value": "no key"}, "no key either"]
    for p in (0, 1):
        reply = broker.client.produce([{"topic": topic, "partition": p, "records": records[p::2]}])
        assert reply.status == 200, reply.body
    want = {f"customer-{c}": (10, max(i for i in range(30) if i % 3 == c)) for c in range(3)}

    batch = kafka_style_counts(read(spark, llog_env, topic=topic, partitions="0,1"))
    got = {r.key: (r.n, r.last_ts) for r in batch.collect()}
    assert {k: n for k, (n, _) in got.items()} == {k: n for k, (n, _) in want.items()}
    ms = {r.key: r.ms for r in batch.selectExpr("key", "unix_millis(last_ts) AS ms").collect()}
    assert ms == {k: base_ms + i for k, (_, i) in want.items()}

    name = f"kq_{uuid.uuid4().hex[:8]}"
    stream = (spark.readStream.format("llog").options(**llog_options(llog_env)).option("topic", topic)
              .option("partitions", "0,1").option("startingOffsets", "earliest").load())
    query = (kafka_style_counts(stream).writeStream.format("memory").queryName(name).outputMode("complete")
             .trigger(availableNow=True).start())
    assert query.awaitTermination(120)
    assert query.exception() is None
    assert {r.key: r.n for r in spark.sql(f"select * from {name}").collect()} == {k: n for k, (n, _) in want.items()}


def test_batch_read_bad_options_say_what_is_wrong(spark, broker_factory, llog_env) -> None:
    broker = broker_factory()
    topic = f"bo-{uuid.uuid4().hex[:8]}"
    fill(broker.client, topic, {0: 3})
    cases = [
        ({}, 'option "topic" is required'),
        ({"topic": topic, "startingOffsets": "{not json"}, "startingOffsets is not valid JSON"),
        ({"topic": topic, "startingOffsets": '{"0": 0}'}, "offsets start at 1"),
        ({"topic": topic, "endingOffsets": '{"0": 9}'}, "past the high watermark 3"),
        # The broker auto-created the topic with the tests' 64 partitions: 70 is none of them.
        ({"topic": topic, "startingOffsets": '{"70": 1}'}, r"names partition\(s\) \[70\], which are not read"),
        ({"topic": topic, "partitions": "70"}, r"partition\(s\) \[70\] of topic .* are not initialized"),
        ({"topic": "never-written"}, "has no initialized partitions"),
        ({"topic": topic, "maxRecordsPerPartition": "0"}, "maxRecordsPerPartition must be >= 1"),
        ({"topic": topic, "includeHeaders": "sometimes"}, "option includeHeaders must be 1 or 0"),
    ]
    for options, match in cases:
        with pytest.raises(Exception, match=match):
            read(spark, llog_env, **options).collect()
    with pytest.raises(Exception, match="LLOG_OXIA_SERVICE_ADDRESS is not set"):
        spark.read.format("llog").option("topic", topic).load().collect()  # no options, no env


def test_df_write_round_trip_key_and_partition_columns(spark, broker_factory, llog_env) -> None:
    broker = broker_factory()
    topic = f"dw-{uuid.uuid4().hex[:8]}"
    data = [(f"k{i % 9}", bytes([i % 256]) + f"-{i}".encode()) for i in range(300)]
    df = spark.createDataFrame(data, "key string, value binary").repartition(2)
    (df.write.format("llog").mode("append").option("topic", topic).option("brokers", broker.url)
     .option("partitions", "4").option("maxRequestRecords", "50").save())
    back = read(spark, llog_env, topic=topic).collect()
    assert Counter(r.value for r in back) == Counter(v for _, v in data)
    key_of = {v: k for k, v in data}
    for r in back:
        assert r.partition == partition_for_key(key_of[r.value], 4)

    # Copy the topic: the partition column keeps each record in its partition, in order.
    copy = f"{topic}-copy"
    src = read(spark, llog_env, topic=topic).select("partition", "value").orderBy("partition", "offset").coalesce(1)
    src.write.format("llog").mode("append").option("topic", copy).option("brokers", broker.url).save()
    original = sorted((r.partition, r.offset, r.value) for r in back)
    copied = sorted((r.partition, r.offset, r.value) for r in read(spark, llog_env, topic=copy).collect())
    assert copied == original

    # String values, no key: spread evenly over the partitions.
    spread = f"{topic}-spread"
    spark.createDataFrame([(f"s{i}",) for i in range(40)], "value string").coalesce(1).write.format("llog") \
        .mode("append").option("topic", spread).option("brokers", broker.url).option("partitions", "4").save()
    counts = Counter(r.partition for r in read(spark, llog_env, topic=spread).collect())
    assert counts == {0: 10, 1: 10, 2: 10, 3: 10}


def test_df_write_stores_kafkas_sink_columns_and_every_reader_gets_them_back(
    spark, broker_factory, llog_env, reader, tmp_path: Path,
) -> None:
    """``key``, ``value`` (a null one a tombstone), ``headers``, ``timestamp`` and
    ``partition`` columns, as Kafka's sink takes them, read back identical through
    the library, /consume, ``spark.read`` and ``readStream``."""
    import datetime as dt

    broker = broker_factory()
    topic = f"dwk-{uuid.uuid4().hex[:8]}"
    utc = dt.timezone.utc
    rows = [
        (f"k{i % 3}", None if i == 4 else f"v{i}".encode(), [("trace", f"t{i}".encode()), ("null", None)],
         dt.datetime.fromtimestamp(1_700_000_000 + i, utc), i % 2)
        for i in range(8)
    ]
    schema = "key string, value binary, headers array<struct<key:string,value:binary>>, timestamp timestamp, " \
             "partition int"
    spark.createDataFrame(rows, schema).coalesce(1).write.format("llog").mode("append") \
        .option("topic", topic).option("brokers", broker.url).option("partitions", "2").save()

    def want(p: int) -> list[tuple]:
        return [(k.encode(), v, tuple(h), (1_700_000_000 + i) * 1000)
                for i, (k, v, h, _, part) in enumerate(rows) if part == p]

    for p in (0, 1):
        # The library.
        got = [(r.key, r.value, r.headers, r.timestamp_ms) for r in reader.iter_from(topic, p, 1)]
        assert got == want(p)
        # /consume.
        res = broker.client.consume([{"topic": topic, "partition": p, "fetch_offset": 1}], max_wait_ms=0).json
        got = [((r["key"] or "").encode(), None if r["value"] is None else r["value"].encode(),
                tuple((h["key"], None if h["value"] is None else h["value"].encode()) for h in r["headers"]),
                r["timestamp_ms"]) for r in res["results"][0]["records"]]
        assert got == want(p)
    # spark.read.
    frame = read(spark, llog_env, topic=topic, includeHeaders="true").selectExpr(
        "partition", "offset", "key", "value", "headers", "unix_millis(timestamp) AS ms")
    got = {(r.partition, r.offset): (r.key, r.value, tuple((h.key, h.value) for h in r.headers), r.ms)
           for r in frame.collect()}
    assert [got[(p, o + 1)] for p in (0, 1) for o in range(len(want(p)))] == want(0) + want(1)
    # readStream.
    name = f"dwk_{uuid.uuid4().hex[:8]}"
    stream = (spark.readStream.format("llog").options(**llog_options(llog_env)).option("topic", topic)
              .option("partitions", "0,1").option("startingOffsets", "earliest").option("includeHeaders", "true")
              .load())
    query = (stream.selectExpr("partition", "offset", "key", "value", "headers", "unix_millis(timestamp) AS ms")
             .writeStream.format("memory").queryName(name).trigger(availableNow=True).start())
    assert query.awaitTermination(120) and query.exception() is None
    streamed = {(r.partition, r.offset): (r.key, r.value, tuple((h.key, h.value) for h in r.headers), r.ms)
                for r in spark.sql(f"select * from {name}").collect()}
    assert streamed == got


def test_df_write_bad_options_fail_before_any_write(spark, broker_factory) -> None:
    broker = broker_factory()
    df = spark.createDataFrame([("a",)], "value string")

    def write(frame, mode="append", **options):
        frame.write.format("llog").mode(mode).options(**options).save()

    with pytest.raises(Exception, match="append-only log"):
        write(df, "overwrite", topic="t", brokers=broker.url, partitions="1")
    with pytest.raises(Exception, match='option "brokers" is required'):
        write(df, topic="t", partitions="1")
    with pytest.raises(Exception, match='option "partitions" .* is required'):
        write(df, topic="t", brokers=broker.url)
    with pytest.raises(Exception, match="needs a 'value' column"):
        write(spark.createDataFrame([(1,)], "v int"), topic="t", brokers=broker.url, partitions="1")
    with pytest.raises(Exception, match="broker URL must look like"):
        write(df, topic="t", brokers="localhost:1", partitions="1")
    assert broker.client.counter("http_requests_total", path="/produce") == 0


def _wait_rows(spark, path: Path, n: int, timeout_s: float = 90.0) -> int:
    deadline = time.monotonic() + timeout_s
    got = 0
    while time.monotonic() < deadline:
        try:
            got = spark.read.parquet(str(path)).count()
        except Exception:  # no committed file yet
            got = 0
        if got >= n:
            return got
        time.sleep(0.3)
    return got


def test_stream_follows_the_log_and_resumes_from_its_checkpoint(
    spark, broker_factory, llog_env, tmp_path: Path
) -> None:
    broker = broker_factory()
    topic = f"st-{uuid.uuid4().hex[:8]}"
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    fill(broker.client, topic, {0: 4, 1: 4}, tag="a")

    def start(**trigger):
        return (
            spark.readStream.format("llog").options(**llog_options(llog_env))
            .option("topic", topic).option("startingOffsets", "earliest").option("maxRecordsPerTrigger", "7")
            .option("partitionDiscoveryIntervalMs", "300")
            .load()
            .writeStream.format("parquet").option("checkpointLocation", str(ckpt)).option("path", str(out))
            .trigger(**trigger).start()
        )

    query = start(processingTime="200 milliseconds")
    try:
        assert _wait_rows(spark, out, 8) == 8
        fill(broker.client, topic, {0: 5, 1: 6, 2: 3}, tag="b")  # after the query started; partition 2 is new
        assert _wait_rows(spark, out, 22) == 22
    finally:
        query.stop()
    assert query.exception() is None

    fill(broker.client, topic, {0: 2, 2: 4}, tag="c")  # while the query is down
    query = start(availableNow=True)
    assert query.awaitTermination(120)
    assert query.exception() is None

    rows = spark.read.parquet(str(out)).collect()
    seen = Counter((r.partition, r.offset) for r in rows)
    assert [k for k, c in seen.items() if c > 1] == []  # no repeat
    expected_hw = {0: 11, 1: 10, 2: 7}
    for p, hw in expected_hw.items():
        assert sorted(o for q, o in seen if q == p) == list(range(1, hw + 1))  # no gap
    by_offset = {(r.partition, r.offset): r.value for r in rows}
    assert by_offset[(2, 1)] == b"b-2-0" and by_offset[(2, 7)] == b"c-2-3"


def test_stream_starting_latest_skips_the_past(spark, broker_factory, llog_env, tmp_path: Path) -> None:
    broker = broker_factory()
    topic = f"sl-{uuid.uuid4().hex[:8]}"
    fill(broker.client, topic, {0: 5}, tag="old")
    query = (
        spark.readStream.format("llog").options(**llog_options(llog_env)).option("topic", topic)
        .option("includeHeaders", "true").load()
        .writeStream.format("memory").queryName(f"q_{uuid.uuid4().hex[:8]}").trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        deadline = time.monotonic() + 60
        while not query.recentProgress and time.monotonic() < deadline:  # the initial offset is taken
            time.sleep(0.2)
        fill(broker.client, topic, {0: 3}, tag="new")
        rows: list = []
        while time.monotonic() < deadline:
            rows = spark.sql(f"select * from {query.name}").collect()
            if len(rows) >= 3:
                break
            time.sleep(0.3)
    finally:
        query.stop()
    assert sorted((r.offset, r.value) for r in rows) == [(6, b"new-0-0"), (7, b"new-0-1"), (8, b"new-0-2")]
    assert [(r.key, r.headers, r.timestampType) for r in rows] == [(None, None, 0)] * 3
    assert list(rows[0].asDict()) == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType",
                                      "headers"]


def _write_totals(path: Path) -> dict:
    return json.loads(path.read_text())


def test_a_task_retried_after_it_sent_stores_every_row_once(spark, broker_factory, llog_env, tmp_path: Path) -> None:
    """Each task's first attempt fails after its first 600 rows were sent and acknowledged;
    Spark runs it again, and the log answers what the first attempt stored as duplicates."""
    broker = broker_factory()
    topic = f"eo-{uuid.uuid4().hex[:8]}"
    totals = tmp_path / "totals.json"
    df = spark.range(0, 4000, 1, 2).selectExpr("cast(id as string) as value", "cast(id % 3 as int) as partition")
    (df.write.format("llog").mode("append").option("topic", topic).option("brokers", broker.url)
     .option("maxBatchBytes", "2048").option("_failFirstAttemptAfterRows", "600")
     .option("_summaryPath", str(totals)).save())
    values = Counter(r.value for r in read(spark, llog_env, topic=topic).collect())
    assert values == Counter(str(i).encode() for i in range(4000))  # every row, once
    stats = _write_totals(totals)["stats"]
    assert stats["records_acked"] == 4000
    assert stats["duplicate_records"] >= 2 * 600  # both tasks' first 600 rows, sent again, stored once
    assert broker.client.counter("writer_duplicate_batches_total") == stats["duplicate_batches"]


def test_a_stream_micro_batch_run_again_stores_its_rows_once(spark, broker_factory, llog_env, tmp_path: Path) -> None:
    """llog to llog with writeStream: each micro-batch's tasks fail once after sending;
    the retried tasks' producers (named by the query and the batch) find their rows stored."""
    broker = broker_factory()
    source, sink = f"ss-{uuid.uuid4().hex[:8]}", f"sk-{uuid.uuid4().hex[:8]}"
    fill(broker.client, source, {0: 300, 1: 300}, tag="s")
    query = (
        spark.readStream.format("llog").options(**llog_options(llog_env)).option("topic", source)
        .option("startingOffsets", "earliest").option("maxRecordsPerTrigger", "400")
        .option("commitToGroup", f"{source}-copier").load()
        .select("partition", "value")
        .writeStream.format("llog").option("topic", sink).option("brokers", broker.url)
        .option("maxBatchBytes", "2048").option("_failFirstAttemptAfterRows", "100")
        .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(availableNow=True).start()
    )
    assert query.awaitTermination(180)
    assert query.exception() is None
    copied = Counter(r.value for r in read(spark, llog_env, topic=sink).collect())
    assert copied == Counter(r.value for r in read(spark, llog_env, topic=source).collect())
    assert max(copied.values()) == 1
    assert broker.client.counter("writer_duplicate_batches_total") > 0
    # The stream committed its micro-batches' end offsets to its group (Spark commits a batch's
    # source offsets when it plans the next one, so the last batch's may not be there yet).
    offsets = broker.client.request("GET", f"/groups/{source}-copier/offsets").json["offsets"]
    assert sorted(o["partition"] for o in offsets) == [0, 1]
    assert all(1 < o["offset"] <= 301 and o["metadata"] == "spark" for o in offsets), offsets


def test_a_broker_killed_during_a_write_leaves_every_row_once(spark, broker_factory, llog_env, tmp_path: Path) -> None:
    """One of two brokers holds what it is sent (a long batch delay) and is killed with
    requests inside: the tasks re-send those batches to the other broker, once each."""
    slow, other = broker_factory(env={"LLOG_BATCH_MAX_DELAY_MS": "60000"}), broker_factory()
    brokers = parse_broker_list([slow.url, other.url])
    # A topic some of whose partitions go to the slow broker first (the client's rendezvous order).
    topic = next(t for t in (f"kb-{uuid.uuid4().hex[:8]}" for _ in range(1000))
                 if any(rendezvous_order(brokers, t, p)[0].url == slow.url for p in range(4)))
    totals = tmp_path / "totals.json"
    # Rows of 200 bytes and 16 KiB requests: requests go before the task's end, without the flush hint,
    # so the slow broker holds them.
    df = spark.range(0, 3000, 1, 2).selectExpr("concat(cast(id as string), '-', repeat('x', 200)) as value",
                                               "cast(id % 4 as int) as partition")
    killed = threading.Event()

    def kill_when_held() -> None:  # the write runs on the test's thread (its session is thread-bound)
        wait_until(lambda: slow.client.counter("batcher_submits_total") >= 1, timeout_s=120,
                   what="a request of the write to wait in the slow broker")
        slow.kill()
        killed.set()

    killer = threading.Thread(target=kill_when_held, daemon=True)
    killer.start()
    (df.write.format("llog").mode("append").option("topic", topic).option("partitions", "4")
     .option("brokers", f"{slow.url},{other.url}").option("maxRequestBytes", "16384")
     .option("_summaryPath", str(totals)).save())
    killer.join(10)
    assert killed.is_set()  # the broker died with requests of the write inside
    values = Counter(r.value for r in read(spark, llog_env, topic=topic).collect())
    assert values == Counter(f"{i}-{'x' * 200}".encode() for i in range(3000))
    assert _write_totals(totals)["stats"]["unknown_batches"] >= 1  # the killed broker's requests were sent again
