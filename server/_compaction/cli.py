"""The compactor service process: flags, ``config_from_args`` and ``main``.

    python -m server.leaderless_log_compactor_server --help
    llog-compactor --help

The service itself (threads, claims, scheduling) is described in
:mod:`server._compaction`.
"""


from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import signal
import sys
import threading
from typing import Any, Mapping, Sequence

from .config import CompactorServiceConfig, parse_targets
from .service import CompactorService
from .tasks import TaskOutcome
from .._errors import ConfigError, LlogError

__all__ = ["main", "parse_args", "config_from_args"]

log = logging.getLogger(__name__)


# -- command line -----------------------------------------------------------------------------------
def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="llog-compactor",
        description=(
            "The llog compactor service: compacts every initialized log under LLOG_ROOT_PREFIX "
            "(seed targets plus discovery), one claimed task per log at a time, runs vacuum on an "
            "interval and serves GET /health, /metrics and /metrics/prometheus. Reads LLOG_OXIA_*, "
            "LLOG_S3_*, LLOG_COMPACTOR_* and LLOG_VACUUM_* from the environment; flags override them. "
            "SIGTERM/SIGINT stop it cleanly."
        ),
    )
    p.add_argument("--targets", help="seed logs, e.g. orders:0,orders:1 (LLOG_COMPACTOR_TARGETS)")
    p.add_argument("--workers", type=int, help="logs compacted in parallel (LLOG_COMPACTOR_WORKERS, default 2)")
    p.add_argument("--compactor-id", help="identity written into claims (LLOG_COMPACTOR_ID, default hostname-pid)")
    p.add_argument("--bind-host", help="HTTP bind address (LLOG_COMPACTOR_BIND_HOST, default 127.0.0.1)")
    p.add_argument("--port", type=int, help="HTTP port, 0 for any free one (LLOG_COMPACTOR_PORT, default 8090)")
    p.add_argument("--discovery-interval-ms", type=int,
                   help="scan for new logs this often, 0 disables (LLOG_COMPACTOR_DISCOVERY_INTERVAL_MS, default 30000)")
    p.add_argument("--idle-sleep-ms", type=int, help="LLOG_COMPACTOR_IDLE_SLEEP_MS (default 1000)")
    p.add_argument("--error-sleep-ms", type=int, help="LLOG_COMPACTOR_ERROR_SLEEP_MS (default 5000)")
    p.add_argument("--idle-jitter-ms", type=int, help="LLOG_COMPACTOR_IDLE_JITTER_MS (default 500)")
    p.add_argument("--error-jitter-ms", type=int, help="LLOG_COMPACTOR_ERROR_JITTER_MS (default 2000)")
    p.add_argument("--max-offsets-per-run", type=int, help="LLOG_COMPACTOR_MAX_OFFSETS_PER_RUN (default 100000)")
    p.add_argument("--max-bytes-per-run", type=int, help="LLOG_COMPACTOR_MAX_BYTES_PER_RUN (default 64 MiB)")
    p.add_argument("--blob-cache-bytes", type=int,
                   help="memory for shared WAL blobs several logs compact from, 0 disables "
                        "(LLOG_COMPACTOR_BLOB_CACHE_BYTES, default 128 MiB)")
    p.add_argument("--shutdown-timeout-ms", type=int,
                   help="wait this long for in-flight runs on shutdown (LLOG_COMPACTOR_SHUTDOWN_TIMEOUT_MS, default 30000)")
    p.add_argument("--vacuum-interval-ms", type=int,
                   help="run vacuum this often, 0 disables (LLOG_VACUUM_INTERVAL_MS, default 600000)")
    p.add_argument("--vacuum-grace-ms", type=int, help="vacuum grace period (LLOG_VACUUM_GRACE_MS, default 3600000)")
    p.add_argument("--once", action="store_true",
                   help="one compaction attempt per known log (targets + discovery), then exit; no HTTP")
    p.add_argument("--log-level", default="INFO", help="logging level (default INFO)")
    return p.parse_args(argv)


def config_from_args(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> CompactorServiceConfig:
    """The environment's config with every given flag applied on top."""
    config = CompactorServiceConfig.from_env(env)
    flags = {
        "workers": args.workers, "compactor_id": args.compactor_id, "bind_host": args.bind_host,
        "port": args.port, "discovery_interval_ms": args.discovery_interval_ms,
        "idle_sleep_ms": args.idle_sleep_ms, "error_sleep_ms": args.error_sleep_ms,
        "idle_jitter_ms": args.idle_jitter_ms, "error_jitter_ms": args.error_jitter_ms,
        "max_offsets_per_run": args.max_offsets_per_run, "max_bytes_per_run": args.max_bytes_per_run,
        "shutdown_timeout_ms": args.shutdown_timeout_ms, "blob_cache_bytes": args.blob_cache_bytes,
    }
    changes: dict[str, Any] = {k: v for k, v in flags.items() if v is not None}
    if args.targets is not None:
        changes["targets"] = parse_targets(args.targets)
    vacuum = {"interval_ms": args.vacuum_interval_ms, "grace_ms": args.vacuum_grace_ms}
    vacuum = {k: v for k, v in vacuum.items() if v is not None}
    if vacuum:
        changes["vacuum"] = dataclasses.replace(config.vacuum, **vacuum)
    return dataclasses.replace(config, **changes)


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
        while not stopping.wait(0.5):
            pass
    except OSError as exc:  # typically the HTTP port is taken
        print(f"llog-compactor: cannot serve HTTP on {config.bind_host}:{config.port}: {exc}", file=sys.stderr)
        return 1
    finally:
        service.close()
    return 0

