"""Decoded ``meta/control`` records, kept by key and Oxia version.

A consumer at the end of a partition has the broker read the partition's
control record on every fetch (has another broker written?), and the answer
is nearly always the record it read last time. Oxia gives every value of a
key its own version, so a record read again at the version already decoded
is the same record: its decode (JSON, and the producers' states) is reused.
Decoded records are immutable, so sharing one between requests is safe.

The cache is bounded by the stored size of what it holds (a record without
producers is about 60 bytes; each idempotent producer adds up to about 150), the
least recently decoded key leaving first.
"""

from __future__ import annotations

import threading

from .._protocol.records import ControlRecord
from .._storage.metastore import Record

__all__ = ["DecodedControls"]


class DecodedControls:
    """``ControlRecord.decode`` of Oxia records, remembered by key and version, up to
    ``capacity_bytes`` of stored records."""

    def __init__(self, capacity_bytes: int = 32 << 20) -> None:
        self._capacity = capacity_bytes
        self._lock = threading.Lock()
        self._by_key: dict[str, tuple[int, ControlRecord, int]] = {}
        self._bytes = 0

    def decode(self, rec: Record) -> ControlRecord:
        hit = self._by_key.get(rec.key)
        if hit is not None and hit[0] == rec.version:
            return hit[1]
        control = ControlRecord.decode(rec.value)
        size = len(rec.key) + len(rec.value)
        with self._lock:
            old = self._by_key.pop(rec.key, None)  # re-inserted last: the dict's order is the eviction order
            self._bytes += size - (old[2] if old else 0)
            self._by_key[rec.key] = (rec.version, control, size)
            while self._bytes > self._capacity and len(self._by_key) > 1:
                self._bytes -= self._by_key.pop(next(iter(self._by_key)))[2]
        return control

    def __len__(self) -> int:
        return len(self._by_key)

    @property
    def nbytes(self) -> int:
        """The stored size (key and value) of the records held."""
        return self._bytes
