"""The read path (the reference system's module name): a short face.

``LeaderlessLogReader`` and its value types live in ``server/_log/reader.py``
(the sparse-index lookup in ``server/_log/index.py``); this module
re-exports them so ``from server.leaderless_log_reader import ...`` keeps
working.
"""

from __future__ import annotations

from ._log.reader import *  # noqa: F401,F403  (the names in its __all__)
from ._log.reader import __all__ as _reader_names

__all__ = [*_reader_names]
