"""Vacuum of unreferenced objects (SPEC 7.9; the reference system's module name): a face.

    python -m server.leaderless_log_vacuum --dry-run
    llog-vacuum --help

The pass lives in ``server/_compaction/vacuum.py``, the command line in
``server/_compaction/vacuum_cli.py``; the compactor service also runs it on a
timer. This module re-exports the public names and is the entry point.
"""

from __future__ import annotations

import sys

from ._compaction.vacuum import *  # noqa: F401,F403  (the names in its __all__)
from ._compaction.vacuum import __all__ as _vacuum_names
from ._compaction.vacuum_cli import format_report, main, parse_args

__all__ = [*_vacuum_names, "format_report", "main", "parse_args"]

if __name__ == "__main__":
    sys.exit(main())
