"""The Node.js Kafka client's test program, installed into the per-user cache.

``kafkajs_program()`` copies ``tests/integration/node/kafkajs`` (its
``package.json``, ``package-lock.json`` and script) to
``$LLOG_CACHE_DIR/node/kafkajs-<key>`` and runs ``npm ci`` there on first use,
so the npm registry is asked once per version of those files; the key hashes
them and the Node version. Installs are serialised by a file lock.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import time
from pathlib import Path

from server._errors import ConfigError

from ._binaries import cache_dir, file_lock
from ._process import StackError

__all__ = ["KAFKAJS_SOURCE", "kafkajs_program", "node"]

KAFKAJS_SOURCE = Path(__file__).resolve().parents[1] / "tests" / "integration" / "node" / "kafkajs"
_FILES = ("package.json", "package-lock.json", "roundtrip.js")


def node() -> str:
    """The machine's ``node``, or a ConfigError saying what to install."""
    found = shutil.which("node")
    if found is None:
        raise ConfigError("Node.js (node >= 18, with npm) is needed for the KafkaJS compatibility test: "
                          "install it (e.g. apt-get install nodejs npm)")
    return found


def kafkajs_program() -> Path:
    """The installed ``roundtrip.js`` (its ``node_modules`` beside it)."""
    version = subprocess.run([node(), "--version"], capture_output=True, text=True, check=False).stdout.strip()
    digest = hashlib.sha256(version.encode())
    for name in _FILES:
        digest.update(b"\x00" + name.encode() + b"\x00" + (KAFKAJS_SOURCE / name).read_bytes())
    home = cache_dir() / "node"
    target = home / f"kafkajs-{digest.hexdigest()[:16]}"
    if (target / ".complete").exists():
        return target / "roundtrip.js"
    home.mkdir(parents=True, exist_ok=True)
    with file_lock(home / ".kafkajs.lock", "kafkajs"):
        if (target / ".complete").exists():
            return target / "roundtrip.js"
        npm = shutil.which("npm")
        if npm is None:
            raise ConfigError("npm is needed to install KafkaJS from the npm registry: install it with Node.js")
        print(f"[node] installing KafkaJS into {target} with npm ci ...", file=sys.stderr, flush=True)
        started = time.monotonic()
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir()
        for name in _FILES:
            shutil.copy2(KAFKAJS_SOURCE / name, target / name)
        done = subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--omit=dev"], cwd=target,
                              capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise StackError(f"npm ci in {target} failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
        (target / ".complete").touch()
        print(f"[node] installed KafkaJS in {time.monotonic() - started:.1f}s", file=sys.stderr, flush=True)
    return target / "roundtrip.js"
