"""Offsets by time: the first record at or after a timestamp, and the newest record.

What Kafka's ListOffsets asks (``offsetsForTimes``, ``-3`` max timestamp).
Every index entry carries its batch's ``max_timestamp_ms`` (a legacy entry
without one: its ``created_at_ms``), so the index narrows the search to one
entry without reading any record: the first entry, in offset order, whose
newest record is at or after the time. Only that entry's batches are then
read, to find the record. Timestamps need not grow with offsets (a producer
sets them), which is why the answer is the first *offset* whose timestamp is
at or after the time, as in Kafka.

The listing is over the partition's whole index (entries are few once
compaction merged them: one per ``LLOG_COMPACTION_*`` target size).
"""

from __future__ import annotations

from dataclasses import dataclass

from .reader import LeaderlessLogReader, ResolvedBatch

__all__ = ["TimedOffset", "offset_for_timestamp", "max_timestamp_offset"]


@dataclass(frozen=True)
class TimedOffset:
    offset: int
    timestamp_ms: int


def _newest(batch: ResolvedBatch) -> int:
    e = batch.entry
    return e.max_timestamp_ms if e.max_timestamp_ms is not None else e.created_at_ms


def offset_for_timestamp(reader: LeaderlessLogReader, topic: str, partition: int,
                         timestamp_ms: int) -> TimedOffset | None:
    """The first record whose timestamp is >= ``timestamp_ms`` (None: none is)."""
    control = reader.control(topic, partition)
    if control.high_watermark < control.log_start_offset:
        return None
    for batch in reader.scan_batches(topic, partition, control.log_start_offset, control.high_watermark,
                                     control=control):
        if _newest(batch) < timestamp_ms:
            continue
        start = max(batch.start_offset, control.log_start_offset)
        for record in reader.iter_from(topic, partition, start, batch.end_offset):
            if record.timestamp_ms is not None and record.timestamp_ms >= timestamp_ms:
                return TimedOffset(record.offset, record.timestamp_ms)
    return None


def max_timestamp_offset(reader: LeaderlessLogReader, topic: str, partition: int) -> TimedOffset | None:
    """The record with the largest timestamp (the first of them), None when the log is empty."""
    control = reader.control(topic, partition)
    if control.high_watermark < control.log_start_offset:
        return None
    best: ResolvedBatch | None = None
    for batch in reader.scan_batches(topic, partition, control.log_start_offset, control.high_watermark,
                                     control=control):
        if best is None or _newest(batch) > _newest(best):
            best = batch
    assert best is not None
    newest = _newest(best)
    start = max(best.start_offset, control.log_start_offset)
    found: TimedOffset | None = None
    for record in reader.iter_from(topic, partition, start, best.end_offset):
        ts = record.timestamp_ms if record.timestamp_ms is not None else newest
        if found is None or ts > found.timestamp_ms:
            found = TimedOffset(record.offset, ts)
    return found
