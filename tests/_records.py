"""Stored batches for tests: what a group, a tail-cache publish or a stored slice holds."""

from __future__ import annotations

from typing import Sequence

from server._protocol.stored_batches import StoredBatches

__all__ = ["stored", "one_per_record", "stored_size"]


def stored(values: Sequence[bytes], ts: int = 0) -> StoredBatches:
    """``values`` as one value-only RecordBatch v2 batch stamped ``ts``."""
    return StoredBatches.of_values(list(values), ts)


def one_per_record(values: Sequence[bytes], ts: int = 0) -> StoredBatches:
    """``values`` as one batch per record (record-granular limits in tests)."""
    return StoredBatches.join([StoredBatches.of_values([v], ts) for v in values])


def stored_size(values: Sequence[bytes]) -> int:
    """Bytes of ``values`` as one stored batch (what the byte limits and the buffer count)."""
    return stored(values).nbytes
