"""The main job, end to end (``./quick_run.sh``).

1. stack      start Oxia (standalone) and MinIO with a bucket; Spark starts on
              a thread from here on, beside the next steps
2. services   start one broker (both roles, with its Kafka listener) and the
              compactor service
3. prometheus start the project's Prometheus (Debian's package, fetched and
              cached on first use) with file-based service discovery on the
              broker and the compactor service, scraping each every second;
              wait until it has scraped both
4. data       generate ~200k deterministic order rows as JSON lines (or --input)
5. spark-up   wait for the Spark session and its warm-up (the produce path on a
              sample, nothing sent), both run beside 2-4
6. produce    the PySpark produce job sends them to the broker as POST /produce
              requests: topic ``orders``, 8 partitions, keyed by customer
7. consume    read everything back through POST /consume long-polls; check
              the record count and a content checksum against the input
8. compact    wait until the compactor service has compacted every partition
9. spark      read the topic with ``spark.read.format("llog")`` (straight from
              Oxia + S3) and check count and checksum again
10. kafka     read the topic with Spark's own ``spark.read.format("kafka")``
              through the broker's Kafka listener and check it again
11. dashboard draw the panels of grafana/leaderless-log-observability.json over
              the run from Prometheus: one PNG per dashboard row and an
              index.html showing them (as ``python -m dashboard.render``)
12. report    records, MB, produce MB/s, end-to-end time, S3 and Oxia operation
              counts, storage under the prefix, where the data lives, and the
              dashboard's index.html and PNGs

The dashboard goes to DATA_DIR/dashboard when the data directory stays
(--data-dir, --keep), else to .llog-stack/quick-run-dashboard; --dashboard-dir
chooses another. Any mismatch stops the run with the failing step named and
exit code 1. ``--keep`` leaves everything running, Prometheus included, and
prints the URLs and how to stop it.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence
from urllib.parse import urlsplit

from loadtest._pipeline import (
    Service,
    StepFailed,
    Tally,
    consume_all,
    generate_orders,
    http_json,
    start_service,
    tally_input,
    wait_until,
)
from loadtest._spark_warmup import SparkWarmup
from server._errors import LlogError

if TYPE_CHECKING:
    from dashboard.render import RenderResult
    from loadtest.quick_observability import QuickObservability

TOPIC = "orders"
ROOT = "llog"


class Run:
    """Prints numbered steps and remembers which one is running."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.step = "setup"

    def begin(self, step: str, message: str) -> None:
        self.step = step
        self.say(message)

    def say(self, message: str) -> None:
        print(f"[quick-run] {time.monotonic() - self.started:6.1f}s {self.step:<10} {message}", flush=True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="./quick_run.sh",
        description="The llog main job: local Oxia + MinIO, a broker and the compactor service, scraped\n"
        "by a local Prometheus; a PySpark job produces a data set through the broker; everything is\n"
        "consumed back, compacted and read with Spark, and checked against the input at each step.\n"
        "At the end the dashboard's panels over the run are drawn to PNGs with an index.html, whose\n"
        "path is printed beside the report.",
        epilog=(__doc__ or "").split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--input", type=Path, help="JSON-lines file to produce instead of the generated sample")
    p.add_argument("--rows", type=int, default=200_000, help="rows of the generated sample (default 200000)")
    p.add_argument("--partitions", type=int, default=8, help="partitions of topic orders (default 8)")
    p.add_argument("--keep", action="store_true",
                   help="leave everything running, Prometheus included; print the URLs and how to stop it")
    p.add_argument("--data-dir", type=Path,
                   help="where the stack, logs, data set and Prometheus data live (default: temporary)")
    p.add_argument("--dashboard-dir", type=Path, help="where the dashboard PNGs and index.html go (default: "
                   "DATA_DIR/dashboard with --data-dir or --keep, else .llog-stack/quick-run-dashboard)")
    p.add_argument("--timeout-s", type=float, default=600, help="limit for each waiting step (default 600)")
    args = p.parse_args(argv)
    if args.rows < 1 or args.partitions < 1:
        p.error("--rows and --partitions must be >= 1")
    if args.input is not None and not args.input.is_file():
        p.error(f"--input {args.input}: no such file")
    return args


def counter_sum(snapshot: dict, name: str, **labels: str) -> float:
    """Sum of a counter in an LlogMetrics JSON snapshot (wherever it is nested)."""
    counters = snapshot.get("counters") or snapshot.get("metrics", {}).get("counters", {})
    want = [f"{k}={v}" for k, v in labels.items()]
    return sum(v for lbl, v in counters.get(name, {}).items() if all(w in lbl.split(",") for w in want))


def run(args: argparse.Namespace, r: Run) -> int:
    from devstack import LocalStack, free_ports, s3_client
    from server.leaderless_log_reader import LeaderlessLogReader

    with ExitStack() as stack:
        data_dir = args.data_dir or (
            Path(".llog-stack/quick-run").resolve() if args.keep
            else Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="llog-quick-")))
        )
        data_dir.mkdir(parents=True, exist_ok=True)

        r.begin("stack", f"starting Oxia + MinIO in {data_dir}")
        local = LocalStack(data_dir / "stack", die_with_parent=not args.keep)
        local.start()
        if not args.keep:
            stack.callback(local.stop)
        settings = local.settings
        env = settings.env(root_prefix=ROOT)
        os.environ.update(env)  # Spark's Python workers inherit these
        r.say(f"Oxia {settings.oxia_address}, S3 {settings.s3_endpoint_url} (bucket {settings.bucket})")
        # Spark starts now, beside the next steps; a warm-up larger than the data set buys nothing.
        warmup = SparkWarmup(data_dir, SparkWarmup.SAMPLE_ROWS if args.input else min(args.rows,
                                                                                     SparkWarmup.SAMPLE_ROWS))
        stack.callback(warmup.stop)

        r.begin("services", "starting the broker and the compactor service")
        (kafka_port,) = free_ports(1)
        kafka = f"127.0.0.1:{kafka_port}"
        broker = start_service("broker", "server.leaderless_log_broker", ["--role", "both", "--kafka-port",
                                                                          str(kafka_port)], env,
                               data_dir / "logs", die_with_parent=not args.keep)
        if not args.keep:
            stack.callback(broker.process.stop)
        # A small tail is compacted after 5 s, not the default 30: the run waits for compaction to end.
        compactor_env = {**env, "LLOG_COMPACTOR_DISCOVERY_INTERVAL_MS": "1000", "LLOG_COMPACTOR_IDLE_SLEEP_MS": "500",
                         "LLOG_COMPACTOR_IDLE_JITTER_MS": "200", "LLOG_COMPACTOR_MAX_DELAY_MS": "5000"}
        compactor = start_service("compactor", "server.leaderless_log_compactor_server", [], compactor_env,
                                  data_dir / "logs", die_with_parent=not args.keep)
        if not args.keep:
            stack.callback(compactor.process.stop)
        r.say(f"broker {broker.url} (Kafka listener {kafka}), compactor service {compactor.url}")
        warmup.broker_ready(broker.url)
        observability = start_prometheus(r, data_dir, (broker, compactor), args, stack)

        if args.input is None:
            r.begin("data", f"generating {args.rows:,} order rows")
            source = data_dir / "orders.jsonl"
            expected = generate_orders(source, args.rows)
        else:
            r.begin("data", f"reading {args.input}")
            source = args.input.resolve()
            expected = tally_input(source)
        r.say(f"{expected.count:,} rows, {expected.nbytes / 1e6:.1f} MB in {source}")

        r.begin("spark-up", "waiting for Spark, started in the background after the stack")
        spark = warmup.result(args.timeout_s)
        r.say(f"Spark session up in {warmup.session_s:.1f} s, warm-up (the produce path on a sample, nothing "
              f"sent) {warmup.warmup_s:.1f} s, both beside the set-up")
        from server.client import ensure_topic, parse_broker_list
        have = ensure_topic(parse_broker_list(broker.url), TOPIC, args.partitions)
        r.say(f"topic {TOPIC}: {have} partitions (POST /topics; {broker.url}/topics/{TOPIC} describes it)")
        r.begin("produce", f"PySpark produce job -> {TOPIC} ({args.partitions} partitions, key customer_id)")
        from server.spark.produce_job import ProduceOptions, run_produce_job
        key_column = "customer_id" if args.input is None else None
        options = ProduceOptions(topic=TOPIC, brokers=(broker.url,), partitions=args.partitions, key_column=key_column,
                                 input_format="json")
        summary = run_produce_job(spark, str(source), options, progress=lambda line: r.say(line))
        st = summary.stats
        r.say(f"acknowledged {st.records_acked:,} records, {summary.mb_per_s:.2f} MB/s, "
              f"{st.requests:,} requests, {st.retries} retries; exactly once (idempotent tasks): "
              f"{st.duplicate_records:,} records sent again were recognized and not stored twice "
              f"({st.duplicate_batches} batches), {st.unknown_batches} batches of unknown outcome re-sent")
        if summary.stats.records_acked != expected.count:
            raise StepFailed(f"{expected.count} rows in, {summary.stats.records_acked} records acknowledged")

        reader = stack.enter_context(LeaderlessLogReader.from_env(env))
        parts = range(args.partitions)
        hws = {p: reader.high_watermark(TOPIC, p) for p in parts}
        r.begin("consume", f"consuming {sum(hws.values()):,} records back through POST /consume")
        got, per_partition = consume_all(broker.url, TOPIC, hws, deadline_s=args.timeout_s, key_field=key_column)
        check(r, "consume", expected, got)
        r.say("per partition: " + ", ".join(f"{p}:{n}" for p, n in sorted(per_partition.items())))

        r.begin("compact", "waiting for the compactor service to compact every partition")
        lag = lambda: sum(max(0, hws[p] - (reader.compaction_cursor(TOPIC, p) - 1)) for p in parts)  # noqa: E731
        wait_until(lambda: lag() == 0, timeout_s=args.timeout_s, what="compaction of every partition",
                   progress=lambda: r.say(f"{lag():,} offsets not yet compacted"))
        r.say(f"every partition compacted (cursor = high watermark + 1); compactor {compactor.url}/metrics")

        r.begin("spark", 'reading the topic with spark.read.format("llog") from Oxia + S3')
        spark_tally = spark_read_tally(spark, TOPIC, args.partitions, key_field=key_column)
        check(r, "spark", expected, spark_tally)

        r.begin("kafka", f'reading the topic with spark.read.format("kafka") from the Kafka listener {kafka}')
        kafka_tally = spark_read_tally(spark, TOPIC, args.partitions, key_field=key_column, kafka=kafka)
        check(r, "kafka", expected, kafka_tally)

        drawn = render_dashboard(r, observability, dashboard_dir(args, data_dir))
        r.begin("report", "")
        report(r, settings, env, broker, compactor, expected, summary, data_dir, s3_client)
        report_dashboard(drawn)
        if args.keep:
            prometheus_pid = observability.prometheus.processes[0].pid
            print("\nEverything keeps running:")
            print(f"  broker             {broker.url}  (POST /produce, POST /consume, GET /metrics)")
            print(f"  Kafka listener     {kafka}  (bootstrap.servers for any Kafka client)")
            print(f"  compactor service  {compactor.url}  (GET /health, /metrics)")
            print(f"  Prometheus         {observability.url}  (scraping both; PromQL at {observability.url}/graph)")
            print(f"  Oxia {settings.oxia_address}   MinIO {settings.s3_endpoint_url}")
            print("  environment for the library and tools:")
            for k, v in env.items():
                print(f"    export {k}={shlex.quote(v)}")
            print("Stop it with:")
            print(f"  kill {broker.process.pid} {compactor.process.pid} {prometheus_pid}")
            print(f"  $LLOG_PY -m devstack down --data-dir {shlex.quote(str(data_dir / 'stack'))}")
            local.detach()
    r.say("OK")
    return 0


