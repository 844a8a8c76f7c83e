"""Sample a running load-test stack into metrics-30s.jsonl.

Example:
  $LLOG_PY -m loadtest.metrics_collector --stack loadtest/results/RUN/stack.json --interval 30

Each sample appends one JSON line to metrics-30s.jsonl beside stack.json
(the format is in loadtest/README.md, "Load-test harness"):

- services: every process of stack.json with a metrics_url (brokers and
  compactor services): its JSON /metrics document, or ok=false with the
  error when the scrape failed (refused, timed out, not JSON ...);
- processes: every process of stack.json with a pid (brokers, compactors,
  Oxia, MinIO, Prometheus ...), read from /proc: CPU seconds (user +
  system), RSS, threads, open files; alive=false once the pid is gone, a
  zombie, or reused by another process;
- host: CPU seconds by mode, available memory, network bytes (every
  interface, loopback included) and disk bytes (whole physical disks).

A process that is down never stops the collector: its entries say so and
the next sample tries again. Samples start when the collector starts and
follow every --interval seconds; elapsed_s counts from the collector's
start. Without --once the collector runs for --duration seconds, or until
SIGINT or SIGTERM, and then takes one last sample.

In Python (the orchestrator): MetricsCollector(stack, out_path,
interval_s).start(), sample_now() for a last sample, stop().
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Mapping, Sequence

from loadtest._harness.json_files import load_checked_json
from loadtest._harness.procfs import ProcessSample, clock_ticks, sample_host, sample_process
from server._signals import wait_for_stop

__all__ = ["METRICS_FILE", "MetricsCollector", "load_stack", "main"]

log = logging.getLogger(__name__)

METRICS_FILE = "metrics-30s.jsonl"
_MAX_SCRAPE_THREADS = 16
# Straight to the services: a proxy from the environment has no business with 127.0.0.1.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def load_stack(path: str | Path) -> dict[str, Any]:
    """Read stack.json; ValueError names the file and what is wrong."""
    return load_checked_json(path, _tracked, "stack.json")


def _tracked(stack: Any) -> tuple[list[tuple[str, str]], list[tuple[str, int]]]:
    """(name, metrics_url) of the services to scrape and (name, pid) of the processes to sample."""
    procs = stack.get("processes") if isinstance(stack, dict) else None
    if not isinstance(procs, list):
        raise ValueError("stack.json must be an object with a 'processes' list")
    services: list[tuple[str, str]] = []
    pids: list[tuple[str, int]] = []
    names: set[str] = set()
    for i, p in enumerate(procs):
        name = p.get("name") if isinstance(p, dict) else None
        if not isinstance(name, str) or not name:
            raise ValueError(f"processes[{i}] must be an object with a non-empty 'name', got {p!r}")
        if name in names:
            raise ValueError(f"processes[{i}]: the name {name!r} is used twice")
        names.add(name)
        url, pid = p.get("metrics_url"), p.get("pid")
        if url is not None and not isinstance(url, str):
            raise ValueError(f"processes[{i}] ({name}): 'metrics_url' must be a string or null, got {url!r}")
        if pid is not None and (not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0):
            raise ValueError(f"processes[{i}] ({name}): 'pid' must be a positive integer or null, got {pid!r}")
        if url:
            services.append((name, url))
        if pid is not None:
            pids.append((name, pid))
    return services, pids


def scrape(url: str, timeout_s: float) -> dict[str, Any]:
    """A service's entry: ``{"ok", "error", "metrics"}``; never raises."""
    try:
        with _OPENER.open(url, timeout=timeout_s) as resp:
            doc = json.loads(resp.read())
        if not isinstance(doc, dict):
            raise ValueError(f"/metrics answered a JSON {type(doc).__name__}, not an object")
    except urllib.error.HTTPError as exc:
        return {"ok": False, "error": f"HTTP {exc.code} from {url}", "metrics": None}
    except Exception as exc:  # refused, reset, timed out, not JSON: all the same to a sample
        reason = getattr(exc, "reason", None) or exc
        return {"ok": False, "error": f"{type(reason).__name__}: {reason}", "metrics": None}
    return {"ok": True, "error": None, "metrics": doc}


