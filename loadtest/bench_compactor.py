"""Benchmark compaction: can the compactor service keep lag bounded under steady ingest?

A BatchingProducer appends at a steady target rate (default 30 MB/s, 64
partitions, 1 KiB records) while a compactor service with N workers runs —
as a subprocess (``python -m server.leaderless_log_compactor_server``,
default) or in this process (``--in-process``). Every second the benchmark
samples the total lag (sum over partitions of high watermark - (cursor - 1),
read from Oxia), the ingest rate and the compaction rate. After the write
phase it stops the writer, measures how long the compactor takes to drain the
lag to zero, and runs one vacuum pass (grace 0) to show what compaction freed.

Prints: compaction throughput (offsets/s, MB/s), S3 GETs and PUTs per
compacted MB, Oxia calls per run, lag over time, and whether lag stayed
bounded (least-squares slope of the lag over the second half of the write
phase below 5% of the ingest rate).

Uses the stack named by LLOG_* in the environment, or starts a private local
stack (Oxia + MinIO) in a temporary directory when LLOG_OXIA_SERVICE_ADDRESS
is not set. Figures only; nothing here asserts a speed.

    python -m loadtest.bench_compactor --rate-mb 30 --partitions 64 --workers 4 --seconds 60
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import deque
from contextlib import ExitStack
from pathlib import Path

from loadtest._common import stack_env
from typing import Callable

from server._compaction.config import CompactorServiceConfig
from server._config import BatchConfig, OxiaConfig, S3Config
from server._errors import BackPressureRejected
from server._protocol.keys import LogLayout
from server._protocol.records import CompactionCursor, ControlRecord
from server._storage.metastore import OxiaMetadataStore
from devstack import die_with_parent_argv
from server.leaderless_log_compactor_server import CompactorService
from server.leaderless_log_metrics import LlogMetrics
from server.leaderless_log_vacuum import Vacuum
from server.leaderless_log_writer import BatchingProducer, LeaderlessLogWriter, SharedAppendGroup

MIB = 1024 * 1024
TOPIC = "bench"
REPO = Path(__file__).resolve().parents[1]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m loadtest.bench_compactor",
        description="Compaction throughput and lag under steady ingest, against a real Oxia + S3 stack.",
    )
    p.add_argument("--rate-mb", type=float, default=30.0, help="target ingest, MB/s of payload (default 30)")
    p.add_argument("--partitions", type=int, default=64, help="partitions written (default 64)")
    p.add_argument("--record-bytes", type=int, default=1024, help="bytes per record (default 1024)")
    p.add_argument("--records-per-submit", type=int, default=64, help="records per submitted group (default 64)")
    p.add_argument("--producer-threads", type=int, default=4, help="producer threads (default 4)")
    p.add_argument("--seconds", type=float, default=60.0, help="length of the write phase (default 60)")
    p.add_argument("--workers", type=int, default=4, help="compactor workers (default 4)")
    p.add_argument("--in-process", action="store_true", help="run the compactor service in this process")
    p.add_argument("--max-offsets-per-run", type=int, help="LLOG_COMPACTOR_MAX_OFFSETS_PER_RUN (default: the compactor's)")
    p.add_argument("--idle-sleep-ms", type=int, default=1000, help="LLOG_COMPACTOR_IDLE_SLEEP_MS (default 1000)")
    p.add_argument("--blob-cache-bytes", type=int,
                   help="LLOG_COMPACTOR_BLOB_CACHE_BYTES (default: the service's, 128 MiB; 0 disables)")
    p.add_argument("--batch-max-bytes", type=int, default=8 * MIB, help="LLOG_BATCH_MAX_BYTES (default 8 MiB)")
    p.add_argument("--batch-max-delay-ms", type=int, default=500, help="LLOG_BATCH_MAX_DELAY_MS (default 500)")
    p.add_argument("--drain-timeout", type=float, default=120.0, help="max seconds to wait for lag 0 (default 120)")
    p.add_argument("--no-vacuum", action="store_true", help="skip the vacuum pass at the end")
    p.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    args = p.parse_args(argv)
    for name in ("partitions", "record_bytes", "records_per_submit", "producer_threads", "workers"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.rate_mb <= 0:
        p.error("--rate-mb must be > 0")
    return args


# -- the compactor under test ------------------------------------------------------------------
class Compactors:
    """The service (subprocess or in-process) and a way to read its counters."""

    def __init__(self, args: argparse.Namespace, env: dict[str, str], stack: ExitStack) -> None:
        self.args = args
        service_env = {
            **env,
            "LLOG_COMPACTOR_ID": "bench-compactor",
            "LLOG_COMPACTOR_WORKERS": str(args.workers),
            "LLOG_COMPACTOR_DISCOVERY_INTERVAL_MS": "1000",
            "LLOG_COMPACTOR_IDLE_SLEEP_MS": str(args.idle_sleep_ms),
            "LLOG_COMPACTOR_IDLE_JITTER_MS": str(max(1, args.idle_sleep_ms // 2)),
            "LLOG_VACUUM_INTERVAL_MS": "0",
        }
        if args.max_offsets_per_run:
            service_env["LLOG_COMPACTOR_MAX_OFFSETS_PER_RUN"] = str(args.max_offsets_per_run)
        if args.blob_cache_bytes is not None:
            service_env["LLOG_COMPACTOR_BLOB_CACHE_BYTES"] = str(args.blob_cache_bytes)
        self._service: CompactorService | None = None
        self._proc: subprocess.Popen | None = None
        if args.in_process:
            self.metrics = LlogMetrics()
            config = CompactorServiceConfig.from_env(service_env)
            self._service = CompactorService.from_env(service_env, config=config, metrics=self.metrics, serve_http=False)
            self._service.start()
            stack.callback(self._service.close)
        else:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                self.port = s.getsockname()[1]
            log = open(tempfile.mktemp(prefix="llog-bench-compactor-", suffix=".log"), "wb")
            self.log_path = log.name
            self._proc = subprocess.Popen(
                die_with_parent_argv([sys.executable, "-m", "server.leaderless_log_compactor_server",
                                      "--port", str(self.port), "--log-level", "WARNING"]),
                env={**os.environ, **service_env, "PYTHONPATH": str(REPO)}, stdout=log, stderr=subprocess.STDOUT,
            )
            stack.callback(self._stop_proc)
            stack.callback(log.close)
            self._wait_healthy()

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise SystemExit(f"compactor service exited with {self._proc.returncode}; see {self.log_path}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        raise SystemExit(f"compactor service did not start; see {self.log_path}")

    def _stop_proc(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGTERM)
            try:
                self._proc.wait(60)
            except subprocess.TimeoutExpired:
                self._proc.kill()

    def counters(self) -> dict[str, float]:
        """compacted offsets/bytes, runs, S3 GETs/PUTs and Oxia calls of the compactor."""
        if self._service is not None:
            snap = self.metrics.snapshot()
        else:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=10) as r:
                snap = json.loads(r.read())
        c = snap["counters"]

        def total(name: str, want: Callable[[str], bool] = lambda _: True) -> float:
            return sum(v for k, v in c.get(name, {}).items() if want(k))

        return {
            "offsets": total("compactor_compacted_offsets_total"),
            "bytes": total("compactor_compacted_bytes_total"),
            "runs": total("compactor_runs_total"),
            "runs_compacted": total("compactor_runs_total", lambda k: "outcome=compacted" in k or "outcome=resumed" in k),
            "task_errors": total("compactor_tasks_total", lambda k: "outcome=error" in k),
            "claims_lost": total("compactor_claims_total", lambda k: "result=lost" in k),
            "s3_gets": total("s3_operations_total", lambda k: "op=get," in k + "," or "op=range_get," in k + ","),
            "s3_puts": total("s3_operations_total", lambda k: "op=put," in k + ","),
            "oxia_calls": total("oxia_operations_total"),
            "cache_fills": total("compactor_blob_cache_requests_total", lambda k: "result=fill" in k),
            "cache_hits": total("compactor_blob_cache_requests_total", lambda k: "result=hit" in k),
            "cache_ranged": total("compactor_blob_cache_requests_total", lambda k: "result=ranged" in k),
        }


# -- the steady writer --------------------------------------------------------------------------
class SteadyWriter:
    """Producer threads pacing submits to ``rate_mb`` MB/s through one BatchingProducer."""

    def __init__(self, args: argparse.Namespace, env: dict[str, str], metrics: LlogMetrics) -> None:
        self.args = args
        self.writer = LeaderlessLogWriter.from_env(env, metrics=metrics)
        config = BatchConfig(args.batch_max_bytes, args.batch_max_delay_ms, max(64 * MIB, 4 * args.batch_max_bytes))
        self.producer = BatchingProducer(self.writer, config, metrics=metrics)
        self.payload = os.urandom(args.record_bytes)
        self.submit_bytes = args.record_bytes * args.records_per_submit
        self.rate_bps = args.rate_mb * 1e6
        self.acked_records = 0
        self.rejected = 0
        self._lock = threading.Lock()
        self._reserved = 0
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        for p in range(self.args.partitions):
            self.producer.ensure_initialized(TOPIC, p)
        self.started = time.monotonic()
        self._threads = [threading.Thread(target=self._run, args=(t,), name=f"bench-producer-{t}")
                         for t in range(self.args.producer_threads)]
        for t in self._threads:
            t.start()

    def _run(self, tid: int) -> None:
        group_payloads = [self.payload] * self.args.records_per_submit
        inflight: deque = deque()
        partition = tid
        mine = 0
        while not self._stop.is_set():
            with self._lock:  # reserve the next slot of the schedule
                due = self.started + self._reserved / self.rate_bps
                self._reserved += self.submit_bytes
            delay = due - time.monotonic()
            if delay > 0:
                self._stop.wait(delay)
                if self._stop.is_set():
                    break
            group = SharedAppendGroup(TOPIC, partition % self.args.partitions, group_payloads)
            partition += self.args.producer_threads
            while True:
                try:
                    inflight.append(self.producer.submit([group]))
                    break
                except BackPressureRejected:
                    with self._lock:
                        self.rejected += 1
                    time.sleep(0.005)
            while len(inflight) > 64 or (inflight and inflight[0].done()):
                (res,) = inflight.popleft().result()
                res.raise_for_error()
                mine += res.count
        for fut in inflight:
            (res,) = fut.result()
            res.raise_for_error()
            mine += res.count
        with self._lock:
            self.acked_records += mine

    def stop(self) -> float:
        self._stop.set()
        for t in self._threads:
            t.join()
        elapsed = time.monotonic() - self.started
        self.producer.close()
        self.writer.close()
        return elapsed


# -- lag --------------------------------------------------------------------------------------------
class LagProbe:
    def __init__(self, env: dict[str, str], partitions: int) -> None:
        self.meta = OxiaMetadataStore(OxiaConfig.from_env(env))
        layout = LogLayout(env["LLOG_ROOT_PREFIX"])
        self.keys = [layout.partition(TOPIC, p) for p in range(partitions)]

    def sample(self) -> tuple[int, int]:
        """(total high watermark, total lag) over all partitions."""
        hw_total = lag_total = 0
        for k in self.keys:
            control = self.meta.get(k.control, k.partition_key)
            if control is None:
                continue
            hw = ControlRecord.decode(control.value).high_watermark
            rec = self.meta.get(k.compaction_cursor, k.partition_key)
            cursor = 1 if rec is None else CompactionCursor.decode(rec.value).offset
            hw_total += hw
            lag_total += max(0, hw - (cursor - 1))
        return hw_total, lag_total

    def close(self) -> None:
        self.meta.close()


def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of y over x."""
    if len(points) < 2:
        return 0.0
    mx = statistics.fmean(x for x, _ in points)
    my = statistics.fmean(y for _, y in points)
    den = sum((x - mx) ** 2 for x, _ in points)
    return 0.0 if den == 0 else sum((x - mx) * (y - my) for x, y in points) / den


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rec_mb = args.record_bytes / 1e6
    with ExitStack() as stack:
        env = stack_env(stack)
        mode = "in-process" if args.in_process else "subprocess"
        print(f"[bench] compactor service ({mode}, {args.workers} workers); writer target {args.rate_mb} MB/s "
              f"over {args.partitions} partitions, {args.record_bytes} B records, {args.seconds:.0f}s", flush=True)
        compactors = Compactors(args, env, stack)
        probe = LagProbe(env, args.partitions)
        stack.callback(probe.close)
        writer_metrics = LlogMetrics()
        writer = SteadyWriter(args, env, writer_metrics)
        writer.start()
        t0 = time.monotonic()
        samples: list[dict[str, float]] = []
        last_hw, last_off, last_t = 0, 0.0, t0
        print(f"{'t_s':>6} {'ingest_MB/s':>11} {'compact_off/s':>13} {'compact_MB/s':>12} {'lag_offsets':>11} {'lag_MB':>8}")

        def take(phase: str) -> dict[str, float]:
            nonlocal last_hw, last_off, last_t
            now = time.monotonic()
            hw, lag = probe.sample()
            c = compactors.counters()
            dt = max(now - last_t, 1e-6)
            s = {"phase": phase, "t": round(now - t0, 2), "hw": hw, "lag": lag,
                 "ingest_mb_s": round((hw - last_hw) * rec_mb / dt, 2),
                 "compact_offsets_s": round((c["offsets"] - last_off) / dt),
                 "compact_mb_s": round((c["offsets"] - last_off) * rec_mb / dt, 2)}
            last_hw, last_off, last_t = hw, c["offsets"], now
            samples.append(s)
            print(f"{s['t']:6.1f} {s['ingest_mb_s']:11.2f} {s['compact_offsets_s']:13.0f} {s['compact_mb_s']:12.2f} "
                  f"{lag:11d} {lag * rec_mb:8.1f}{'  (drain)' if phase == 'drain' else ''}", flush=True)
            return s

        before = compactors.counters()
        while time.monotonic() - t0 < args.seconds:
            time.sleep(max(0.0, 1.0 - (time.monotonic() - last_t)))
            take("write")
        write_elapsed = writer.stop()
        at_stop = take("write")
        drain_started = time.monotonic()
        drained = at_stop["lag"] == 0
        while not drained and time.monotonic() - drain_started < args.drain_timeout:
            time.sleep(max(0.0, 1.0 - (time.monotonic() - last_t)))
            drained = take("drain")["lag"] == 0
        drain_s = time.monotonic() - drain_started
        after = compactors.counters()
        total_s = time.monotonic() - t0

        vacuum_fig = {}
        if not args.no_vacuum:
            vm = LlogMetrics()
            with Vacuum(OxiaConfig.from_env(env), S3Config.from_env(env), grace_ms=0, allow_unsafe_grace=True,
                        metrics=vm) as v:  # the writes are done: nothing can reference late
                report = v.run_once()
            vacuum_fig = {
                "seconds": report.duration_s, "objects_scanned": report.scanned,
                "objects_deleted": len(report.deleted), "mib_reclaimed": round(report.bytes_reclaimed / MIB, 1),
                "kept": dict(report.kept), "errors": len(report.errors),
            }

    d = {k: after[k] - before[k] for k in after}
    write_samples = [s for s in samples if s["phase"] == "write"]
    lags = [s["lag"] for s in write_samples]
    second_half = [(s["t"], s["lag"]) for s in write_samples if s["t"] >= args.seconds / 2]
    lag_slope = slope(second_half)
    acked = writer.acked_records
    ingest_offsets_s = acked / write_elapsed
    compacted_mb = d["bytes"] / 1e6
    bounded = drained and lag_slope < 0.05 * ingest_offsets_s
    figures = {
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "ingest": {
            "records": acked, "seconds": round(write_elapsed, 1),
            "mb_per_s": round(acked * rec_mb / write_elapsed, 2), "records_per_s": round(ingest_offsets_s),
            "flushes": int(writer_metrics.counter("batcher_flushes_total")),
            "backpressure_rejections": writer.rejected,
        },
        "compaction": {
            "offsets": int(d["offsets"]), "compacted_mb": round(compacted_mb, 1),
            "offsets_per_s": round(d["offsets"] / total_s), "mb_per_s": round(compacted_mb / total_s, 2),
            "offsets_per_s_while_writing": round(statistics.fmean(s["compact_offsets_s"] for s in write_samples[1:]))
            if len(write_samples) > 1 else 0,
            "runs": int(d["runs"]), "runs_that_compacted": int(d["runs_compacted"]),
            "avg_offsets_per_compacting_run": round(d["offsets"] / max(d["runs_compacted"], 1)),
            "s3_gets_per_compacted_mb": round(d["s3_gets"] / max(compacted_mb, 1e-9), 2),
            "s3_puts_per_compacted_mb": round(d["s3_puts"] / max(compacted_mb, 1e-9), 3),
            "oxia_calls_per_run": round(d["oxia_calls"] / max(d["runs"], 1), 1),
            "blob_cache_hit_ratio": round(d["cache_hits"] / max(d["cache_hits"] + d["cache_fills"] + d["cache_ranged"], 1), 3),
            "task_errors": int(d["task_errors"]),
        },
        "lag": {
            "max_offsets": max(lags, default=0), "p50_offsets": int(statistics.median(lags)) if lags else 0,
            "max_mb": round(max(lags, default=0) * rec_mb, 1),
            "at_writer_stop_offsets": at_stop["lag"],
            "slope_second_half_offsets_per_s": round(lag_slope, 1),
            "drained": drained, "drain_seconds": round(drain_s, 1),
            "bounded": bounded,
        },
        "vacuum_after_drain": vacuum_fig,
        "samples": samples,
    }
    print("\ningest (BatchingProducer, paced)")
    for k, v in figures["ingest"].items():
        print(f"  {k:36s} {v}")
    print(f"compaction ({mode} service, {args.workers} workers)")
    for k, v in figures["compaction"].items():
        print(f"  {k:36s} {v}")
    print("lag")
    for k, v in figures["lag"].items():
        print(f"  {k:36s} {v}")
    if vacuum_fig:
        print("vacuum after drain (grace 0)")
        for k, v in vacuum_fig.items():
            print(f"  {k:36s} {v}")
    verdict = "BOUNDED" if bounded else "NOT bounded"
    print(f"\nlag {verdict}: slope over the second half {lag_slope:+.1f} offsets/s vs ingest "
          f"{ingest_offsets_s:.0f} offsets/s; drained to 0 in {drain_s:.1f}s after the writer stopped")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