def scrape_doc(services: Sequence[Service], partitions: int) -> dict[str, Any]:
    """The services as quick_observability's stack document. The labels mark
    every scraped series with the run's shape, which the dashboard's run-shape
    panel shows."""
    processes = []
    for service in services:
        address = urlsplit(service.url)
        processes.append({"kind": service.name, "host": address.hostname, "port": address.port})
    labels = {"scenario": "quick-run", "run_id": f"quick-run-{time.strftime('%Y%m%d-%H%M%S')}",
              "brokers": "1", "partitions": str(partitions)}
    return {"run_id": labels["run_id"], "scrape_labels": labels, "processes": processes}


def start_prometheus(r: Run, data_dir: Path, services: Sequence[Service], args: argparse.Namespace,
                     stack: ExitStack) -> QuickObservability:
    from loadtest.quick_observability import QuickObservability

    r.begin("prometheus", "starting Prometheus (Debian's package, fetched and cached on first use)")
    # With --keep it stays up with the stack, so it must not die with this process.
    observability = QuickObservability(data_dir, say=r.say, die_with_parent=not args.keep)
    if not args.keep:
        stack.callback(observability.stop)
    observability.start(scrape_doc(services, args.partitions), timeout_s=min(args.timeout_s, 60.0))
    r.say(f"Prometheus {observability.url} has scraped the broker and the compactor service "
          f"(every {observability.scrape_interval_ms} ms); its data in {observability.prometheus.data_dir}")
    return observability


