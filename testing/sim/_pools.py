"""Thread pools that keep every store call on the actor's own thread.

The writer commits partitions on ``_pool`` and the reader reads ahead on
``_pool``. In a run each actor is one scheduled thread, so
:func:`inline_pools` replaces those pools, per instance, with an
:class:`InlineExecutor` that runs each task at ``submit`` in the caller's
thread.
"""

from __future__ import annotations

from concurrent.futures import Future

__all__ = ["InlineExecutor", "inline_pools"]


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
