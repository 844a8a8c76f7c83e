"""Benchmark the write path (BatchingProducer -> writer) and the reader's scan.

Drives a BatchingProducer from many threads over N partitions with R-byte
records for a fixed time, then scans what was written back with the reader,
and prints figures: records/s, MB/s, flushes, flush latency p50/p99, S3 PUTs
per flush, Oxia round trips per partition per flush (and of those the writes
and the reads); for the scan records/s, MB/s, S3 GETs and Oxia calls.

Uses the stack named by LLOG_* in the environment, or starts a private local
stack (Oxia + MinIO) in a temporary directory when LLOG_OXIA_SERVICE_ADDRESS
is not set. Figures only; nothing here asserts a speed.

    python -m loadtest.bench_writer --partitions 64 --record-bytes 1024 --seconds 20
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections import deque
from contextlib import ExitStack
from pathlib import Path

from loadtest._common import stack_env

from server._config import BatchConfig
from server._errors import BackPressureRejected
from server.leaderless_log_metrics import LlogMetrics
from server.leaderless_log_reader import LeaderlessLogReader
from server.leaderless_log_writer import BatchingProducer, LeaderlessLogWriter, SharedAppendGroup

MIB = 1024 * 1024


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m loadtest.bench_writer",
        description="Write-path and scan benchmark against a real Oxia + S3 stack (prints figures).",
    )
    p.add_argument("--partitions", type=int, default=64, help="partitions written (default 64)")
    p.add_argument("--record-bytes", type=int, default=1024, help="bytes per record (default 1024)")
    p.add_argument("--records-per-submit", type=int, default=64, help="records per submitted group (default 64)")
    p.add_argument("--threads", type=int, default=8, help="producer threads (default 8)")
    p.add_argument("--window", type=int, default=32, help="unacknowledged submits per thread (default 32)")
    p.add_argument("--seconds", type=float, default=20.0, help="how long to produce (default 20)")
    p.add_argument("--batch-max-bytes", type=int, default=8 * MIB, help="LLOG_BATCH_MAX_BYTES (default 8 MiB)")
    p.add_argument("--batch-max-delay-ms", type=int, default=500, help="LLOG_BATCH_MAX_DELAY_MS (default 500)")
    p.add_argument("--scan-partitions", type=int, default=4, help="partitions scanned back (default 4)")
    p.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    args = p.parse_args(argv)
    for name in ("partitions", "record_bytes", "records_per_submit", "threads", "window"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    return args


def produce(args: argparse.Namespace, env: dict[str, str], metrics: LlogMetrics) -> dict[str, float]:
    payload = os.urandom(args.record_bytes)
    group_payloads = [payload] * args.records_per_submit
    config = BatchConfig(
        max_bytes=args.batch_max_bytes,
        max_delay_ms=args.batch_max_delay_ms,
        max_buffer_bytes=max(64 * MIB, 4 * args.batch_max_bytes),
    )
    acked_records = 0
    rejected = 0
    lock = threading.Lock()
    latencies: deque[float] = deque(maxlen=100_000)
    with LeaderlessLogWriter.from_env(env, metrics=metrics) as writer:
        # Partitions are initialized lazily by the producer, as a broker does.
        with BatchingProducer(writer, config, metrics=metrics) as producer:
            deadline = time.monotonic() + args.seconds

            def worker(tid: int) -> None:
                nonlocal acked_records, rejected
                inflight: deque = deque()
                i = tid
                mine = 0
                while time.monotonic() < deadline:
                    group = SharedAppendGroup("bench", i % args.partitions, group_payloads)
                    i += args.threads
                    try:
                        inflight.append((time.monotonic(), producer.submit([group])))
                    except BackPressureRejected:
                        with lock:
                            rejected += 1
                        time.sleep(0.005)
                    while len(inflight) >= args.window or (inflight and inflight[0][1].done()):
                        t0, fut = inflight.popleft()
                        (res,) = fut.result()
                        res.raise_for_error()
                        latencies.append(time.monotonic() - t0)
                        mine += res.count
                for t0, fut in inflight:
                    (res,) = fut.result()
                    res.raise_for_error()
                    latencies.append(time.monotonic() - t0)
                    mine += res.count
                with lock:
                    acked_records += mine

            started = time.monotonic()
            threads = [threading.Thread(target=worker, args=(t,), name=f"bench-{t}") for t in range(args.threads)]
            for t in threads:
                t.start()
            last = started
            while any(t.is_alive() for t in threads):
                time.sleep(0.5)
                if time.monotonic() - last >= 5:
                    last = time.monotonic()
                    done = metrics.counter("writer_records_total")
                    print(f"[bench] {last - started:5.1f}s  {done:,.0f} records committed", flush=True)
            for t in threads:
                t.join()
            elapsed = time.monotonic() - started

    flushes = metrics.counter("batcher_flushes_total")
    flush_h = metrics.histogram("batcher_flush_seconds")
    partition_flushes = metrics.counter("batcher_flush_partitions_total")
    oxia_writes = sum(
        metrics.counter("oxia_operations_total", op=op) for op in ("put", "put_cas", "delete", "delete_range")
    )
    oxia_reads = sum(
        metrics.counter("oxia_operations_total", op=op) for op in ("get", "get_ceiling", "range_scan", "list")
    )
    init_ops = 2 * args.partitions  # initialize_partition: two create-if-absent puts each
    ordered = sorted(latencies)
    return {
        "records": acked_records,
        "seconds": round(elapsed, 2),
        "records_per_s": round(acked_records / elapsed),
        "mb_per_s": round(acked_records * args.record_bytes / elapsed / 1e6, 2),
        "flushes": int(flushes),
        "flush_p50_ms": round(flush_h.quantile(0.5) * 1000, 1) if flush_h else 0,
        "flush_p99_ms": round(flush_h.quantile(0.99) * 1000, 1) if flush_h else 0,
        "submit_ack_p50_ms": round(ordered[len(ordered) // 2] * 1000, 1) if ordered else 0,
        "submit_ack_p99_ms": round(ordered[int(len(ordered) * 0.99)] * 1000, 1) if ordered else 0,
        "s3_puts_per_flush": round(metrics.counter("s3_operations_total", op="put") / max(flushes, 1), 3),
        "avg_partitions_per_flush": round(partition_flushes / max(flushes, 1), 1),
        "oxia_round_trips_per_partition_per_flush": round((oxia_writes + oxia_reads - init_ops) / max(partition_flushes, 1), 3),
        "oxia_writes_per_partition_per_flush": round((oxia_writes - init_ops) / max(partition_flushes, 1), 3),
        "oxia_reads_per_partition_per_flush": round(oxia_reads / max(partition_flushes, 1), 3),
        "backpressure_rejections": rejected,
        "blob_mib_avg": round(metrics.counter("writer_blob_bytes_total") / max(flushes, 1) / MIB, 2),
    }


def scan(args: argparse.Namespace, env: dict[str, str]) -> dict[str, float]:
    metrics = LlogMetrics()
    records = 0
    nbytes = 0
    with LeaderlessLogReader.from_env(env, metrics=metrics) as reader:
        started = time.monotonic()
        for p in range(min(args.scan_partitions, args.partitions)):
            for rec in reader.iter_from("bench", p, 1):
                records += 1
                nbytes += len(rec.payload)
        elapsed = time.monotonic() - started
    return {
        "partitions": min(args.scan_partitions, args.partitions),
        "records": records,
        "seconds": round(elapsed, 2),
        "records_per_s": round(records / max(elapsed, 1e-9)),
        "mb_per_s": round(nbytes / max(elapsed, 1e-9) / 1e6, 2),
        "s3_gets": int(metrics.counter("s3_operations_total", op="range_get") + metrics.counter("s3_operations_total", op="get")),
        "oxia_calls": int(metrics.counter("oxia_operations_total")),
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with ExitStack() as stack:
        env = stack_env(stack)
        print(
            f"[bench] producing {args.seconds:.0f}s: {args.partitions} partitions, {args.record_bytes} B records, "
            f"{args.threads} threads x {args.records_per_submit} records/submit", flush=True,
        )
        metrics = LlogMetrics()
        write = produce(args, env, metrics)
        print("[bench] scanning back ...", flush=True)
        read = scan(args, env)
    figures = {"config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}, "write": write, "scan": read}
    print("\nwrite path (BatchingProducer -> LeaderlessLogWriter)")
    for k, v in write.items():
        print(f"  {k:42s} {v}")
    print("reader sequential scan (iter_from)")
    for k, v in read.items():
        print(f"  {k:42s} {v}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
