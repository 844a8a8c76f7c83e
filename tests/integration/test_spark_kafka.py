"""Spark's own Kafka source and sink (``spark-sql-kafka-0-10_2.13``, the same version as
pyspark) against llog's Kafka listener, on real Oxia + MinIO and Spark local:
``df.write.format("kafka")``, ``spark.read.format("kafka")`` and
``readStream.format("kafka")``, checked record for record against what llog holds
(``format("llog")``, ``/consume``, the library): one log, two protocols."""

from __future__ import annotations

import uuid

from ._spark_helpers import records_every_way, spark  # noqa: F401

PARTITIONS = 3
COLUMNS = ("partition", "offset", "key", "value", "headers", "unix_millis(timestamp) AS ms")


def _rows(frame) -> dict:
    return {(r.partition, r.offset): (None if r.key is None else bytes(r.key),
                                      None if r.value is None else bytes(r.value),
                                      tuple((h.key, None if h.value is None else bytes(h.value))
                                            for h in (r.headers or ())), r.ms)
            for r in frame.collect()}


def test_spark_kafka_sink_source_and_stream_against_the_listener(spark, broker_factory, llog_env,  # noqa: F811
                                                                 unique_topic):
    broker = broker_factory(env={"LLOG_KAFKA_PORT": "0", "LLOG_BROKER_MAX_WAIT_MS": "500"})
    assert broker.client.request("POST", "/topics", {"name": unique_topic, "partitions": PARTITIONS}).status == 201
    kafka = {"kafka.bootstrap.servers": broker.kafka}
    from pyspark.sql import functions as F
    rows = [(f"k{i}", f"value {i}", i % PARTITIONS, i) for i in range(90)]
    frame = (spark.createDataFrame(rows, "key string, value string, partition int, n int")
             .withColumn("headers", F.array(F.struct(F.lit("n").alias("key"),
                                                     F.col("n").cast("string").cast("binary").alias("value"))))
             .drop("n"))
    frame.write.format("kafka").options(**kafka).option("topic", unique_topic).option("includeHeaders", "true").save()

    read = _rows(spark.read.format("kafka").options(**kafka).option("subscribe", unique_topic)
                 .option("includeHeaders", "true").load().selectExpr(*COLUMNS))
    assert sorted(v[1] for v in read.values()) == sorted(f"value {i}".encode() for i in range(90))
    for p in range(PARTITIONS):
        assert sorted(o for q, o in read if q == p) == list(range(30))  # Kafka's offsets from 0

    name = f"kafka_stream_{uuid.uuid4().hex[:8]}"
    query = (spark.readStream.format("kafka").options(**kafka).option("subscribe", unique_topic)
             .option("startingOffsets", "earliest").option("includeHeaders", "true").load().selectExpr(*COLUMNS)
             .writeStream.format("memory").queryName(name).trigger(availableNow=True).start())
    assert query.awaitTermination(120) and query.exception() is None
    assert _rows(spark.sql(f"select * from {name}")) == read

    # The same log read through llog's own paths: every record, key, header and timestamp,
    # at llog's offsets (Kafka's + 1).
    ways = records_every_way(spark, llog_env, broker, unique_topic, range(PARTITIONS))
    as_kafka = {(p, o - 1): record for (p, o), record in ways["spark.read"].items()}
    assert as_kafka == read
    assert ways["library"] == ways["consume"] == ways["spark.read"] == ways["readStream"]

    # And the other way round: rows written with format("llog") read with format("kafka").
    back = f"{unique_topic}-llog"
    (spark.createDataFrame([(f"k{i}", f"via llog {i}") for i in range(20)], "key string, value string")
     .write.format("llog").mode("append").option("topic", back).option("brokers", broker.url)
     .option("partitions", "2").save())
    got = spark.read.format("kafka").options(**kafka).option("subscribe", back).load().collect()
    assert sorted((bytes(r.key), bytes(r.value)) for r in got) == sorted(
        (f"k{i}".encode(), f"via llog {i}".encode()) for i in range(20))
