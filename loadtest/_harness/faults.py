"""Faults a scenario injects while load runs: SIGKILL (or SIGTERM) a broker,
a compactor or an Oxia server at a time, and restart it later. Every action
is one line of ``faults.jsonl``: ``{"ts_ms", "elapsed_s", "target",
"action": "kill" | "stop" | "restart", "ok", "error"}``."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Callable, Protocol, Sequence

from .scenario import Fault

__all__ = ["FaultInjector", "Breakable"]


class Breakable(Protocol):
    def kill(self, target: str, *, hard: bool = True) -> None: ...
    def restart(self, target: str) -> None: ...


class FaultInjector:
    """Runs the scenario's faults on a thread, relative to :meth:`start`.
    Call :meth:`stop` only after the stack is down: the thread stays alive
    until then, because the processes it restarted die with it."""

    def __init__(self, stack: Breakable, faults: Sequence[Fault], log_path: Path,
                 say: Callable[[str], None] = print) -> None:
        self._stack = stack
        self._plan = sorted(self._actions(faults), key=lambda a: a[0])
        self._log_path = log_path
        self._say = say
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = 0.0
        self.events: list[dict] = []

    @staticmethod
    def _actions(faults: Sequence[Fault]) -> list[tuple[float, str, str]]:
        plan = []
        for f in faults:
            plan.append((f.at_s, f.target, f.action))
            if f.restart_after_s is not None:
                plan.append((f.at_s + f.restart_after_s, f.target, "restart"))
        return plan

    def start(self) -> None:
        self._t0 = time.monotonic()
        if self._plan:
            self._thread = threading.Thread(target=self._run, name="fault-injector", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(120)

    def _run(self) -> None:
        for at_s, target, action in self._plan:
            if self._stop.wait(max(0.0, self._t0 + at_s - time.monotonic())):
                return
            self._do(target, action)
        # A process restarted here dies with the thread that started it (the
        # servers run under ``setpriv --pdeathsig``, which Linux ties to the
        # starting thread): hold the thread until the run is over.
        self._stop.wait()

    def _do(self, target: str, action: str) -> None:
        error = None
        try:
            if action == "restart":
                self._stack.restart(target)
            else:
                self._stack.kill(target, hard=action == "kill")
        except Exception as exc:  # noqa: BLE001 - recorded; the run goes on and the summary warns
            error = f"{type(exc).__name__}: {exc}"
        event = {"ts_ms": int(time.time() * 1000), "elapsed_s": round(time.monotonic() - self._t0, 3),
                 "target": target, "action": action, "ok": error is None, "error": error}
        self.events.append(event)
        with open(self._log_path, "a") as out:
            out.write(json.dumps(event) + "\n")
        self._say(f"[fault] {event['elapsed_s']:.1f}s {action} {target}" + (f" FAILED: {error}" if error else ""))
