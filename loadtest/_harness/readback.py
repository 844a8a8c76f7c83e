"""Read-back: every acknowledged offset is in the log, and nothing is past its end.

The client's ``acked`` map (``client-summary.json``) names every offset
range a broker acknowledged, inclusive. :func:`check_read_back` asks a
:class:`ReadBack` for each partition's high watermark and for the parts of
each acked range it cannot read, and reports only the partitions where
something does not add up, plus totals.

- ``missing``: acknowledged offsets that could not be read (a gap in the
  index, a vanished or corrupt object, or an offset past the high watermark).
  Any of these makes the run fail: the log lost an acknowledged write.
- ``high_watermark`` vs ``max_acked``: the log may end after the last
  acknowledged offset (requests whose outcome the client never learned, a
  partially failed request), never before it.
- ``unacked_offsets``: offsets in the log that nobody acknowledged
  (``high_watermark - acked records``), expected only up to what the client's
  unknown-outcome and partial requests can explain.

:class:`LibraryReadBack` reads through ``LeaderlessLogReader`` straight from
Oxia and S3 (no broker involved), decoding every batch (length, CRC and
record count are checked) without copying records out.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Protocol, Sequence

from server._errors import (
    CorruptBatch,
    InconsistentReadState,
    LlogError,
    ObjectNotFound,
    OffsetOutOfRange,
    PartitionNotInitialized,
)

if TYPE_CHECKING:
    from server.leaderless_log_reader import BatchDecoder, LeaderlessLogReader

__all__ = ["LibraryReadBack", "OffsetRange", "ReadBack", "check_read_back", "merge_ranges", "parse_partition"]

OffsetRange = tuple[int, int]
"""``(start, end)``, both inclusive."""

_UNREADABLE = (CorruptBatch, InconsistentReadState, ObjectNotFound, OffsetOutOfRange)
"""What a read of a lost or damaged offset raises (anything else is a failure of the check)."""


class ReadBack(Protocol):
    """What the read-back check needs from the log."""

    def high_watermark(self, topic: str, partition: int) -> int:
        """The last offset of the partition; 0 when it is empty or not initialized."""
        ...

    def missing_ranges(self, topic: str, partition: int, start: int, end: int) -> list[OffsetRange]:
        """The parts of ``[start, end]`` that cannot be read (empty when all can)."""
        ...


def parse_partition(key: str) -> tuple[str, int]:
    """``"orders:3"`` -> ``("orders", 3)`` (topic names never hold ``:``)."""
    topic, _, partition = key.rpartition(":")
    return topic, int(partition)


def merge_ranges(ranges: Iterable[Sequence[int]]) -> list[OffsetRange]:
    """Sorted, with overlapping and adjacent ranges joined."""
    out: list[list[int]] = []
    for start, end in sorted((int(r[0]), int(r[1])) for r in ranges):
        if out and start <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return [(s, e) for s, e in out]


class LibraryReadBack:
    """:class:`ReadBack` through ``LeaderlessLogReader``; a context manager.

    Built from the run's ``LLOG_*`` settings (``stack.json``'s ``llog_env``),
    or around a ``reader`` the caller owns (and closes). ``decode`` turns each
    stored batch into records (the checked batches themselves by default); one that also checks
    the records' bytes raises ``CorruptBatch`` to have the batch counted missing."""

    def __init__(self, llog_env: Mapping[str, str] | None = None, *, reader: LeaderlessLogReader | None = None,
                 decode: BatchDecoder | None = None) -> None:
        from server.leaderless_log_reader import LeaderlessLogReader, stored

        if (llog_env is None) == (reader is None):
            raise ValueError("give exactly one of llog_env and reader")
        self._owns_reader = reader is None
        self._reader = reader or LeaderlessLogReader.from_env(dict(llog_env or {}))
        self._decode = decode or stored

    def __enter__(self) -> LibraryReadBack:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        if self._owns_reader:
            self._reader.close()

    def high_watermark(self, topic: str, partition: int) -> int:
        try:
            return self._reader.high_watermark(topic, partition)
        except PartitionNotInitialized:
            return 0

    def missing_ranges(self, topic: str, partition: int, start: int, end: int) -> list[OffsetRange]:
        hwm = self.high_watermark(topic, partition)
        missing: list[OffsetRange] = []
        if end > hwm:
            missing.append((max(start, hwm + 1), end))
            end = hwm
        offset = start
        while offset <= end:
            offset, gap = self._read_until_gap(topic, partition, offset, end)
            if gap is not None:
                missing.append(gap)
                offset = gap[1] + 1
        return merge_ranges(missing)

    def _read_until_gap(self, topic: str, partition: int, start: int, end: int) -> tuple[int, OffsetRange | None]:
        """Read from ``start``; return where reading stopped and the unreadable span there, if any."""
        offset = start
        try:
            for run in self._reader.iter_runs(topic, partition, start, end, decode=self._decode):
                if run.first > offset:
                    return offset, (offset, run.first - 1)
                offset = run.last + 1
        except _UNREADABLE as exc:
            # The index scan runs ahead of the batches handed out: a gap it met
            # further on is raised before the batches before it are read.
            ahead = exc.offset if exc.offset is not None and exc.offset > offset else None
            if ahead is not None:
                offset, gap = self._read_until_gap(topic, partition, offset, min(ahead - 1, end))
                if gap is not None or offset > end:
                    return offset, gap
            return offset, self._unreadable_span(topic, partition, offset, end)
        return offset, None if offset > end else (offset, end)

    def _unreadable_span(self, topic: str, partition: int, offset: int, end: int) -> OffsetRange:
        """Where the unreadable part that begins at ``offset`` ends.

        A batch the index names but whose bytes are lost or damaged is missing
        as a whole. For a gap in the index the next indexed offset is found by
        probing ``offset + 1, + 2, + 4 ...`` up to ``end``: what lies between the last
        failed probe and the batch found is counted missing too (an over-count,
        never an under-count, and only ever for a log that already lost data).
        """
        try:
            batch = self._reader.resolve(topic, partition, offset)
            return offset, min(batch.end_offset, end)
        except LlogError:
            pass
        step, probe = 1, offset
        while probe < end:
            probe = min(offset + step, end)
            try:
                batch = self._reader.resolve(topic, partition, probe)
                return offset, max(offset, batch.start_offset - 1)
            except LlogError:
                step *= 2
        return offset, end


