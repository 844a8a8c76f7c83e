"""What the compactor service runs and how a run can end.

``TaskResult`` is one worker attempt on one log; its ``outcome`` is a
``CompactionOutcome`` value or one the service adds (``busy``,
``not_initialized``, ``error``). ``Compactor`` and ``VacuumLike`` are the
small Protocols the service needs of ``LeaderlessLogCompactor`` and
``Vacuum``, so unit tests can hand it fakes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from .._protocol.keys import TopicPartition

__all__ = [
    "Compactor",
    "VacuumLike",
    "TaskResult",
    "OUTCOME_COMPACTED",
    "OUTCOME_RESUMED",
    "OUTCOME_NOTHING",
    "OUTCOME_CONFLICT",
    "OUTCOME_ABANDONED",
    "OUTCOME_BUSY",
    "OUTCOME_NOT_INITIALIZED",
    "OUTCOME_ERROR",
]

# Task outcomes: the CompactionOutcome values plus what the service adds.
OUTCOME_COMPACTED = "compacted"
OUTCOME_RESUMED = "resumed"
OUTCOME_NOTHING = "nothing_to_do"
OUTCOME_CONFLICT = "conflict"
OUTCOME_ABANDONED = "abandoned"
OUTCOME_BUSY = "busy"
"""Another compactor holds the log's claim."""
OUTCOME_NOT_INITIALIZED = "not_initialized"
"""A seed target without ``meta/control`` (yet)."""
OUTCOME_ERROR = "error"


class Compactor(Protocol):
    """What the service needs of ``LeaderlessLogCompactor``."""

    def compact_once(self, topic: str, partition: int, max_offsets: int | None = None) -> Any: ...

    def close(self) -> None: ...


class VacuumLike(Protocol):
    def run_once(self, dry_run: bool = False) -> Any: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class TaskResult:
    """One worker attempt on one log."""

    tp: TopicPartition
    outcome: str
    """A CompactionOutcome value, ``busy``, ``not_initialized`` or ``error``."""
    result: Any = None
    """The ``CompactionResult`` when ``compact_once`` returned."""
    error: str | None = None
    seconds: float = 0.0
