"""The ``llog`` Spark data source (PySpark 4 Python Data Source API).

::

    from server.spark import register
    register(spark)                                             # format "llog"

    df = (spark.read.format("llog").option("topic", "orders")
          .option("startingOffsets", '{"0": 5, "1": "earliest"}').load())
    df.write.format("llog").mode("append").option("topic", "copy") \\
        .option("brokers", "http://127.0.0.1:8080").option("partitions", 8).save()
    q = spark.readStream.format("llog").option("topic", "orders").load() \\
        .writeStream.format("parquet").option("checkpointLocation", ...).start(...)

**Batch read** goes straight to Oxia and S3 with
:class:`~server.leaderless_log_reader.LeaderlessLogReader` (no broker in the
path). The columns are those of Spark's Kafka source, in its order, so a
query written for ``format("kafka")`` runs by changing the format name:
``key binary, value binary, topic string, partition int, offset long,
timestamp timestamp, timestampType int`` (:data:`SCHEMA`), and with
``includeHeaders`` a last column ``headers array<struct<key string, value
binary>>`` (null for a record without headers). ``offset`` is llog's offset
(from 1); ``timestamp`` is the record's CreateTime or, when ``timestampType``
is 1, its LogAppendTime. The driver snapshots each partition's high
watermark when the read is planned; one input partition per
(topic-partition, chunk of at most ``maxRecordsPerPartition`` offsets), so
a large partition is read in parallel. Input partitions carry only topic,
partition and an offset range; the reader object carries the resolved
storage settings, and each Python worker opens its clients inside
``read()`` (once per worker process, then reused by the worker's later
tasks). The streaming read has the same columns.

**Streaming read** (``DataSourceStreamReader``): the offset of a micro-batch
is ``{"<topic>": {"<partition>": next_offset, ...}}``, the next offset to read
in each partition (every offset below it is done). ``latestOffset`` is each
partition's high watermark + 1, so a micro-batch reads ``[start, end - 1]``
inclusive; partitions that appear later are read from offset 1. Spark writes
the offsets to the checkpoint before a batch runs, so a restarted query
replays exactly the planned ranges and continues after them: no gap, no
repeat (given an idempotent sink such as the file sink). Supports
``maxRecordsPerTrigger`` and ``Trigger.AvailableNow``.

**Write** (``df.write.format("llog").mode("append")``) goes through the
brokers with the produce job's client (:mod:`server.client`) and takes the
columns of Spark's Kafka sink (:mod:`server.spark._sink_columns`): ``value``
(string or binary; a null is a tombstone) is the record's value; ``key``
(string or binary) is stored with it; ``headers`` (array<struct<key string,
value binary>>) and ``timestamp`` (timestamp) are kept; an integer
``partition`` column places a record explicitly, else its key picks Kafka's
murmur2 partition, else records are spread evenly over ``partitions``; a
``topic`` column names each row's topic when the ``topic`` option is not
set (the option wins, as in Kafka's sink). Other columns (``offset`` ...)
are ignored, so a DataFrame read from ``llog`` or Kafka writes back as it
is. Exactly once, like the produce job: each task is an idempotent producer
named by the write (a stream: by the query id and the micro-batch id) and its
partition, so a retried task or micro-batch stores none of its rows twice,
provided Spark feeds it the same rows in the same order (``exactlyOnce``
false: at least once).

Options (case-insensitive):

=================================  =============================================================
``topic``                          required to read; to write, unless a ``topic`` column
``partitions``                     read: partitions to read, ``"0,1,5"`` or ``[0, 1, 5]``
                                   (default: every initialized one). write: the partition
                                   count (needed without a ``partition`` column)
``startingOffsets``                ``earliest`` (batch default), ``latest`` (stream default),
                                   or JSON ``{"0": 5, "1": "earliest"}``: first offset to
                                   read, inclusive (earliest: the log start, which
                                   retention and DeleteRecords move; an offset below it
                                   is refused); partitions not named use the default
``endingOffsets``                  batch only: ``latest`` (default) or JSON
                                   ``{"0": 100, "1": "latest"}``: last offset, inclusive
``maxRecordsPerPartition``         offsets per input partition (default 50000)
``maxRecordsPerTrigger``           stream: most records per micro-batch (default: all)
``partitionDiscoveryIntervalMs``   stream: how often new partitions are looked for
                                   (default 10000; 0 = every micro-batch)
``commitToGroup``                  stream: commit each completed micro-batch's end
                                   offsets to this consumer group (default: none), so
                                   ``llog-admin groups describe`` shows the stream's lag;
                                   the checkpoint stays what the stream resumes from
``includeHeaders``                 read: ``true`` adds the ``headers`` column (default
                                   ``false``; :class:`~server.spark._options.ReadOptions`)
``oxia.serviceAddress``            ... and ``oxia.namespace``, ``rootPrefix``,
                                   ``s3.endpoint``, ``s3.region``, ``s3.accessKeyId``,
                                   ``s3.secretAccessKey``, ``s3.sessionToken``: where the
                                   log lives; each falls back to its ``LLOG_*`` variable
                                   in the driver's environment
``brokers``                        write: broker URLs, comma-separated
``maxRequestBytes``                write: as the produce job's ``--max-request-bytes``
                                   (and ``maxRequestRecords``, ``maxRetries``,
                                   ``maxInFlight``)
``produceBody``                    write: ``binary`` (default: records sent as Kafka
                                   RecordBatch v2 batches, stored as sent) or
                                   ``json`` (for brokers that accept JSON only)
``maxBatchBytes``                  write: largest batch sent (default 1,000,000; a topic
                                   refuses batches over its ``max.message.bytes``)
=================================  =============================================================

Offsets are inclusive and start at 1, as everywhere in llog; an explicit
offset outside ``[1, high watermark + 1]`` is an error at planning time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, DataSourceReader, DataSourceStreamReader

from .._errors import ConfigError

# The source lives in private modules by role; this module keeps the names
# callers and tests import (``from server.spark.datasource import ...``).
# ruff: noqa: F401
from ._options import (
    _ENV_PREFIXES,
    _STORAGE_OPTIONS,
    _int_opt,
    _opt,
    _partition_list,
    _resolve,
    _resolve_end,
    _topic,
    parse_offsets,
    read_options,
    storage_env,
)
from ._read_source import (
    ARROW_BATCH_BYTES,
    ARROW_BATCH_RECORDS,
    DEFAULT_CHUNK_RECORDS,
    LlogBatchReader,
    OffsetRange,
    _chunks,
    _clients,
    _clients_lock,
    _close_clients,
    _Log,
    _NoObjects,
    _reader_for,
    read_range,
)
from ._stream_source import LlogStreamReader, _cap
from ._write_source import LlogCommitMessage, LlogStreamWriter, LlogWriter, _ProgressSender, produce_arrow_batches

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType


__all__ = [
    "LlogDataSource", "register", "SCHEMA", "HEADERS_SCHEMA", "OffsetRange", "parse_offsets", "produce_arrow_batches",
]

# Spark's Kafka source schema (KafkaRecordToRowConverter), every column nullable;
# the Arrow batches the readers send are server.spark._arrow_records.SCHEMA / HEADERS_SCHEMA.
SCHEMA = "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, timestampType int"
HEADERS_SCHEMA = f"{SCHEMA}, headers array<struct<key: string, value: binary>>"


def register(spark: SparkSession) -> None:
    """Register the ``llog`` format with ``spark``."""
    spark.dataSource.register(LlogDataSource)


# -- the data source ------------------------------------------------------------------------------------


class LlogDataSource(DataSource):
    """Format ``llog``: batch and streaming reads from Oxia + S3, writes through the brokers."""

    @classmethod
    def name(cls) -> str:
        return "llog"

    def schema(self) -> str:
        return HEADERS_SCHEMA if read_options(self.options).include_headers else SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return LlogBatchReader(self.options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return LlogStreamReader(self.options)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        if overwrite:
            raise ConfigError('llog is an append-only log: use .mode("append"), not overwrite')
        writer = LlogWriter(self.options, schema)
        writer.ensure_topic()
        return writer

    def streamWriter(self, schema: StructType, overwrite: bool) -> LlogStreamWriter:  # noqa: N802 - Spark's name
        if overwrite:
            raise ConfigError('llog is an append-only log: use outputMode("append")')
        writer = LlogStreamWriter(self.options, schema)
        writer.writer.ensure_topic()
        return writer
