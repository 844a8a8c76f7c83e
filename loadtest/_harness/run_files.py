"""A run directory's artifacts, read once and forgivingly.

Every file of the run directory (``loadtest/README.md``, "Run directory") is
optional here: a missing file is listed in :attr:`RunFiles.missing`, a JSONL
line that does not parse is counted in :attr:`RunFiles.malformed` and
skipped, so a summary or a plot of a half-finished run still comes out and
says what it could not see.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["EXPECTED_FILES", "RunFiles", "load_run"]

EXPECTED_FILES = (
    "resolved-config.json",
    "stack.json",
    "git.json",
    "environment.json",
    "routing-manifest.json",
    "client-30s.jsonl",
    "client-summary.json",
    "remap-events.jsonl",
    "metrics-30s.jsonl",
)
"""The files every finished run has (``summary.json`` and pictures come after)."""


@dataclass
class RunFiles:
    """The parsed artifacts of one run directory (empty where a file is missing)."""

    run_dir: Path
    stack: dict[str, Any] = field(default_factory=dict)
    resolved_config: dict[str, Any] = field(default_factory=dict)
    git: dict[str, Any] = field(default_factory=dict)
    environment: dict[str, Any] = field(default_factory=dict)
    routing: dict[str, Any] = field(default_factory=dict)
    client_summary: dict[str, Any] = field(default_factory=dict)
    client_windows: list[dict[str, Any]] = field(default_factory=list)
    """``client-30s.jsonl``, in file order."""
    remap_events: list[dict[str, Any]] = field(default_factory=list)
    metric_samples: list[dict[str, Any]] = field(default_factory=list)
    """``metrics-30s.jsonl``, sorted by ``ts_ms``."""
    missing: list[str] = field(default_factory=list)
    """Expected files that are absent or not readable JSON."""
    malformed: dict[str, int] = field(default_factory=dict)
    """Per JSONL file, lines skipped because they were not a JSON object."""

    def process_kinds(self) -> dict[str, str]:
        """``stack.json``'s process name -> kind (``broker``, ``compactor``, ``oxia`` ...)."""
        return {p["name"]: p.get("kind", "") for p in self.stack.get("processes", []) if "name" in p}


def load_run(run_dir: Path) -> RunFiles:
    """Read every artifact of ``run_dir`` that is there."""
    run_dir = Path(run_dir)
    files = RunFiles(run_dir)
    files.stack = _json(files, "stack.json")
    files.resolved_config = _json(files, "resolved-config.json")
    files.git = _json(files, "git.json")
    files.environment = _json(files, "environment.json")
    files.routing = _json(files, "routing-manifest.json")
    files.client_summary = _json(files, "client-summary.json")
    files.client_windows = _jsonl(files, "client-30s.jsonl")
    files.remap_events = _jsonl(files, "remap-events.jsonl")
    samples = _jsonl(files, "metrics-30s.jsonl")
    files.metric_samples = sorted(samples, key=lambda s: s.get("ts_ms", 0))
    return files


def _json(files: RunFiles, name: str) -> dict[str, Any]:
    path = files.run_dir / name
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        files.missing.append(name)
        return {}
    if not isinstance(value, dict):
        files.missing.append(name)
        return {}
    return value


def _jsonl(files: RunFiles, name: str) -> list[dict[str, Any]]:
    path = files.run_dir / name
    try:
        text = path.read_text()
    except OSError:
        files.missing.append(name)
        return []
    rows: list[dict[str, Any]] = []
    bad = 0
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:  # a writer killed mid-line leaves half a line at the end
            bad += 1
            continue
        if isinstance(row, dict):
            rows.append(row)
        else:
            bad += 1
    if bad:
        files.malformed[name] = bad
    return rows
