"""The compactor service process: flags, ``config_from_args`` and ``main``.

    python -m server.leaderless_log_compactor_server --help
    llog-compactor --help

The service itself (threads, claims, scheduling) is described in
:mod:`server._compaction`.
"""


from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import textwrap
import threading
from typing import Mapping, Sequence

from .config import CompactorServiceConfig, VacuumConfig
from .service import CompactorService
from .tasks import TaskOutcome
from .._config import OxiaConfig, S3Config
from .._errors import ConfigError, LlogError
from .._settings import Flags, environment_help
from .._signals import wait_for_stop
from .._storage.billing import S3Prices

__all__ = ["main", "parse_args", "config_from_args", "FLAGS", "ENVIRONMENT"]

log = logging.getLogger(__name__)


# -- command line -----------------------------------------------------------------------------------
FLAGS = (Flags(CompactorServiceConfig), Flags(VacuumConfig, prefix="vacuum-"))
"""The flags: one per setting of the service (``--workers`` ...) and of its vacuum (``--vacuum-grace-ms`` ...)."""
ENVIRONMENT = (OxiaConfig, S3Config, S3Prices)
"""The other configs the service reads from the environment (``CompactorService.from_env``)."""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="llog-compactor",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=textwrap.fill(
            "The llog compactor service: compacts every initialized log under LLOG_ROOT_PREFIX "
            "(seed targets plus discovery), one claimed task per log at a time, runs vacuum on an "
            "interval and serves GET /health, /metrics and /metrics/prometheus. Each flag overrides its "
            "variable. SIGTERM/SIGINT stop it cleanly.", 100,
        ),
        epilog="Also read from the environment (see .env.example):\n" + environment_help(ENVIRONMENT),
    )
    for flags in FLAGS:
        flags.add_to(p)
    p.add_argument("--once", action="store_true",
                   help="one compaction attempt per known log (targets + discovery), then exit; no HTTP")
    p.add_argument("--log-level", default="INFO", help="logging level (default INFO)")
    return p


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    return _parser().parse_args(argv)


def config_from_args(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> CompactorServiceConfig:
    """The environment's config with every given flag applied on top."""
    service, vacuum = FLAGS
    return CompactorServiceConfig.from_env(
        env, vacuum=VacuumConfig.from_env(env, **vacuum.values(args)), **service.values(args)
    )


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    """``llog-compactor``: run until SIGTERM/SIGINT (exit 0), or one pass with ``--once``
    (exit 0 if no attempt failed, else 1). Bad configuration exits 2."""
    args = parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(threadName)s %(name)s: %(message)s"
    )
    try:
        config = config_from_args(args, env)
        service = CompactorService.from_env(env, config=config, serve_http=not args.once)
    except ConfigError as exc:
        print(f"llog-compactor: {exc}", file=sys.stderr)
        return 2
    except LlogError as exc:
        print(f"llog-compactor: cannot start: {exc}", file=sys.stderr)
        return 1

    stopping = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        if stopping.is_set():
            log.warning("second %s: exiting now", signal.Signals(signum).name)
            os._exit(1)
        log.info("%s: shutting down", signal.Signals(signum).name)
        stopping.set()
        service.request_stop()  # also ends a --once pass early

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    if args.once:
        try:
            results = service.run_pass()
        finally:
            service.close()
        counts: dict[str, int] = {}
        for r in results:
            counts[r.outcome.value] = counts.get(r.outcome.value, 0) + 1
        print(json.dumps({"partitions": len(results), "outcomes": counts}))
        return 1 if counts.get(TaskOutcome.ERROR.value) else 0

    try:
        service.start()
        wait_for_stop(stopping)
    except OSError as exc:  # typically the HTTP port is taken
        print(f"llog-compactor: cannot serve HTTP on {config.bind_host}:{config.port}: {exc}", file=sys.stderr)
        return 1
    finally:
        service.close()
    return 0

