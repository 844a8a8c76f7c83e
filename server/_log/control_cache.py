"""Decoded ``meta/control`` records, kept by key and Oxia version.

A consumer at the end of a partition has the broker read the partition's
control record on every fetch (has another broker written?), and the answer
is nearly always the record it read last time. Oxia gives every value of a
key its own version, so a record read again at the version already decoded
is the same record: its decode (JSON, and the producers' states) is reused.
Decoded records are immutable, so sharing one between requests is safe.
"""

from __future__ import annotations

import threading

from .._protocol.records import ControlRecord
from .._storage.metastore import Record

__all__ = ["DecodedControls"]


class DecodedControls:
    """``ControlRecord.decode`` of Oxia records, remembered by key and version (the
    ``capacity`` most recently decoded keys)."""

    def __init__(self, capacity: int = 1 << 14) -> None:
        self._capacity = capacity
        self._lock = threading.Lock()
        self._by_key: dict[str, tuple[int, ControlRecord]] = {}

    def decode(self, rec: Record) -> ControlRecord:
        hit = self._by_key.get(rec.key)
        if hit is not None and hit[0] == rec.version:
            return hit[1]
        control = ControlRecord.decode(rec.value)
        with self._lock:
            self._by_key.pop(rec.key, None)  # re-inserted last: the dict's order is the eviction order
            self._by_key[rec.key] = (rec.version, control)
            if len(self._by_key) > self._capacity:
                del self._by_key[next(iter(self._by_key))]
        return control

    def __len__(self) -> int:
        return len(self._by_key)