def dashboard_dir(args: argparse.Namespace, data_dir: Path) -> Path:
    if args.dashboard_dir is not None:
        return args.dashboard_dir.resolve()
    if args.data_dir is not None or args.keep:  # the data directory stays: keep the pictures with it
        return data_dir / "dashboard"
    return Path(".llog-stack/quick-run-dashboard").resolve()


def render_dashboard(r: Run, observability: QuickObservability, out_dir: Path) -> RenderResult:
    """Draw the dashboard from Prometheus's first scrape until now."""
    r.begin("dashboard", f"drawing the dashboard's panels over the run from {observability.url} into {out_dir}")
    # A failed query leaves its panel empty and is named in index.html and the report; the
    # data checks already passed, so it does not fail the run.
    return observability.render(observability.started_at_s, time.time(), out_dir)


def report_dashboard(drawn: RenderResult) -> None:
    queried = sum(1 for d in drawn.panels if d.panel.targets)
    print(f"  dashboard         {drawn.index}")
    print(f"                    {len(drawn.images)} PNGs beside it, one per dashboard row; {queried - len(drawn.empty)}"
          f" of {queried} panels have data from this run")
    for image in drawn.images:
        print(f"                    {image.name}")
    if drawn.empty:
        print("                    no data in this run: " + ", ".join(drawn.empty))
    if drawn.errors:
        print(f"                    {len(drawn.errors)} queries failed: " + "; ".join(drawn.errors))


