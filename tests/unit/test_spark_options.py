"""Option parsing of the llog data source and the produce job (no Spark session, no stack)."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")

from server._errors import ConfigError  # noqa: E402
from server.spark.datasource import (  # noqa: E402
    OffsetRange,
    _cap,
    _chunks,
    _partition_list,
    _resolve,
    _resolve_end,
    parse_offsets,
    storage_env,
)
from server.spark.produce_job import ProduceOptions, infer_format  # noqa: E402

START = {"default": "earliest", "allowed": ("earliest", "latest")}


def test_offsets_keywords_and_json() -> None:
    assert parse_offsets(None, "startingOffsets", **START) == ("earliest", {})
    assert parse_offsets("LATEST", "startingOffsets", **START) == ("latest", {})
    assert parse_offsets('{"0": 5, "1": "earliest", "3": "latest"}', "startingOffsets", **START) == (
        "earliest", {0: 5, 1: "earliest", 3: "latest"},
    )


@pytest.mark.parametrize(
    "raw,match",
    [
        ("{bad", "not valid JSON"),
        ("[1, 2]", "must be earliest or latest or a JSON object"),
        ('{"x": 1}', "'x' is not a partition number"),
        ('{"-1": 1}', "is not a partition number"),
        ('{"0": 0}', "offsets start at 1"),
        ('{"0": true}', "use an offset >= 1"),
        ('{"0": "newest"}', "use an offset >= 1"),
        ("sometimes", "must be earliest or latest"),
    ],
)
def test_bad_offsets_are_config_errors(raw: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        parse_offsets(raw, "startingOffsets", **START)


def test_ending_offsets_refuse_earliest() -> None:
    with pytest.raises(ConfigError):
        parse_offsets('{"0": "earliest"}', "endingOffsets", default="latest", allowed=("latest",))


def test_resolve_bounds() -> None:
    assert _resolve("earliest", 10, "startingOffsets", 0) == 1
    assert _resolve("latest", 10, "startingOffsets", 0) == 11
    assert _resolve(11, 10, "startingOffsets", 0) == 11  # just past the end: nothing yet, allowed
    with pytest.raises(ConfigError, match="past the high watermark 10"):
        _resolve(12, 10, "startingOffsets", 0)
    # After retention or DeleteRecords moved the log start to 4: earliest is 4, below it is refused.
    assert _resolve("earliest", 10, "startingOffsets", 0, log_start=4) == 4
    assert _resolve(4, 10, "startingOffsets", 0, log_start=4) == 4
    with pytest.raises(ConfigError, match="below the log start 4"):
        _resolve(3, 10, "startingOffsets", 0, log_start=4)
    assert _resolve_end("latest", 10, 0) == 10
    with pytest.raises(ConfigError, match="past the high watermark"):
        _resolve_end(11, 10, 0)


def test_chunks_cover_the_range_exactly() -> None:
    assert _chunks("t", 2, 5, 14, 4) == [
        OffsetRange("t", 2, 5, 8), OffsetRange("t", 2, 9, 12), OffsetRange("t", 2, 13, 14),
    ]
    assert _chunks("t", 0, 11, 10, 4) == []


def test_read_limit_cap_is_fair_and_exact() -> None:
    assert _cap({0: 1, 1: 1}, {0: 101, 1: 3}, 10) == {0: 9, 1: 3}
    assert _cap({0: 1}, {0: 5, 1: 7}, 100) == {0: 5, 1: 7}
    got = _cap({0: 1, 1: 1, 2: 1}, {0: 1000, 1: 1000, 2: 1000}, 10)
    assert sum(v - 1 for v in got.values()) == 10


def test_partition_list() -> None:
    assert _partition_list({"partitions": "3, 1,1"}) == [1, 3]
    assert _partition_list({"PARTITIONS": "[0, 2]"}) == [0, 2]
    assert _partition_list({}) is None
    with pytest.raises(ConfigError):
        _partition_list({"partitions": "a,b"})


def test_include_headers_option_picks_kafkas_schema_with_or_without_headers() -> None:
    from server.spark._options import ReadOptions, read_options
    from server.spark.datasource import HEADERS_SCHEMA, SCHEMA, LlogDataSource

    kafka = "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, timestampType int"
    assert SCHEMA == kafka
    assert HEADERS_SCHEMA == f"{kafka}, headers array<struct<key: string, value: binary>>"
    assert read_options({}) == ReadOptions(include_headers=False)
    assert read_options({"INCLUDEHEADERS": "true"}).include_headers is True
    assert read_options({"includeHeaders": "false"}).include_headers is False
    assert LlogDataSource({"topic": "t"}).schema() == SCHEMA
    assert LlogDataSource({"topic": "t", "includeHeaders": "TRUE"}).schema() == HEADERS_SCHEMA
    with pytest.raises(ConfigError, match="option includeHeaders must be 1 or 0 \\(or true/false\\), got 'maybe'"):
        LlogDataSource({"topic": "t", "includeHeaders": "maybe"}).schema()


def test_storage_env_options_win_over_the_environment() -> None:
    environ = {"LLOG_OXIA_SERVICE_ADDRESS": "env:1", "LLOG_ROOT_PREFIX": "envroot", "HOME": "/x"}
    env = storage_env({"oxia.serviceAddress": "opt:2", "s3.endpoint": "http://s3:9000"}, environ)
    assert env["LLOG_OXIA_SERVICE_ADDRESS"] == "opt:2"
    assert env["LLOG_S3_ENDPOINT_URL"] == "http://s3:9000"
    assert env["LLOG_ROOT_PREFIX"] == "envroot"
    assert "HOME" not in env
    with pytest.raises(ConfigError, match="oxia.serviceAddress"):
        storage_env({}, {})


def test_produce_options_validation() -> None:
    ok = ProduceOptions(topic="orders", brokers="http://a:1, http://b:2")
    assert ok.brokers == ("http://a:1", "http://b:2")
    with pytest.raises(ConfigError, match="invalid topic"):
        ProduceOptions(topic="a/b", brokers=("http://a:1",))
    with pytest.raises(ConfigError, match="unknown input format 'xml'"):
        ProduceOptions(topic="t", brokers=("http://a:1",), input_format="xml")
    with pytest.raises(ConfigError, match="--partitions"):
        ProduceOptions(topic="t", brokers=("http://a:1",), partitions=0)
    with pytest.raises(ConfigError, match="broker URL"):
        ProduceOptions(topic="t", brokers=("a:1",))


def test_infer_format() -> None:
    assert infer_format(["data/*.jsonl"]) == "json"
    assert infer_format(["a.csv.gz"]) == "csv"
    assert infer_format(["x.parquet", "y.pq"]) == "parquet"
    with pytest.raises(ConfigError, match="pass --format"):
        infer_format(["data/"])
    with pytest.raises(ConfigError, match="different formats"):
        infer_format(["a.csv", "b.json"])


def test_produce_body_option_of_the_writer() -> None:
    from pyspark.sql.types import StringType, StructField, StructType

    from server.spark._write_source import LlogWriter

    schema = StructType([StructField("value", StringType())])
    opts = {"topic": "t", "brokers": "http://127.0.0.1:1", "partitions": "2"}
    assert LlogWriter(opts, schema).config.body == "binary"
    assert LlogWriter({**opts, "PRODUCEBODY": "JSON"}, schema).config.body == "json"
    with pytest.raises(ConfigError, match="option produceBody must be one of binary, json, got 'xml'"):
        LlogWriter({**opts, "produceBody": "xml"}, schema)
    with pytest.raises(ConfigError, match="--body|body must be one of"):
        ProduceOptions(topic="t", brokers=("http://127.0.0.1:1",), body="xml")


def test_the_job_and_the_writer_take_the_client_limits_from_producer_config(capsys) -> None:
    """4 MiB, 50,000 records, 10 retries, 4 in flight, binary: declared once, on ProducerConfig."""
    from pyspark.sql.types import StringType, StructField, StructType

    from server.client import ProducerConfig, parse_broker_list
    from server.spark._write_source import LlogWriter
    from server.spark.produce_job import parse_args

    client = ProducerConfig(brokers=parse_broker_list("http://a:1"))
    assert ProduceOptions(topic="t", brokers=("http://a:1",)).producer_config() == client
    schema = StructType([StructField("value", StringType())])
    opts = {"topic": "t", "brokers": "http://a:1", "partitions": "2"}
    assert LlogWriter(opts, schema).config == client
    changed = LlogWriter({**opts, "maxRequestBytes": "2048", "MAXINFLIGHT": "2", "maxRetries": "0"}, schema).config
    assert (changed.max_request_bytes, changed.max_in_flight, changed.max_retries) == (2048, 2, 0)
    with pytest.raises(ConfigError, match="option maxRequestBytes must be >= 1024, got 10"):
        LlogWriter({**opts, "maxRequestBytes": "10"}, schema)
    with pytest.raises(ConfigError, match="option maxInFlight must be an integer, got 'many'"):
        LlogWriter({**opts, "maxInFlight": "many"}, schema)
    with pytest.raises(SystemExit):
        parse_args(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "(Spark writer option maxRequestBytes, default 4194304 (4 MiB))" in text
    assert "(Spark writer option maxRequestRecords, default 50000)" in text
    args = parse_args(["in.jsonl", "--topic", "t", "--brokers", "http://a:1", "--max-in-flight", "8"])
    assert (args.max_in_flight, args.max_retries) == (8, None)  # unset flags keep ProducerConfig's defaults
