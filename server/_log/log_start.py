"""Deleting records: move a log's start up to an offset the caller names (SPEC 7.13).

Kafka's DeleteRecords (``kafka-delete-records``, ``Admin.deleteRecords``,
Kafka Streams purging its repartition topics) asks that a partition's
records below an offset be gone. In llog that is one conditional write of
``meta/control``: ``log_start_offset`` becomes the offset (anywhere up to
the counter ``S``: inside an entry, above the compaction cursor, inside the
pending append) and ``log_start_at_ms`` now. Readers refuse offsets below
the start from then on (7.4); nothing is deleted here: compaction goes on
below the start as it would, and vacuum deletes the index entries below
``min(start, cursor)`` and then their objects a grace period later (7.9),
as for retention (7.10) and a deleted topic's log (7.11).

The write is conditional on the version read, so it never undoes a
writer's reservation, a fence or retention's move: on a conflict it reads
again and retries (with back-off: a busy log's control record changes on
every flush). The start never goes back: an offset at or below it changes
nothing. A FENCED log (fenced, or a deleted topic's) is refused: its start
is the fence's or the deletion's business.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .._errors import ConcurrencyConflict, OffsetOutOfRange, PartitionFenced, PartitionNotInitialized, \
    VersionConflict
from .._protocol.keys import PartitionKeys, TopicPartition
from .._protocol.records import ControlRecord
from .._retry import Backoff
from .._runtime import REAL_RUNTIME, Runtime
from .._storage.metastore import MetadataStore

__all__ = ["DeleteRecordsResult", "delete_records"]


@dataclass(frozen=True)
class DeleteRecordsResult:
    log_start_offset: int
    """The log start after the call (llog's offsets: the first readable one)."""
    previous_log_start: int
    high_watermark: int
    """The last offset in the log when the start moved (``S - 1``)."""

    @property
    def moved(self) -> bool:
        return self.log_start_offset > self.previous_log_start


def delete_records(meta: MetadataStore, keys: PartitionKeys, before: int | None, *,
                   runtime: Runtime = REAL_RUNTIME) -> DeleteRecordsResult:
    """Make every record below ``before`` unreadable (``None``: every record in the log now).

    Raises OffsetOutOfRange when ``before`` is past the counter (``S``: one past the
    high watermark), PartitionFenced for a FENCED log, PartitionNotInitialized, and
    ConcurrencyConflict when the control record kept changing for the back-off's span."""
    tp = keys.tp
    backoff = Backoff(runtime=runtime)
    while True:
        rec = meta.get(keys.control, keys.partition_key)
        if rec is None:
            raise PartitionNotInitialized("no meta/control", topic=tp.topic, partition=tp.partition)
        control = ControlRecord.decode(rec.value)
        target = control.sequence_counter if before is None else before
        _check(control, target, tp)
        start = control.log_start_offset
        if target <= start:
            return DeleteRecordsResult(start, start, control.high_watermark)
        moved = replace(control, log_start_offset=target, log_start_at_ms=runtime.clock.now_ms())
        try:
            meta.put(keys.control, moved.encode(), keys.partition_key, expected_version=rec.version)
            return DeleteRecordsResult(target, start, control.high_watermark)
        except VersionConflict:
            backoff = backoff.next()
            if backoff.exhausted:
                raise ConcurrencyConflict("meta/control kept changing; the log start did not move",
                                          topic=tp.topic, partition=tp.partition) from None
            backoff.sleep()


def _check(control: ControlRecord, target: int, tp: TopicPartition) -> None:
    if control.fenced:
        raise PartitionFenced("the log is FENCED (or its topic deleted): its start stays",
                              topic=tp.topic, partition=tp.partition)
    if not 1 <= target <= control.sequence_counter:
        raise OffsetOutOfRange(
            f"cannot delete the records below offset {target}: the log ends at {control.high_watermark}",
            log_start_offset=control.log_start_offset, high_watermark=control.high_watermark,
            topic=tp.topic, partition=tp.partition)
