"""The produce job: a PySpark job that feeds a data set to the brokers as ``POST /produce`` requests.

::

    python -m server.spark.produce_job data/orders.jsonl --topic orders --partitions 8 \\
        --key-column customer_id --brokers http://127.0.0.1:8080
    PYSPARK_PYTHON=$LLOG_PY spark-submit server/spark/produce_job.py ...   # same options
    run_produce_job(spark, df_or_path, ProduceOptions(topic=..., brokers=...))  # from Python

Input: JSON lines, CSV (with a header line), Parquet or plain text, by path
or glob (``--format``, or inferred from the extension), or any DataFrame
when called as a function. What one record holds:

- default: the whole row as JSON text. For JSON lines that is the line as
  written (verbatim, not re-serialized; blank lines are skipped); for CSV,
  Parquet and DataFrames it is ``to_json`` of the row, nulls kept; for text
  it is the line.
- ``--value-column C``: that column; a binary column is sent as bytes, a
  string as its UTF-8 bytes, anything else as its JSON text (structs,
  arrays, maps) or string form.
- ``--key-column C``: the record's key (its string form unless string or
  binary), stored with the record.
- ``--timestamp-column C``: the record's timestamp (a timestamp, integer
  ms, or a string Spark can parse); default: when sent.
- ``--headers-column C``: the record's headers (a JSON object or struct: one
  header per field; a map<string, string>; or an array of struct<key string,
  value binary or string>).

Partitioning: ``--partition-column C`` names each row's partition; else with
``--key-column`` a record goes to Kafka's murmur2 partition of its key
(``_partitioner``), so equal keys share a partition; without either, or for
a null key, records are spread round-robin.

The rows go through the ``llog`` data source's writer
(``df.write.format("llog")``, :mod:`server.spark.datasource`): each Spark
task gets its slice as Arrow batches, assigns partitions, and hands the
records to a :class:`~server.client.TaskProducer`: bounded
multi-partition requests, a stable broker per partition with fallback,
retries for 503/409-retriable/connection failures. Delivery is **exactly
once** (``exactly_once``, the default): each task is an idempotent producer
(SPEC 7.12) named by the job's write and the task's partition, so a batch
whose outcome was unknown (``OutcomeUnknown``, a 504, a lost answer) and the
rows of a retried Spark task are sent again and recognized as duplicates;
the summary counts them (``duplicate_records``). This holds when Spark
feeds a retried task the same rows in the same order (a deterministic
input, as Spark's own exactly-once file sinks require). With
``--exactly-once false`` it is at least once: such batches may then be in
the log twice (``unknown_records`` bounds that when no task failed).

Progress: every ``--progress-interval-s`` the driver prints a line with the
records and bytes acknowledged so far; tasks report them over a best-effort
UDP datagram to the driver (lost datagrams only delay the line). The final
summary (printed, and with ``--summary-json`` written as JSON) comes from
the tasks' own results, not from the datagrams.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, NamedTuple, Sequence

if __package__ in (None, ""):  # run as a script (spark-submit server/spark/produce_job.py)
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from server._errors import ConfigError, LlogError
from server._protocol.keys import validate_topic
from server._settings import same_as
from server.client import (
    BrokerUnreachable,
    ProduceError,
    ProducerConfig,
    ProduceStats,
    check_brokers,
    parse_broker_list,
)

# Loading the input and reporting progress live in private modules; their
# names stay importable from here.
from server.spark._job_input import (  # noqa: F401
    _COMPRESSION,
    _ERROR_LINE,
    _EXTENSIONS,
    FORMATS,
    KEY_COL,
    VALUE_COL,
    _as_key,
    _as_value,
    _column,
    _first_line,
    _JsonLines,
    _spark_error_line,
    infer_format,
    load_input,
    prepare_records,
)
from server.spark._job_progress import _ProgressMonitor
from server.spark._options import PRODUCER_SETTINGS
from server.spark._session import ship_code, spark_session

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "ProduceOptions",
    "ProduceSummary",
    "PartitionRange",
    "ProduceJobFailed",
    "run_produce_job",
    "load_input",
    "prepare_records",
    "spark_session",
    "main",
]

log = logging.getLogger(__name__)


class ProduceJobFailed(ProduceError):
    """A Spark task of the produce job failed; the message carries the task's error."""


# -- options and summary ---------------------------------------------------------------


