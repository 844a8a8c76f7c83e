"""What the actors did and saw, recorded for the checker.

Every append attempt is recorded as it begins and gets its outcome in
``testing.history``'s vocabulary when it ends -- ``ok`` (with offsets), a
definite failure, or unknown (the writer could not tell, or crashed); every
record an actor read is queued for the checker. Payloads are unique per
append (``w1-17-0-3``: writer 1, append 17, group 0, record 3), so any record
read names its append; a writer that re-sends an unknown append sends the
same payloads, recorded as a retry of the first attempt.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from server._errors import LlogError

from ..history import Outcome, is_unknown_outcome

__all__ = ["Attempt", "History"]

TP = tuple[str, int]


@dataclass
class Attempt:
    """One group of one ``append_shared`` call (a ``testing.history.Batch``)."""

    batch_id: str
    actor: str
    tp: TP
    payloads: tuple[bytes, ...]
    outcome: Outcome | None = None
    """None while the append is in flight."""
    start_offset: int | None = None
    end_offset: int | None = None
    detail: str = ""
    """The error of an attempt that was not acknowledged."""
    retry_of: str | None = None
    idempotent: bool = False

    @property
    def when(self) -> str:
        return ""


@dataclass
class History:
    attempts: list[Attempt] = field(default_factory=list)
    sent: dict[tuple[TP, bytes], list[Attempt]] = field(default_factory=dict)
    """(log, payload) -> the attempts that sent it."""
    acked_offsets: dict[TP, list[int]] = field(default_factory=dict)
    """Acknowledged offsets per log in acknowledgement order (for sampling)."""
    reads: list[tuple[str, TP, int, bytes]] = field(default_factory=list)
    """Records read by reader actors, not yet checked: (actor, log, offset, payload)."""
    violations: list[str] = field(default_factory=list)
    """Problems an actor noticed itself (an error no correct run produces)."""
    references_in_flight: dict[str, int] = field(default_factory=dict)
    """Actor -> sim ms when its current append/compaction began: such an
    operation may still make a first reference to an object it wrote."""
    new_acks: list[Attempt] = field(default_factory=list)
    """Acknowledged since the checker last looked."""
    retention_passes: int = 0
    retention_advances: int = 0
    records_deletions: int = 0
    """DeleteRecords calls that returned (the start moved, or was at or past the offset already)."""
    topic_deletions: int = 0
    duplicates_answered: int = 0
    """Idempotent attempts answered as duplicates of an earlier one."""
    fenced_zombies: int = 0
    """Batches of a superseded producer epoch refused as fenced."""

    def begin(self, actor: str, tp: TP, payloads: tuple[bytes, ...], idempotent: bool = False) -> Attempt:
        earlier = self.sent.get((tp, payloads[0])) if payloads else None
        retry_of = earlier[0].batch_id if earlier and earlier[0].payloads == payloads else None
        attempt = Attempt(f"{actor}#{len(self.attempts)}", actor, tp, payloads, retry_of=retry_of,
                          idempotent=idempotent)
        self.attempts.append(attempt)
        for p in payloads:
            self.sent.setdefault((tp, p), []).append(attempt)
        return attempt

    def attempts_of(self, tp: TP, payload: bytes) -> list[Attempt]:
        """The attempts that sent ``payload`` to ``tp``."""
        return self.sent.get((tp, payload), [])

    def acknowledge(self, attempt: Attempt, start: int, end: int) -> None:
        attempt.outcome, attempt.start_offset, attempt.end_offset = Outcome.OK, start, end
        if end - start + 1 != len(attempt.payloads):
            self.violations.append(
                f"{attempt.actor}: append {attempt.batch_id} of {len(attempt.payloads)} records acknowledged "
                f"as [{start}, {end}]")
            return
        self.new_acks.append(attempt)
        self.acked_offsets.setdefault(attempt.tp, []).extend(range(start, end + 1))

    def fail(self, attempt: Attempt, error: BaseException) -> None:
        if type(error) is LlogError:  # the writer's wrapper for an unexpected exception
            self.violations.append(f"{attempt.actor}: append {attempt.batch_id} hit an internal error: {error}")
        attempt.outcome = Outcome.UNKNOWN if is_unknown_outcome(error) else Outcome.FAILED
        attempt.detail = f"{type(error).__name__}: {error}"

    def undecided(self, attempt: Attempt, detail: str) -> None:
        attempt.outcome, attempt.detail = Outcome.UNKNOWN, detail

    def crashed(self, attempt: Attempt) -> None:
        if attempt.outcome is None:
            attempt.outcome, attempt.detail = Outcome.UNKNOWN, "writer crashed"
