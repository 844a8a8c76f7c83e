"""Keep a reused PySpark worker's memory management cheap: the garbage
collection Spark runs after every task, and the allocator's page faults.

A reused PySpark worker calls ``gc.collect()`` after each task
(``pyspark/daemon.py``). Once a worker has imported pyarrow, boto3 and the
gRPC Oxia client and holds an open reader, it tracks about 100k container
objects, and each of those full collections costs about 55 ms of CPU per
task (measured on the 2-core box; a read task of 25 MB takes 100-200 ms).
Those objects live as long as the worker. So after the first task that
created them the worker collects once and moves everything that survived
into the permanent generation (``gc.freeze()``, the pre-fork server idiom):
later collections scan only what later tasks create.

A read task also allocates and frees a few MiB per S3 GET. With glibc's
defaults the freed memory goes back to the kernel (heap trimming) and the
next GET faults it in again, a page at a time: about 12k page faults per
200 MB read on the 2-core VM, 0.03-0.05 s of system CPU. So a worker that
reads sets fixed thresholds once (:func:`keep_freed_memory`): blocks below
16 MiB come from the heap, and up to 64 MiB of freed heap stays for reuse.
"""

from __future__ import annotations

import ctypes
import gc
import threading
from typing import Iterator, TypeVar

__all__ = ["after_first_task", "freeze_long_lived", "keep_freed_memory"]

T = TypeVar("T")

_frozen = False
_tuned = False
_lock = threading.Lock()

_M_TRIM_THRESHOLD = -1  # glibc <malloc.h>
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 16 << 20
TRIM_THRESHOLD = 64 << 20


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


def keep_freed_memory() -> bool:
    """Once per process: glibc's ``mallopt`` thresholds as described above.
    True if they were set; False elsewhere (another C library, or a later call)."""
    global _tuned
    with _lock:
        if _tuned:
            return False
        _tuned = True
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the C library this process runs on
    except (OSError, AttributeError):  # none with mallopt
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
