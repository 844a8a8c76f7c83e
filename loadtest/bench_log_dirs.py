"""What DescribeLogDirs costs a broker: the time and Oxia requests of one ``kafka-log-dirs --describe``.

Kafka UIs ask every broker for its log dirs to show topic sizes, often and
for every topic. An llog broker answers for the partitions Metadata names it
leader of, each sized from Oxia (its control record, compaction cursor and
index). The benchmark starts one broker with its Kafka listener (on a
private local stack unless ``LLOG_OXIA_SERVICE_ADDRESS`` names one), creates
``--topics`` topics of ``--partitions`` partitions with a record in each,
then sends ``--calls`` DescribeLogDirs for every topic per run (kafka-python's
admin client) and prints per call the median and p90 time and the Oxia
requests the broker made, over ``--repeat`` runs.

    python -m loadtest.bench_log_dirs --topics 8 --partitions 64 --calls 20 --repeat 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from contextlib import ExitStack
from pathlib import Path

from loadtest._common import Broker, stack_env
from server.client import ensure_topic, parse_broker_list


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m loadtest.bench_log_dirs", description=__doc__.split("\n\n")[0])
    p.add_argument("--topics", type=int, default=8, help="topics (default 8)")
    p.add_argument("--partitions", type=int, default=64, help="partitions per topic (default 64)")
    p.add_argument("--calls", type=int, default=20, help="DescribeLogDirs calls per run (default 20)")
    p.add_argument("--repeat", type=int, default=3, help="runs; medians are printed (default 3)")
    args = p.parse_args(argv)
    if min(args.topics, args.partitions, args.calls, args.repeat) < 1:
        p.error("--topics, --partitions, --calls and --repeat must be positive")
    return args


def fill(broker: Broker, args: argparse.Namespace) -> list[str]:
    """The topics, each with one record in every partition (so every log has an index entry)."""
    from kafka import KafkaProducer

    topics = [f"dirs-{uuid.uuid4().hex[:8]}" for _ in range(args.topics)]
    for topic in topics:
        ensure_topic(parse_broker_list([broker.url]), topic, args.partitions)
    producer = KafkaProducer(bootstrap_servers=broker.kafka, linger_ms=20)
    try:
        for topic in topics:
            for p in range(args.partitions):
                producer.send(topic, b"x" * 100, partition=p)
        producer.flush(60)
    finally:
        producer.close()
    return topics


def one_run(broker: Broker, args: argparse.Namespace, i: int) -> dict[str, float]:
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=broker.kafka, request_timeout_ms=60_000)
    try:
        times: list[float] = []
        oxia0 = broker.counter("oxia_operations_total")
        sized = 0
        for _ in range(args.calls):
            started = time.perf_counter()
            answer = admin.describe_log_dirs()
            times.append(time.perf_counter() - started)
            sized = sum(len(t["partitions"]) for broker_dirs in answer for d in broker_dirs["log_dirs"]
                        for t in d["topics"])
        oxia = (broker.counter("oxia_operations_total") - oxia0) / args.calls
    finally:
        admin.close()
    times.sort()
    run = {"median_ms": statistics.median(times) * 1000, "p90_ms": times[int(0.9 * (len(times) - 1))] * 1000,
           "oxia_per_call": oxia, "partitions": sized}
    print(f"[log-dirs] run {i + 1}/{args.repeat}: {run['partitions']:.0f} partitions sized per call, "
          f"median {run['median_ms']:.1f} ms, p90 {run['p90_ms']:.1f} ms, "
          f"{run['oxia_per_call']:.0f} Oxia requests per call", flush=True)
    return run


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with ExitStack() as stack:
        env = stack_env(stack)
        logs = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="llog-log-dirs-")))
        broker = Broker(env, "both", logs / "broker.log", ["--kafka-port", "0"])
        stack.callback(broker.stop)
        fill(broker, args)
        runs = [one_run(broker, args, i) for i in range(args.repeat)]
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    print(f"DescribeLogDirs over {med['partitions']:.0f} partitions, medians of "
          f"{args.repeat}: {med['median_ms']:.1f} ms per call (p90 {med['p90_ms']:.1f} ms), "
          f"{med['oxia_per_call']:.0f} Oxia requests per call")
    return 0


if __name__ == "__main__":
    sys.exit(main())
