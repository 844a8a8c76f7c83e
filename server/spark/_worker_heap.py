"""Keep the garbage collection that Spark runs after every task cheap.

A reused PySpark worker calls ``gc.collect()`` after each task
(``pyspark/daemon.py``). Once a worker has imported pyarrow, boto3 and the
gRPC Oxia client and holds an open reader, it tracks about 100k container
objects, and each of those full collections costs about 55 ms of CPU per
task (measured on the 2-core box; a read task of 25 MB takes 100-200 ms).
Those objects live as long as the worker. So after the first task that
created them the worker collects once and moves everything that survived
into the permanent generation (``gc.freeze()``, the pre-fork server idiom):
later collections scan only what later tasks create.
"""

from __future__ import annotations

import gc
import threading
from typing import Iterator, TypeVar

__all__ = ["after_first_task", "freeze_long_lived"]

T = TypeVar("T")

_frozen = False
_lock = threading.Lock()


def freeze_long_lived() -> bool:
    """Collect, then freeze what is left; only the first call in a process does anything."""
    global _frozen
    with _lock:
        if _frozen:
            return False
        _frozen = True
    gc.collect()
    gc.freeze()
    return True


def after_first_task(items: Iterator[T]) -> Iterator[T]:
    """``items``, then :func:`freeze_long_lived` once they are exhausted
    (the task's clients and imports are in place by then)."""
    yield from items
    freeze_long_lived()
