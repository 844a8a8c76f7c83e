"""Benchmark ``df.write.format("llog")`` with small records (prints figures).

A DataFrame of ``--records`` string values of ``--record-bytes`` bytes each,
built inside the JVM (``spark.range``: no input file, so the figure is the
write path itself: Arrow batches to the Python tasks, partitioning,
encoding, the requests and the broker), is written to one broker
``--rounds`` times, after one untimed warm-up write (the JVM's JIT and the
Python workers' start). Each round writes a fresh topic and reports records
and MB per second, the requests sent and the broker process's CPU per MB;
the median counts. ``--key`` partitions by a key column (Kafka's murmur2)
instead of round-robin; ``--body json`` sends JSON instead of the binary
body. Spark runs ``local[N]`` with ``--tasks`` tasks; with the stack, the
broker and Spark all on the same cores, CPU per record is what counts.

    python -m loadtest.bench_spark_produce --records 2000000 --record-bytes 100
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from loadtest._common import Broker, stack_env

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m loadtest.bench_spark_produce", description=__doc__.split("\n\n")[0])
    p.add_argument("--records", type=int, default=2_000_000, help="records per write (default 2000000)")
    p.add_argument("--record-bytes", type=int, default=100, help="bytes per record (default 100)")
    p.add_argument("--partitions", type=int, default=8, help="topic partitions (default 8)")
    p.add_argument("--tasks", type=int, default=2, help="Spark tasks (and local[N] cores) (default 2)")
    p.add_argument("--rounds", type=int, default=3, help="timed writes; the median counts (default 3)")
    p.add_argument("--key", action="store_true", help="partition by a key column (murmur2) instead of round-robin")
    p.add_argument("--body", choices=("binary", "json"), default="binary", help="request body (default binary)")
    p.add_argument("--max-in-flight", type=int, default=4, help="requests in flight per task (default 4)")
    p.add_argument("--batch-max-delay-ms", type=int, default=500,
                   help="the broker's LLOG_BATCH_MAX_DELAY_MS (default 500, the product default)")
    args = p.parse_args(argv)
    if min(args.records, args.record_bytes, args.partitions, args.tasks, args.rounds) < 1:
        p.error("--records, --record-bytes, --partitions, --tasks and --rounds must be >= 1")
    return args


def records_frame(spark: Any, records: int, record_bytes: int, tasks: int, key: bool) -> Any:
    """``records`` distinct string values of exactly ``record_bytes`` ASCII bytes (plus a key column)."""
    from pyspark.sql import functions as F

    digits = F.lpad(F.col("id").cast("string"), 12, "0")
    pad = F.expr(f"repeat('x', {max(0, record_bytes - 12)})")
    value = F.substring(F.concat(digits, pad), 1, record_bytes).alias("value")
    cols = [value] + ([F.concat(F.lit("k"), (F.col("id") % 100_003).cast("string")).alias("key")] if key else [])
    return spark.range(records, numPartitions=tasks).select(*cols)


def write(df: Any, topic: str, broker: Broker, args: argparse.Namespace) -> float:
    started = time.monotonic()
    (df.write.format("llog").mode("append").option("topic", topic).option("brokers", broker.url)
     .option("partitions", str(args.partitions)).option("produceBody", args.body)
     .option("maxInFlight", str(args.max_in_flight)).save())
    return time.monotonic() - started


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from server.leaderless_log_reader import LeaderlessLogReader
    from server.spark.produce_job import spark_session

    with ExitStack() as stack:
        env = stack_env(stack)
        env["LLOG_BATCH_MAX_DELAY_MS"] = str(args.batch_max_delay_ms)
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="llog-bench-spark-produce-")))
        broker = Broker(env, "write", work / "broker.log")
        stack.callback(broker.stop)
        spark = spark_session("llog-bench-spark-produce", f"local[{args.tasks}]", {
            "spark.ui.enabled": "false", "spark.driver.memory": "2g",
        })
        stack.callback(spark.stop)
        spark.sparkContext.setLogLevel("ERROR")
        reader = stack.enter_context(LeaderlessLogReader.from_env(env))
        df = records_frame(spark, args.records, args.record_bytes, args.tasks, args.key)
        mb = args.records * args.record_bytes / 1e6
        shape = (f"{args.records:,} records x {args.record_bytes} B ({mb:,.1f} MB), {args.partitions} partitions, "
                 f"{args.tasks} tasks, {'keyed' if args.key else 'round-robin'}, {args.body} body, "
                 f"{args.max_in_flight} in flight per task, batch delay {args.batch_max_delay_ms} ms")
        print(f"[bench] {shape}", flush=True)
        print("[bench] warm-up write (untimed) ...", flush=True)
        write(df, "bench-warmup", broker, args)
        rounds = []
        for i in range(args.rounds):
            topic = f"bench-{i}"
            cpu0 = broker.cpu_seconds()
            seconds = write(df, topic, broker, args)
            cpu = broker.cpu_seconds() - cpu0
            written = sum(reader.high_watermark(topic, p) for p in range(args.partitions))
            if written != args.records:
                print(f"bench_spark_produce: {written:,} records in the log, {args.records:,} written", file=sys.stderr)
                return 1
            rounds.append({"seconds": seconds, "records_per_s": args.records / seconds, "mb_per_s": mb / seconds,
                           "broker_cpu_ms_per_mb": 1000 * cpu / mb})
            r = rounds[-1]
            print(f"[bench] round {i + 1}: {seconds:.2f} s, {r['records_per_s']:,.0f} records/s, "
                  f"{r['mb_per_s']:.1f} MB/s, broker CPU {r['broker_cpu_ms_per_mb']:.1f} ms/MB", flush=True)
    med = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
    print()
    print(f"df.write.format(\"llog\"): {shape}")
    print(f"  median of {len(rounds)}     {med['records_per_s']:,.0f} records/s, {med['mb_per_s']:.1f} MB/s "
          f"({med['seconds']:.2f} s per write), broker CPU {med['broker_cpu_ms_per_mb']:.1f} ms/MB")
    print("  rounds           " + ", ".join(f"{r['records_per_s']:,.0f}" for r in rounds) + " records/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
