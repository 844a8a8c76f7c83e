"""Compaction (the reference system's module name): a short face.

``LeaderlessLogCompactor.compact_once`` (SPEC 7.7) lives in
``server/_compaction/compactor.py``; the service that runs it for every log
is ``server.leaderless_log_compactor_server``. This module re-exports the
compactor's public names.
"""

from __future__ import annotations

from ._compaction.compactor import *  # noqa: F401,F403  (the names in its __all__)
from ._compaction.compactor import __all__ as _compactor_names
from ._protocol.records import CompactionState

# The seed's names of the compaction states.
STATE_WRITING_COMPACTED_INDEX = CompactionState.WRITING_COMPACTED_INDEX
STATE_DELETING_OLD = CompactionState.DELETING_OLD
STATE_UPDATING_CURSOR = CompactionState.UPDATING_CURSOR

__all__ = [
    *_compactor_names,
    "CompactionState",
    "STATE_WRITING_COMPACTED_INDEX",
    "STATE_DELETING_OLD",
    "STATE_UPDATING_CURSOR",
]
