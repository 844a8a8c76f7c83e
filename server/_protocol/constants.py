"""The protocol's numbers (SPEC 7.0, "Deadlines that protect vacuum"), declared once.

Vacuum deletes an unreferenced object once it is older than the grace period
``G``; so a process that wrote an object must not make the first reference
to it (a reservation, SPEC 7.3; a ``meta/compaction`` record, SPEC 7.7) once
the object's ``created_at_ms`` is more than ``D`` in the past, and ``D`` is at
most ``G / 2`` minus the worst clock skew between machines. The writer, the
compactor and vacuum import these; nothing repeats them as literals.
"""

from __future__ import annotations

__all__ = ["REFERENCE_DEADLINE_MS", "VACUUM_GRACE_MS", "MIN_SAFE_GRACE_MS"]

REFERENCE_DEADLINE_MS = 60_000
"""SPEC 7.0 ``D`` (the suggested 60 s): never make the first reference to an
object whose ``created_at_ms`` is further in the past than this."""

VACUUM_GRACE_MS = 3_600_000
"""SPEC 7.0 ``G`` (the suggested one hour): vacuum keeps every object younger
than this, referenced or not."""

MIN_SAFE_GRACE_MS = 2 * REFERENCE_DEADLINE_MS
"""SPEC 7.0 ``G >= 2D``: a shorter grace period can delete an object an append
or a compaction is about to reference."""
