"""Initialize a log (SPEC 7.1): the compaction cursor, then ``meta/control``, each only if absent."""

from __future__ import annotations

from .._errors import VersionConflict
from .._protocol.keys import PartitionKeys
from .._protocol.records import CompactionCursor, ControlRecord, LogState
from .._storage.metastore import EXPECT_ABSENT, MetadataStore

__all__ = ["initialize_log"]


def initialize_log(meta: MetadataStore, keys: PartitionKeys) -> int | None:
    """Create the log's cursor (offset 1) and control record (OPEN, counter 1)
    if absent; the version of the control record this call created, or None
    when it existed. The cursor goes first, so whoever sees the control record
    (the discovery anchor) also finds the cursor. Idempotent."""
    try:
        meta.put(keys.compaction_cursor, CompactionCursor(1).encode(), keys.partition_key,
                 expected_version=EXPECT_ABSENT)
    except VersionConflict:
        pass
    try:
        return meta.put(keys.control, ControlRecord(LogState.OPEN, 1, None).encode(), keys.partition_key,
                        expected_version=EXPECT_ABSENT)
    except VersionConflict:
        return None
