"""What a retention pass costs a compactor service: time, Oxia requests and index rows read per pass.

Every compactor service runs retention each ``LLOG_RETENTION_INTERVAL_MS``
over every log it knows (SPEC 7.10). A log that keeps a week of data has an
index of thousands of compacted ranges, and most passes let nothing go. The
benchmark writes ``--logs`` logs into Oxia (on a private local stack unless
``LLOG_OXIA_SERVICE_ADDRESS`` names one), each with ``--entries`` COMPACTED
index entries below its compaction cursor and a WAL entry above it, under
one topic with ``retention.ms`` of 7 days (nothing old enough: the common
pass), then per run: ``--passes`` passes of the service's own
``RetentionRunner.run_once`` with nothing changed ("unchanged"), then
``--passes`` passes each after a new WAL entry in every log ("appended").
The entries are written directly (no S3 objects): retention reads only the
index. It prints per phase the median time per pass, the Oxia requests and
the rows read per pass (by range scans and CEILING gets), and the medians
of ``--repeat`` runs.

    python -m loadtest.bench_retention --logs 64 --entries 1000 --passes 5 --repeat 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from typing import Iterator

from loadtest._common import stack_env
from server._catalogue.catalogue import TopicCatalogue
from server._compaction.retention_runner import RetentionRunner
from server._config import OxiaConfig
from server._metrics import LlogMetrics
from server._protocol.keys import LogLayout, TopicPartition
from server._protocol.records import CompactionCursor, ControlRecord, EntryType, IndexEntry, LogState
from server._runtime import REAL_RUNTIME
from server._storage.metastore import OxiaMetadataStore, Record

TOPIC = "retained"
WEEK_MS = 7 * 24 * 3600 * 1000
RANGE = 1000
"""Offsets per compacted range."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m loadtest.bench_retention", description=__doc__.split("\n\n")[0])
    p.add_argument("--logs", type=int, default=64, help="logs (partitions of one topic; default 64)")
    p.add_argument("--entries", type=int, default=1000, help="compacted ranges per log (default 1000)")
    p.add_argument("--passes", type=int, default=5, help="retention passes per phase of a run (default 5)")
    p.add_argument("--repeat", type=int, default=3, help="runs; medians are printed (default 3)")
    args = p.parse_args(argv)
    if min(args.logs, args.entries, args.passes, args.repeat) < 1:
        p.error("--logs, --entries, --passes and --repeat must be positive")
    return args


class CountingStore(OxiaMetadataStore):
    """Counts the rows range scans and CEILING gets hand out."""

    rows = 0

    def range_scan(self, min_key: str, max_key: str, partition_key: str | None) -> Iterator[Record]:
        for row in super().range_scan(min_key, max_key, partition_key):
            self.rows += 1
            yield row

    def ceiling(self, key: str, partition_key: str) -> Record | None:
        self.rows += 1
        return super().ceiling(key, partition_key)


def requests(metrics: LlogMetrics) -> int:
    return int(metrics.counter("oxia_operations_total"))


def write_logs(meta: OxiaMetadataStore, layout: LogLayout, args: argparse.Namespace) -> None:
    now = REAL_RUNTIME.clock.now_ms()
    end = args.entries * RANGE

    def one(p: int) -> None:
        keys = layout.partition(TOPIC, p)
        for i in range(args.entries):
            last = (i + 1) * RANGE
            entry = IndexEntry(EntryType.COMPACTED, RANGE, f"{keys.index_prefix}c{i}", "kafka-batch-v2", None, None,
                               now, max_timestamp_ms=now - (args.entries - i), size_bytes=64 << 20)
            meta.put(keys.index(last), entry.encode(), keys.partition_key)
        meta.put(keys.compaction_cursor, CompactionCursor(end + 1).encode(), keys.partition_key)
        meta.put(keys.control, ControlRecord(LogState.OPEN, end + 1).encode(), keys.partition_key)
        append(meta, layout, p, end + 1)

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(one, range(args.logs)))


def append(meta: OxiaMetadataStore, layout: LogLayout, p: int, offset: int) -> None:
    """One WAL entry at ``offset`` and the control record past it."""
    keys = layout.partition(TOPIC, p)
    got = meta.get(keys.control, keys.partition_key)
    control = ControlRecord.decode(got.value)
    entry = IndexEntry(EntryType.WAL, 1, "wal/x", "kafka-batch-v2", 0, 1024, REAL_RUNTIME.clock.now_ms())
    meta.put(keys.index(offset), entry.encode(), keys.partition_key)
    meta.put(keys.control, ControlRecord(LogState.OPEN, offset + 1, log_start_offset=control.log_start_offset).encode(),
             keys.partition_key)


def run_once(env: dict[str, str], args: argparse.Namespace, run: int) -> dict[str, tuple[float, float, float]]:
    layout = LogLayout(f"{env['LLOG_ROOT_PREFIX']}-{run}")
    metrics = LlogMetrics()
    meta = CountingStore(OxiaConfig.from_env(env), metrics)
    try:
        TopicCatalogue(meta, layout).create(TOPIC, args.logs, {"retention.ms": str(WEEK_MS)})
        started = time.monotonic()
        write_logs(meta, layout, args)
        print(f"[bench] run {run + 1}: {args.logs} logs of {args.entries} entries written in "
              f"{time.monotonic() - started:.1f} s", file=sys.stderr, flush=True)
        tps = [TopicPartition(TOPIC, p) for p in range(args.logs)]
        runner = RetentionRunner(meta, layout, lambda: tps, 0, threading.Event(), REAL_RUNTIME.rng, metrics)
        runner.run_once()  # the first pass after a start reads every index whole either way
        out = {}
        next_offset = args.entries * RANGE + 2
        for phase in ("unchanged", "appended"):
            times, reqs, rows = [], [], []
            for _ in range(args.passes):
                if phase == "appended":
                    for p in range(args.logs):
                        append(meta, layout, p, next_offset)
                    next_offset += 1
                r0, n0, t0 = requests(metrics), meta.rows, time.perf_counter()
                results = runner.run_once()
                times.append((time.perf_counter() - t0) * 1000)
                reqs.append(requests(metrics) - r0)
                rows.append(meta.rows - n0)
                assert len(results) == args.logs and all(r.outcome.value == "kept" for r in results), results[:3]
            out[phase] = (statistics.median(times), statistics.median(reqs), statistics.median(rows))
            print(f"[bench] run {run + 1} {phase}: {out[phase][0]:.0f} ms per pass, {out[phase][1]:.0f} Oxia "
                  f"requests, {out[phase][2]:.0f} index rows read", file=sys.stderr, flush=True)
        return out
    finally:
        meta.close()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with ExitStack() as stack:
        env = stack_env(stack)
        runs = [run_once(env, args, i) for i in range(args.repeat)]
    print(f"retention pass over {args.logs} logs of {args.entries} compacted ranges, medians of {args.repeat} runs "
          f"of {args.passes} passes")
    print(f"{'phase':<10} {'ms per pass':>12} {'Oxia requests':>14} {'index rows read':>16}   [runs]")
    for phase in ("unchanged", "appended"):
        ms = [r[phase][0] for r in runs]
        reqs = [r[phase][1] for r in runs]
        rows = [r[phase][2] for r in runs]
        print(f"{phase:<10} {statistics.median(ms):>12.0f} {statistics.median(reqs):>14.0f} "
              f"{statistics.median(rows):>16.0f}   [{' '.join(f'{m:.0f}' for m in ms)}]")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
