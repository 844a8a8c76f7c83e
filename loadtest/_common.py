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
import uuid
from contextlib import ExitStack
from pathlib import Path

__all__ = ["stack_env"]


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
