"""Build and cache the Oxia and S3 server binaries (Go) and Prometheus (Debian package).

Everything lands in ``$LLOG_CACHE_DIR/bin`` (default ``~/.cache/llog/bin``)::

    bin/oxia-v0.14.0            the binary, named for the version actually built
    bin/oxia.stamp.json         {"version": ..., "candidates": [...], "binary": ...}
    bin/oxia.build.log          go's output of the last build
    bin/.oxia.lock              held while building, so two processes never both build
    bin/prometheus-2.42.0+ds-5+deb12u1, bin/promtool-2.42.0+ds-5+deb12u1
                                from Debian's package (stamp, log and lock as for oxia)

A stamp is written only after the binary is in place, so its presence means
"done": the fast path is one small JSON read and one ``stat``.

Oxia is built from its module source because ``go install ...@version`` reads
the module's version list, which the Go proxy here refuses (403); ``go mod
download`` of an exact version works. The versions are tried in order and the
first that builds wins.

A version with a ``+llog.N`` suffix is built from a copy of that version's
source with our patch N applied. ``+llog.1``: v0.14.0 assigns a write's WAL
offset under the leader lock but queues it to the WAL after releasing the
lock, so concurrent writes to one shard can reach the WAL out of order and the
shard then fails every later write ("N can not immediately follow M",
oxia-db/oxia#772). The patch holds the lock until the entry is queued, which
is how upstream fixed it; the client protocol is unchanged.

Prometheus is not built: Debian bookworm's ``prometheus`` package is fetched
with ``apt-get download`` (works without root, installs nothing) into a
temporary directory and unpacked with ``dpkg-deb -x``; only ``usr/bin/prometheus``
and ``usr/bin/promtool`` are kept. Both are Go binaries linked only against
libc. Fetch, unpack and the ``--version`` checks take about 2 s (19 MB); a
``go install`` of Prometheus would take minutes.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Sequence

from server._errors import ConfigError

from ._process import StackError, log_tail

__all__ = [
    "OXIA_VERSIONS",
    "S3_KINDS",
    "BuiltBinary",
    "cache_dir",
    "bin_dir",
    "ensure_oxia",
    "ensure_s3_server",
    "ensure_prometheus",
    "ensure_promtool",
    "PROMETHEUS_DEB_VERSION",
    "progress",
    "file_lock",
]

logger = logging.getLogger(__name__)

OXIA_MODULE = "github.com/oxia-db/oxia"
OXIA_VERSIONS: tuple[str, ...] = ("v0.14.4", "v0.14.0+llog.1")
"""Tried in order; v0.14.4 is the wanted one, v0.14.0 (patched) what the proxy serves here."""

_GO_INSTALLS: dict[str, tuple[str, str]] = {
    # kind -> (package@version, name of the installed binary)
    "minio": ("github.com/minio/minio@v0.0.0-20260212201848-7aac2a2c5b7c", "minio"),
    "versitygw": ("github.com/versity/versitygw/cmd/versitygw@v1.8.0", "versitygw"),
}
S3_KINDS: tuple[str, ...] = tuple(_GO_INSTALLS)

PROMETHEUS_DEB_VERSION = "2.42.0+ds-5+deb12u1"
"""Debian bookworm's ``prometheus`` package (``apt-cache policy prometheus``)."""

_MIN_GO = (1, 24)
_HEARTBEAT_S = 30.0


@dataclass(frozen=True)
class BuiltBinary:
    """A cached binary and the version it was built from."""

    name: str
    version: str
    path: Path


def progress(message: str, *args: object) -> None:
    """Print a ``[devstack]`` progress line to stderr (builds are slow; say so)."""
    text = message % args if args else message
    print(f"[devstack] {text}", file=sys.stderr, flush=True)


