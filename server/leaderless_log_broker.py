"""The HTTP broker (the reference system's module name): a short face.

    python -m server.leaderless_log_broker --role both --port 8080
    llog-broker --help

The broker lives in ``server/_broker/`` (``broker.py``: the ``Broker``, its
routes and lifecycle, built from parts or ``Broker.from_env``; ``cli.py``:
flags, ``serve``, ``main``; ``http.py``, ``codec.py``, ``consume.py``,
``config.py``, ``tail_cache*.py``); this module re-exports its public names
and is the entry point.
"""

from __future__ import annotations

from ._broker.broker import Broker
from ._broker.cli import main, parse_args, serve
from ._broker.http import BrokerHTTPServer, Response
from ._signals import exit_process

__all__ = ["Broker", "BrokerHTTPServer", "Response", "main", "parse_args", "serve"]

if __name__ == "__main__":
    exit_process(main())
