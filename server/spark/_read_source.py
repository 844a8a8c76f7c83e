"""Batch read of the ``llog`` data source: straight from Oxia + S3, one input
partition (:class:`OffsetRange`) per chunk of a topic-partition's offsets
(see :mod:`server.spark.datasource`)."""

from __future__ import annotations

import atexit
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Sequence

from pyspark.sql.datasource import DataSourceReader, InputPartition

from .._config import OxiaConfig
from .._errors import ConfigError, PartitionNotInitialized
from .._protocol.keys import LogLayout
from ..client import MIB
from ._options import (
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
from ._worker_heap import freeze_long_lived

if TYPE_CHECKING:
    import pyarrow as pa

    from .._log.reader import LeaderlessLogReader

__all__ = ["LlogBatchReader", "OffsetRange", "read_range"]


DEFAULT_CHUNK_RECORDS = 50_000
ARROW_BATCH_RECORDS = 10_000  # Spark's default spark.sql.execution.arrow.maxRecordsPerBatch
# Spark's JVM reads each Arrow batch into one buffer from a netty pool of
# 4 MiB chunks; a bigger batch is allocated from and given back to the OS
# every time (15k page faults per 200 MB read, a fifth of the JVM's CPU).
ARROW_BATCH_BYTES = 2 * MIB


# -- clients -----------------------------------------------------------------------------------


_clients: dict[tuple, Any] = {}
_clients_lock = threading.Lock()


def _cached(kind: str, env: Mapping[str, str], factory: Callable[[Mapping[str, str]], Any]) -> Any:
    """One client of ``kind`` per storage settings, kept for the life of this
    Python process: Spark reuses its workers, and opening clients (an Oxia
    connection with its shard assignments, a boto3 client) would otherwise
    be paid again by every task and every query plan."""
    key = (kind, *sorted(env.items()))
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            client = _clients[key] = factory(env)
        return client


def _reader_for(env: Mapping[str, str]) -> LeaderlessLogReader:
    """A reader for these settings, shared by the tasks of this Python worker."""
    from .._log.reader import LeaderlessLogReader

    return _cached("reader", env, LeaderlessLogReader.from_env)


def _log_for(env: Mapping[str, str]) -> _Log:
    """Metadata-only access for planning, shared by the query plans of this process."""
    return _cached("log", env, _Log)


@atexit.register
def _close_clients() -> None:
    with _clients_lock:
        clients = list(_clients.values())
        _clients.clear()
    for c in clients:
        try:
            c.close()
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
        from .._storage.metastore import OxiaMetadataStore
        from .._log.reader import LeaderlessLogReader

        oxia = OxiaConfig.from_env(env)
        self.layout = LogLayout(oxia.root_prefix)
        self.meta = OxiaMetadataStore(oxia)
        self.reader = LeaderlessLogReader(oxia, metadata_store=self.meta, object_store=_NoObjects())

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
        bounds = self.bounds(topic, partition)
        return None if bounds is None else bounds[1]

    def bounds(self, topic: str, partition: int) -> tuple[int, int] | None:
        """``(log start, high watermark)`` from one control read; None for a partition never written."""
        try:
            control = self.reader.control(topic, partition)
        except PartitionNotInitialized:
            return None
        return control.log_start_offset, control.high_watermark


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


def read_range(env: Mapping[str, str], part: OffsetRange, include_headers: bool = False) -> Iterator[pa.RecordBatch]:
    """The records of ``part`` as Arrow batches of the data source's schema
    (with the headers column when ``include_headers``)."""
    from .._log.reader import stored
    from ._arrow_records import record_batches
    from ._worker_heap import after_first_task, keep_freed_memory

    keep_freed_memory()
    runs = _reader_for(env).iter_runs(part.topic, part.partition, part.start, part.end, decode=stored)
    return after_first_task(record_batches(
        runs, part.topic, part.partition, part.start, part.end,
        max_records=ARROW_BATCH_RECORDS, max_bytes=ARROW_BATCH_BYTES, include_headers=include_headers,
    ))


# -- batch read ------------------------------------------------------------------------------------


class LlogBatchReader(DataSourceReader):
    """Plans on the driver (high watermarks snapshotted once), reads on the executors."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.topic = _topic(options)
        self.env = storage_env(options)
        self.include_headers = read_options(options).include_headers
        chosen = _partition_list(options)
        start_mode, start_at = parse_offsets(
            _opt(options, "startingOffsets"), "startingOffsets", default="earliest", allowed=("earliest", "latest")
        )
        end_mode, end_at = parse_offsets(
            _opt(options, "endingOffsets"), "endingOffsets", default="latest", allowed=("latest",)
        )
        chunk = _int_opt(options, "maxRecordsPerPartition", DEFAULT_CHUNK_RECORDS)
        lg = _log_for(self.env)
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
        bounds = {p: lg.bounds(self.topic, p) for p in chosen}
        missing = [p for p, b in bounds.items() if b is None]
        if missing:
            raise ConfigError(
                f"partition(s) {missing} of topic {self.topic!r} are not initialized "
                f"(initialized: {lg.partitions(self.topic) or 'none'})"
            )
        self.ranges: list[OffsetRange] = []
        for p in chosen:
            log_start, hw = bounds[p]  # type: ignore[misc]
            s = _resolve(start_at.get(p, start_mode), hw, "startingOffsets", p, log_start)
            e = _resolve_end(end_at.get(p, end_mode), hw, p)
            if s > e + 1:
                raise ConfigError(
                    f"partition {p}: startingOffsets {s} is after endingOffsets {e} (inclusive bounds)"
                )
            self.ranges.extend(_chunks(self.topic, p, s, e, chunk))
        freeze_long_lived()  # this planning process is reused for later queries

    def partitions(self) -> Sequence[InputPartition]:
        return self.ranges

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, OffsetRange):  # Spark's placeholder when there is nothing to read
            return iter(())
        return read_range(self.env, partition, self.include_headers)