def cache_dir() -> Path:
    """``$LLOG_CACHE_DIR``, else ``$XDG_CACHE_HOME/llog``, else ``~/.cache/llog``."""
    explicit = os.environ.get("LLOG_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "llog"


def bin_dir() -> Path:
    return cache_dir() / "bin"


def ensure_oxia(versions: Sequence[str] = OXIA_VERSIONS) -> Path:
    """Return the cached Oxia binary, building it on first use."""
    return _ensure("oxia", tuple(versions), _build_oxia).path


def ensure_s3_server(kind: str = "minio") -> Path:
    """Return the cached S3 server binary (``minio`` or ``versitygw``)."""
    if kind not in _GO_INSTALLS:
        raise ConfigError(f"unknown S3 server kind {kind!r}; expected one of {', '.join(S3_KINDS)}")
    version = _GO_INSTALLS[kind][0].rsplit("@", 1)[1]
    return _ensure(kind, (version,), lambda v, target, log: _go_install(kind, v, target, log)).path


def ensure_prometheus(version: str = PROMETHEUS_DEB_VERSION) -> Path:
    """Return the cached Prometheus server binary, fetched from Debian's package on first use.

    ``promtool`` of the same package lies next to it (:func:`ensure_promtool`).
    """
    return _ensure("prometheus", (version,), _fetch_prometheus_deb, preflight=_check_apt).path


def ensure_promtool(version: str = PROMETHEUS_DEB_VERSION) -> Path:
    """Return the cached ``promtool`` that came with :func:`ensure_prometheus`'s package."""
    server = ensure_prometheus(version)
    promtool = _promtool_beside(server)
    if not os.access(promtool, os.X_OK):
        raise StackError(f"{promtool} is missing next to {server}; delete {server.parent / 'prometheus.stamp.json'}")
    return promtool


_Build = Callable[[str, Path, Path], None]
"""(version, target path, build log) -> None; raises StackError on failure."""


def _ensure(
    name: str, candidates: tuple[str, ...], build: _Build, *, preflight: Callable[[], None] | None = None
) -> BuiltBinary:
    directory = bin_dir()
    stamp = directory / f"{name}.stamp.json"
    found = _read_stamp(name, stamp, candidates)
    if found is not None:
        return found
    directory.mkdir(parents=True, exist_ok=True)
    with file_lock(directory / f".{name}.lock", name):
        # Another process may have finished the build while we waited.
        found = _read_stamp(name, stamp, candidates)
        if found is not None:
            return found
        (preflight or _check_go)()
        build_log = directory / f"{name}.build.log"
        failures: list[str] = []
        for version in candidates:
            target = directory / f"{name}-{version}"
            tmp = directory / f".{name}-{version}.tmp{os.getpid()}"
            try:
                build(version, tmp, build_log)
            except StackError as exc:
                failures.append(f"{version}: {exc}")
                reason = str(exc).splitlines()[0][:200]
                progress("%s %s not available (%s); trying the next version", name, version, reason)
                tmp.unlink(missing_ok=True)
                continue
            os.replace(tmp, target)
            record = {"name": name, "version": version, "candidates": list(candidates), "binary": target.name}
            _write_json_atomic(stamp, record)
            progress("%s %s ready: %s", name, version, target)
            return BuiltBinary(name, version, target)
        raise StackError(f"could not build {name} (tried {', '.join(candidates)}):\n" + "\n".join(failures))


def _read_stamp(name: str, stamp: Path, candidates: tuple[str, ...]) -> BuiltBinary | None:
    try:
        record = json.loads(stamp.read_text())
    except (OSError, ValueError):
        return None
    if record.get("candidates") != list(candidates):
        return None  # built for another pin list: rebuild
    path = stamp.parent / str(record.get("binary", ""))
    if not record.get("binary") or not os.access(path, os.X_OK):
        return None
    return BuiltBinary(name, str(record["version"]), path)


def _write_json_atomic(path: Path, record: dict[str, object]) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(json.dumps(record, indent=2) + "\n")
    os.replace(tmp, path)


@contextmanager
def file_lock(path: Path, name: str) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (one build of ``name`` at a time, across processes)."""
    with open(path, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            progress("another process is building %s; waiting for it", name)
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _check_go() -> None:
    go = shutil.which("go")
    if go is None:
        raise ConfigError(
            "the Go toolchain (go >= %d.%d) is needed to build Oxia and the S3 server: "
            "install it from https://go.dev/dl/ and put `go` on PATH" % _MIN_GO
        )
    out = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True, check=False).stdout.strip()
    digits = out.removeprefix("go").split(".")
    try:
        have = (int(digits[0]), int(digits[1]))
    except (IndexError, ValueError):
        logger.warning("cannot parse the Go version %r; trying anyway", out)
        return
    if have < _MIN_GO:
        raise ConfigError(f"go >= {_MIN_GO[0]}.{_MIN_GO[1]} is needed, found {out}: install a newer Go")


def _patch_wal_order(src: Path) -> None:
    """Patch llog.1 (see the module docstring) on a writable copy of v0.14.0."""
    path = src / "server" / "leader_controller.go"
    text = path.read_text()
    unlock_early = "\tterm := lc.term\n\tlc.Unlock()\n\trequest := requestSupplier(newOffset)\n"
    marshal_fail = "\tvalue, err := logEntryValue.MarshalVT()\n\tif err != nil {\n\t\tcb.OnCompleteError(err)\n"
    append = "\twalLog.AppendAndSync(&proto.LogEntry{\n"
    if text.count(unlock_early) != 1 or text.count(marshal_fail) != 1 or text.count(append) != 1:
        raise StackError(f"oxia source at {path} is not the v0.14.0 this patch was written for")
    text = text.replace(unlock_early, "\tterm := lc.term\n\trequest := requestSupplier(newOffset)\n")
    text = text.replace(
        marshal_fail,
        "\tvalue, err := logEntryValue.MarshalVT()\n\tif err != nil {\n\t\tlc.Unlock()\n\t\tcb.OnCompleteError(err)\n",
    )
    text = text.replace(
        append,
        "\t// llog patch: queue to the WAL under the lock, in offset order (oxia-db/oxia#772).\n"
        "\tdefer lc.Unlock()\n" + append,
    )
    path.chmod(0o644)
    path.write_text(text)


_OXIA_PATCHES: dict[str, Callable[[Path], None]] = {"llog.1": _patch_wal_order}


def _build_oxia(version: str, target: Path, build_log: Path) -> None:
    module_version, _, patch = version.partition("+")
    if patch and patch not in _OXIA_PATCHES:
        raise StackError(f"unknown oxia patch {patch!r}")
    progress("downloading the oxia %s module source", module_version)
    result = subprocess.run(
        ["go", "mod", "download", "-json", f"{OXIA_MODULE}@{module_version}"],
        capture_output=True,
        text=True,
        check=False,
    )
    try:
        info = json.loads(result.stdout) if result.stdout.strip() else {}
    except ValueError:
        info = {}
    if result.returncode != 0 or not info.get("Dir"):
        reason = info.get("Error") or result.stderr.strip() or f"exit status {result.returncode}"
        raise StackError(f"go mod download {OXIA_MODULE}@{module_version} failed: {reason}")
    env = dict(os.environ, GOFLAGS="-mod=mod")
    with tempfile.TemporaryDirectory(prefix="llog-oxia-src-") as tmp:
        src = Path(info["Dir"])
        if patch:
            progress("applying llog patch %s to the oxia %s source", patch, module_version)
            src = Path(shutil.copytree(src, Path(tmp) / "oxia"))
            _OXIA_PATCHES[patch](src)
        progress("building oxia %s with go (first run, ~2 min)…", version)
        _run_build(
            ["go", "build", "-trimpath", "-o", str(target.resolve()), "./cmd"],
            cwd=src,
            env=env,
            build_log=build_log,
            what=f"oxia {version}",
        )


def _go_install(kind: str, version: str, target: Path, build_log: Path) -> None:
    package, binary_name = _GO_INSTALLS[kind]
    progress("building %s %s with go install (first run, ~2 min)…", kind, version)
    gobin = target.with_name(f"{target.name}.gobin")
    gobin.mkdir(parents=True, exist_ok=True)
    try:
        _run_build(
            ["go", "install", package],
            cwd=bin_dir(),
            env=dict(os.environ, GOBIN=str(gobin)),
            build_log=build_log,
            what=f"{kind} {version}",
        )
        os.replace(gobin / binary_name, target)
    finally:
        shutil.rmtree(gobin, ignore_errors=True)


def _run_build(argv: list[str], *, cwd: Path, env: dict[str, str], build_log: Path, what: str) -> None:
    """Run a go build with its output in ``build_log``, saying every 30 s that it still runs."""
    started = time.monotonic()
    with open(build_log, "w") as log:
        log.write(f"$ (cd {cwd} && {' '.join(argv)})\n")
        log.flush()
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        next_beat = started + _HEARTBEAT_S
        try:
            while proc.poll() is None:
                time.sleep(0.5)
                if time.monotonic() >= next_beat:
                    progress("still building %s (%ds)", what, time.monotonic() - started)
                    next_beat += _HEARTBEAT_S
        except BaseException:
            proc.kill()
            proc.wait()
            raise
    if proc.returncode != 0:
        raise StackError(f"building {what} failed (exit {proc.returncode}); see {build_log}:\n{log_tail(build_log)}")
    progress("built %s in %ds", what, time.monotonic() - started)


def _check_apt() -> None:
    missing = [tool for tool in ("apt-get", "dpkg-deb") if shutil.which(tool) is None]
    if missing:
        raise ConfigError(
            f"Prometheus is taken from Debian's prometheus package, which needs {' and '.join(missing)}: "
            "run on Debian (bookworm) or Ubuntu, or put a prometheus binary in the cache by hand"
        )


def _promtool_beside(server: Path) -> Path:
    return server.with_name(server.name.replace("prometheus-", "promtool-", 1))


def _fetch_prometheus_deb(version: str, target: Path, build_log: Path) -> None:
    """``apt-get download prometheus=<version>``, unpack, keep the two binaries.

    ``promtool`` is moved to its final name first; ``_ensure`` then moves the
    server to ``target``'s final name and writes the stamp, so a stamp means both.
    """
    started = time.monotonic()
    build_log.write_text("")  # _run_logged appends each step
    with tempfile.TemporaryDirectory(prefix=".prometheus-deb-", dir=bin_dir()) as tmp:
        work = Path(tmp)
        progress("fetching Debian's prometheus %s package with apt-get download (~19 MB)…", version)
        _run_logged(["apt-get", "download", f"prometheus={version}"], cwd=work, build_log=build_log,
                    hint="is the version still in the archive? `apt-cache policy prometheus`; "
                         "on a machine without package lists run `apt-get update` first")
        debs = sorted(work.glob("prometheus_*.deb"))
        if len(debs) != 1:
            raise StackError(f"apt-get download left {[d.name for d in debs]} in {work}, expected one .deb")
        progress("unpacking %s", debs[0].name)
        _run_logged(["dpkg-deb", "-x", str(debs[0]), str(work / "root")], cwd=work, build_log=build_log)
        server, promtool = work / "root/usr/bin/prometheus", work / "root/usr/bin/promtool"
        for binary in (server, promtool):
            # Proves the binary runs here (dynamic libraries, architecture), not only that it unpacked.
            _run_logged([str(binary), "--version"], cwd=work, build_log=build_log)
        os.replace(promtool, _promtool_beside(target.with_name(f"prometheus-{version}")))
        os.replace(server, target)
    progress("fetched and unpacked prometheus %s in %.1fs", version, time.monotonic() - started)


def _run_logged(argv: list[str], *, cwd: Path, build_log: Path, hint: str = "") -> None:
    """Run a short command with its output appended to ``build_log``."""
    with open(build_log, "a") as log:
        log.write(f"$ (cd {cwd} && {' '.join(argv)})\n")
        log.flush()
        try:
            result = subprocess.run(argv, cwd=cwd, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, check=False, timeout=600)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise StackError(f"{argv[0]} failed: {exc}; see {build_log}") from exc
    if result.returncode != 0:
        more = f" ({hint})" if hint else ""
        raise StackError(
            f"{' '.join(argv)} failed (exit {result.returncode}){more}; see {build_log}:\n{log_tail(build_log)}"
        )
