"""Finding the index entry that covers an offset by listing (SPEC 7.4 step 3b).

The CEILING get answers "which entry holds offset x?" in one call in a clean
index. A redundant WAL entry left inside a COMPACTED range (SPEC 8.2, O3)
sorts before that COMPACTED entry's key, so the first key at or after ``x``
can be a WAL entry that starts above ``x``. Listing on from ``x`` and passing
over such entries finds the COMPACTED entry that holds ``x``; a COMPACTED
entry that starts above ``x`` ends the search, because COMPACTED entries
never overlap, so no later key can hold ``x``.
"""

from __future__ import annotations

from .._protocol.keys import PartitionKeys
from .._protocol.records import EntryType, IndexEntry
from .._storage.metastore import MetadataStore

__all__ = ["covering_entry"]


def covering_entry(store: MetadataStore, keys: PartitionKeys, offset: int) -> tuple[int, IndexEntry] | None:
    """``(end_offset, entry)`` of the first index entry whose range holds
    ``offset``, passing over WAL entries that start above it; None if there
    is none."""
    for rec in store.range_scan(keys.index(offset), keys.index_end, keys.partition_key):
        end = keys.index_offset(rec.key)
        if end is None:
            return None
        entry = IndexEntry.decode(rec.value)
        if entry.start_offset(end) <= offset:
            return end, entry
        if entry.type != EntryType.WAL:
            return None
    return None
