"""The run directory: its name, and the snapshots that make a run auditable
(``resolved-config.json``, ``git.json``, ``environment.json``)."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping

from .json_files import write_json_atomic
from .scenario import Scenario

__all__ = ["RESULTS_DIR", "new_run_dir", "write_snapshots", "masked_env"]

REPO = Path(__file__).resolve().parents[2]
RESULTS_DIR = REPO / "loadtest" / "results"
_SECRET_WORDS = ("SECRET", "TOKEN", "PASSWORD", "ACCESS_KEY")


def new_run_dir(scenario: str, results_dir: Path = RESULTS_DIR, now: datetime | None = None) -> tuple[str, Path]:
    """``<YYYYMMDDTHHMMSSZ>-<scenario>``, created (a suffix keeps two runs in one second apart)."""
    stamp = (now or datetime.now(timezone.utc)).strftime("%Y%m%dT%H%M%SZ")
    run_id = f"{stamp}-{scenario}"
    path = results_dir / run_id
    n = 1
    while path.exists():
        n += 1
        run_id = f"{stamp}-{scenario}-{n}"
        path = results_dir / run_id
    (path / "logs").mkdir(parents=True)
    return run_id, path


def masked_env(env: Mapping[str, str]) -> dict[str, str]:
    """``LLOG_*`` settings with secrets replaced by ``***``."""
    return {k: ("***" if any(w in k for w in _SECRET_WORDS) else v) for k, v in sorted(env.items())
            if k.startswith("LLOG_")}


def write_snapshots(run_dir: Path, scenario: Scenario, llog_env: Mapping[str, str]) -> None:
    write_json_atomic(run_dir / "resolved-config.json", scenario.to_dict())
    write_json_atomic(run_dir / "git.json", _git())
    write_json_atomic(run_dir / "environment.json", _environment(llog_env))


def _run(argv: list[str]) -> str:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=20, cwd=REPO, check=False).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


def _git() -> dict[str, Any]:
    status = [line for line in _run(["git", "status", "--porcelain"]).splitlines() if line]
    status = [line for line in status if "loadtest/results/" not in line]
    return {
        "commit": _run(["git", "rev-parse", "HEAD"]) or None,
        "branch": _run(["git", "rev-parse", "--abbrev-ref", "HEAD"]) or None,
        "dirty": bool(status),
        "status": status,
    }


def _environment(llog_env: Mapping[str, str]) -> dict[str, Any]:
    meminfo = Path("/proc/meminfo")
    mem_kib = None
    if meminfo.exists():
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kib = int(line.split()[1])
    go = shutil.which("go")
    java = shutil.which("java")
    return {
        "host": platform.node(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "memory_bytes": mem_kib * 1024 if mem_kib else None,
        "python": sys.version.split()[0],
        "go": _run([go, "version"]) if go else None,
        "java": (subprocess.run([java, "-version"], capture_output=True, text=True, check=False).stderr.splitlines()
                 or [None])[0] if java else None,
        "llog_env": masked_env({**os.environ, **llog_env}),
    }
