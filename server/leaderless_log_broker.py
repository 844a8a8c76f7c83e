"""The HTTP broker (the reference system's module name): a short face.

    python -m server.leaderless_log_broker --role both --port 8080
    llog-broker --help

The broker lives in ``server/_broker/`` (``broker.py``: lifecycle and the
command line; ``http.py``, ``codec.py``, ``consume.py``, ``config.py``,
``tail_cache*.py``); this module re-exports its public names and is the
entry point.
"""

from __future__ import annotations

import sys

from ._broker.broker import Broker, BrokerHTTPServer, Response, main, parse_args, serve

__all__ = ["Broker", "BrokerHTTPServer", "Response", "main", "parse_args", "serve"]

if __name__ == "__main__":
    sys.exit(main())