class MetricsCollector:
    """Samples the services, processes and host of a stack (parsed stack.json) into
    ``out_path``, one JSON line per sample: every ``interval_s`` on a named
    background thread after :meth:`start`, and whenever :meth:`sample_now` is
    called. ``with MetricsCollector(...) as c:`` starts it and stops it."""

    def __init__(self, stack: Mapping[str, Any], out_path: str | Path, interval_s: float = 30.0, *,
                 scrape_timeout_s: float = 5.0, proc_root: str | Path = "/proc", sys_root: str | Path = "/sys") -> None:
        if not interval_s > 0:
            raise ValueError(f"interval_s must be positive, got {interval_s}")
        if not scrape_timeout_s > 0:
            raise ValueError(f"scrape_timeout_s must be positive, got {scrape_timeout_s}")
        self._services, self._pids = _tracked(stack)
        self.out_path = Path(out_path)
        self.interval_s = interval_s
        self.scrape_timeout_s = scrape_timeout_s
        self._proc_root, self._sys_root = proc_root, sys_root
        self._ticks = clock_ticks()
        self._start_ticks: dict[str, int] = {}  # first start time seen per process: tells a reused pid
        self._t0 = time.monotonic()
        self._lock = threading.Lock()  # one sample at a time, so lines never interleave
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self.samples_written = 0

    def __enter__(self) -> MetricsCollector:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Take a sample now and then every ``interval_s`` on a background thread."""
        if self._thread is not None:
            raise RuntimeError("the collector is already started")
        self._t0 = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="metrics-collector", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the background thread (after the sample it may be taking); safe to call twice."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join()

    close = stop

    def track(self, stack: Mapping[str, Any]) -> None:
        """Follow a changed stack.json from the next sample on (a process restarted with a new pid)."""
        services, pids = _tracked(stack)
        with self._lock:
            self._services, self._pids = services, pids

    def sample_now(self) -> dict[str, Any]:
        """Take one sample, append it to the file and return it."""
        with self._lock:
            sample = self._sample()
            self.out_path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.out_path, "a", encoding="utf-8") as f:
                f.write(json.dumps(sample, separators=(",", ":")) + "\n")
            self.samples_written += 1
        ok = sum(s["ok"] for s in sample["services"].values())
        alive = sum(bool(p["alive"]) for p in sample["processes"].values())
        log.info("sample %d: %d/%d services answered, %d/%d processes alive", self.samples_written, ok,
                 len(sample["services"]), alive, len(sample["processes"]))
        return sample

    def _run(self) -> None:
        due = time.monotonic()
        while not self._stopping.is_set():
            try:
                self.sample_now()
            except Exception:  # a full disk, say: log it, and try again at the next interval
                log.exception("metrics sample failed")
            due += self.interval_s
            now = time.monotonic()
            if due < now:  # a sample took longer than the interval: skip the missed slots
                due = now + self.interval_s - (now - due) % self.interval_s
            self._stopping.wait(due - now)

    def _sample(self) -> dict[str, Any]:
        ts_ms = int(time.time() * 1000)
        elapsed_s = round(time.monotonic() - self._t0, 3)
        services = self._scrape_all()
        processes = {name: self._process(name, pid).to_json() for name, pid in self._pids}
        host = sample_host(self._proc_root, self._sys_root, ticks=self._ticks).to_json()
        return {"ts_ms": ts_ms, "elapsed_s": elapsed_s, "services": services, "processes": processes, "host": host}

    def _scrape_all(self) -> dict[str, dict[str, Any]]:
        if not self._services:
            return {}
        workers = min(len(self._services), _MAX_SCRAPE_THREADS)
        with ThreadPoolExecutor(workers, thread_name_prefix="metrics-scrape") as pool:
            results = pool.map(lambda s: scrape(s[1], self.scrape_timeout_s), self._services)
            return {name: r for (name, _), r in zip(self._services, results)}

    def _process(self, name: str, pid: int) -> ProcessSample:
        try:
            s = sample_process(pid, self._proc_root, ticks=self._ticks)
        except Exception:  # an unreadable /proc entry must not cost the whole sample
            log.exception("cannot sample %s (pid %d)", name, pid)
            return ProcessSample(pid, None, None, None, None, alive=False)
        if s.start_ticks is not None:
            first = self._start_ticks.setdefault(name, s.start_ticks)
            if first != s.start_ticks:  # the pid now belongs to another process: ours is gone
                return ProcessSample(pid, None, None, None, None, alive=False)
        return s


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m loadtest.metrics_collector",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--stack", required=True, type=Path, metavar="RUN_DIR/stack.json",
                        help="the run's stack.json; samples go to metrics-30s.jsonl beside it")
    parser.add_argument("--interval", type=float, default=30.0, metavar="S",
                        help="seconds between samples (default: 30)")
    when = parser.add_mutually_exclusive_group()
    when.add_argument("--once", action="store_true", help="take one sample and exit")
    when.add_argument("--duration", type=float, metavar="S",
                      help="sample for S seconds, then take a last sample and exit (default: until SIGINT/SIGTERM)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="[collector] %(message)s", stream=sys.stderr)
    try:
        stack = load_stack(args.stack)
        collector = MetricsCollector(stack, args.stack.parent / METRICS_FILE, args.interval)
    except ValueError as exc:
        print(f"metrics_collector: {exc}", file=sys.stderr)
        return 2
    if not args.once:
        done = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: done.set())
        collector.start()
        wait_for_stop(done, args.duration)
        collector.stop()
    collector.sample_now()
    print(f"{collector.samples_written} samples appended to {collector.out_path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
