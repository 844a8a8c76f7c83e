"""Waiting in the main thread for a signal handler to set an Event.

CPython runs a signal's Python handler only in the main thread, between
bytecodes. The kernel delivers a process-directed signal (``kill``'s SIGTERM)
to any thread that does not block it, and a broker has many (gRPC's, the
listeners', the pools'). When another thread takes it, CPython only marks the
signal pending: a main thread blocked in an untimed ``Event.wait()`` is not
woken, the handler never runs, and the process ignores SIGTERM until it is
killed. Waiting in short slices returns to bytecode, where the pending
handler runs, so a stop is seen within one slice whichever thread took the
signal.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from typing import NoReturn

SLICE_S = 0.05
"""How long the main thread may block before it looks at pending signals."""


def wait_for_stop(stop: threading.Event, timeout_s: float | None = None) -> bool:
    """``stop.wait(timeout_s)`` that lets signal handlers run meanwhile;
    True once ``stop`` is set, False when ``timeout_s`` ran out first."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        left = SLICE_S if deadline is None else min(SLICE_S, deadline - time.monotonic())
        if left <= 0:
            return stop.is_set()
        if stop.wait(left):
            return True


def exit_process(code: int) -> NoReturn:
    """End a server's process once it has closed what it opened: flush the logs and the
    standard streams, then leave without the interpreter's teardown, whose final garbage
    collection of every module took 0.3 s of each broker's stop and had nothing left to
    close. Only for a ``__main__``: it ends the process, not the call."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nobody reads it any more
            pass
    os._exit(code)
