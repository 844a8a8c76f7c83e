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
from typing import Mapping, Sequence

from .._errors import LlogError
from .vacuum import Vacuum, VacuumReport

__all__ = ["format_report", "main", "parse_args"]


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


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="llog-vacuum",
        description=(
            "Delete S3 objects under LLOG_ROOT_PREFIX that no log references any more and that are "
            "older than the grace period (SPEC 7.9). Reads LLOG_OXIA_*, LLOG_S3_* and LLOG_VACUUM_* "
            "from the environment; flags override them."
        ),
    )
    p.add_argument("--dry-run", action="store_true", help="print what would be deleted; change nothing")
    p.add_argument("--grace-ms", type=int, help="keep objects younger than this (default LLOG_VACUUM_GRACE_MS or 3600000)")
    p.add_argument("--keep-redundant-entries", action="store_true",
                   help="do not delete WAL index entries below the compaction cursor")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--quiet", action="store_true", help="print only the summary")
    p.add_argument("--log-level", default="WARNING", help="logging level (default WARNING)")
    args = p.parse_args(argv)
    if args.grace_ms is not None and args.grace_ms < 0:
        p.error("--grace-ms must be >= 0")
    return args


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    """``llog-vacuum``: one pass; exit 0 if it completed without errors, else 1."""
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    kwargs: dict[str, object] = {}
    if args.grace_ms is not None:
        kwargs["grace_ms"] = args.grace_ms
    if args.keep_redundant_entries:
        kwargs["delete_redundant_entries"] = False
    try:
        with Vacuum.from_env(env, **kwargs) as vacuum:
            report = vacuum.run_once(dry_run=args.dry_run)
    except LlogError as exc:
        print(f"llog-vacuum: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        print(format_report(report, verbose=not args.quiet))
    return 1 if report.errors else 0