@dataclass(frozen=True)
class ProduceOptions:
    """Options of one produce job. Validated on construction (ConfigError)."""

    topic: str
    brokers: tuple[str, ...]
    """Broker URLs (``http://host:port``); a comma-separated string is accepted."""
    partitions: int = 1
    """Partition count: records go to partitions 0..partitions-1."""
    key_column: str | None = None
    value_column: str | None = None
    """Default: the whole row as JSON text."""
    timestamp_column: str | None = None
    headers_column: str | None = None
    partition_column: str | None = None
    input_format: str | None = None
    """json | csv | parquet | text; default: from the input's extension."""
    max_request_bytes: int = same_as(ProducerConfig, "max_request_bytes")
    max_request_records: int = same_as(ProducerConfig, "max_request_records")
    max_retries: int = same_as(ProducerConfig, "max_retries")
    max_in_flight: int = same_as(ProducerConfig, "max_in_flight")
    """Concurrent requests per Spark task."""
    body: str = same_as(ProducerConfig, "body")
    max_batch_bytes: int = same_as(ProducerConfig, "max_batch_bytes")
    exactly_once: bool = same_as(ProducerConfig, "exactly_once")
    """The client's settings (:data:`PRODUCER_SETTINGS`): declared, with their
    defaults and bounds, once on :class:`ProducerConfig`."""
    csv_header: bool = True
    progress_interval_s: float = 5.0

    def __post_init__(self) -> None:
        try:
            validate_topic(self.topic)
        except LlogError as exc:
            raise ConfigError(f"--topic: {exc}") from None
        brokers = self.brokers.split(",") if isinstance(self.brokers, str) else self.brokers
        object.__setattr__(self, "brokers", tuple(b.url for b in parse_broker_list(brokers)))
        if isinstance(self.partitions, bool) or not isinstance(self.partitions, int) or self.partitions < 1:
            raise ConfigError(f"--partitions must be an integer >= 1, got {self.partitions!r}")
        if self.input_format is not None and self.input_format not in FORMATS:
            raise ConfigError(f"unknown input format {self.input_format!r}; use one of {', '.join(FORMATS)}")
        if self.progress_interval_s <= 0:
            raise ConfigError("progress_interval_s must be > 0")
        self.producer_config()  # validates the request limits

    def producer_config(self) -> ProducerConfig:
        settings = {d.name: getattr(self, d.name) for d in PRODUCER_SETTINGS.declared()}
        return ProducerConfig(brokers=parse_broker_list(self.brokers), **settings)


class PartitionRange(NamedTuple):
    """Offsets acknowledged to this job in one partition."""

    first_offset: int
    """Lowest acknowledged offset (inclusive)."""
    last_offset: int
    """Highest acknowledged offset (inclusive). Other writers' records may lie in between."""
    records: int
    """Records this job had acknowledged in the partition."""


@dataclass(frozen=True)
class ProduceSummary:
    """What a finished produce job did: its tasks' counters summed
    (``stats``: records and bytes acknowledged, requests, retries, unknown
    outcomes, acknowledged ranges per partition) and the job's own figures."""

    topic: str
    rows_read: int
    duration_s: float
    tasks: int
    stats: ProduceStats
    exactly_once: bool = True
    """Each task an idempotent producer (the records sent again were stored once)."""

    @property
    def partitions(self) -> dict[int, PartitionRange]:
        """Offsets acknowledged to this job, per partition."""
        return {p: PartitionRange(*r) for p, r in sorted(self.stats.ranges.items())}

    @property
    def mb_per_s(self) -> float:
        return self.stats.bytes_acked / 1e6 / self.duration_s if self.duration_s > 0 else 0.0

    @property
    def rows_per_s(self) -> float:
        return self.stats.records_acked / self.duration_s if self.duration_s > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        counters = self.stats.to_json()
        del counters["ranges"]
        return {
            "topic": self.topic,
            "rows_read": self.rows_read,
            **counters,
            "duration_s": round(self.duration_s, 3),
            "mb_per_s": round(self.mb_per_s, 3),
            "rows_per_s": round(self.rows_per_s, 1),
            "tasks": self.tasks,
            "delivery": "exactly-once" if self.exactly_once else "at-least-once",
            "partitions": {
                str(p): {"first_offset": r.first_offset, "last_offset": r.last_offset, "records": r.records}
                for p, r in self.partitions.items()
            },
        }

    def format(self) -> str:
        st = self.stats
        lines = [
            f"produce job summary: topic {self.topic}",
            f"  rows read            {self.rows_read:,}",
            f"  records acknowledged {st.records_acked:,} ({st.bytes_acked / 1e6:,.2f} MB payload)",
            f"  requests             {st.requests:,} ({st.retries:,} retries, "
            f"{st.retried_batches:,} retried batches, {st.retried_records:,} records re-sent)",
            f"  unknown outcomes     {st.unknown_batches:,} batches, {st.unknown_records:,} records re-sent "
            + ("(idempotent: stored once)" if self.exactly_once else "(at-least-once: these may appear twice)"),
            f"  duplicates dropped   {st.duplicate_batches:,} batches, {st.duplicate_records:,} records "
            "(sent again, stored once)",
            f"  duration             {self.duration_s:.2f} s  "
            f"({self.rows_per_s:,.0f} rows/s, {self.mb_per_s:.2f} MB/s)",
            f"  tasks                {self.tasks}",
            "  acknowledged offsets per partition (inclusive):",
        ]
        for p, r in self.partitions.items():
            lines.append(f"    {p:>5}: {r.first_offset}..{r.last_offset} ({r.records:,} records)")
        return "\n".join(lines)


