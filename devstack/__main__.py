"""``python -m devstack``: build, start, inspect and stop the local stack.

    install                       build the Oxia and S3 server binaries (cached)
    up --data-dir D [--foreground]  start; prints ``export LLOG_...`` lines
    status --data-dir D           which processes run (exit 1 if any is down, 3 if not up)
    env --data-dir D              ``export LLOG_...`` lines for a running stack
    down --data-dir D             stop it (from any process: pids are in D/stack-state.json)
    prometheus --data-dir D --target [JOB=]HOST:PORT ...
                                  run Prometheus in the foreground, scraping those targets
"""

from __future__ import annotations

import argparse
import logging
import shlex
import signal
import sys
import time
from pathlib import Path
from types import FrameType

from server._errors import LlogError

from ._binaries import S3_KINDS, ensure_oxia, ensure_prometheus, ensure_s3_server
from ._gobuild import GoBuildError, kafka_go_clients
from ._jars import JARS, ensure_jars
from ._node import kafkajs_program
from ._process import StackError, free_ports
from ._prometheus import DEFAULT_METRICS_PATH, PrometheusServer, ScrapeTarget
from ._stack import OXIA_MODES, LocalStack, StackSettings, default_s3_kind, read_state, stop_from_state

DEFAULT_DATA_DIR = Path(".llog-stack")
EXIT_DOWN = 1
EXIT_NOT_UP = 3


def _say(message: str, *args: object) -> None:
    print(f"[devstack] {message % args if args else message}", file=sys.stderr, flush=True)


def _exports(settings: StackSettings, root_prefix: str) -> str:
    return "\n".join(f"export {k}={shlex.quote(v)}" for k, v in settings.env(root_prefix).items())


def _cmd_install(args: argparse.Namespace) -> int:
    ensure_oxia()
    kinds = S3_KINDS if args.all else (args.s3 or default_s3_kind(),)
    for kind in kinds:
        ensure_s3_server(kind)
    if args.prometheus:
        ensure_prometheus()
    for name in JARS:
        try:
            ensure_jars(name)
        except StackError as exc:  # only the Kafka compatibility tests and steps need them
            _say("WARNING: %s", exc)
    for program in (kafka_go_clients, kafkajs_program):
        try:
            program()
        except (GoBuildError, LlogError) as exc:  # only the Go and Node clients' compatibility tests need them
            _say("WARNING: %s", exc)
    return 0


def _scrape_target(text: str, metrics_path: str) -> ScrapeTarget:
    job, _, address = text.rpartition("=")
    if not address.rpartition(":")[2].isdigit():
        raise argparse.ArgumentTypeError(f"--target {text!r}: expected [JOB=]HOST:PORT")
    return ScrapeTarget(address, job=job or "broker", metrics_path=metrics_path)


def _cmd_prometheus(args: argparse.Namespace) -> int:
    try:
        targets = [_scrape_target(t, args.metrics_path) for t in args.target]
    except argparse.ArgumentTypeError as exc:
        _say("error: %s", exc)
        return 2
    server = PrometheusServer(
        ensure_prometheus(), args.data_dir, port=args.port or free_ports(1)[0],
        scrape_interval_ms=args.scrape_interval_ms, enable_lifecycle=args.enable_lifecycle,
    )
    server.set_targets(targets)
    signal.signal(signal.SIGTERM, _raise_stop)
    with server:
        _say("prometheus at %s scraping %s; targets file %s; Ctrl-C stops it", server.url,
             ", ".join(f"{t.job}={t.address}{t.metrics_path}" for t in targets) or "nothing yet",
             server.targets_path)
        print(server.url, flush=True)
        try:
            while server.processes[0].running:
                time.sleep(0.5)
            _say("prometheus exited; log %s", server.processes[0].log_path)
            return EXIT_DOWN
        except (KeyboardInterrupt, _Stop):
            _say("stopping")
            return 0


class _Stop(Exception):
    """Raised from the SIGTERM handler to leave the foreground wait."""


def _raise_stop(signum: int, frame: FrameType | None) -> None:
    raise _Stop(signal.Signals(signum).name)


def _cmd_up(args: argparse.Namespace) -> int:
    state = read_state(args.data_dir)
    if state is not None and state.all_alive and not args.foreground:
        _say("already up in %s", args.data_dir)
        print(_exports(state.settings, args.root_prefix))
        return 0
    if state is not None and not state.any_alive:
        stop_from_state(args.data_dir)  # stale file of a crashed run
    stack = LocalStack(
        args.data_dir,
        oxia_mode=args.oxia_mode,
        oxia_shards=args.shards,
        s3_kind=args.s3 or default_s3_kind(),
        bucket=args.bucket,
        die_with_parent=args.foreground,
    )
    stack.start()
    settings = stack.settings
    _say("up: oxia %s (%s), %s %s, bucket %s", settings.oxia_address, settings.oxia_mode,
         settings.s3_kind, settings.s3_endpoint_url, settings.bucket)
    print(_exports(settings, args.root_prefix), flush=True)
    if not args.foreground:
        _say("stop it with: python -m devstack down --data-dir %s", args.data_dir)
        stack.detach()
        return 0
    signal.signal(signal.SIGTERM, _raise_stop)
    _say("running in the foreground; Ctrl-C stops it")
    try:
        while all(p.running for p in stack.processes):
            time.sleep(0.5)
        dead = [p.name for p in stack.processes if not p.running]
        _say("stopping: %s exited (logs in %s)", ", ".join(dead), args.data_dir)
        return EXIT_DOWN
    except (KeyboardInterrupt, _Stop):
        _say("stopping")
        return 0
    finally:
        stack.stop()


