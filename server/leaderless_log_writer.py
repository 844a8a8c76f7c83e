"""The write path (the reference system's module name): a short face.

``LeaderlessLogWriter`` appends to topic-partitions, ``BatchingProducer``
batches appends from many threads into shared flushes, and
``materialize_pending`` recovers someone else's pending append. They live in
``server/_log/`` (``writer.py``, ``producer.py``, ``recovery.py``); this
module re-exports them so ``from server.leaderless_log_writer import ...``
keeps working.
"""

from __future__ import annotations

from ._log.producer import BatchingProducer
from ._log.recovery import create_index_entry, drop_if_redundant, materialize_pending
from ._log.writer import LeaderlessLogWriter
from ._protocol.structs import AppendResult, SharedAppendGroup

__all__ = [
    "LeaderlessLogWriter",
    "SharedAppendGroup",
    "AppendResult",
    "BatchingProducer",
    "materialize_pending",
    "create_index_entry",
    "drop_if_redundant",
]
