"""The soak run's own samples: ``soak-samples.jsonl``, one line every ``interval_s``.

A line (all times UTC milliseconds)::

    {"ts_ms": ..., "elapsed_s": 12.0, "phase": "load",          # or "catch-up" once load stopped
     "processes": {"broker-1": {"kind": "broker", "pid": 1, "cpu_s": 3.2, "rss_bytes": ...,
                                "threads": 14, "open_files": 31, "alive": true}, ...},
     "objects": {"ok": true, "total": 812, "bytes": ..., "list_ms": 35.0,
                 "by_kind": {"wal-shared": 700, "compacted": 112, "legacy-wal": 0, "other": 0}},
     "compaction": {"ok": true, "lag": {"lt:0": 0, ...}, "high_watermark_sum": 51200},
     "vacuum": {"ok": true, "runs": 3, "failed_runs": 0, "objects_deleted": 412, "run_seconds": 4.2}}

- ``processes``: every process of ``stack.json`` with a pid (Oxia, MinIO,
  brokers, compactor services), read from ``/proc`` (:mod:`.procfs`);
- ``objects``: a listing of every S3 object under the run's root prefix
  (the bucket prefix vacuum lists), counted by kind: ``wal-shared`` (the
  brokers' shared WAL objects, garbage once every log they hold is
  compacted past them), ``compacted`` (one per compaction run, referenced
  for good), ``legacy-wal``, ``other``;
- ``compaction``: per partition, ``high watermark - (cursor - 1)``, the
  offsets written but not compacted (the cursor is read first, so a lag is
  never under-stated);
- ``vacuum``: the compactor services' passes (``vacuum_runs_total``, and
  those that failed), ``vacuum_objects_deleted_total`` and the seconds the
  passes took (the sum of ``vacuum_run_seconds``), summed.

A part that fails (S3 or Oxia unreachable for a moment) says ``"ok": false``
with the error; the sampler keeps going.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path
from typing import Any, Callable, Mapping

from loadtest._harness.procfs import clock_ticks, sample_process
from loadtest._harness.samples import metric_sum

__all__ = ["SAMPLES_FILE", "SoakSampler", "object_kind"]

log = logging.getLogger(__name__)

SAMPLES_FILE = "soak-samples.jsonl"
OBJECT_KINDS = ("wal-shared", "compacted", "legacy-wal", "other")


def object_kind(key: str, root: str) -> str:
    """The kind of an object key under ``root`` (the layouts of SPEC section 5)."""
    parts = key[len(root) + 1:].split("/") if key.startswith(root + "/") else []
    if len(parts) == 2 and parts[0] == "wal-shared":
        return "wal-shared"
    if len(parts) == 6 and parts[1] == "partitions" and parts[3] == "data":
        return {"compacted": "compacted", "wal": "legacy-wal"}.get(parts[4], "other")
    return "other"


class SoakSampler:
    """Writes one sample every ``interval_s`` on a named thread; ``stop()`` takes a last one.

    ``reader`` answers ``high_watermark`` and ``compaction_cursor`` (a
    ``LeaderlessLogReader``); ``objects`` lists the bucket (an ``ObjectStore``);
    ``scrape(url)`` returns a service's ``/metrics`` entry like the metrics
    collector's ``scrape``."""

    def __init__(self, stack: Mapping[str, Any], out_path: Path, *, reader: Any, objects: Any, bucket: str,
                 root: str, partitions: list[tuple[str, int]], scrape: Callable[[str], dict[str, Any]],
                 interval_s: float = 10.0) -> None:
        self._processes = [(p["name"], p["kind"], p["pid"]) for p in stack["processes"] if p.get("pid")]
        self._compactor_urls = [p["metrics_url"] for p in stack["processes"]
                                if p["kind"] == "compactor" and p.get("metrics_url")]
        self.out_path = Path(out_path)
        self._reader, self._objects, self._bucket, self._root = reader, objects, bucket, root
        self._partitions = partitions
        self._scrape = scrape
        self.interval_s = interval_s
        self.load_until_ms = float("inf")
        """Samples from this time on are of the ``catch-up`` phase."""
        self._ticks = clock_ticks()
        self._started = time.monotonic()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="soak-sampler", daemon=True)

    def start(self) -> None:
        self._started = time.monotonic()
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread, then take one last sample."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self.sample_now()

    def sample_now(self) -> dict[str, Any]:
        """Take one sample, append it to the file and return it."""
        with self._lock:
            now_ms = int(time.time() * 1000)
            sample = {"ts_ms": now_ms, "elapsed_s": round(time.monotonic() - self._started, 3),
                      "phase": "load" if now_ms < self.load_until_ms else "catch-up",
                      "processes": self._sample_processes(), "objects": self._count_objects(),
                      "compaction": self._compaction(), "vacuum": self._vacuum()}
            with open(self.out_path, "a") as out:
                out.write(json.dumps(sample, separators=(",", ":")) + "\n")
        return sample

    def lags(self) -> dict[str, int] | None:
        """Every partition's compaction lag now (None when Oxia did not answer)."""
        part = self._compaction()
        return part["lag"] if part["ok"] else None

    def _run(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            try:
                self.sample_now()
            except Exception:  # noqa: BLE001 - a sample that failed must not end the soak's sampling
                log.exception("soak sample failed")
            next_at += self.interval_s
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    def _sample_processes(self) -> dict[str, Any]:
        out = {}
        for name, kind, pid in self._processes:
            out[name] = {"kind": kind, **sample_process(pid, ticks=self._ticks).to_json()}
        return out

    def _count_objects(self) -> dict[str, Any]:
        started = time.monotonic()
        counts = dict.fromkeys(OBJECT_KINDS, 0)
        total_bytes = 0
        try:
            for info in self._objects.list(self._bucket, f"{self._root}/"):
                counts[object_kind(info.key, self._root)] += 1
                total_bytes += info.size
        except Exception as exc:  # noqa: BLE001 - S3 away for a moment: say so, sample again later
            return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        return {"ok": True, "total": sum(counts.values()), "bytes": total_bytes, "by_kind": counts,
                "list_ms": round((time.monotonic() - started) * 1000, 1)}

    def _compaction(self) -> dict[str, Any]:
        lag: dict[str, int] = {}
        hwm_sum = 0
        try:
            for topic, partition in self._partitions:
                cursor = self._reader.compaction_cursor(topic, partition)
                hwm = self._reader.high_watermark(topic, partition)
                lag[f"{topic}:{partition}"] = max(0, hwm - (cursor - 1))
                hwm_sum += hwm
        except Exception as exc:  # noqa: BLE001 - Oxia away for a moment
            return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        return {"ok": True, "lag": lag, "high_watermark_sum": hwm_sum}

    def _vacuum(self) -> dict[str, Any]:
        totals = {"runs": 0.0, "failed_runs": 0.0, "objects_deleted": 0.0, "run_seconds": 0.0}
        for url in self._compactor_urls:
            entry = self._scrape(url)
            if not entry["ok"]:
                return {"ok": False, "error": entry["error"]}
            doc = entry["metrics"]
            totals["runs"] += metric_sum(doc, "counters", "vacuum_runs_total")
            totals["failed_runs"] += metric_sum(doc, "counters", "vacuum_runs_total", outcome="error")
            totals["objects_deleted"] += metric_sum(doc, "counters", "vacuum_objects_deleted_total")
            histogram = ((doc.get("histograms") or {}).get("vacuum_run_seconds") or {}).get("") or {}
            totals["run_seconds"] += float(histogram.get("sum_s") or 0.0)
        return {"ok": True, **{k: round(v, 3) if k == "run_seconds" else int(v) for k, v in totals.items()}}
