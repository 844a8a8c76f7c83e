"""``tests._waiting.wait_until``, the suite's one way to wait for a condition."""

from __future__ import annotations

import pytest

from tests._waiting import wait_until


def test_returns_the_first_truthy_value() -> None:
    values = iter([0, None, "", 7])
    assert wait_until(lambda: next(values), 5.0, "the fourth value") == 7


def test_a_timeout_names_what_never_happened_a_callable_at_the_failure() -> None:
    with pytest.raises(AssertionError, match="waiting for the door"):
        wait_until(lambda: False, 0.02, "the door")
    state = {"calls": 0}

    def never() -> bool:
        state["calls"] += 1
        return False

    with pytest.raises(AssertionError, match=r"waiting for \d+ calls so far") as failed:
        wait_until(never, 0.02, lambda: f"{state['calls']} calls so far")
    assert f"{state['calls']} calls so far" in str(failed.value)  # described after the last call, not before the first
