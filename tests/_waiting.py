"""Waiting in tests for a condition, never for a length of time.

A test that sleeps "long enough" for an effect is flaky on a loaded machine
and hides what it waits for. :func:`wait_until` polls a predicate until it
holds; its timeout is a failure deadline (generous, never a timing
expectation), and the failure says what never happened.

Prefer an Event, a gauge or a counter the code already exposes as the
predicate; to let time pass, inject a clock where the library takes one.
"""

from __future__ import annotations

import time
from typing import Callable, TypeVar

__all__ = ["wait_until"]

T = TypeVar("T")


def wait_until(predicate: Callable[[], T], timeout_s: float = 10.0,
               what: str | Callable[[], str] = "the condition", *, interval_s: float = 0.01) -> T:
    """Call ``predicate`` until it returns a truthy value and return that value;
    raise AssertionError naming ``what`` if ``timeout_s`` passes first (a
    callable ``what`` is called then, so it can show the state at the failure)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what() if callable(what) else what}")
        time.sleep(interval_s)
