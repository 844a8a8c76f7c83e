"""llog: a diskless, leaderless Kafka-style log on Oxia and S3.

The public API::

    from server import LeaderlessLogWriter, SharedAppendGroup, LeaderlessLogReader

The seed's module paths (``server.leaderless_log_writer`` ...) work too.
"""

from __future__ import annotations

from .leaderless_log_common import *  # noqa: F401,F403
from .leaderless_log_common import __all__ as _common
from .leaderless_log_metrics import LlogMetrics
from .leaderless_log_reader import LeaderlessLogReader
from .leaderless_log_writer import BatchingProducer, LeaderlessLogWriter

__all__ = [*_common, "LlogMetrics", "LeaderlessLogReader", "LeaderlessLogWriter", "BatchingProducer"]