# -- the driver side ------------------------------------------------------------------------------


def run_produce_job(
    spark: SparkSession,
    source: DataFrame | str | Sequence[str],
    options: ProduceOptions,
    *,
    progress: Callable[[str], None] | None = None,
) -> ProduceSummary:
    """Produce every row of ``source`` (a DataFrame, or input path(s)/glob(s))
    to ``options.topic``; returns the summary. ``progress`` gets a line every
    ``options.progress_interval_s`` (default: printed to stderr).

    Every check that can fail without sending (options, input readable,
    columns present, at least one broker answering /health) runs first and
    raises ConfigError / BrokerUnreachable; a failed task raises
    ProduceJobFailed naming the broker, topic-partition and last error.

    The rows go through ``df.write.format("llog")`` (the same writer users
    call), with two internal options: where tasks send progress datagrams
    and the file the writer's driver-side commit leaves the totals in.
    """
    from pyspark.sql import DataFrame

    from server.spark.datasource import register

    started = time.monotonic()  # the summary's duration covers reading the input too
    emit = progress or (lambda line: print(line, file=sys.stderr, flush=True))
    if isinstance(source, DataFrame):
        prepared = prepare_records(source, options, "dataframe")
    else:
        df, fmt = load_input(spark, source, options.input_format, csv_header=options.csv_header)
        prepared = prepare_records(df, options, fmt)
    _require_a_broker(options)
    register(spark)

    group = f"llog-produce-{uuid.uuid4().hex[:8]}"
    sc = spark.sparkContext
    workdir = Path(tempfile.mkdtemp(prefix="llog-produce-"))
    summary_path = workdir / "totals.json"
    monitor = _ProgressMonitor(spark, group, options.progress_interval_s, emit)
    writer = _llog_writer(prepared, options, f"{monitor.addr[0]}:{monitor.addr[1]}", summary_path)
    try:
        _save_as_job(sc, group, writer, options, monitor)
        duration = time.monotonic() - started
        totals = json.loads(summary_path.read_text())
    finally:
        monitor.close()
        shutil.rmtree(workdir, ignore_errors=True)
    summary = ProduceSummary(
        topic=options.topic, rows_read=totals["rows"], duration_s=duration, tasks=totals["tasks"],
        stats=ProduceStats.from_json(totals["stats"]), exactly_once=options.exactly_once,
    )
    if summary.stats.records_acked != summary.rows_read:  # only a bug could do this; never report it as success
        raise ProduceJobFailed(
            f"{summary.rows_read} rows read but {summary.stats.records_acked} records acknowledged",
            topic=options.topic,
        )
    return summary


def _save_as_job(sc, group: str, writer, options: ProduceOptions, monitor: _ProgressMonitor) -> None:
    """Run the write as one Spark job group; a failed task becomes
    ProduceJobFailed naming its error."""
    try:
        sc.setJobGroup(group, f"llog produce job -> {options.topic}")
        try:
            writer.save()
        finally:
            sc.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
            sc.setLocalProperty("spark.job.description", None)  # type: ignore[arg-type]
    except Exception as exc:
        if isinstance(exc, LlogError):
            raise
        records = monitor.totals()[0]
        raise ProduceJobFailed(
            f"the produce job failed: {_spark_error_line(str(exc))} (about {records:,} records were "
            "acknowledged before the failure; re-running the job is a new write and appends them again)",
            topic=options.topic,
        ) from exc


def _llog_writer(prepared: DataFrame, options: ProduceOptions, progress_address: str, summary_path: Path):
    """``prepared.write`` to the ``llog`` format with the job's options, plus
    where tasks send progress datagrams and the writer leaves the totals."""
    writer = (
        prepared.write.format("llog").mode("append")
        .option("topic", options.topic)
        .option("brokers", ",".join(options.brokers))
        .option("partitions", str(options.partitions))
        .option("_progressAddress", progress_address)
        .option("_summaryPath", str(summary_path))
    )
    for d in PRODUCER_SETTINGS.declared():
        writer = writer.option(d.setting.option, str(getattr(options, d.name)))
    return writer


