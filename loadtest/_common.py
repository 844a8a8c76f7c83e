"""What every benchmark shares: where to run.

``stack_env`` returns the ``LLOG_*`` environment of the stack named in this
process's environment, or of a private local stack (Oxia + MinIO in a
temporary directory, stopped with ``stack``) when ``LLOG_OXIA_SERVICE_ADDRESS``
is not set. Either way the benchmark gets a fresh root prefix, so it starts
from empty partitions and never writes into an existing log.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Callable, Iterable

__all__ = ["stack_env", "run_threads"]


def stack_env(stack: ExitStack) -> dict[str, str]:
    if os.environ.get("LLOG_OXIA_SERVICE_ADDRESS"):
        env = {k: v for k, v in os.environ.items() if k.startswith(("LLOG_", "AWS_"))}
    else:
        from server.devstack import LocalStack

        print("[bench] no LLOG_OXIA_SERVICE_ADDRESS: starting a private local stack ...", flush=True)
        data = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="llog-bench-")))
        env = stack.enter_context(LocalStack(data)).settings.env()
    env["LLOG_ROOT_PREFIX"] = f"bench-{uuid.uuid4().hex[:8]}"
    return env


def run_threads(target: Callable[..., object], args: Iterable[object], name: str = "bench") -> float:
    """Run ``target(arg)`` on one named thread per arg; return the seconds until all finished."""
    started = time.monotonic()
    threads = [threading.Thread(target=target, args=(a,), name=f"{name}-{i}") for i, a in enumerate(args)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.monotonic() - started
