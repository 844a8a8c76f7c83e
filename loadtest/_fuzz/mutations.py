"""Every case kind with its weight, and the seeded choice of the next case.

The choice and the case both come from one ``random.Random``, so the run's
sequence of cases is a function of its seed (the timing of the answers is
not: the cases run on several threads).
"""

from __future__ import annotations

import random
from typing import Callable

from .mutate_admin import ADMIN_CASES
from .mutate_binary import BINARY_CASES
from .mutate_http import HTTP_CASES
from .mutate_json import JSON_CASES
from .requests import Case, Ctx

__all__ = ["KINDS", "next_case"]

_Build = Callable[[random.Random, Ctx], Case]


def _bind(build: Callable[[random.Random, Ctx, str], Case], target: str) -> _Build:
    return lambda rng, ctx: build(rng, ctx, target)


def _table() -> list[tuple[str, str, float, _Build]]:
    rows: list[tuple[str, str, float, _Build]] = []
    for kind, (weight, build) in {**JSON_CASES, **BINARY_CASES, **ADMIN_CASES}.items():
        rows.append(("broker", kind, weight, build))
    for kind, (broker_weight, compactor_weight, http_build) in HTTP_CASES.items():
        if broker_weight:
            rows.append(("broker", kind, broker_weight, _bind(http_build, "broker")))
        if compactor_weight:
            rows.append(("compactor", kind, compactor_weight, _bind(http_build, "compactor")))
    return rows


_TABLE = _table()
KINDS = tuple(sorted({kind for _, kind, _, _ in _TABLE}))
_WEIGHTS = [weight for _, _, weight, _ in _TABLE]


def next_case(rng: random.Random, ctx: Ctx) -> Case:
    """The next case: a kind drawn by weight, then built."""
    (_, _, _, build), = rng.choices(_TABLE, weights=_WEIGHTS)
    return build(rng, ctx)
