"""Retention (SPEC 7.10): move a log's start past the compacted ranges its topic lets go.

A pass over one log reads ``meta/control`` (its log start ``L`` and high
watermark), the compaction cursor ``c`` and what the log stores
(``_log/stored.py``: ``StoredSizes`` keeps each log's size between passes
and reads an index again only past what can have changed), then walks the
COMPACTED entries from ``L`` below the cursor, oldest first, letting each go
while either rule of the topic says so (Kafka's rules, on compacted ranges
where Kafka has segments), and reads the index no further than the first it
keeps:

- ``retention.ms``: the entry's newest record (``max_timestamp_ms``, or
  ``created_at_ms`` for an entry of the reference system) is older than
  ``now - retention.ms``;
- ``retention.bytes``: the log would still hold at least ``retention.bytes``
  without it (entries count their stored bytes: a WAL slice its
  ``byte_length``, a COMPACTED entry its ``size_bytes``).

A topic whose ``cleanup.policy`` is ``compact`` alone lets nothing go (llog
has no key compaction: it keeps every version of every key).

It stops at the first entry neither rule lets go, so the log start only
ever lands on an entry boundary at or below the cursor: WAL data, the
pending append and anything not yet compacted are never dropped. The new
start is one conditional write of ``meta/control`` (``log_start_offset`` and
``log_start_at_ms``); a writer that raced it retries its own write, and a
conflict here leaves the log for the next pass. Nothing is deleted here:
vacuum deletes the index entries below the start, then their objects, a
grace period later (SPEC 7.9).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum

from .._catalogue.topic_config import TopicConfig
from .._errors import VersionConflict
from .._log.stored import StoredHead, StoredSizes, compacted_from, entry_bytes
from .._protocol.keys import PartitionKeys
from .._storage.metastore import MetadataStore
from .._metrics import LlogMetrics
from .._runtime import REAL_RUNTIME, Runtime

__all__ = ["RetentionOutcome", "RetentionResult", "apply_retention", "retain"]


class RetentionOutcome(str, Enum):
    ADVANCED = "advanced"
    """The log start moved."""
    KEPT = "kept"
    """Nothing may go yet (or the topic keeps everything)."""
    CONFLICT = "conflict"
    """``meta/control`` changed under the pass; the next pass tries again."""
    MISSING = "missing"
    """The log is not initialized."""


@dataclass(frozen=True)
class RetentionResult:
    topic: str
    partition: int
    outcome: RetentionOutcome
    log_start_offset: int
    """The log start after the pass."""
    previous_log_start: int
    retained_bytes: int = 0
    """Bytes the log holds from its (new) start on."""
    dropped_bytes: int = 0
    """Bytes let go by this pass."""


def apply_retention(
    meta: MetadataStore, keys: PartitionKeys, config: TopicConfig, *, runtime: Runtime = REAL_RUNTIME,
    metrics: LlogMetrics | None = None, sizes: StoredSizes | None = None,
) -> RetentionResult:
    """One pass of SPEC 7.10 over the log of ``keys`` under ``config``; ``sizes`` keeps the log's
    stored bytes between passes (without it the index is read whole for them)."""
    (head,) = (sizes or StoredSizes(meta)).heads([keys])
    return retain(meta, keys, config, head, runtime=runtime, metrics=metrics)


def retain(
    meta: MetadataStore, keys: PartitionKeys, config: TopicConfig, head: StoredHead | None, *,
    runtime: Runtime = REAL_RUNTIME, metrics: LlogMetrics | None = None,
) -> RetentionResult:
    """:func:`apply_retention` with the log's head already read (``StoredSizes.heads``, for many
    logs at once). A head read earlier than the pass is safe: the start is written conditionally
    on its version, a cursor only grows and a total only grows by appends (so an older one lets
    less go)."""
    tp = keys.tp
    if head is None:
        return RetentionResult(tp.topic, tp.partition, RetentionOutcome.MISSING, 1, 1)
    control, version, total = head.control, head.version, head.total_bytes
    start = control.log_start_offset

    now = runtime.clock.now_ms()
    new_start, dropped = start, 0
    if config.retains:  # cleanup.policy=compact keeps everything
        for first, end, entry in compacted_from(meta, keys, start, head.cursor):
            if first > new_start:
                break  # not contiguous from the start: never skip over data
            size = entry_bytes(entry)
            newest = entry.max_timestamp_ms if entry.max_timestamp_ms is not None else entry.created_at_ms
            old = config.retention_ms >= 0 and newest < now - config.retention_ms
            big = config.retention_bytes >= 0 and total - dropped - size >= config.retention_bytes
            if not (old or big):
                break
            new_start, dropped = end + 1, dropped + size

    if new_start == start:
        return RetentionResult(tp.topic, tp.partition, RetentionOutcome.KEPT, start, start, total)
    moved = replace(control, log_start_offset=new_start, log_start_at_ms=now)
    try:
        meta.put(keys.control, moved.encode(), keys.partition_key, expected_version=version)
    except VersionConflict:
        return RetentionResult(tp.topic, tp.partition, RetentionOutcome.CONFLICT, start, start, total)
    if metrics is not None:
        metrics.inc("retention_dropped_bytes_total", dropped)
        metrics.inc("retention_advances_total")
    return RetentionResult(tp.topic, tp.partition, RetentionOutcome.ADVANCED, new_start, start, total - dropped,
                           dropped)
