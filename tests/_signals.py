"""Sending a signal to one thread of another process (``tgkill``).

``os.kill`` lets the kernel pick the thread; these tests choose one that is
not the main thread, the case a process must survive: CPython only marks the
signal pending there, and the main thread has to look (``server._signals``).
"""

from __future__ import annotations

import ctypes
import os
import platform
import signal

import pytest

_SYS_TGKILL = {"x86_64": 234, "aarch64": 131}


def signal_a_worker_thread(pid: int, sig: signal.Signals) -> int:
    """Send ``sig`` to a thread of ``pid`` other than its main one; return its id."""
    number = _SYS_TGKILL.get(platform.machine())
    if number is None:
        pytest.skip(f"no tgkill syscall number known for {platform.machine()}")
    workers = sorted(int(t) for t in os.listdir(f"/proc/{pid}/task") if int(t) != pid)
    assert workers, f"process {pid} has no thread besides its main one"
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(number, pid, workers[0], int(sig)) != 0:
        raise OSError(ctypes.get_errno(), f"tgkill({pid}, {workers[0]}, {sig.name})")
    return workers[0]
