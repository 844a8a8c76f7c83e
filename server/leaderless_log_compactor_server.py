"""The long-running compactor service (the reference system's module name): a short face.

    python -m server.leaderless_log_compactor_server --help
    llog-compactor --help

The service lives in ``server/_compaction/`` (its design in the package
docstring, the process in ``cli.py``, the threads in ``service.py``); this
module re-exports its public names and is the entry point.
"""

from __future__ import annotations

from ._compaction.cli import config_from_args, main, parse_args
from ._compaction.service import CompactorService
from ._compaction.tasks import TaskOutcome, TaskResult
from ._signals import exit_process

__all__ = ["CompactorService", "TaskOutcome", "TaskResult", "main", "parse_args", "config_from_args"]

if __name__ == "__main__":
    exit_process(main())
