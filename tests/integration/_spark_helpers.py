"""Shared pieces of the Spark integration tests.

``spark`` is ONE SparkSession for the whole test session (local[2,2]: a failed
task is tried once more; no UI,
2 shuffle partitions, 2 GiB driver), with the ``llog`` format registered;
test modules import the fixture from here. Starting the JVM costs about ten
seconds, so nothing here ever stops and restarts it.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

import pytest

pytest.importorskip("pyspark")

from devstack import spark_kafka_jars  # noqa: E402
from server.spark.produce_job import spark_session  # noqa: E402

from .conftest import BrokerClient, value_bytes  # noqa: E402

SPARK_CONF = {
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.driver.memory": "2g",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.streaming.pollingDelay": "50ms",
}


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    # Spark's Kafka connector (format("kafka")) for the tests against llog's Kafka listener.
    conf = {**SPARK_CONF, "spark.jars": ",".join(spark_kafka_jars())}
    session = spark_session("llog-tests", "local[2,2]", conf)  # a failed task is tried once more
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def llog_options(env: Mapping[str, str]) -> dict[str, str]:
    """Data source options naming the log of ``env`` (the test's LLOG_* settings)."""
    return {
        "oxia.serviceAddress": env["LLOG_OXIA_SERVICE_ADDRESS"],
        "oxia.namespace": env["LLOG_OXIA_NAMESPACE"],
        "rootPrefix": env["LLOG_ROOT_PREFIX"],
        "s3.endpoint": env["LLOG_S3_ENDPOINT_URL"],
        "s3.region": env["LLOG_S3_REGION_NAME"],
        "s3.accessKeyId": env["LLOG_S3_ACCESS_KEY_ID"],
        "s3.secretAccessKey": env["LLOG_S3_SECRET_ACCESS_KEY"],
    }


def write_jsonl(path: Path, rows: Iterable[dict]) -> list[str]:
    lines = [json.dumps(r, separators=(",", ":")) for r in rows]
    path.write_text("".join(line + "\n" for line in lines))
    return lines


def consume_partitions(
    client: BrokerClient, topic: str, partitions: Iterable[int]
) -> dict[int, list[tuple[int, bytes]]]:
    """Every record of each partition through POST /consume (empty list for a
    partition that was never written)."""
    out = {}
    for p in partitions:
        reply = client.consume([{"topic": topic, "partition": p, "fetch_offset": 1}], max_wait_ms=0)
        (res,) = reply.json["results"]
        if not res["ok"] and res["error_code"] == "UNKNOWN_TOPIC_OR_PARTITION":
            out[p] = []
            continue
        out[p] = client.consume_all(topic, p, max_bytes=16 * 1024 * 1024)
    return out


def dead_broker_url() -> str:
    """A URL where nothing listens."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"http://127.0.0.1:{port}"


__all__ = ["spark", "llog_options", "write_jsonl", "consume_partitions", "dead_broker_url", "value_bytes"]


def records_every_way(spark: Any, env: Mapping[str, str], broker: Any, topic: str, partitions: Iterable[int]) -> dict:
    """``{way: {(partition, offset): (key, value, headers, timestamp_ms)}}`` of a whole topic read
    through the library, ``/consume``, ``spark.read`` and ``readStream`` (headers as tuples of pairs)."""
    import base64
    import uuid

    from server.leaderless_log_reader import LeaderlessLogReader

    def raw(v: Any) -> bytes | None:
        return None if v is None else (v.encode() if isinstance(v, str) else base64.b64decode(v["base64"]))

    parts = list(partitions)
    out: dict[str, dict] = {"library": {}, "consume": {}}
    with LeaderlessLogReader.from_env(dict(env)) as reader:
        for p in parts:
            for r in reader.iter_from(topic, p, reader.log_start_offset(topic, p)):
                out["library"][(p, r.offset)] = (r.key, r.payload, tuple(r.headers), r.timestamp_ms)
    for p in parts:
        res = broker.client.consume([{"topic": topic, "partition": p, "fetch_offset": 1}], max_wait_ms=0).json
        for r in res["results"][0]["records"]:
            out["consume"][(p, r["offset"])] = (raw(r["key"]), raw(r["value"]),
                                                tuple((h["key"], raw(h["value"])) for h in r["headers"]),
                                                r["timestamp_ms"])
    columns = ("partition", "offset", "key", "value", "headers", "unix_millis(timestamp) AS ms")

    def rows(frame: Any) -> dict:
        return {(r.partition, r.offset): (None if r.key is None else bytes(r.key),
                                          None if r.value is None else bytes(r.value),
                                          tuple((h.key, None if h.value is None else bytes(h.value))
                                                for h in (r.headers or ())), r.ms)
                for r in frame.collect()}

    options = {**llog_options(env), "topic": topic, "partitions": ",".join(map(str, parts)), "includeHeaders": "true"}
    out["spark.read"] = rows(spark.read.format("llog").options(**options).load().selectExpr(*columns))
    name = f"every_way_{uuid.uuid4().hex[:8]}"
    query = (spark.readStream.format("llog").options(**options).option("startingOffsets", "earliest").load()
             .selectExpr(*columns).writeStream.format("memory").queryName(name).trigger(availableNow=True).start())
    assert query.awaitTermination(120) and query.exception() is None
    out["readStream"] = rows(spark.sql(f"select * from {name}"))
    return out
