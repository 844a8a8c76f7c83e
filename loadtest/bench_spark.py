"""Benchmark the Spark pipeline (prints figures).

1. The produce job (``run_produce_job``) on a generated JSON lines data set
   (``--rows`` rows of about ``--row-bytes`` bytes, ``--partitions``
   partitions, keyed by customer) against one broker, then against two.
2. Reading the first topic back in full: ``spark.read.format("llog")``
   straight from Oxia + S3, versus ``POST /consume`` through a fresh
   read-role broker (empty tail cache, so it reads S3 as well), once with
   ``--consume-clients`` concurrent clients (partitions split between them)
   and once with a single client reading partition after partition.

Spark runs local[2] with a 2 GiB driver. Uses the stack named by LLOG_* in
the environment, or starts a private local stack (Oxia + MinIO) when
LLOG_OXIA_SERVICE_ADDRESS is not set. Figures only; nothing here asserts a
speed.

Both reads are measured warm, as a long-running job or broker would see
them: Spark after ``--warmup-reads`` full reads (the JVM's JIT keeps
compiling Spark's planner for a few dozen queries: on the 2-core VM about
0.8 s of compiling per query at first, 0.4 s after 20 and 0.15 s after 40;
the first, cold read and the JIT time left per timed query are printed
too), ``/consume`` after the read broker has served the other topic once. Then ``--repeat`` rounds each time one Spark read,
one Spark count/sum query and one ``/consume`` read, so that the machine
getting faster or slower over the run affects both sides alike; medians
count, and the per-round ratios are printed. The Spark read writes to
Spark's ``noop`` sink (every value crosses into a JVM row, and nothing runs
after the scan); the count/sum query adds a shuffle and a second stage, and
its figure is printed beside it. Every round checks that both sides read
every produced record and the same payload bytes.

    python -m loadtest.bench_spark --rows 200000 --row-bytes 1024
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import statistics
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path

from loadtest._common import Broker, stack_env
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

MIB = 1024 * 1024


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m loadtest.bench_spark", description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=200_000, help="rows in the data set (default 200000)")
    p.add_argument("--row-bytes", type=int, default=1024, help="approximate bytes per JSON row (default 1024)")
    p.add_argument("--partitions", type=int, default=8, help="topic partitions (default 8)")
    p.add_argument("--consume-clients", type=int, default=8, help="concurrent /consume clients (default 8)")
    p.add_argument(
        "--consume-max-bytes", type=int, default=8 * MIB, help="max_bytes per /consume request (default 8 MiB)"
    )
    p.add_argument("--batch-max-delay-ms", type=int, default=100, help="brokers' LLOG_BATCH_MAX_DELAY_MS (default 100)")
    p.add_argument("--repeat", type=int, default=5,
                   help="rounds of timed reads, one of each kind per round; medians count (default 5)")
    p.add_argument("--warmup-reads", type=int, default=40,
                   help="untimed full Spark reads before the rounds, every 8th a count/sum query "
                        "(default 40; the first is reported as cold)")
    p.add_argument("--skip-two-brokers", action="store_true", help="skip the two-broker produce run")
    p.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    args = p.parse_args(argv)
    if args.warmup_reads < 1 or args.repeat < 1:
        p.error("--warmup-reads and --repeat must be at least 1")
    return args


def make_dataset(spark: Any, path: Path, rows: int, row_bytes: int) -> tuple[int, int]:
    """A deterministic JSON lines data set written by Spark; returns (rows, bytes)."""
    from pyspark.sql import functions as F

    pad = max(0, row_bytes - 110)
    df = spark.range(rows, numPartitions=4).select(
        F.to_json(F.struct(
            F.col("id").alias("order_id"),
            F.concat(F.lit("cust-"), (F.col("id") * 7919 % 5000).cast("string")).alias("customer"),
            (F.col("id") % 100000 / 100.0).alias("amount"),
            F.lit("2026-01-01T00:00:00Z").alias("ts"),
            F.expr(f"repeat(substr(md5(cast(id as string)), 1, 16), {pad // 16 + 1})").substr(1, pad).alias("items"),
        )).alias("value")
    )
    df.write.mode("overwrite").text(str(path))
    files = list(path.glob("part-*"))
    for f in files:
        f.rename(f.with_suffix(".jsonl"))
    return rows, sum(f.stat().st_size for f in path.glob("*.jsonl"))


def produce(spark: Any, path: Path, topic: str, brokers: list[Broker], partitions: int) -> dict[str, Any]:
    from server.spark.produce_job import ProduceOptions, run_produce_job

    opts = ProduceOptions(topic=topic, brokers=tuple(b.url for b in brokers), partitions=partitions,
                          key_column="customer", progress_interval_s=5.0)
    s = run_produce_job(spark, str(path / "*.jsonl"), opts, progress=lambda line: print(line, flush=True))
    return {
        "brokers": len(brokers), "rows": s.stats.records_acked, "payload_mb": round(s.stats.bytes_acked / 1e6, 1),
        "seconds": round(s.duration_s, 2), "rows_per_s": round(s.rows_per_s), "mb_per_s": round(s.mb_per_s, 1),
        "requests": s.stats.requests, "retries": s.stats.retries,
    }


def _timings(runs: list[float], nbytes: int) -> dict[str, Any]:
    median = statistics.median(runs)
    return {"seconds": round(median, 2), "mb_per_s": round(nbytes / 1e6 / median, 1),
            "best_mb_per_s": round(nbytes / 1e6 / min(runs), 1), "runs_s": [round(r, 2) for r in runs]}


class JitClock:
    """The driver JVM's accumulated JIT compilation time (all compiler threads)."""

    def __init__(self, spark: Any) -> None:
        self._bean = spark._jvm.java.lang.management.ManagementFactory.getCompilationMXBean()
        self._last = self._bean.getTotalCompilationTime()

    def lap_ms(self) -> int:
        """Milliseconds compiled since the previous lap."""
        now = self._bean.getTotalCompilationTime()
        lap, self._last = now - self._last, now
        return lap


