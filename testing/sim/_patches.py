"""Take the library's nondeterminism away for the length of one run.

The simulator does not edit ``server/``; it swaps names inside the protocol
modules and restores them afterwards. Everything that could make two runs of
one seed differ is listed in ``PATCHED_MODULES`` below, with why:

- ``time``: the writer's and compactor's blob age rule (SPEC 7.0 ``D``), the
  vacuum's grace period and run timing, the compactor's stage timers, and
  ``Backoff``'s deadline and ``sleep`` all read the clock;
- ``uuid``: object names, ``append_id`` and ``compaction_id``;
- ``random``: ``Backoff`` draws its jitter from the global ``random``;
- ``Backoff``: its ``started_at`` default is ``field(default_factory=
  time.monotonic)``, which captured the *real* ``time.monotonic`` when the
  class was defined, so patching ``_retry.time`` alone is not enough: the
  modules that build one get a subclass whose default reads the sim clock.

Thread pools are replaced per instance (``inline_pools``): the writer commits
partitions on ``_pool`` and the reader reads ahead on ``_pool``; an
:class:`InlineExecutor` runs each task at ``submit`` in the caller's thread,
so every store call stays on the actor's own (scheduled) thread.

Patching module globals is process-wide: run one simulation per process at
a time.
"""

from __future__ import annotations

import contextlib
import importlib
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Iterator

from ._clock import SimTimeModule, SimUuidModule

__all__ = ["PATCHED_MODULES", "InlineExecutor", "determinism", "inline_pools"]

PATCHED_MODULES: dict[str, tuple[str, ...]] = {
    # _now_ms() for created_at_ms and the D check; uuid4 for blob names and
    # append ids; Backoff for CAS-conflict retries (jitter, deadline, sleep).
    "server._log.writer": ("time", "uuid", "Backoff"),
    # time.time for created_at_ms and the D check before K5, perf_counter for
    # stage timers; uuid4 for compacted object names and compaction ids.
    "server._compaction.compactor": ("time", "uuid", "Backoff"),
    # time.monotonic/time.time for run timing (the grace clock itself is
    # passed in as now_ms=, the vacuum's own seam).
    "server._compaction.vacuum": ("time",),
    # Backoff.next draws random.uniform jitter; exhausted/sleep use time.
    "server._retry": ("time", "random"),
}


class InlineExecutor:
    """A ``ThreadPoolExecutor`` stand-in that runs each task inside ``submit``.

    Ordinary exceptions go into the Future, as a pool would deliver them; a
    ``BaseException`` (the simulator's crash) propagates at once so it kills
    the actor that submitted the task.
    """

    def submit(self, fn, /, *args, **kwargs) -> Future:
        fut: Future = Future()
        try:
            fut.set_result(fn(*args, **kwargs))
        except Exception as exc:  # noqa: BLE001 - delivered through the Future, like a pool
            fut.set_exception(exc)
        return fut

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        pass


def inline_pools(obj: object) -> object:
    """Replace ``obj._pool`` (and its reader's, for a compactor) with an
    InlineExecutor; returns ``obj``. The original pools never started a
    thread (ThreadPoolExecutor starts workers on the first submit)."""
    for target in (obj, getattr(obj, "_reader", None)):
        if target is not None and hasattr(target, "_pool"):
            target._pool.shutdown(wait=False)
            target._pool = InlineExecutor()
    return obj


def _sim_backoff(base: type, time_module: SimTimeModule) -> type:
    @dataclass(frozen=True)
    class SimBackoff(base):  # type: ignore[misc, valid-type]
        """``Backoff`` whose ``started_at`` reads the simulated clock."""

        started_at: float = field(default_factory=time_module.monotonic)

    return SimBackoff


@contextlib.contextmanager
def determinism(time_module: SimTimeModule, uuid_module: SimUuidModule, jitter) -> Iterator[None]:
    """Patch ``PATCHED_MODULES`` for the duration of the block, then restore.

    ``jitter`` replaces the ``random`` module for ``Backoff`` (anything with
    ``uniform``: a seeded ``random.Random``).
    """
    retry = importlib.import_module("server._retry")
    values = {
        "time": time_module,
        "uuid": uuid_module,
        "random": jitter,
        "Backoff": _sim_backoff(retry.Backoff, time_module),
    }
    saved: list[tuple[object, str, object]] = []
    try:
        for name, attrs in PATCHED_MODULES.items():
            module = importlib.import_module(name)
            for attr in attrs:
                if hasattr(module, attr):
                    saved.append((module, attr, getattr(module, attr)))
                    setattr(module, attr, values[attr])
        yield
    finally:
        for module, attr, old in reversed(saved):
            setattr(module, attr, old)
