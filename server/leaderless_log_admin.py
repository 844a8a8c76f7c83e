"""``llog-admin``: the operator's console script (the topic catalogue): a face.

    python -m server.leaderless_log_admin topics create orders --partitions 12
    llog-admin --help

The commands live in ``server/_admin/cli.py``, the catalogue in ``server/_catalogue/``.
"""

from __future__ import annotations

import sys

from ._admin.cli import main, parse_args

__all__ = ["main", "parse_args"]

if __name__ == "__main__":
    sys.exit(main())
