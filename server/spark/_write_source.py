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
    topic: str,
    config: ProducerConfig,
    *,
    partitions: int | None,
    value_column: str = "value",
    key_column: str | None = None,
    partition_column: str | None = None,
    task_index: int = 0,
    on_progress: Any = None,
) -> tuple[int, ProduceStats]:
    """Produce every row of ``batches`` (one Spark task); returns ``(rows, stats)``.

    The partition of a row is its ``partition_column`` value, else Kafka's
    murmur2 partition of its ``key_column`` value (a null key spreads like no
    key), else round-robin starting at ``task_index``. A null value or
    partition raises ValueError: rows are never dropped.
    """
    partitioner = KeyPartitioner(partitions or 1, start=task_index)
    rows = 0
    with TaskProducer(topic, config, on_progress=on_progress) as producer:
        for batch in batches:
            if batch.num_rows == 0:
                continue
            values = batch.column(batch.schema.get_field_index(value_column))
            if partition_column is not None:
                col = batch.column(batch.schema.get_field_index(partition_column))
                parts = check_partition_column(col, partitions, first_row=rows)
            elif key_column is not None:
                parts = partitioner.assign_column(batch.column(batch.schema.get_field_index(key_column)))
            else:
                parts = partitioner.spread_array(batch.num_rows)
            null = first_null(values)
            if null is not None:
                raise ValueError(f"row {rows + null} of the task has a null value; a record value must be a string or bytes")
            producer.add(values, parts)
            rows += batch.num_rows
        stats = producer.flush()
    return rows, stats


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
        from pyspark.sql.types import BinaryType, ByteType, IntegerType, LongType, ShortType, StringType

        self.topic = _topic(options)
        brokers = _opt(options, "brokers")
        if not brokers:
            raise ConfigError('option "brokers" is required to write: .option("brokers", "http://127.0.0.1:8080")')
        self.config = ProducerConfig(brokers=parse_broker_list(brokers), **producer_options(options))
        self.partitions = _int_opt(options, "partitions", None)
        self.progress_address = _opt(options, "_progressAddress")
        self.summary_path = _opt(options, "_summaryPath")
        fields = {f.name: f.dataType for f in schema.fields}
        if "value" not in fields:
            raise ConfigError(f"the DataFrame needs a 'value' column (string or binary); it has {list(fields)}")
        if not isinstance(fields["value"], (StringType, BinaryType)):
            raise ConfigError(f"column 'value' must be string or binary, got {fields['value'].simpleString()}")
        self.partition_column = "partition" if "partition" in fields else None
        self.key_column = "key" if "key" in fields and self.partition_column is None else None
        if self.partition_column and not isinstance(fields["partition"], (IntegerType, LongType, ShortType, ByteType)):
            raise ConfigError(f"column 'partition' must be an integer, got {fields['partition'].simpleString()}")
        if self.key_column and not isinstance(fields["key"], (StringType, BinaryType)):
            raise ConfigError(f"column 'key' must be string or binary (cast it), got {fields['key'].simpleString()}")
        if self.partition_column is None and self.partitions is None:
            raise ConfigError(
                'option "partitions" (the partition count) is required unless the DataFrame has a partition column'
            )

    def ensure_topic(self) -> None:
        """On the driver, before any task writes: the topic has the partitions rows go to."""
        if self.partitions is not None:
            ensure_topic(self.config.brokers, self.topic, self.partitions)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> LlogCommitMessage:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        reporter = _ProgressSender(self.progress_address, ctx) if self.progress_address else None
        try:
            rows, stats = produce_arrow_batches(
                iterator, self.topic, self.config, partitions=self.partitions, value_column="value",
                key_column=self.key_column, partition_column=self.partition_column,
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