class SparkReads:
    """Full reads of one topic with ``spark.read.format("llog")``, timed from
    ``load()`` (query planning, high watermarks included) to the last row."""

    def __init__(self, spark: Any, env: dict[str, str], topic: str) -> None:
        self.spark = spark
        self.options = {
            "topic": topic,
            "oxia.serviceAddress": env["LLOG_OXIA_SERVICE_ADDRESS"],
            "rootPrefix": env["LLOG_ROOT_PREFIX"],
        }
        for opt, var in (("s3.endpoint", "LLOG_S3_ENDPOINT_URL"), ("s3.region", "LLOG_S3_REGION_NAME"),
                         ("s3.accessKeyId", "LLOG_S3_ACCESS_KEY_ID"),
                         ("s3.secretAccessKey", "LLOG_S3_SECRET_ACCESS_KEY")):
            if env.get(var):
                self.options[opt] = env[var]

    def _df(self) -> Any:
        return self.spark.read.format("llog").options(**self.options).load()

    def read(self) -> float:
        """Every row into Spark and nowhere else: the ``noop`` sink is Spark's
        own way to time a scan (each value still crosses from the Python
        reader into a JVM row) without a second stage after it."""
        started = time.monotonic()
        self._df().write.format("noop").mode("overwrite").save()
        return time.monotonic() - started

    def aggregate(self) -> tuple[float, int, int]:
        """``count(*)`` and ``sum(length(value))`` over the topic: the read
        plus a shuffle and a final stage. Returns (seconds, records, payload
        bytes); the counts check what the reads read."""
        started = time.monotonic()
        (row,) = self._df().selectExpr("count(*) AS n", "sum(length(value)) AS b").collect()
        return time.monotonic() - started, row["n"], row["b"]

    def input_partitions(self) -> int:
        return self._df().rdd.getNumPartitions()


def value_bytes(value: Any) -> bytes:
    """A consumed record value as bytes (a string, or {"base64": ...})."""
    return value.encode() if isinstance(value, str) else base64.b64decode(value["base64"])


