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
path). Schema ``topic string, partition int, offset long, value binary``.
The driver snapshots each partition's high watermark when the read is
planned; one input partition per (topic-partition, chunk of at most
``maxRecordsPerPartition`` offsets), so a large partition is read in
parallel. Input partitions carry only topic, partition and an offset range;
the reader object carries the resolved storage settings, and each Python
worker opens its clients inside ``read()`` (once per worker process, then
reused by the worker's later tasks).

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
brokers with the produce job's client (:mod:`server.spark._http_client`):
column ``value`` (string or binary) is the record; an integer ``partition``
column places it explicitly, else a ``key`` column (string or binary) picks
Kafka's murmur2 partition, else records are spread evenly over
``partitions``. Other columns (``topic``, ``offset`` ...) are ignored: the
``topic`` option names the destination. At-least-once, like the produce job.

Options (case-insensitive):

=================================  =============================================================
``topic``                          required
``partitions``                     read: partitions to read, ``"0,1,5"`` or ``[0, 1, 5]``
                                   (default: every initialized one). write: the partition
                                   count (needed without a ``partition`` column)
``startingOffsets``                ``earliest`` (batch default), ``latest`` (stream default),
                                   or JSON ``{"0": 5, "1": "earliest"}``: first offset to
                                   read, inclusive; partitions not named use the default
``endingOffsets``                  batch only: ``latest`` (default) or JSON
                                   ``{"0": 100, "1": "latest"}``: last offset, inclusive
``maxRecordsPerPartition``         offsets per input partition (default 50000)
``maxRecordsPerTrigger``           stream: most records per micro-batch (default: all)
``partitionDiscoveryIntervalMs``   stream: how often new partitions are looked for
                                   (default 10000; 0 = every micro-batch)
``oxia.serviceAddress``            ... and ``oxia.namespace``, ``rootPrefix``,
                                   ``s3.endpoint``, ``s3.region``, ``s3.accessKeyId``,
                                   ``s3.secretAccessKey``, ``s3.sessionToken``: where the
                                   log lives; each falls back to its ``LLOG_*`` variable
                                   in the driver's environment
``brokers``                        write: broker URLs, comma-separated
``maxRequestBytes``                write: as the produce job's ``--max-request-bytes``
                                   (and ``maxRequestRecords``, ``maxRetries``,
                                   ``maxInFlight``)
=================================  =============================================================

Offsets are inclusive and start at 1, as everywhere in llog; an explicit
offset outside ``[1, high watermark + 1]`` is an error at planning time.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import socket
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Sequence

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from .._config import OxiaConfig, S3Config
from .._errors import ConfigError, InconsistentReadState, LlogError, PartitionNotInitialized
from .._keys import LogLayout, validate_topic
from ._http_client import (
    MIB,
    ProducerConfig,
    ProduceStats,
    TaskProducer,
    encode_binary_records,
    encode_text_records,
    parse_broker_list,
)
from ._partitioner import KeyPartitioner

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

    from ..leaderless_log_reader import LeaderlessLogReader

__all__ = ["LlogDataSource", "register", "SCHEMA", "OffsetRange", "parse_offsets", "produce_arrow_batches"]

log = logging.getLogger(__name__)

SCHEMA = "topic string, partition int, offset long, value binary"
DEFAULT_CHUNK_RECORDS = 50_000
ARROW_BATCH_RECORDS = 4096
ARROW_BATCH_BYTES = 8 * MIB

_STORAGE_OPTIONS = {
    "oxia.serviceaddress": "LLOG_OXIA_SERVICE_ADDRESS",
    "oxia.namespace": "LLOG_OXIA_NAMESPACE",
    "rootprefix": "LLOG_ROOT_PREFIX",
    "s3.endpoint": "LLOG_S3_ENDPOINT_URL",
    "s3.region": "LLOG_S3_REGION_NAME",
    "s3.accesskeyid": "LLOG_S3_ACCESS_KEY_ID",
    "s3.secretaccesskey": "LLOG_S3_SECRET_ACCESS_KEY",
    "s3.sessiontoken": "LLOG_S3_SESSION_TOKEN",
}
_ENV_PREFIXES = ("LLOG_", "AWS_")


def register(spark: SparkSession) -> None:
    """Register the ``llog`` format with ``spark``."""
    spark.dataSource.register(LlogDataSource)


# -- options -------------------------------------------------------------------------------


def _opt(options: Mapping[str, str], name: str, default: str | None = None) -> str | None:
    low = name.lower()
    for k, v in options.items():
        if k.lower() == low:
            return None if v is None else str(v)
    return default


def _int_opt(options: Mapping[str, str], name: str, default: int | None, minimum: int = 1) -> int | None:
    raw = _opt(options, name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"option {name} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise ConfigError(f"option {name} must be >= {minimum}, got {value}")
    return value


def _topic(options: Mapping[str, str]) -> str:
    topic = _opt(options, "topic")
    if not topic:
        raise ConfigError('option "topic" is required: .option("topic", "orders")')
    try:
        return validate_topic(topic)
    except LlogError as exc:
        raise ConfigError(f"option topic: {exc}") from None


def _partition_list(options: Mapping[str, str]) -> list[int] | None:
    raw = _opt(options, "partitions")
    if raw is None or not raw.strip():
        return None
    text = raw.strip()
    try:
        items = json.loads(text) if text.startswith("[") else [p for p in text.split(",") if p.strip()]
        parts = sorted({int(p) for p in items})
    except (ValueError, TypeError):
        raise ConfigError(f'option partitions must look like "0,1,5" or [0, 1, 5], got {raw!r}') from None
    if not parts or parts[0] < 0:
        raise ConfigError(f"option partitions must list partition numbers >= 0, got {raw!r}")
    return parts


def storage_env(options: Mapping[str, str], environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``LLOG_*``/``AWS_*`` settings: the options first, then the environment.
    Validated here (ConfigError), on the driver."""
    environ = os.environ if environ is None else environ
    env = {k: v for k, v in environ.items() if k.startswith(_ENV_PREFIXES)}
    for opt, var in _STORAGE_OPTIONS.items():
        value = _opt(options, opt)
        if value is not None and value.strip():
            env[var] = value.strip()
    try:
        OxiaConfig.from_env(env)
        S3Config.from_env(env)
    except ConfigError as exc:
        raise ConfigError(f"{exc} (or set option oxia.serviceAddress / s3.endpoint ...)") from None
    return env


def parse_offsets(
    raw: str | None, name: str, *, default: str, allowed: Sequence[str]
) -> tuple[str, dict[int, int | str]]:
    """``(mode, per_partition)``. A plain ``earliest``/``latest`` is the mode
    for every partition; a JSON object (``{"0": 5, "1": "earliest"}``: ints
    >= 1 or one of ``allowed``) names some partitions, the rest get ``default``."""
    text = (raw if raw is not None else default).strip()
    if not text.startswith("{"):
        if text.lower() in allowed:
            return text.lower(), {}
        raise ConfigError(
            f"option {name} must be {' or '.join(allowed)} or a JSON object like "
            f'{{"0": 5, "1": "{allowed[0]}"}}, got {text!r}'
        )
    try:
        obj = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"option {name} is not valid JSON ({exc}): {text!r}") from None
    if not isinstance(obj, dict):
        raise ConfigError(f"option {name} must be a JSON object of partition -> offset, got {text!r}")
    out: dict[int, int | str] = {}
    for k, v in obj.items():
        try:
            p = int(k)
            if p < 0 or str(p) != k.strip():
                raise ValueError
        except ValueError:
            raise ConfigError(f"option {name}: {k!r} is not a partition number") from None
        if isinstance(v, str) and v.lower() in allowed:
            out[p] = v.lower()
        elif isinstance(v, int) and not isinstance(v, bool) and v >= 1:
            out[p] = v
        else:
            raise ConfigError(
                f"option {name}: partition {p} has {v!r}; use an offset >= 1 (offsets start at 1) "
                f"or {' / '.join(repr(a) for a in allowed)}"
            )
    return default, out


# -- clients -----------------------------------------------------------------------------------


_clients: dict[tuple, LeaderlessLogReader] = {}
_clients_lock = threading.Lock()


def _reader_for(env: Mapping[str, str]) -> LeaderlessLogReader:
    """A reader for these settings, shared by the tasks of this Python worker
    (opening an Oxia client costs a few hundred milliseconds)."""
    from ..leaderless_log_reader import LeaderlessLogReader

    key = tuple(sorted(env.items()))
    with _clients_lock:
        reader = _clients.get(key)
        if reader is None:
            reader = _clients[key] = LeaderlessLogReader.from_env(env)
        return reader


@atexit.register
def _close_clients() -> None:
    with _clients_lock:
        readers = list(_clients.values())
        _clients.clear()
    for r in readers:
        try:
            r.close()
        except Exception:
            pass


class _NoObjects:
    """An object store for metadata-only readers: planning needs high
    watermarks, never record bytes, and skipping the S3 client saves its
    start-up on every query plan."""

    def _refuse(self, *args: object, **kwargs: object) -> None:
        raise AssertionError("the planning reader does not read objects")

    put = get = list = delete_many = _refuse

    def close(self) -> None:
        pass


class _Log:
    """Driver-side, metadata-only access: partition discovery and high watermarks."""

    def __init__(self, env: Mapping[str, str]) -> None:
        from .._metastore import OxiaMetadataStore
        from ..leaderless_log_reader import LeaderlessLogReader

        oxia = OxiaConfig.from_env(env)
        self.layout = LogLayout(oxia.root_prefix)
        self.meta = OxiaMetadataStore(oxia)
        self.reader = LeaderlessLogReader(oxia, metadata_store=self.meta, object_store=_NoObjects())

    def __enter__(self) -> _Log:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.reader.close()
        self.meta.close()

    def partitions(self, topic: str) -> list[int]:
        """Every initialized partition of ``topic`` (one listing across shards).

        Lists the topic's whole key range and keeps the ``meta/control`` keys;
        the range also holds the index keys, which compaction keeps few."""
        base = f"{self.layout.root}/{topic}/partitions/"
        keys = self.meta.list_keys(base, f"{base}~/", partition_key=None)
        tps = (self.layout.parse_control_key(k) for k in keys)
        return sorted({tp.partition for tp in tps if tp is not None and tp.topic == topic})

    def high_watermark(self, topic: str, partition: int) -> int | None:
        """The last offset, or None for a partition that was never written."""
        try:
            return self.reader.high_watermark(topic, partition)
        except PartitionNotInitialized:
            return None


# -- input partitions and reading ----------------------------------------------------------------


@dataclass(frozen=True)
class OffsetRange(InputPartition):
    """One input partition: offsets ``start..end`` (inclusive) of one topic-partition."""

    topic: str
    partition: int
    start: int
    end: int


def _chunks(topic: str, partition: int, start: int, end: int, size: int) -> list[OffsetRange]:
    return [OffsetRange(topic, partition, s, min(end, s + size - 1)) for s in range(start, end + 1, size)]


def read_range(env: Mapping[str, str], part: OffsetRange) -> Iterator[pa.RecordBatch]:
    """The records of ``part`` as Arrow batches of the data source's schema."""
    import pyarrow as pa

    schema = pa.schema([
        ("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()), ("value", pa.binary()),
    ])
    reader = _reader_for(env)
    offsets: list[int] = []
    values: list[bytes] = []
    nbytes = 0
    expected = part.start

    def batch() -> pa.RecordBatch:
        n = len(offsets)
        return pa.RecordBatch.from_arrays(
            [
                pa.array([part.topic] * n, pa.string()),
                pa.array([part.partition] * n, pa.int32()),
                pa.array(offsets, pa.int64()),
                pa.array(values, pa.binary()),
            ],
            schema=schema,
        )

    for rec in reader.iter_from(part.topic, part.partition, part.start, part.end):
        if rec.offset != expected:
            raise InconsistentReadState(
                f"expected offset {expected}, read {rec.offset}", topic=part.topic, partition=part.partition,
            )
        expected += 1
        offsets.append(rec.offset)
        values.append(rec.payload)
        nbytes += len(rec.payload)
        if len(offsets) >= ARROW_BATCH_RECORDS or nbytes >= ARROW_BATCH_BYTES:
            yield batch()
            offsets, values, nbytes = [], [], 0
    if offsets:
        yield batch()
    if expected != part.end + 1:
        raise InconsistentReadState(
            f"read offsets {part.start}..{expected - 1}, wanted up to {part.end}",
            topic=part.topic, partition=part.partition,
        )


# -- batch read ------------------------------------------------------------------------------------


class LlogBatchReader(DataSourceReader):
    """Plans on the driver (high watermarks snapshotted once), reads on the executors."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.topic = _topic(options)
        self.env = storage_env(options)
        chosen = _partition_list(options)
        start_mode, start_at = parse_offsets(
            _opt(options, "startingOffsets"), "startingOffsets", default="earliest", allowed=("earliest", "latest")
        )
        end_mode, end_at = parse_offsets(
            _opt(options, "endingOffsets"), "endingOffsets", default="latest", allowed=("latest",)
        )
        chunk = _int_opt(options, "maxRecordsPerPartition", DEFAULT_CHUNK_RECORDS)
        with _Log(self.env) as lg:
            if chosen is None:
                chosen = lg.partitions(self.topic)
                if not chosen:
                    raise ConfigError(
                        f"topic {self.topic!r} has no initialized partitions under root prefix "
                        f"{lg.layout.root!r}; nothing to read"
                    )
            for name, named in (("startingOffsets", start_at), ("endingOffsets", end_at)):
                extra = sorted(set(named) - set(chosen))
                if extra:
                    raise ConfigError(f"{name} names partition(s) {extra}, which are not read (reading {chosen})")
            watermarks = {p: lg.high_watermark(self.topic, p) for p in chosen}
            missing = [p for p, hw in watermarks.items() if hw is None]
            if missing:
                raise ConfigError(
                    f"partition(s) {missing} of topic {self.topic!r} are not initialized "
                    f"(initialized: {lg.partitions(self.topic) or 'none'})"
                )
            self.ranges: list[OffsetRange] = []
            for p in chosen:
                hw = watermarks[p] or 0
                s = _resolve(start_at.get(p, start_mode), hw, "startingOffsets", p)
                e = _resolve_end(end_at.get(p, end_mode), hw, p)
                if s > e + 1:
                    raise ConfigError(
                        f"partition {p}: startingOffsets {s} is after endingOffsets {e} (inclusive bounds)"
                    )
                self.ranges.extend(_chunks(self.topic, p, s, e, chunk))

    def partitions(self) -> Sequence[InputPartition]:
        return self.ranges

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, OffsetRange):  # Spark's placeholder when there is nothing to read
            return iter(())
        return read_range(self.env, partition)


def _resolve(spec: int | str | None, hw: int, name: str, partition: int) -> int:
    """A starting offset: earliest -> 1, latest -> hw + 1, an int within [1, hw + 1]."""
    if spec == "earliest":
        return 1
    if spec == "latest":
        return hw + 1
    assert isinstance(spec, int)
    if spec > hw + 1:
        raise ConfigError(
            f"{name} for partition {partition} is {spec}, past the high watermark {hw} "
            f"(the next offset to be written is {hw + 1})"
        )
    return spec


def _resolve_end(spec: int | str | None, hw: int, partition: int) -> int:
    if spec == "latest":
        return hw
    assert isinstance(spec, int)
    if spec > hw:
        raise ConfigError(f"endingOffsets for partition {partition} is {spec}, past the high watermark {hw}")
    return spec


# -- streaming read ----------------------------------------------------------------------------------


class LlogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets ``{"<topic>": {"<partition>": next_offset}}``; see the module docstring."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.topic = _topic(options)
        self.env = storage_env(options)
        self.fixed = _partition_list(options)
        self.start_mode, self.start_at = parse_offsets(
            _opt(options, "startingOffsets"), "startingOffsets", default="latest", allowed=("earliest", "latest")
        )
        if _opt(options, "endingOffsets") is not None:
            raise ConfigError("endingOffsets is for batch reads; a stream follows the log")
        if self.fixed is not None:
            extra = sorted(set(self.start_at) - set(self.fixed))
            if extra:
                raise ConfigError(f"startingOffsets names partition(s) {extra}, which are not read ({self.fixed})")
        self.chunk = _int_opt(options, "maxRecordsPerPartition", DEFAULT_CHUNK_RECORDS)
        self.max_per_trigger = _int_opt(options, "maxRecordsPerTrigger", None)
        self.discovery_interval_s = (_int_opt(options, "partitionDiscoveryIntervalMs", 10_000, 0) or 0) / 1000.0
        self._target: dict[int, int] | None = None
        self._log: _Log | None = None
        self._known: list[int] = []
        self._listed_at = float("-inf")

    def __getstate__(self) -> dict[str, Any]:  # executors get settings, never open clients
        state = dict(self.__dict__)
        state["_log"] = None
        return state

    def _lg(self) -> _Log:
        if self._log is None:
            self._log = _Log(self.env)
        return self._log

    def _partitions(self) -> list[int]:
        """The fixed list, or the topic's partitions re-listed at most every
        ``partitionDiscoveryIntervalMs`` (the listing covers the index keys too)."""
        if self.fixed is not None:
            return self.fixed
        now = time.monotonic()
        if now - self._listed_at >= self.discovery_interval_s:
            self._known = self._lg().partitions(self.topic)
            self._listed_at = now
        return self._known

    def _available(self) -> dict[int, int]:
        """partition -> next offset to be written (high watermark + 1)."""
        lg = self._lg()
        return {p: (lg.high_watermark(self.topic, p) or 0) + 1 for p in self._partitions()}

    def _wrap(self, nexts: Mapping[int, int]) -> dict:
        return {self.topic: {str(p): int(nexts[p]) for p in sorted(nexts)}}

    def _unwrap(self, offset: Mapping[str, Any]) -> dict[int, int]:
        if set(offset) != {self.topic}:
            raise ConfigError(
                f"the checkpoint's offsets are for topic(s) {sorted(offset)}, this query reads {self.topic!r}; "
                "use a new checkpointLocation"
            )
        return {int(p): int(n) for p, n in offset[self.topic].items()}

    def initialOffset(self) -> dict:
        avail = self._available()
        for p in self.start_at:
            avail.setdefault(p, 1)
        start = {
            p: _resolve(self.start_at.get(p, self.start_mode), nxt - 1, "startingOffsets", p)
            for p, nxt in avail.items()
        }
        return self._wrap(start)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = self._unwrap(start)
        avail = self._available()
        if self._target is not None:
            avail = {p: min(n, self._target.get(p, 1)) for p, n in avail.items()}
        end = {p: max(begin.get(p, 1), n) for p, n in avail.items()}
        for p, n in begin.items():  # a partition dropped from the listing keeps its position
            end.setdefault(p, n)
        cap = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        if cap is not None:
            end = _cap(begin, end, cap)
        return self._wrap(end)

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_per_trigger) if self.max_per_trigger else ReadAllAvailable()

    def reportLatestOffset(self) -> dict | None:
        return self._wrap(self._available())

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._available()

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        begin, stop = self._unwrap(start), self._unwrap(end)
        out: list[OffsetRange] = []
        for p, nxt in sorted(stop.items()):
            first = begin.get(p, 1)
            if nxt > first:
                out.extend(_chunks(self.topic, p, first, nxt - 1, self.chunk))
        return out

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, OffsetRange):  # Spark's placeholder when there is nothing to read
            return iter(())
        return read_range(self.env, partition)

    def commit(self, end: dict) -> None:
        """Nothing to do: the log keeps no consumer state."""

    def stop(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


def _cap(begin: Mapping[int, int], end: dict[int, int], cap: int) -> dict[int, int]:
    """Move at most ``cap`` records past ``begin``, shared fairly (water-filling)."""
    want = {p: end[p] - begin.get(p, 1) for p in end}
    give = {p: 0 for p in end}
    left = cap
    open_ = [p for p in sorted(want) if want[p] > 0]
    while left > 0 and open_:
        share = max(1, left // len(open_))
        for p in list(open_):
            take = min(share, want[p] - give[p], left)
            give[p] += take
            left -= take
            if give[p] >= want[p]:
                open_.remove(p)
            if left <= 0:
                break
    return {p: begin.get(p, 1) + give[p] if want[p] > 0 else end[p] for p in end}


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
    import pyarrow as pa

    partitioner = KeyPartitioner(partitions or 1, start=task_index)
    rows = 0
    with TaskProducer(topic, config, on_progress=on_progress) as producer:
        for batch in batches:
            if batch.num_rows == 0:
                continue
            col = batch.column(batch.schema.get_field_index(value_column))
            if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
                frags, sizes = encode_text_records(col.to_pylist())
            elif pa.types.is_binary(col.type) or pa.types.is_large_binary(col.type):
                frags, sizes = encode_binary_records(col.to_pylist())
            else:
                raise ValueError(f"column {value_column!r} must be string or binary, got {col.type}")
            if partition_column is not None:
                parts = batch.column(batch.schema.get_field_index(partition_column)).to_pylist()
                for i, p in enumerate(parts):
                    if p is None or p < 0 or (partitions is not None and p >= partitions):
                        bound = f"0..{partitions - 1}" if partitions is not None else ">= 0"
                        raise ValueError(f"row {rows + i} of the task has partition {p!r}; it must be {bound}")
            elif key_column is not None:
                parts = partitioner.assign(batch.column(batch.schema.get_field_index(key_column)).to_pylist())
            else:
                parts = partitioner.spread(batch.num_rows)
            producer.add(parts, frags, sizes)
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
        self.config = ProducerConfig(
            brokers=parse_broker_list(brokers),
            max_request_bytes=_int_opt(options, "maxRequestBytes", 4 * MIB, 1024),
            max_request_records=_int_opt(options, "maxRequestRecords", 50_000),
            max_retries=_int_opt(options, "maxRetries", 10, 0),
            max_in_flight=_int_opt(options, "maxInFlight", 4),
        )
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
            "llog write to %s: %d rows, %d records acknowledged, %d requests, %d retried batches",
            self.topic, rows, total.records_acked, total.requests, total.retried_batches,
        )

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        rows, tasks, total = self._totals(messages)
        self._leave_summary(rows, tasks, total, ok=False)
        log.warning(
            "llog write to %s failed; %d rows of completed tasks stay written (at-least-once: "
            "re-running the write appends them again)", self.topic, rows,
        )


# -- the data source ------------------------------------------------------------------------------------


class LlogDataSource(DataSource):
    """Format ``llog``: batch and streaming reads from Oxia + S3, writes through the brokers."""

    @classmethod
    def name(cls) -> str:
        return "llog"

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return LlogBatchReader(self.options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return LlogStreamReader(self.options)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        if overwrite:
            raise ConfigError('llog is an append-only log: use .mode("append"), not overwrite')
        return LlogWriter(self.options, schema)