def _cmd_down(args: argparse.Namespace) -> int:
    stopped = stop_from_state(args.data_dir)
    _say("stopped %s", ", ".join(stopped) if stopped else "nothing (no running stack)")
    return 0


def _cmd_status(args: argparse.Namespace) -> int:
    state = read_state(args.data_dir)
    if state is None:
        print(f"not up (no state file in {args.data_dir})")
        return EXIT_NOT_UP
    settings = state.settings
    print(f"oxia   {settings.oxia_address} ({settings.oxia_mode})")
    print(f"s3     {settings.s3_endpoint_url} ({settings.s3_kind}, bucket {settings.bucket})")
    for info in state.processes:
        print(f"{info.name:18} pid {info.pid:<8} {'running' if info.alive else 'DOWN'}   log {info.log}")
    return 0 if state.all_alive else EXIT_DOWN


def _cmd_env(args: argparse.Namespace) -> int:
    state = read_state(args.data_dir)
    if state is None:
        _say("no stack in %s; start one with: python -m devstack up --data-dir %s",
             args.data_dir, args.data_dir)
        return EXIT_NOT_UP
    print(_exports(state.settings, args.root_prefix))
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m devstack",
        description="Local Oxia + S3 stack for llog tests and development.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def with_data_dir(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
        p.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR,
                       help=f"stack data directory (default: {DEFAULT_DATA_DIR})")
        return p

    install = sub.add_parser("install", help="build the Oxia and S3 server binaries, fetch the Kafka tools' jars and "
                                            "build the Go and Node.js Kafka clients' test programs, into the cache")
    install.add_argument("--s3", choices=S3_KINDS, help="S3 server to build (default: $LLOG_DEVSTACK_S3 or minio)")
    install.add_argument("--all", action="store_true", help="build every S3 server kind")
    install.add_argument("--prometheus", action="store_true",
                         help="also fetch Prometheus (Debian's package; otherwise fetched on first use)")
    install.set_defaults(func=_cmd_install)

    up = with_data_dir(sub.add_parser("up", help="start the stack; prints export lines"))
    up.add_argument("--foreground", action="store_true", help="stay attached; Ctrl-C or SIGTERM stops the stack")
    up.add_argument("--oxia-mode", choices=OXIA_MODES, default="standalone")
    up.add_argument("--shards", type=int, default=1, help="Oxia shards in the default namespace")
    up.add_argument("--s3", choices=S3_KINDS, help="S3 server (default: $LLOG_DEVSTACK_S3 or minio)")
    up.add_argument("--bucket", default="llog")
    up.add_argument("--root-prefix", default="llog", help="LLOG_ROOT_PREFIX to print")
    up.set_defaults(func=_cmd_up)

    down = with_data_dir(sub.add_parser("down", help="stop the stack started with `up`"))
    down.set_defaults(func=_cmd_down)

    status = with_data_dir(sub.add_parser("status", help="show the stack's processes"))
    status.set_defaults(func=_cmd_status)

    env = with_data_dir(sub.add_parser("env", help="print export lines for the running stack"))
    env.add_argument("--root-prefix", default="llog", help="LLOG_ROOT_PREFIX to print")
    env.set_defaults(func=_cmd_env)

    prom = with_data_dir(sub.add_parser(
        "prometheus", help="run Prometheus in the foreground, scraping llog services (file-based discovery)",
        description="Start Prometheus on 127.0.0.1 with its data in DATA_DIR/prometheus; "
                    "edit DATA_DIR/prometheus/targets.json to change what it scrapes while it runs.",
    ))
    prom.add_argument("--target", action="append", default=[], metavar="[JOB=]HOST:PORT",
                      help="a service to scrape (repeatable); JOB defaults to broker")
    prom.add_argument("--metrics-path", default=DEFAULT_METRICS_PATH,
                      help=f"path of the targets' exposition (default: {DEFAULT_METRICS_PATH})")
    prom.add_argument("--port", type=int, default=0, help="listen port (default: a free one)")
    prom.add_argument("--scrape-interval-ms", type=int, default=1000)
    prom.add_argument("--enable-lifecycle", action="store_true", help="allow POST /-/reload and /-/quit")
    prom.set_defaults(func=_cmd_prometheus)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return int(args.func(args))
    except LlogError as exc:
        _say("error: %s", exc)
        return 2


if __name__ == "__main__":
    sys.exit(main())
