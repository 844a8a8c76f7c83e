"""What one ``compact_once`` run did: its outcome and the figures the service and metrics read."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

__all__ = ["CompactionOutcome", "CompactionResult"]


class CompactionOutcome(str, Enum):
    NOTHING_TO_DO = "nothing_to_do"
    """No WAL run starts at the cursor below the limit."""
    COMPACTED = "compacted"
    """This run selected, wrote and committed a new compacted range."""
    RESUMED = "resumed"
    """This run finished an interrupted compaction found in meta/compaction."""
    CONFLICT = "conflict"
    """Another compactor owns the range; this run stopped without changing it."""
    ABANDONED = "abandoned"
    """An interrupted or stale compaction was no longer valid and was dropped."""
    DEFERRED = "deferred"
    """The WAL run at the cursor is smaller than ``min_bytes_per_run`` and younger than
    ``max_delay_ms``: left for a later run, to write fewer, bigger compacted objects."""


@dataclass(frozen=True)
class CompactionResult:
    topic: str
    partition: int
    outcome: CompactionOutcome
    start_offset: int | None = None
    end_offset: int | None = None
    msg_count: int = 0
    data_key: str | None = None
    """``s3://`` URI of the compacted object."""
    source_entries: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    recovered_pending: bool = False
    high_watermark: int = 0
    """The partition's high watermark at the start of the run."""
    cursor: int = 1
    """The compaction cursor after the run."""
    retry_after_ms: int | None = None
    """``DEFERRED`` only: when the oldest waiting entry reaches ``max_delay_ms``."""

    @property
    def lag_offsets(self) -> int:
        """Offsets written but not yet compacted (as of this run): what is left."""
        return max(0, self.high_watermark - (self.cursor - 1))

    @property
    def backlog_offsets(self) -> int:
        """Offsets waiting for compaction when this run started: how far behind
        the compactor was when it came to the partition (``lag_offsets`` is
        what the run left, 0 whenever it caught up with the high watermark it
        started from, however much had piled up)."""
        first = self.start_offset if self.start_offset is not None else self.cursor
        return max(0, self.high_watermark - (first - 1))
