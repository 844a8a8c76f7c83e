"""Child processes of the local stack: start, wait until healthy, stop.

Each process writes stdout and stderr to a log file in its data directory;
when it does not come up, the error carries the end of that log. Processes
run in their own session so that a terminal's Ctrl-C reaches only the
parent, which then stops them in order (SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from contextlib import ExitStack
from pathlib import Path
from typing import Callable, Mapping, Sequence

from server._errors import LlogError

__all__ = [
    "StackError",
    "ManagedProcess",
    "die_with_parent_argv",
    "free_ports",
    "ports_free",
    "log_tail",
    "http_ok",
    "tcp_open",
    "pid_alive",
    "stop_pid",
]

logger = logging.getLogger(__name__)

_LOG_TAIL_LINES = 40


class StackError(LlogError):
    """A local stack component could not be built, started, or reached."""


def log_tail(path: Path, lines: int = _LOG_TAIL_LINES) -> str:
    """The last ``lines`` lines of a log file (or a note that there is none)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 64 * 1024))
            text = handle.read().decode("utf-8", "replace")
    except OSError:
        return f"(no log at {path})"
    return "\n".join("    " + line for line in text.splitlines()[-lines:])


def free_ports(count: int) -> list[int]:
    """``count`` distinct free TCP ports on 127.0.0.1.

    All sockets stay bound until every port is picked, so the ports differ;
    another process can still take one before our child binds it (rare).
    """
    with ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind(("127.0.0.1", 0))
            ports.append(sock.getsockname()[1])
        return ports


def ports_free(ports: Sequence[int]) -> bool:
    """Whether every port can be bound on 127.0.0.1 right now."""
    for port in ports:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                return False
    return True


def tcp_open(port: int, host: str = "127.0.0.1", timeout_s: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def http_ok(url: str, timeout_s: float = 1.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return 200 <= response.status < 300
    except (urllib.error.URLError, OSError, ValueError):
        return False


def die_with_parent_argv(argv: list[str]) -> list[str]:
    """Prefix ``argv`` so Linux SIGTERMs the child when its parent dies.

    Without it a pytest run killed with SIGKILL leaves servers behind. It is
    done with util-linux's ``setpriv --pdeathsig`` rather than a
    ``preexec_fn``: a preexec_fn makes subprocess fork the whole Python
    process, and once grpc (the Oxia client) has threads running, grpc's fork
    handlers abort that child before it can exec (seen as a server "exiting
    with status -6"). Without a preexec_fn subprocess uses vfork/exec, which
    runs no fork handlers. Linux ties the signal to the *thread* that started
    the child. Where setpriv is missing the child simply outlives a killed
    parent.
    """
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return argv
    return [setpriv, "--pdeathsig", "TERM", "--", *argv]


class ManagedProcess:
    """One server process with its log file; ``stop()`` is safe to call twice."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        *,
        log_path: Path,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        die_with_parent: bool = True,
    ) -> None:
        self.name = name
        self.argv = [str(a) for a in argv]
        self.log_path = log_path
        self._env = dict(env) if env is not None else None
        self._cwd = cwd
        self._die_with_parent = die_with_parent and sys.platform.startswith("linux")
        self._proc: subprocess.Popen[bytes] | None = None

    def __repr__(self) -> str:
        return f"ManagedProcess({self.name!r}, pid={self.pid}, running={self.running})"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> None:
        if self.running:
            return
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        if self._env:
            env.update(self._env)
        with open(self.log_path, "ab") as log:
            log.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} start: {' '.join(self.argv)}\n".encode())
            log.flush()
            self._proc = subprocess.Popen(
                die_with_parent_argv(self.argv) if self._die_with_parent else self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=self._cwd,
                start_new_session=True,
            )
        logger.info("started %s (pid %s), log %s", self.name, self._proc.pid, self.log_path)

    def wait_healthy(self, check: Callable[[], bool], *, timeout_s: float, what: str = "healthy") -> None:
        """Poll ``check`` until true; fail early if the process exits."""
        deadline = time.monotonic() + timeout_s
        delay = 0.05
        while True:
            if self._proc is None:
                raise StackError(f"{self.name} was not started")
            code = self._proc.poll()
            if code is not None:
                raise StackError(
                    f"{self.name} exited with status {code} before it was {what}; "
                    f"log {self.log_path}:\n{log_tail(self.log_path)}"
                )
            if check():
                return
            if time.monotonic() >= deadline:
                raise StackError(
                    f"{self.name} (pid {self._proc.pid}) was not {what} after {timeout_s:.0f}s; "
                    f"log {self.log_path}:\n{log_tail(self.log_path)}"
                )
            time.sleep(delay)
            delay = min(delay * 2, 0.5)

    def kill(self) -> None:
        """SIGKILL, for failure tests: no chance to shut down cleanly."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout_s``."""
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            logger.warning("%s (pid %s) ignored SIGTERM for %.0fs; killing it", self.name, proc.pid, timeout_s)
            proc.kill()
            proc.wait()
        logger.info("stopped %s (pid %s)", self.name, proc.pid)

    def describe(self) -> dict[str, object]:
        """What another process needs to find and stop this one (state file)."""
        return {"name": self.name, "pid": self.pid, "argv0": self.argv[0], "log": str(self.log_path)}


def pid_alive(pid: int, argv0: str | None = None) -> bool:
    """Whether ``pid`` runs, and (where /proc allows checking) runs ``argv0``.

    The executable check guards against a recycled pid after a reboot or a
    long time: we must never signal an unrelated process.
    """
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return argv0 is None
    if argv0 is None:
        return True
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return True  # no /proc: trust the pid
    if not cmdline or not cmdline[0]:
        return False  # zombie
    return os.fsdecode(cmdline[0]) == argv0


def stop_pid(pid: int, argv0: str | None, timeout_s: float = 10.0) -> bool:
    """Stop a process started by another ``devstack`` process; True if it was running."""
    if not pid_alive(pid, argv0):
        return False
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not pid_alive(pid, argv0):
            return True
        time.sleep(0.1)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return True
