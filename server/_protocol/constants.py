"""The protocol's numbers (SPEC 7.0, "Deadlines that protect vacuum"), declared once.

Vacuum deletes an unreferenced object once it is older than the grace period
``G``; so a process that wrote an object must not make the first reference
to it (a reservation, SPEC 7.3; a ``meta/compaction`` record, SPEC 7.7) once
the object's ``created_at_ms`` is more than ``D`` in the past, and ``D`` is at
most ``G / 2`` minus the worst clock skew between machines. The writer, the
compactor and vacuum import these; nothing repeats them as literals.
"""

from __future__ import annotations

from .._errors import ConfigError

__all__ = [
    "REFERENCE_DEADLINE_MS", "VACUUM_GRACE_MS", "MAX_CLOCK_SKEW_MS", "MIN_SAFE_GRACE_MS",
    "check_grace", "check_reference_deadline",
]

REFERENCE_DEADLINE_MS = 60_000
"""SPEC 7.0 ``D`` (the suggested 60 s): never make the first reference to an
object whose ``created_at_ms`` is further in the past than this."""

VACUUM_GRACE_MS = 3_600_000
"""SPEC 7.0 ``G`` (the suggested one hour): vacuum keeps every object younger
than this, referenced or not."""

MAX_CLOCK_SKEW_MS = 5_000
"""The worst clock skew between machines llog allows for (NTP keeps real
machines within tens of milliseconds; 5 s leaves room for a bad one)."""

MIN_SAFE_GRACE_MS = 2 * (REFERENCE_DEADLINE_MS + MAX_CLOCK_SKEW_MS)
"""SPEC 7.0 ``D <= G / 2 - skew``, so ``G >= 2 (D + skew)``: a shorter grace
period can delete an object that a paused append or compaction references
afterwards (130 s)."""


def check_grace(grace_ms: int, *, allow_unsafe: bool = False, name: str = "LLOG_VACUUM_GRACE_MS") -> None:
    """Refuse a vacuum grace period that breaks SPEC 7.0.

    ``allow_unsafe`` is for a vacuum run while no writer and no compactor
    runs at all (a clean-up after everything stopped, a test on quiet
    stores): with nothing in flight, no reference can appear late.
    """
    if grace_ms < 0:
        raise ConfigError(f"{name} must be >= 0, got {grace_ms}")
    if grace_ms < MIN_SAFE_GRACE_MS and not allow_unsafe:
        raise ConfigError(
            f"{name} is {grace_ms} ms, below the minimum of {MIN_SAFE_GRACE_MS} ms: an append or a compaction "
            f"may reference its object up to {REFERENCE_DEADLINE_MS} ms after writing it (SPEC 7.0 D), and "
            f"clocks may differ by {MAX_CLOCK_SKEW_MS} ms, so vacuum must wait 2 x (D + skew) before deleting "
            "an unreferenced object or it can delete acknowledged records. Raise it, or set "
            "LLOG_VACUUM_ALLOW_UNSAFE_GRACE=true only while no writer and no compactor runs."
        )


def check_reference_deadline(max_reference_age_ms: int, *, what: str) -> None:
    """Refuse a reference deadline longer than the ``D`` vacuum's grace is
    sized for (a shorter one is safe: it only abandons more)."""
    if not 0 < max_reference_age_ms <= REFERENCE_DEADLINE_MS:
        raise ConfigError(
            f"{what} max_reference_age_ms must be 1-{REFERENCE_DEADLINE_MS} ms (SPEC 7.0 D), got "
            f"{max_reference_age_ms}: vacuum deletes unreferenced objects older than 2 x (D + skew), so a "
            "later first reference could point at a deleted object"
        )