def consume_all(port: int, topic: str, partitions: int, clients: int, max_bytes: int) -> dict[str, Any]:
    """Every record of the topic through /consume, partitions split across threads (raw figures)."""
    totals = {"records": 0, "bytes": 0, "requests": 0}
    lock = threading.Lock()
    errors: list[BaseException] = []

    def worker(ps: list[int]) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        try:
            for p in ps:
                offset = 1
                while True:
                    body = json.dumps({"topic_partitions": [{"topic": topic, "partition": p, "fetch_offset": offset,
                                                             "partition_max_bytes": max_bytes}],
                                       "max_wait_ms": 0, "max_bytes": max_bytes}).encode()
                    conn.request("POST", "/consume", body=body, headers={"Content-Type": "application/json"})
                    reply = json.loads(conn.getresponse().read())
                    (res,) = reply["results"]
                    n = len(res["records"])
                    nbytes = sum(len(value_bytes(r["value"])) for r in res["records"])
                    with lock:
                        totals["records"] += n
                        totals["bytes"] += nbytes
                        totals["requests"] += 1
                    offset = res["next_fetch_offset"]
                    if n == 0 or offset > res["high_watermark"]:
                        break
        except BaseException as exc:  # reported by the caller
            errors.append(exc)
        finally:
            conn.close()

    groups = [list(range(partitions))[i::clients] for i in range(min(clients, partitions))]
    threads = [threading.Thread(target=worker, args=(g,)) for g in groups]
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.monotonic() - started
    if errors:
        raise errors[0]
    return {**totals, "seconds": seconds, "clients": len(groups)}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from server.spark.produce_job import spark_session

    figures: dict[str, Any] = {"config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}}
    with ExitStack() as stack:
        env = stack_env(stack)
        env["LLOG_BATCH_MAX_DELAY_MS"] = str(args.batch_max_delay_ms)
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="llog-bench-spark-work-")))
        spark = spark_session("llog-bench-spark", "local[2]", {
            "spark.ui.enabled": "false", "spark.driver.memory": "2g", "spark.sql.shuffle.partitions": "2",
        })
        stack.callback(spark.stop)
        spark.sparkContext.setLogLevel("ERROR")

        print(f"[bench] generating {args.rows:,} JSON rows of ~{args.row_bytes} bytes ...", flush=True)
        rows, nbytes = make_dataset(spark, work / "data", args.rows, args.row_bytes)
        figures["dataset"] = {"rows": rows, "mb": round(nbytes / 1e6, 1)}
        print(f"[bench] data set: {rows:,} rows, {nbytes / 1e6:,.1f} MB", flush=True)

        b1 = Broker(env, "both", work / "broker-1.log")
        stack.callback(b1.stop)
        # Warm-up: the first Python job starts Spark's Python workers; keep that out of the figures.
        warm = work / "warm"
        warm.mkdir()
        (warm / "w.jsonl").write_text("".join(json.dumps({"customer": f"c{i}"}) + "\n" for i in range(1000)))
        produce(spark, warm, "bench-warmup", [b1], args.partitions)
        print("[bench] 1. produce job -> one broker ...", flush=True)
        figures["produce_one_broker"] = one = produce(spark, work / "data", "bench-one", [b1], args.partitions)
        print(f"[bench]    {one}", flush=True)
        if not args.skip_two_brokers:
            b2 = Broker(env, "both", work / "broker-2.log")
            stack.callback(b2.stop)
            print("[bench] 2. produce job -> two brokers ...", flush=True)
            figures["produce_two_brokers"] = two = produce(spark, work / "data", "bench-two", [b1, b2], args.partitions)
            print(f"[bench]    {two}", flush=True)

        print("[bench] 3. warming up: Spark reads of bench-one straight from Oxia + S3 ...", flush=True)
        reads = SparkReads(spark, env, "bench-one")
        jit = JitClock(spark)
        cold = reads.read()
        for i in range(1, args.warmup_reads):
            if i % 8 == 7:
                reads.aggregate()
            else:
                reads.read()
            if (i + 1) % 10 == 0:
                print(f"[bench]    warm-up read {i + 1}/{args.warmup_reads} done, JIT compiling "
                      f"{jit.lap_ms() / 10:.0f} ms per read", flush=True)
        reader = Broker(env, "read", work / "reader.log")
        stack.callback(reader.stop)
        warm_topic = "bench-two" if not args.skip_two_brokers else "bench-warmup"
        consume_all(reader.port, warm_topic, args.partitions, args.consume_clients, args.consume_max_bytes)

        print(f"[bench] 4. {args.repeat} rounds, each: a Spark read (noop sink), a Spark count/sum query, and "
              f"POST /consume with {args.consume_clients} clients (read-role broker: empty tail cache, reads S3)",
              flush=True)
        expected = one["rows"]
        runs: dict[str, list[float]] = {"spark": [], "spark_aggregate": [], "consume": []}
        jit.lap_ms()
        for r in range(args.repeat):
            runs["spark"].append(reads.read())
            seconds, records, nbytes = reads.aggregate()
            runs["spark_aggregate"].append(seconds)
            c = consume_all(reader.port, "bench-one", args.partitions, args.consume_clients, args.consume_max_bytes)
            runs["consume"].append(c["seconds"])
            if records != expected or c["records"] != expected or c["bytes"] != nbytes:
                raise SystemExit(
                    f"bench_spark: reads disagree: produced {expected:,} records; Spark read {records:,} "
                    f"({nbytes:,} bytes), /consume read {c['records']:,} ({c['bytes']:,} bytes)"
                )
            print(f"[bench]    round {r + 1}: Spark {runs['spark'][-1]:.2f} s, Spark count/sum "
                  f"{runs['spark_aggregate'][-1]:.2f} s, /consume {c['seconds']:.2f} s", flush=True)
        jit_ms = jit.lap_ms() / (2 * args.repeat)
        figures["spark_read"] = sr = {
            "records": records, "payload_mb": round(nbytes / 1e6, 1), **_timings(runs["spark"], nbytes),
            "cold_mb_per_s": round(nbytes / 1e6 / cold, 1), "input_partitions": reads.input_partitions(),
            "warmup_reads": args.warmup_reads, "jit_ms_per_timed_query": round(jit_ms),
        }
        figures["spark_read_aggregate"] = sa = _timings(runs["spark_aggregate"], nbytes)
        figures["consume_read"] = cr = {
            "records": c["records"], "requests": c["requests"], "clients": c["clients"],
            **_timings(runs["consume"], nbytes),
        }
        reader1 = Broker(env, "read", work / "reader-1.log")
        stack.callback(reader1.stop)
        print("[bench] 5. the same topic through POST /consume, one client (another fresh broker) ...", flush=True)
        c = consume_all(reader1.port, "bench-one", args.partitions, 1, args.consume_max_bytes)
        if c["records"] != expected or c["bytes"] != nbytes:
            raise SystemExit(f"bench_spark: one /consume client read {c['records']:,} records ({c['bytes']:,} bytes), "
                             f"expected {expected:,} ({nbytes:,} bytes)")
        figures["consume_read_one_client"] = c1 = {"records": c["records"], "requests": c["requests"],
                                                   **_timings([c["seconds"]], nbytes)}
        ratios = [c_s / s_s for s_s, c_s in zip(runs["spark"], runs["consume"])]
        figures["spark_read_speedup_vs_consume"] = round(sr["mb_per_s"] / cr["mb_per_s"], 2)
        figures["spark_read_speedup_per_round"] = [round(x, 2) for x in ratios]
        figures["spark_aggregate_speedup_vs_consume"] = round(sa["mb_per_s"] / cr["mb_per_s"], 2)
        figures["spark_read_speedup_vs_one_consumer"] = round(sr["mb_per_s"] / c1["mb_per_s"], 2)

    print("\n== bench_spark figures ==")
    print(f"data set            {figures['dataset']['rows']:,} rows, {figures['dataset']['mb']} MB JSON lines, "
          f"{args.partitions} partitions")
    for name in ("produce_one_broker", "produce_two_brokers"):
        f = figures.get(name)
        if f:
            print(f"produce job ({f['brokers']} broker{'s' if f['brokers'] > 1 else ''})  {f['rows_per_s']:,} rows/s, "
                  f"{f['mb_per_s']} MB/s ({f['payload_mb']} MB in {f['seconds']} s, {f['requests']} requests, "
                  f"{f['retries']} retries)")
    print(f"Spark read (S3)     {sr['mb_per_s']} MB/s median of {args.repeat}, best {sr['best_mb_per_s']} "
          f"({sr['records']:,} records, {sr['payload_mb']} MB in {sr['seconds']} s, {sr['input_partitions']} input "
          f"partitions, noop sink, after {args.warmup_reads} warm-up reads; the first, cold read: "
          f"{sr['cold_mb_per_s']} MB/s; JIT still compiling {sr['jit_ms_per_timed_query']} ms per timed query)")
    print(f"Spark count/sum     {sa['mb_per_s']} MB/s median of {args.repeat}, best {sa['best_mb_per_s']} "
          f"(the read plus a shuffle and a second stage)")
    print(f"/consume read       {cr['mb_per_s']} MB/s median of {args.repeat}, best {cr['best_mb_per_s']} "
          f"({cr['records']:,} records in {cr['seconds']} s, {cr['clients']} clients, {cr['requests']} requests)")
    print(f"/consume read       {c1['mb_per_s']} MB/s, one client, one cold run ({c1['records']:,} records in "
          f"{c1['seconds']} s, {c1['requests']} requests)")
    per_round = figures["spark_read_speedup_per_round"]
    print(f"Spark / consume     {figures['spark_read_speedup_vs_consume']}x (medians; per round "
          f"{min(per_round)}x..{max(per_round)}x) against {cr['clients']} clients; count/sum query "
          f"{figures['spark_aggregate_speedup_vs_consume']}x; "
          f"{figures['spark_read_speedup_vs_one_consumer']}x against one client")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
