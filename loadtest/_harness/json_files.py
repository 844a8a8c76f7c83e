"""Run-directory JSON files: read one and check it, write one whole.

Every harness artifact is read back by another command (``stack.json`` by
the collector, ``routing-manifest.json`` by the hammer and the read-back);
an unreadable or malformed file should fail with the file's name and what
is wrong in it, in the reading module's own error type.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

__all__ = ["load_checked_json", "write_json_atomic"]


def load_checked_json(path: str | Path, check: Callable[[Any], object], what: str,
                      error: type[Exception] = ValueError) -> Any:
    """Parse the JSON file ``path`` and run ``check`` on it. An unreadable file,
    bad JSON, or ``error`` raised by ``check`` becomes ``error`` prefixed with
    the path (``what`` names the file in the message: "the routing manifest")."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except OSError as exc:
        raise error(f"{path}: cannot read {what}: {exc}") from exc
    except json.JSONDecodeError as exc:
        raise error(f"{path}: {what} is not JSON: {exc}") from exc
    try:
        check(doc)
    except error as exc:
        raise error(f"{path}: {exc}") from None
    return doc


def write_json_atomic(path: str | Path, doc: Any) -> None:
    """Write ``doc`` as indented JSON to a temporary file beside ``path``, then
    rename it, so a reader never sees half a file."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    tmp.replace(path)
