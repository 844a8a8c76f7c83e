"""Streaming read of the ``llog`` data source: micro-batch offsets are
``{"<topic>": {"<partition>": next_offset}}`` (see :mod:`server.spark.datasource`)."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Sequence

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from .._errors import ConfigError, InvalidRequest, LlogError
from .._groups.offsets import GroupOffsets
from .._protocol.keys import TopicPartition, validate_group
from ._options import _int_opt, _opt, _partition_list, _resolve, _topic, parse_offsets, read_options, storage_env
from ._read_source import DEFAULT_CHUNK_RECORDS, OffsetRange, _chunks, _Log, read_range

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["LlogStreamReader"]

log = logging.getLogger(__name__)


# -- streaming read ----------------------------------------------------------------------------------


class LlogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets ``{"<topic>": {"<partition>": next_offset}}``; see the module docstring."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.topic = _topic(options)
        self.env = storage_env(options)
        self.include_headers = read_options(options).include_headers
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
        self.group = _opt(options, "commitToGroup")
        """A consumer group each completed micro-batch's end offsets are committed to (off when unset):
        operators see the stream's lag; Spark's checkpoint stays what the stream resumes from."""
        if self.group is not None:
            try:
                validate_group(self.group)
            except InvalidRequest as exc:
                raise ConfigError(f"option commitToGroup: {exc.message}") from None
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
        lg = self._lg()
        bounds = {p: lg.bounds(self.topic, p) or (1, 0) for p in {*self._partitions(), *self.start_at}}
        start = {
            p: _resolve(self.start_at.get(p, self.start_mode), hw, "startingOffsets", p, log_start)
            for p, (log_start, hw) in bounds.items()
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
        return read_range(self.env, partition, self.include_headers)

    def commit(self, end: dict) -> None:
        """With ``commitToGroup``, the micro-batch's end offsets become the group's
        committed offsets (best effort: a failure is logged, the stream goes on)."""
        if self.group is None:
            return
        offsets = [(TopicPartition(topic, int(p)), int(nxt), "spark")
                   for topic, parts in end.items() for p, nxt in parts.items() if int(nxt) > 1]
        if not offsets:
            return
        lg = self._lg()
        try:
            GroupOffsets(lg.meta, lg.layout).commit(self.group, offsets)
        except LlogError as exc:
            log.warning("committing the stream's offsets to group %s failed: %s", self.group, exc)

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