def check_read_back(
    read_back: ReadBack,
    acked: Mapping[str, Sequence[Sequence[int]]],
    *,
    partitions: Iterable[str] = (),
    unacked_bound: int | None = None,
    workers: int = 8,
) -> dict[str, Any]:
    """Check every acked range of ``acked`` (``{"topic:partition": [[start, end], ...]}``);
    ``partitions`` adds partitions with nothing acked (their high watermark
    counts towards ``unacked_offsets``). ``unacked_bound`` is how many
    unacknowledged offsets the client's unknown outcomes can explain."""
    keys = sorted(set(acked) | set(partitions), key=parse_partition)
    with ThreadPoolExecutor(max(1, workers), thread_name_prefix="llog-read-back") as pool:
        rows = list(pool.map(lambda key: _check_partition(read_back, key, acked.get(key, ())), keys))
    totals = {
        "partitions_checked": len(rows),
        "acked_ranges": sum(r["acked_ranges"] for r in rows),
        "acked_records": sum(r["acked_records"] for r in rows),
        "records_missing": sum(r["missing_records"] for r in rows),
        "high_watermark_sum": sum(r["high_watermark"] for r in rows),
        "unacked_offsets": sum(r["unacked_offsets"] for r in rows),
    }
    totals["records_confirmed"] = totals["acked_records"] - totals["records_missing"]
    mismatches = [_mismatch(r) for r in rows
                  if r["missing"] or r["unacked_offsets"] or r["high_watermark"] != r["max_acked"]]
    return {
        "ran": True,
        "error": None,
        **totals,
        "unacked_bound": unacked_bound,
        "unacked_within_bound": None if unacked_bound is None else totals["unacked_offsets"] <= unacked_bound,
        "mismatches": mismatches,
    }


def _check_partition(read_back: ReadBack, key: str, ranges: Sequence[Sequence[int]]) -> dict[str, Any]:
    topic, partition = parse_partition(key)
    merged = merge_ranges(ranges)
    missing: list[OffsetRange] = []
    for start, end in merged:
        missing.extend(read_back.missing_ranges(topic, partition, start, end))
    acked_records = sum(e - s + 1 for s, e in merged)
    hwm = read_back.high_watermark(topic, partition)
    missing = merge_ranges(missing)
    present_acked = acked_records - sum(e - s + 1 for s, e in missing)
    return {
        "partition": key,
        "acked_ranges": len(merged),
        "acked_records": acked_records,
        "max_acked": merged[-1][1] if merged else 0,
        "high_watermark": hwm,
        "missing": [list(r) for r in missing],
        "missing_records": acked_records - present_acked,
        "unacked_offsets": max(0, hwm - present_acked),
    }


def _mismatch(row: Mapping[str, Any]) -> dict[str, Any]:
    if row["missing"]:
        problem = "acknowledged offsets missing"
    elif row["high_watermark"] < row["max_acked"]:
        problem = "high watermark below the last acknowledged offset"
    elif row["high_watermark"] > row["max_acked"]:
        problem = "log ends after the last acknowledged offset"
    else:
        problem = "offsets in the log that nobody acknowledged"
    return {"problem": problem, **{k: row[k] for k in (
        "partition", "missing", "high_watermark", "max_acked", "acked_records", "unacked_offsets")}}
