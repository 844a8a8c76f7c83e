"""The compactor service's vacuum (SPEC 7.9): one pass on demand, or every interval on a thread.

The ``Vacuum`` is made on first use and kept. A failed pass is logged and
the next interval tries again. The first timed pass starts at a random point
of the first interval, so a fleet started together does not vacuum in
lockstep.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable

from .._runtime import RandomSource
from .tasks import VacuumLike

__all__ = ["VacuumRunner"]

log = logging.getLogger(__name__)


class VacuumRunner:
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
        self._factory = factory
        self._interval_s = interval_ms / 1000
        self._stop = stop
        self._rng = rng
        self._vacuum: VacuumLike | None = None
        self.thread: threading.Thread | None = None
        """The timer thread; None until started, or when the interval is 0."""

    def start(self) -> None:
        if self._interval_s <= 0 or self.thread is not None:
            return
        self.thread = threading.Thread(target=self._loop, name="llog-compactor-vacuum", daemon=True)
        self.thread.start()

    def join(self, timeout_s: float) -> None:
        if self.thread is not None:
            self.thread.join(timeout=timeout_s)

    def _loop(self) -> None:
        first: float | None = self._interval_s * self._rng.uniform(0.5, 1.0)
        while not self._stop.wait(first if first is not None else self._interval_s):
            first = None
            self.run_once()

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