def check(r: Run, step: str, expected: Tally, got: Tally) -> None:
    if not expected.same_as(got):
        raise StepFailed(
            f"{got.count:,} records read, checksum {got.checksum:016x}; "
            f"expected {expected.count:,}, checksum {expected.checksum:016x}"
        )
    if got.keys_wrong:
        raise StepFailed(f"{step}: {got.keys_wrong:,} of {got.keys_checked:,} records have a key that is not "
                         "their customer_id")
    keys = f", {got.keys_checked:,} keys = customer_id" if got.keys_checked else ""
    r.say(f"{got.count:,} records, checksum {got.checksum:016x}: match the input{keys}")


def spark_read_tally(spark, topic: str, partitions: int, key_field: str | None = None,
                     kafka: str | None = None) -> Tally:
    """Count and checksum of the topic's values read with Spark; with ``key_field``, each
    record's key (Kafka's ``key`` column) checked against that field of its value. With
    ``kafka`` (a bootstrap server), through Spark's own Kafka source and llog's listener."""
    from loadtest._pipeline import MASK64

    if kafka is None:
        df = spark.read.format("llog").option("topic", topic).load()
    else:
        df = spark.read.format("kafka").option("kafka.bootstrap.servers", kafka).option("subscribe", topic).load()

    def part_tally(rows):
        part = Tally()
        for row in rows:
            value = bytes(row.value)
            part.add(value)
            if key_field is not None:
                part.check_key(value, None if row.key is None else bytes(row.key), key_field)
        yield part

    tally = Tally()
    for part in df.select("key", "value").rdd.mapPartitions(part_tally).collect():
        tally.count += part.count
        tally.checksum = (tally.checksum + part.checksum) & MASK64
        tally.nbytes += part.nbytes
        tally.keys_checked += part.keys_checked
        tally.keys_wrong += part.keys_wrong
    return tally


