"""Write of the ``llog`` data source (``df.write.format("llog")``): every row
through the brokers with the produce job's client, at least once
(see :mod:`server.spark.datasource`)."""

from __future__ import annotations

import json
import logging
import os
import socket
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator, Mapping

from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage

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
from ..client._record_chunks import first_null

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

__all__ = ["LlogWriter", "LlogCommitMessage", "produce_arrow_batches"]

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
    """
    partitioner = KeyPartitioner(partitions or 1, start=task_index)
    producers: dict[str, TaskProducer] = {}
    rows = 0
    stats = ProduceStats()
    try:
        for batch in batches:
            if batch.num_rows == 0:
                continue
            for name, part in _by_topic(batch, topic, topic_column, rows):
                producer = producers.get(name)
                if producer is None:
                    producer = producers[name] = TaskProducer(name, config, on_progress=on_progress)
                _add(producer, part, rows, partitioner, partitions, value_column, key_column, partition_column,
                     headers_column, timestamp_column)
            rows += batch.num_rows
        for producer in producers.values():
            stats.merge(producer.flush())
    finally:
        for producer in producers.values():
            producer.close()
    return rows, stats


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


class LlogWriter(DataSourceArrowWriter):
    """``df.write.format("llog")``: every row through the brokers, at least once.

    Two internal options serve the produce job: ``_progressAddress``
    (``host:port`` for progress datagrams) and ``_summaryPath`` (a file on
    the driver host where ``commit``/``abort`` leave the totals).
    """

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.topic = _topic(options, required=False)
        brokers = _opt(options, "brokers")
        if not brokers:
            raise ConfigError('option "brokers" is required to write: .option("brokers", "http://127.0.0.1:8080")')
        self.config = ProducerConfig(brokers=parse_broker_list(brokers), **producer_options(options))
        self.partitions = _int_opt(options, "partitions", None)
        self.progress_address = _opt(options, "_progressAddress")
        self.summary_path = _opt(options, "_summaryPath")
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
        from pyspark import TaskContext

        ctx = TaskContext.get()
        reporter = _ProgressSender(self.progress_address, ctx) if self.progress_address else None
        try:
            c = self.columns
            rows, stats = produce_arrow_batches(
                iterator, self.topic, self.config, partitions=self.partitions, value_column="value",
                key_column=c.key, partition_column=c.partition, headers_column=c.headers,
                timestamp_column=c.timestamp, topic_column=c.topic,
                task_index=ctx.partitionId() if ctx is not None else 0, on_progress=reporter,
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
            "%d batches (%d records) of unknown outcome re-sent (at-least-once)",
            self.topic, rows, total.records_acked, total.requests, total.retried_batches,
            total.unknown_batches, total.unknown_records,
        )

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        rows, tasks, total = self._totals(messages)
        self._leave_summary(rows, tasks, total, ok=False)
        log.warning(
            "llog write to %s failed; %d rows of completed tasks stay written (at-least-once: "
            "re-running the write appends them again)", self.topic, rows,
        )
