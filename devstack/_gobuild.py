"""Building the repository's own Go programs into the per-user cache.

``ensure_go_binary(source, name)`` (a single-file, standard-library program of
``loadtest/``) and ``ensure_go_module_binary(directory, name)`` (a module with
its ``go.mod`` and ``go.sum``, whose dependencies come from the Go module proxy)
return ``$LLOG_CACHE_DIR/bin/<name>-<key>``, building it with the machine's Go
on first use; the key hashes the sources and the Go version, so an edited
source gets its own binary. Builds are serialised
by a file lock (two runs starting at once build once), use ``GOTOOLCHAIN=local``
(never download a toolchain) and ``CGO_ENABLED=0`` (a static binary).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

from ._binaries import cache_dir, file_lock
from server._errors import ConfigError

__all__ = ["GoBuildError", "ensure_go_binary", "ensure_go_module_binary", "kafka_go_clients", "source_key"]

KAFKA_GO_CLIENTS = Path(__file__).resolve().parents[1] / "tests" / "integration" / "go" / "kafkaclients"
"""franz-go, Sarama and kafka-go against the Kafka listener (``tests/integration/test_kafka_go_clients.py``)."""

_GO_FALLBACK = Path("/usr/local/go/bin/go")


class GoBuildError(RuntimeError):
    """``go build`` failed; the message ends with the build log's tail."""


def _progress(message: str) -> None:
    print(f"[go] {message}", file=sys.stderr, flush=True)


def source_key(source: bytes, go_version: str) -> str:
    """What a cached binary is named for: the source and the toolchain that built it."""
    digest = hashlib.sha256()
    digest.update(go_version.encode())
    digest.update(b"\x00")
    digest.update(source)
    return digest.hexdigest()[:16]


def _find_go(source: Path) -> str:
    go = shutil.which("go")
    if go is None and os.access(_GO_FALLBACK, os.X_OK):
        go = str(_GO_FALLBACK)
    if go is None:
        raise ConfigError(
            f"the Go toolchain is needed to build {source.name}: install it from "
            "https://go.dev/dl/ and put `go` on PATH"
        )
    return go


def _go_env(goflags: str = "") -> dict[str, str]:
    gocache = os.environ.get("GOCACHE") or str(cache_dir() / "go-build")
    # GOTOOLCHAIN=local: never download another toolchain; CGO_ENABLED=0: a static
    # binary (the pure-Go resolver is all it needs); GOFLAGS: none for a stdlib-only file,
    # -mod=readonly for a module (its go.sum pins every dependency; nothing is rewritten).
    return dict(os.environ, GOCACHE=gocache, GOTOOLCHAIN="local", CGO_ENABLED="0", GOFLAGS=goflags)


def _go_version(go: str) -> str:
    result = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True, env=_go_env(), check=False)
    version = result.stdout.strip()
    if result.returncode != 0 or not version:
        raise ConfigError(f"`{go} env GOVERSION` failed (exit {result.returncode}): {result.stderr.strip()}")
    return version


def ensure_go_binary(source: Path, name: str) -> Path:
    """The cached binary of ``source`` (``<name>-<key>``), built on first use."""
    code = source.read_bytes()
    go = _find_go(source)
    return _cached(name, code, go, lambda target, log: _build(go, code, source.name, target, log))


def ensure_go_module_binary(directory: Path, name: str) -> Path:
    """The cached binary of the Go module in ``directory`` (``<name>-<key>``, the key over its
    ``go.mod``, ``go.sum`` and ``*.go`` files), built on first use; its dependencies come from
    the Go module proxy into the machine's module cache."""
    files = sorted(p for p in directory.iterdir() if p.name in ("go.mod", "go.sum") or p.suffix == ".go")
    code = b"".join(p.name.encode() + b"\x00" + p.read_bytes() + b"\x00" for p in files)
    go = _find_go(directory)
    return _cached(name, code, go, lambda target, log: _go_build(
        go, ["."], directory, "-mod=readonly", target, log, str(directory)))


def kafka_go_clients() -> Path:
    """The compatibility tests' Go program (franz-go, Sarama, kafka-go), built on first use."""
    return ensure_go_module_binary(KAFKA_GO_CLIENTS, "kafkaclients")


def _cached(name: str, code: bytes, go: str, build: Callable[[Path, Path], None]) -> Path:
    """``$LLOG_CACHE_DIR/bin/<name>-<key>``, ``build(target, build_log)`` run once under a file lock
    when it is not there yet (two runs starting at once build once)."""
    directory = cache_dir() / "bin"
    target = directory / f"{name}-{source_key(code, _go_version(go))}"
    if os.access(target, os.X_OK):
        return target
    directory.mkdir(parents=True, exist_ok=True)
    with file_lock(directory / f".{name}.lock", name):
        if not os.access(target, os.X_OK):  # another process may have built it while we waited
            build(target, directory / f"{name}.build.log")
    return target


def _build(go: str, code: bytes, filename: str, target: Path, build_log: Path) -> None:
    """A single-file program: built from a copy in a temporary directory."""
    with tempfile.TemporaryDirectory(prefix="llog-go-src-") as src:
        main = Path(src) / filename
        main.write_bytes(code)
        _go_build(go, [str(main)], Path(src), "", target, build_log, filename)


def _go_build(go: str, what_to_build: list[str], cwd: Path, goflags: str, target: Path, build_log: Path,
              what: str) -> None:
    """``go build`` into a temporary name, then renamed over ``target``; its output in ``build_log``."""
    _progress(f"building {target.name} with {go} ...")
    started = time.monotonic()
    tmp = target.with_name(f".{target.name}.tmp{os.getpid()}")
    argv = [go, "build", "-trimpath", "-o", str(tmp), *what_to_build]
    with open(build_log, "w") as log:
        log.write(f"$ (cd {cwd} && {' '.join(argv)})\n")
        log.flush()
        result = subprocess.run(argv, cwd=cwd, env=_go_env(goflags), stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, check=False)
    if result.returncode != 0:
        tmp.unlink(missing_ok=True)
        tail = "\n".join(build_log.read_text(errors="replace").splitlines()[-30:])
        raise GoBuildError(f"go build of {what} failed (exit {result.returncode}); {build_log}:\n{tail}")
    os.replace(tmp, target)
    _progress(f"built {target} in {time.monotonic() - started:.1f}s")
