"""The ``llog-vacuum`` command: one vacuum pass from the command line.

    python -m server.leaderless_log_vacuum --dry-run
    llog-vacuum --help

Reads ``LLOG_OXIA_*``, ``LLOG_S3_*`` and ``LLOG_VACUUM_*`` (flags override
them), runs :meth:`Vacuum.run_once` and prints the report; the pass itself
is in ``vacuum.py``.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import textwrap
from typing import Mapping, Sequence

from .._config import OxiaConfig, S3Config
from .._errors import ConfigError, LlogError
from .._settings import Flags, environment_help
from .config import VacuumConfig
from .vacuum import Vacuum, VacuumReport

__all__ = ["format_report", "main", "parse_args", "FLAGS", "ENVIRONMENT"]


def _mib(n: int) -> str:
    return f"{n / (1024 * 1024):.2f} MiB"


def format_report(report: VacuumReport, verbose: bool = True) -> str:
    verb = "would delete" if report.dry_run else "deleted"
    lines = []
    if verbose:
        for key in report.redundant_entries:
            lines.append(f"{verb} redundant index entry {key}")
        for d in report.deleted:
            lines.append(f"{verb} s3://{report.bucket}/{d.key}  {d.size} B  {d.kind}  age {d.age_ms / 1000:.0f}s")
        for err in report.errors:
            lines.append(f"error: {err}")
    kept = ", ".join(f"{k}={v}" for k, v in report.kept.items()) or "none"
    lines.append(
        f"{'dry run: ' if report.dry_run else ''}scanned {report.scanned} objects ({_mib(report.scanned_bytes)}) "
        f"under s3://{report.bucket}/{report.root}/ with grace {report.grace_ms} ms in {report.duration_s:.2f}s"
    )
    lines.append(f"kept {report.kept_total}: {kept}")
    lines.append(
        f"{verb} {len(report.deleted)} objects, {report.bytes_reclaimed} bytes ({_mib(report.bytes_reclaimed)}) "
        f"reclaimed{' if run for real' if report.dry_run else ''}; "
        f"{len(report.redundant_entries)} redundant index entries; "
        f"{report.logs_checked} logs checked; {len(report.errors)} errors"
    )
    return "\n".join(lines)


FLAGS = Flags(VacuumConfig, skip=("interval_ms",))
"""The flags: ``--grace-ms`` and ``--delete-redundant-entries`` (the interval is the service's)."""
ENVIRONMENT = (OxiaConfig, S3Config)
"""The other configs a pass reads from the environment."""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="llog-vacuum",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=textwrap.fill(
            "Delete S3 objects under LLOG_ROOT_PREFIX that no log references any more and that are "
            "older than the grace period (SPEC 7.9). Each flag overrides its variable.", 100,
        ),
        epilog="Also read from the environment (see .env.example):\n" + environment_help(ENVIRONMENT),
    )
    p.add_argument("--dry-run", action="store_true", help="print what would be deleted; change nothing")
    FLAGS.add_to(p)
    p.add_argument("--keep-redundant-entries", dest="delete_redundant_entries", action="store_false",
                   default=None, help="the same as --no-delete-redundant-entries")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--quiet", action="store_true", help="print only the summary")
    p.add_argument("--log-level", default="WARNING", help="logging level (default WARNING)")
    return p


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    return _parser().parse_args(argv)


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    """``llog-vacuum``: one pass; exit 0 if it completed without errors, 1 if
    not, 2 on bad configuration."""
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = VacuumConfig.from_env(env, **FLAGS.values(args))
    except ConfigError as exc:
        print(f"llog-vacuum: {exc}", file=sys.stderr)
        return 2
    try:
        with Vacuum.from_env(
            env, grace_ms=config.grace_ms, allow_unsafe_grace=config.allow_unsafe_grace,
            delete_redundant_entries=config.delete_redundant_entries,
        ) as vacuum:
            report = vacuum.run_once(dry_run=args.dry_run)
    except LlogError as exc:
        print(f"llog-vacuum: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        print(format_report(report, verbose=not args.quiet))
    return 1 if report.errors else 0
