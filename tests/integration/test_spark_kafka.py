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


def test_spark_kafka_sink_and_source_over_sasl_ssl(spark, broker_factory, tmp_path, unique_topic):  # noqa: F811
    """The connector's ``kafka.*`` options carry the Java client's TLS and SCRAM settings as they
    would to a secured Kafka."""
    from devstack.pki import make_pki

    pki = make_pki(tmp_path / "pki")
    users = tmp_path / "kafka-users"
    users.write_text("spark:spark-secret\n")
    broker = broker_factory(env={"LLOG_KAFKA_PORT": "0", "LLOG_BROKER_MAX_WAIT_MS": "500",
                                 **pki.broker_env,
                                 "LLOG_KAFKA_SASL_USERS": str(users)})
    assert broker.client.request("POST", "/topics", {"name": unique_topic, "partitions": PARTITIONS}).status == 201
    kafka = {"kafka.bootstrap.servers": broker.kafka, "kafka.security.protocol": "SASL_SSL",
             "kafka.sasl.mechanism": "SCRAM-SHA-512",
             "kafka.sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                                       'username="spark" password="spark-secret";',
             "kafka.ssl.truststore.type": "PEM", "kafka.ssl.truststore.location": pki.ca}
    rows = [(f"k{i}", f"secured {i}") for i in range(30)]
    spark.createDataFrame(rows, "key string, value string").write.format("kafka").options(**kafka) \
        .option("topic", unique_topic).save()
    read = spark.read.format("kafka").options(**kafka).option("subscribe", unique_topic).load() \
        .selectExpr("CAST(key AS STRING) AS k", "CAST(value AS STRING) AS v").collect()
    assert sorted((r.k, r.v) for r in read) == sorted(rows)
    assert broker.client.counter("kafka_authentications_total", mechanism="SCRAM-SHA-512", outcome="ok") >= 2
