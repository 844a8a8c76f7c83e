"""What the actors did and saw: the history the checker judges.

Like Jepsen's Kafka history, every append attempt is recorded with its
outcome -- acknowledged (with offsets), a definite failure, or unknown (the
writer could not tell, or crashed) -- and every record an actor read is
queued for the checker. Payloads are unique per append (``w1-17-0-3``: writer
1, append 17, group 0, record 3), so any record read names its append.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from server._errors import LlogError, OutcomeUnknown

__all__ = ["Attempt", "History", "is_unknown_outcome", "ACKED", "FAILED", "UNKNOWN", "INFLIGHT"]

ACKED, FAILED, UNKNOWN, INFLIGHT = "acked", "failed", "unknown", "inflight"

TP = tuple[str, int]


def is_unknown_outcome(error: BaseException) -> bool:
    """True if an append error leaves open whether the records were appended:
    only ``OutcomeUnknown``. Every other error is definite (SPEC 1.3), and the
    checker holds the writer to it: such a batch must never appear."""
    return isinstance(error, OutcomeUnknown)


@dataclass
class Attempt:
    """One group of one ``append_shared`` call."""

    id: int
    actor: str
    tp: TP
    payloads: tuple[bytes, ...]
    status: str = INFLIGHT
    start_offset: int | None = None
    end_offset: int | None = None
    error: str = ""


@dataclass
class History:
    attempts: list[Attempt] = field(default_factory=list)
    by_payload: dict[bytes, list[Attempt]] = field(default_factory=dict)
    acked: dict[TP, dict[int, bytes]] = field(default_factory=dict)
    """Per log, offset -> the payload an acknowledgement put there."""
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

    def begin(self, actor: str, tp: TP, payloads: tuple[bytes, ...]) -> Attempt:
        attempt = Attempt(len(self.attempts), actor, tp, payloads)
        self.attempts.append(attempt)
        for p in payloads:
            self.by_payload.setdefault(p, []).append(attempt)
        return attempt

    def acknowledge(self, attempt: Attempt, start: int, end: int) -> None:
        attempt.status, attempt.start_offset, attempt.end_offset = ACKED, start, end
        if end - start + 1 != len(attempt.payloads):
            self.violations.append(
                f"{attempt.actor}: append {attempt.id} of {len(attempt.payloads)} records acknowledged "
                f"as [{start}, {end}]")
            return
        self.new_acks.append(attempt)

    def fail(self, attempt: Attempt, error: BaseException) -> None:
        if type(error) is LlogError:  # the writer's wrapper for an unexpected exception
            self.violations.append(f"{attempt.actor}: append {attempt.id} hit an internal error: {error}")
        attempt.status = UNKNOWN if is_unknown_outcome(error) else FAILED
        attempt.error = f"{type(error).__name__}: {error}"

    def crashed(self, attempt: Attempt) -> None:
        if attempt.status == INFLIGHT:
            attempt.status, attempt.error = UNKNOWN, "writer crashed"

    def may_hold(self, payload: bytes) -> int:
        """How many times ``payload`` may appear in its log: once per attempt
        that was acknowledged, unknown or is still running."""
        return sum(1 for a in self.by_payload.get(payload, ()) if a.status != FAILED)
