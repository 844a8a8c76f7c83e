"""Write of the ``llog`` data source (``df.write.format("llog")``): every row
through the brokers with the produce job's client, exactly once
(see :mod:`server.spark.datasource`)."""

from __future__ import annotations

import json
import logging
import os
import socket
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator, Mapping

from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage

from .._errors import ConfigError
from ..client import (
    ProducerConfig,
    ProduceStats,
    TaskProducer,
    ensure_topic,
    parse_broker_list,
)
from ._options import _int_opt, _opt, _topic, producer_options
from ._sink_columns import check_sink_columns
from ..client._partitioner import KeyPartitioner, check_partition_column
from ..client._produce_client import ProduceClient
from ..client._producer_id import init_task_producer, task_producer_name
from ..client._record_chunks import first_null

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

__all__ = ["LlogWriter", "LlogStreamWriter", "LlogCommitMessage", "produce_arrow_batches"]

log = logging.getLogger(__name__)


# -- write ------------------------------------------------------------------------------------------


def produce_arrow_batches(
    batches: Iterator[pa.RecordBatch],
    topic: str | None,
    config: ProducerConfig,
    *,
    partitions: int | None,
    value_column: str = "value",
    key_column: str | None = None,
    partition_column: str | None = None,
    headers_column: str | None = None,
    timestamp_column: str | None = None,
    topic_column: str | None = None,
    task_index: int = 0,
    on_progress: Any = None,
    producer_name: str | None = None,
    fail_after_rows: int | None = None,
) -> tuple[int, ProduceStats]:
    """Produce every row of ``batches`` (one Spark task); returns ``(rows, stats)``.

    Columns as Kafka's sink takes them: ``value`` (a null is a tombstone),
    and optionally ``key`` (stored, and hashed for the partition), ``headers``
    (array of struct<key string, value binary>), ``timestamp`` (the
    record's time; none: when sent) and ``topic`` (used when ``topic`` is
    None). The partition of a row is its ``partition_column`` value, else
    Kafka's murmur2 partition of its key (a null key spreads like no key),
    else round-robin starting at ``task_index``. A null partition raises
    ValueError: rows are never dropped.

    ``producer_name`` (with ``config.exactly_once``): the task's idempotent
    producer, resumed, shared by its topics (:mod:`server.client._producer_id`).
    ``fail_after_rows`` (tests): once that many rows are sent and acknowledged,
    fail the task, as an executor lost after sending would.
    """
    partitioner = KeyPartitioner(partitions or 1, start=task_index)
    producers: dict[str, TaskProducer] = {}
    identity = _task_identity(config, producer_name)
    rows = 0
    stats = ProduceStats()
    try:
        for batch in batches:
            if batch.num_rows == 0:
                continue
            for name, part in _by_topic(batch, topic, topic_column, rows):
                producer = producers.get(name)
                if producer is None:
                    producer = producers[name] = TaskProducer(name, config, on_progress=on_progress,
                                                              producer=identity)
                _add(producer, part, rows, partitioner, partitions, value_column, key_column, partition_column,
                     headers_column, timestamp_column)
            rows += batch.num_rows
            if fail_after_rows is not None and rows >= fail_after_rows:
                for producer in producers.values():
                    producer.flush()
                raise RuntimeError(f"injected failure after {rows} rows were sent (_failFirstAttemptAfterRows)")
        for producer in producers.values():
            stats.merge(producer.flush())
    finally:
        for producer in producers.values():
            producer.close()
    return rows, stats


def _task_identity(config: ProducerConfig, producer_name: str | None):
    """The task's idempotent producer (None: at-least-once)."""
    if producer_name is None or not config.exactly_once:
        return None
    client = ProduceClient(config)
    try:
        return init_task_producer(client, producer_name)
    finally:
        client.close()


def _by_topic(batch: pa.RecordBatch, topic: str | None, topic_column: str | None, first_row: int):
    """``(topic, rows)`` pieces of ``batch``: all of it for a fixed topic, else split by its topic column."""
    import pyarrow.compute as pc

    if topic is not None:
        yield topic, batch
        return
    col = batch.column(batch.schema.get_field_index(topic_column))
    null = first_null(col)
    if null is not None:
        raise ValueError(f"row {first_row + null} of the task has a null topic; set the column or the topic option")
    for name in pc.unique(col).to_pylist():
        yield name, batch.filter(pc.equal(col, name))


