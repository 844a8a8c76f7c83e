"""``server._signals.wait_for_stop``: a signal taken by a thread other than
the main one still reaches the main thread's handler."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from pathlib import Path

from server._signals import wait_for_stop

REPO = Path(__file__).resolve().parents[2]

# SIGTERM raised in a helper thread (pthread_kill names the thread, as the
# kernel may when it picks one) while the main thread already waits; the
# handler, which only the main thread runs, sets the event. A bare
# Event.wait(120) sleeps its whole timeout, past the subprocess's 30 s.
_SCRIPT = textwrap.dedent("""
    import signal, threading, time
    from server._signals import wait_for_stop

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())

    def raise_here():
        time.sleep(0.3)  # the main thread is inside the wait by then
        signal.pthread_kill(threading.get_ident(), signal.SIGTERM)

    threading.Thread(target=raise_here).start()
    print("stopped" if wait_for_stop(stop, 120.0) else "timed out")
""")


def _run() -> str:
    done = subprocess.run([sys.executable, "-c", _SCRIPT], cwd=REPO, capture_output=True, text=True,
                          timeout=30, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_signal_taken_by_another_thread_stops_the_wait() -> None:
    assert _run() == "stopped"


def test_a_timeout_returns_false_and_a_set_event_true() -> None:
    stop = threading.Event()
    assert wait_for_stop(stop, 0.05) is False
    stop.set()
    assert wait_for_stop(stop) is True and wait_for_stop(stop, 0) is True
