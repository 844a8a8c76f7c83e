"""The compactor service's vacuum (SPEC 7.9): one pass on demand, or every interval on a thread.

The ``Vacuum`` is made on first use and kept. A failed pass is logged and
the next interval tries again (``periodic.py``).
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable

from .._runtime import RandomSource
from .periodic import PeriodicPass
from .tasks import VacuumLike

__all__ = ["VacuumRunner"]

log = logging.getLogger(__name__)


class VacuumRunner(PeriodicPass):
    """Runs ``VacuumLike.run_once`` for the service; ``interval_ms`` 0: only on demand.

    ``start()`` runs the timer thread (``llog-compactor-vacuum``) until
    ``stop`` is set; ``close()`` closes the vacuum it made.
    """

    def __init__(
        self,
        factory: Callable[[], VacuumLike],
        interval_ms: int,
        stop: threading.Event,
        rng: RandomSource,
    ) -> None:
        super().__init__("llog-compactor-vacuum", interval_ms, stop, rng)
        self._factory = factory
        self._vacuum: VacuumLike | None = None

    def run_once(self) -> Any:
        """One vacuum pass now; its report, or None if it failed. Never raises."""
        try:
            if self._vacuum is None:
                self._vacuum = self._factory()
            report = self._vacuum.run_once()
        except Exception as exc:  # noqa: BLE001 - the next interval tries again
            log.warning("vacuum pass failed: %s", exc)
            return None
        log.info(
            "vacuum: scanned %d objects, deleted %d (%d bytes), %d redundant index entries, %d errors",
            report.scanned, len(report.deleted), report.bytes_reclaimed,
            len(report.redundant_entries), len(report.errors),
        )
        return report

    def close(self) -> None:
        """Close the vacuum, if one was made (safe to call twice)."""
        vacuum, self._vacuum = self._vacuum, None
        if vacuum is not None:
            vacuum.close()
