"""What DescribeLogDirs costs a broker: the time and Oxia requests of one ``kafka-log-dirs --describe``.

Kafka UIs ask every broker for its log dirs to show topic sizes, often and
for every topic. An llog broker answers for the partitions Metadata names it
leader of, each sized from Oxia (its control record, compaction cursor and
index; a log unchanged since the broker last sized it is not scanned again).
The benchmark starts one broker with its Kafka listener (on a private local
stack unless ``LLOG_OXIA_SERVICE_ADDRESS`` names one) and creates
``--topics`` topics of ``--partitions`` partitions. Each run sends
``--calls`` DescribeLogDirs for every topic (kafka-python's admin client)
with a record written to every partition before each ("changed": every log
scanned), then ``--calls`` more with nothing written ("unchanged"), and
prints for each the median and p90 time per call and the Oxia requests the
broker made per call; then the medians of ``--repeat`` runs.

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
    p.add_argument("--calls", type=int, default=20, help="DescribeLogDirs calls per phase of a run (default 20)")
    p.add_argument("--repeat", type=int, default=3, help="runs; medians are printed (default 3)")
    args = p.parse_args(argv)
    if min(args.topics, args.partitions, args.calls, args.repeat) < 1:
        p.error("--topics, --partitions, --calls and --repeat must be positive")
    return args


def make_topics(broker: Broker, args: argparse.Namespace) -> list[str]:
    topics = [f"dirs-{uuid.uuid4().hex[:8]}" for _ in range(args.topics)]
    for topic in topics:
        ensure_topic(parse_broker_list([broker.url]), topic, args.partitions)
    return topics


def write_everywhere(producer, topics: list[str], partitions: int) -> None:
    """A record in every partition: every log changed since it was last sized."""
    for topic in topics:
        for p in range(partitions):
            producer.send(topic, b"x" * 100, partition=p)
    producer.flush(60)


def one_run(broker: Broker, args: argparse.Namespace, topics: list[str], i: int) -> dict[str, float]:
    from kafka import KafkaAdminClient, KafkaProducer

    admin = KafkaAdminClient(bootstrap_servers=broker.kafka, request_timeout_ms=60_000)
    producer = KafkaProducer(bootstrap_servers=broker.kafka, linger_ms=20)
    run: dict[str, float] = {}
    try:
        for phase, write in (("changed", True), ("unchanged", False)):
            times: list[float] = []
            oxia = 0.0
            for _ in range(args.calls):
                if write:
                    write_everywhere(producer, topics, args.partitions)
                oxia0 = broker.counter("oxia_operations_total")
                started = time.perf_counter()
                answer = admin.describe_log_dirs()
                times.append(time.perf_counter() - started)
                oxia += broker.counter("oxia_operations_total") - oxia0
                run["partitions"] = sum(len(t["partitions"]) for broker_dirs in answer
                                        for d in broker_dirs["log_dirs"] for t in d["topics"])
            times.sort()
            run[f"{phase}_ms"] = statistics.median(times) * 1000
            run[f"{phase}_p90_ms"] = times[int(0.9 * (len(times) - 1))] * 1000
            run[f"{phase}_oxia"] = oxia / args.calls
    finally:
        producer.close()
        admin.close()
    print(f"[log-dirs] run {i + 1}/{args.repeat}: {run['partitions']:.0f} partitions sized per call; "
          f"{_phases(run)}", flush=True)
    return run


def _phases(run: dict[str, float]) -> str:
    return "; ".join(
        f"{phase} logs {run[f'{phase}_ms']:.1f} ms per call (p90 {run[f'{phase}_p90_ms']:.1f}), "
        f"{run[f'{phase}_oxia']:.0f} Oxia requests" for phase in ("changed", "unchanged"))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with ExitStack() as stack:
        env = stack_env(stack)
        logs = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="llog-log-dirs-")))
        broker = Broker(env, "both", logs / "broker.log", ["--kafka-port", "0"])
        stack.callback(broker.stop)
        topics = make_topics(broker, args)
        runs = [one_run(broker, args, topics, i) for i in range(args.repeat)]
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    print(f"DescribeLogDirs over {med['partitions']:.0f} partitions, medians of {args.repeat} runs: {_phases(med)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
