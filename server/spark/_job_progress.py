"""Progress of the produce job, driver side: task datagrams in, a line out
every interval (the task side is :class:`server.spark._write_source._ProgressSender`)."""

from __future__ import annotations

import json
import socket
import threading
import time
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["_ProgressMonitor"]


class _ProgressMonitor:
    """Driver side: gathers task datagrams and prints a line every interval."""

    def __init__(self, spark: SparkSession, job_group: str, interval_s: float, emit: Callable[[str], None]) -> None:
        self._sc = spark.sparkContext
        self._group = job_group
        self._interval_s = interval_s
        self._emit = emit
        self._tasks: dict[str, tuple[int, int, int, int]] = {}
        self._stop = threading.Event()
        self._started = time.monotonic()
        host = self._sc.getConf().get("spark.driver.host", "127.0.0.1") or "127.0.0.1"
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            self.sock.bind((host, 0))
        except OSError:
            self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.addr: tuple[str, int] = self.sock.getsockname()
        self._rx = threading.Thread(target=self._receive, name="llog-produce-progress-rx", daemon=True)
        self._tx = threading.Thread(target=self._report, name="llog-produce-progress", daemon=True)
        self._rx.start()
        self._tx.start()

    def _receive(self) -> None:
        while not self._stop.is_set():
            try:
                data, _ = self.sock.recvfrom(4096)
                key, *vals = json.loads(data)
                self._tasks[str(key)] = tuple(int(v) for v in vals)  # type: ignore[assignment]
            except (socket.timeout, ValueError, TypeError):
                continue
            except OSError:
                return

    def totals(self) -> tuple[int, int, int, int]:
        vals = list(self._tasks.values())
        return tuple(sum(v[i] for v in vals) for i in range(4))  # type: ignore[return-value]

    def _task_counts(self) -> tuple[int, int]:
        done = total = 0
        try:
            tracker = self._sc.statusTracker()
            for job_id in tracker.getJobIdsForGroup(self._group):
                job = tracker.getJobInfo(job_id)
                for stage_id in job.stageIds if job else ():
                    st = tracker.getStageInfo(stage_id)
                    if st is not None:
                        done += st.numCompletedTasks
                        total += st.numTasks
        except Exception:  # progress is best effort
            pass
        return done, total

    def line(self) -> str:
        records, nbytes, requests, retries = self.totals()
        elapsed = time.monotonic() - self._started
        done, total = self._task_counts()
        return (
            f"[produce] {elapsed:6.1f}s  {records:,} records ({nbytes / 1e6:,.1f} MB) acknowledged, "
            f"{nbytes / 1e6 / elapsed if elapsed > 0 else 0:.1f} MB/s, {requests:,} requests, "
            f"{retries:,} retries, tasks {done}/{total} done"
        )

    def _report(self) -> None:
        while not self._stop.wait(self._interval_s):
            self._emit(self.line())

    def close(self) -> None:
        self._stop.set()
        self._tx.join(2)
        self._rx.join(2)
        self.sock.close()
