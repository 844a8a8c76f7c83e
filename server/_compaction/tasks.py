"""What the compactor service runs and how a run can end.

``TaskResult`` is one worker attempt on one log; its ``outcome`` is a
``TaskOutcome``: a ``CompactionOutcome`` value or one the service adds
(``busy``, ``not_initialized``, ``error``). ``Compactor`` and ``VacuumLike``
are the small Protocols the service needs of ``LeaderlessLogCompactor`` and
``Vacuum``, so unit tests can hand it fakes; ``close_quietly`` closes
them (and the stores) on shutdown.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol

from .._protocol.keys import TopicPartition

__all__ = ["Compactor", "VacuumLike", "TaskOutcome", "TaskResult", "close_quietly"]

log = logging.getLogger(__name__)


class TaskOutcome(str, Enum):
    """How one task ended: the ``CompactionOutcome`` values plus what the service adds.

    The values are the ``outcome`` labels of ``compactor_tasks_total`` and the
    ``last_outcome`` of ``/metrics``; pass ``.value`` where a plain string is
    wanted (``str()`` of a member is ``TaskOutcome.BUSY`` on Python 3.11).
    """

    COMPACTED = "compacted"
    RESUMED = "resumed"
    NOTHING_TO_DO = "nothing_to_do"
    CONFLICT = "conflict"
    ABANDONED = "abandoned"
    DEFERRED = "deferred"
    BUSY = "busy"
    """Another compactor holds the log's claim."""
    NOT_INITIALIZED = "not_initialized"
    """A seed target without ``meta/control`` (yet)."""
    ERROR = "error"


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
    outcome: TaskOutcome
    """A CompactionOutcome value, ``busy``, ``not_initialized`` or ``error``."""
    result: Any = None
    """The ``CompactionResult`` when ``compact_once`` returned."""
    error: str | None = None
    seconds: float = 0.0


def close_quietly(obj: Any) -> None:
    """``obj.close()``, logging (at debug) instead of raising: closing must not mask shutdown."""
    try:
        obj.close()
    except Exception as exc:  # noqa: BLE001
        log.debug("closing %r failed: %s", obj, exc)