def _add(producer: TaskProducer, batch: pa.RecordBatch, first_row: int, partitioner: KeyPartitioner,
         partitions: int | None, value_column: str, key_column: str | None, partition_column: str | None,
         headers_column: str | None, timestamp_column: str | None) -> None:
    column = batch.schema.get_field_index
    values = batch.column(column(value_column))
    keys = batch.column(column(key_column)) if key_column is not None else None
    if partition_column is not None:
        parts = check_partition_column(batch.column(column(partition_column)), partitions, first_row=first_row)
    elif keys is not None:
        parts = partitioner.assign_column(keys)
    else:
        parts = partitioner.spread_array(batch.num_rows)
    headers = None
    if headers_column is not None:
        headers = [None if hs is None else [(h["key"], h["value"]) for h in hs]
                   for hs in batch.column(column(headers_column)).to_pylist()]
    stamps = None
    if timestamp_column is not None:
        stamps = timestamps_ms(batch.column(column(timestamp_column)))
    producer.add(values, parts, keys=keys, headers=headers, timestamps=stamps)


def timestamps_ms(col: pa.Array):
    """A Spark timestamp column (Arrow timestamp, any unit) or integer ms as int64 ms; null: when sent (-1)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    if pa.types.is_timestamp(col.type):
        col = pc.cast(col, pa.timestamp("ms", col.type.tz)).cast(pa.int64())
    return np.asarray(col.fill_null(-1).to_numpy(zero_copy_only=False), dtype=np.int64)


class _ProgressSender:
    """Task side of the produce job's progress: one small UDP datagram per
    update to the driver (best effort; a lost datagram only delays a line)."""

    def __init__(self, address: str, ctx: Any) -> None:
        host, _, port = address.rpartition(":")
        self.addr = (host, int(port))
        self.key = f"{ctx.stageId()}.{ctx.partitionId()}.{ctx.attemptNumber()}" if ctx is not None else "0"
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)

    def __call__(self, stats: ProduceStats) -> None:
        msg = json.dumps([self.key, stats.records_acked, stats.bytes_acked, stats.requests, stats.retries])
        try:
            self.sock.sendto(msg.encode(), self.addr)
        except OSError:
            pass

    def close(self) -> None:
        self.sock.close()


@dataclass
class LlogCommitMessage(WriterCommitMessage):
    rows: int
    stats: str
    """ProduceStats as JSON."""


def _first_attempt(ctx: Any) -> bool:
    return ctx is None or ctx.attemptNumber() == 0


class LlogWriter(DataSourceArrowWriter):
    """``df.write.format("llog")``: every row through the brokers, exactly once.

    Two internal options serve the produce job: ``_progressAddress``
    (``host:port`` for progress datagrams) and ``_summaryPath`` (a file on
    the driver host where ``commit``/``abort`` leave the totals).
    """

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.write_id = uuid.uuid4().hex
        """Made once, on the driver: every attempt of a task of this write names its producer by it."""
        self.topic = _topic(options, required=False)
        brokers = _opt(options, "brokers")
        if not brokers:
            raise ConfigError('option "brokers" is required to write: .option("brokers", "http://127.0.0.1:8080")')
        self.config = ProducerConfig(brokers=parse_broker_list(brokers), **producer_options(options))
        self.partitions = _int_opt(options, "partitions", None)
        self.progress_address = _opt(options, "_progressAddress")
        self.summary_path = _opt(options, "_summaryPath")
        self.fail_after_rows = _int_opt(options, "_failFirstAttemptAfterRows", None)
        """Tests: a task's first attempt fails once it has sent this many rows (Spark retries it)."""
        fields = {f.name: f.dataType for f in schema.fields}
        self.columns = check_sink_columns(fields, has_topic=self.topic is not None)
        if self.columns.partition is None and self.partitions is None:
            raise ConfigError(
                'option "partitions" (the partition count) is required unless the DataFrame has a partition column'
            )

    def ensure_topic(self) -> None:
        """On the driver, before any task writes: the topic has the partitions rows go to
        (a topic column's topics are created by the brokers on first produce)."""
        if self.partitions is not None and self.topic is not None:
            ensure_topic(self.config.brokers, self.topic, self.partitions)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> LlogCommitMessage:
        return self.write_task(iterator, None)

    def write_task(self, iterator: Iterator[pa.RecordBatch], stream: tuple[str, str] | None) -> LlogCommitMessage:
        """One task: its rows, its idempotent producer named by the write (or, for a
        stream, by ``(query id, batch id)``) and the task's partition."""
        from pyspark import TaskContext

        ctx = TaskContext.get()
        part = ctx.partitionId() if ctx is not None else 0
        name = (task_producer_name(self.write_id, part) if stream is None
                else task_producer_name(stream[0], part, stream[1]))
        reporter = _ProgressSender(self.progress_address, ctx) if self.progress_address else None
        try:
            c = self.columns
            rows, stats = produce_arrow_batches(
                iterator, self.topic, self.config, partitions=self.partitions, value_column="value",
                key_column=c.key, partition_column=c.partition, headers_column=c.headers,
                timestamp_column=c.timestamp, topic_column=c.topic, task_index=part, on_progress=reporter,
                producer_name=name, fail_after_rows=self.fail_after_rows if _first_attempt(ctx) else None,
            )
            if reporter is not None:
                reporter(stats)
        finally:
            if reporter is not None:
                reporter.close()
        return LlogCommitMessage(rows, json.dumps(stats.to_json()))

    def _totals(self, messages: list[WriterCommitMessage | None]) -> tuple[int, int, ProduceStats]:
        total, rows, tasks = ProduceStats(), 0, 0
        for m in messages:
            if isinstance(m, LlogCommitMessage):
                tasks += 1
                rows += m.rows
                total.merge(ProduceStats.from_json(json.loads(m.stats)))
        return rows, tasks, total

    def _leave_summary(self, rows: int, tasks: int, total: ProduceStats, ok: bool) -> None:
        if self.summary_path:
            doc = {"ok": ok, "rows": rows, "tasks": tasks, "stats": total.to_json()}
            tmp = f"{self.summary_path}.tmp"
            with open(tmp, "w") as f:
                json.dump(doc, f)
            os.replace(tmp, self.summary_path)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        rows, tasks, total = self._totals(messages)
        self._leave_summary(rows, tasks, total, ok=True)
        log.info(
            "llog write to %s: %d rows, %d records acknowledged, %d requests, %d retried batches, "
            "%d batches (%d records) of unknown outcome re-sent, %d duplicate batches (%d records) recognized "
            "and not stored again (%s)",
            self.topic, rows, total.records_acked, total.requests, total.retried_batches,
            total.unknown_batches, total.unknown_records, total.duplicate_batches, total.duplicate_records,
            "exactly once" if self.config.exactly_once else "at-least-once",
        )

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        rows, tasks, total = self._totals(messages)
        self._leave_summary(rows, tasks, total, ok=False)
        log.warning(
            "llog write to %s failed; %d rows of completed tasks stay written (re-running the write "
            "is a new write: it appends them again)", self.topic, rows,
        )


class LlogStreamWriter(DataSourceStreamArrowWriter):
    """``writeStream.format("llog")``: each micro-batch as a write whose tasks'
    producers are named by the query's id (kept in its checkpoint, the same
    after a restart) and the batch id, so a micro-batch Spark runs again after
    a failure or a restart stores none of its rows twice."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.writer = LlogWriter(options, schema)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> LlogCommitMessage:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        query = ctx.getLocalProperty("sql.streaming.queryId") if ctx is not None else None
        batch = ctx.getLocalProperty("streaming.sql.batchId") if ctx is not None else None
        if not query or batch is None:
            raise ConfigError("a streaming write task without its query and batch ids (Spark's local properties)")
        return self.writer.write_task(iterator, (query, batch))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803 - Spark's name
        self.writer.commit(messages)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        self.writer.abort(messages)