def _require_a_broker(options: ProduceOptions) -> None:
    health = check_brokers(parse_broker_list(options.brokers))
    if all(err is not None for err in health.values()):
        detail = "; ".join(f"{url}: {err}" for url, err in health.items())
        raise BrokerUnreachable(
            "no broker answers GET /health", broker=", ".join(health), topic=options.topic,
            partition=-1, last_error=detail, attempts=1,
        )
    for url, err in health.items():
        if err is not None:
            log.warning("broker %s is not answering (%s); its partitions go to the others", url, err)


# -- CLI -------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m server.spark.produce_job",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Feed a data set to llog brokers as POST /produce requests (PySpark).",
        epilog=(
            "Delivery is exactly once: when the job succeeds every row is in the log once, also\n"
            "when a reply was lost, a broker died or Spark retried a task (each task is an idempotent\n"
            "producer; the summary counts the duplicates dropped). That needs Spark to feed a retried\n"
            "task the same rows in the same order (a deterministic input). --no-exactly-once: at least\n"
            "once (brokers without POST /producers). Exit status: 0 done, 1 produce failed, 2 bad\n"
            "options or input.\n\n"
            "Also runs as: PYSPARK_PYTHON=python spark-submit server/spark/produce_job.py ..."
        ),
    )
    p.add_argument("input", nargs="+", help="input path(s) or glob(s): JSON lines, CSV, Parquet or text")
    p.add_argument("--topic", required=True, help="topic to produce to")
    p.add_argument("--partitions", type=int, default=1, help="partition count (default 1)")
    p.add_argument(
        "--key-column", help="column stored as the record's key; it picks the partition (Kafka murmur2) "
        "unless --partition-column is given; default: no key, spread evenly"
    )
    p.add_argument("--value-column", help="column sent as the record (default: the whole row as JSON text)")
    p.add_argument("--timestamp-column", help="column holding each record's timestamp (default: when sent)")
    p.add_argument("--headers-column",
                   help="column holding each record's headers: map<string,string> or array<struct<key,value>>")
    p.add_argument("--partition-column", help="column holding each record's partition (default: by key or spread)")
    p.add_argument(
        "--brokers", action="append", required=True,
        help="broker URL(s), comma-separated or repeated, e.g. http://127.0.0.1:8080",
    )
    p.add_argument("--format", choices=FORMATS, help="input format (default: from the extension)")
    PRODUCER_SETTINGS.add_to(p.add_argument_group("requests (per Spark task)"))
    p.add_argument("--no-csv-header", action="store_true", help="CSV input has no header line")
    p.add_argument("--master", help="Spark master (default local[*], or what spark-submit sets)")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark configuration")
    p.add_argument("--summary-json", type=Path, help="also write the summary as JSON to this file")
    p.add_argument("--progress-interval-s", type=float, default=5.0, help="seconds between progress lines (default 5)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args = parse_args(argv)
    try:
        options = ProduceOptions(
            topic=args.topic,
            brokers=tuple(b for arg in args.brokers for b in arg.split(",")),
            partitions=args.partitions,
            key_column=args.key_column,
            value_column=args.value_column,
            timestamp_column=args.timestamp_column,
            headers_column=args.headers_column,
            partition_column=args.partition_column,
            input_format=args.format,
            csv_header=not args.no_csv_header,
            progress_interval_s=args.progress_interval_s,
            **PRODUCER_SETTINGS.values(args),
        )
        conf = {}
        for item in args.conf:
            k, sep, v = item.partition("=")
            if not sep:
                raise ConfigError(f"--conf wants KEY=VALUE, got {item!r}")
            conf[k] = v
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    spark = spark_session("llog-produce-job", args.master, conf)
    try:
        spark.sparkContext.setLogLevel("ERROR")
        ship_code(spark)
        summary = run_produce_job(spark, args.input, options)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except LlogError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        spark.stop()
    print(summary.format())
    if args.summary_json:
        args.summary_json.parent.mkdir(parents=True, exist_ok=True)
        args.summary_json.write_text(json.dumps(summary.to_json(), indent=2) + "\n")
        print(f"summary written to {args.summary_json}")
    return 0


if __name__ == "__main__":
    from server.spark.produce_job import main as _main  # the package module, so tasks unpickle by reference

    sys.exit(_main())