def report(r, settings, env, broker, compactor, expected, summary, data_dir, s3_client) -> None:
    b = http_json(f"{broker.url}/metrics")
    c = http_json(f"{compactor.url}/metrics")
    s3 = s3_client(settings.s3_endpoint_url, access_key_id=settings.access_key_id,
                   secret_access_key=settings.secret_access_key)
    objects = total = 0
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=settings.bucket, Prefix=f"{ROOT}/"):
        for obj in page.get("Contents", []):
            objects += 1
            total += obj["Size"]
    elapsed = time.monotonic() - r.started
    puts = counter_sum(b, "s3_operations_total", op="put") + counter_sum(c, "s3_operations_total", op="put")
    gets = sum(counter_sum(m, "s3_operations_total", op=op) for m in (b, c) for op in ("get", "range_get"))
    oxia = counter_sum(b, "oxia_operations_total") + counter_sum(c, "oxia_operations_total")
    print()
    print("llog quick run: report")
    print(f"  records           {expected.count:,} ({expected.nbytes / 1e6:.1f} MB of JSON)")
    print(f"  produce           {summary.mb_per_s:.2f} MB/s, {summary.rows_per_s:,.0f} rows/s "
          f"({summary.stats.requests:,} requests, {summary.stats.retries} retries)")
    print(f"  end-to-end time   {elapsed:.1f} s (set-up excluded)")
    print(f"  S3 requests       {puts:,.0f} PUT, {gets:,.0f} GET (broker + compactor)")
    print(f"  Oxia operations   {oxia:,.0f} (broker + compactor)")
    print(f"  storage           {objects:,} objects, {total / 1e6:.1f} MB under s3://{settings.bucket}/{ROOT}/")
    bb, cb = b["s3"]["billing"], c["s3"]["billing"]
    monthly = max(x["storage_cost_usd_per_month"] or 0.0 for x in (bb, cb))
    print(f"  S3 bill estimate  ${bb['request_cost_usd'] + cb['request_cost_usd']:.6f} in requests (broker + "
          f"compactor), ${monthly:.6f} per month to store the prefix (S3 Standard us-east-1 prices)")
    print("  where the data lives:")
    print(f"    Oxia {settings.oxia_address}: {ROOT}/{TOPIC}/partitions/<p>/meta/control, .../index/<end offset>")
    print(f"    S3   s3://{settings.bucket}/{ROOT}/{TOPIC}/partitions/<p>/data/compacted/<uuid>"
          f" (and {ROOT}/wal-shared/<uuid> until vacuum reclaims them)")
    print(f"    logs {data_dir / 'logs'}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    r = Run()
    try:
        return run(args, r)
    except StepFailed as exc:
        print(f"[quick-run] FAILED at step '{r.step}': {exc}", file=sys.stderr)
    except LlogError as exc:
        print(f"[quick-run] FAILED at step '{r.step}': {type(exc).__name__}: {exc}", file=sys.stderr)
    except KeyboardInterrupt:
        print(f"[quick-run] interrupted at step '{r.step}'", file=sys.stderr)
    except Exception as exc:  # anything else still names the step, with the traceback
        import traceback

        traceback.print_exc()
        print(f"[quick-run] FAILED at step '{r.step}': {type(exc).__name__}: {exc}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
