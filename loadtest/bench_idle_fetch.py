"""What idle Kafka consumers cost a broker: CPU per fetch at the end of empty partitions.

Consumers assigned to the end of every partition of an empty topic fetch
every 500 ms (librdkafka's ``fetch.wait.max.ms``, kafka-python's
``fetch_max_wait_ms``) and get nothing; each fetch still reads every
partition's control record from Oxia (another broker may have written).
librdkafka names every partition in every fetch; kafka-python keeps a fetch
session (KIP-227), so its idle fetches name none (``--fetch-sessions 0``
turns the broker's sessions off, for comparison). The benchmark starts a broker with its Kafka listener (on a private
local stack unless ``LLOG_OXIA_SERVICE_ADDRESS`` names one), lets the
consumers settle, then measures for ``--seconds``: the broker's CPU (share of
one core), fetches per second and CPU per fetch; ``--repeat`` runs and their
medians.

    python -m loadtest.bench_idle_fetch --consumers 4 --partitions 64 --repeat 3
    python -m loadtest.bench_idle_fetch --client kafka-python [--fetch-sessions 0]
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
from typing import Callable

from loadtest._common import Broker, stack_env
from server.client import ensure_topic, parse_broker_list


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m loadtest.bench_idle_fetch", description=__doc__.split("\n\n")[0])
    p.add_argument("--consumers", type=int, default=4, help="idle consumers (default 4)")
    p.add_argument("--client", choices=("librdkafka", "kafka-python"), default="librdkafka",
                   help="the consumers' client (default librdkafka, which keeps no fetch session)")
    p.add_argument("--fetch-sessions", type=int, default=None, metavar="N",
                   help="the broker's LLOG_KAFKA_FETCH_SESSIONS (default: the broker's own, 1000; 0: none)")
    p.add_argument("--partitions", type=int, default=64, help="partitions of the empty topic (default 64)")
    p.add_argument("--seconds", type=float, default=20.0, help="measured seconds per run (default 20)")
    p.add_argument("--settle-s", type=float, default=8.0, help="seconds before measuring (default 8)")
    p.add_argument("--repeat", type=int, default=3, help="runs; medians are printed (default 3)")
    args = p.parse_args(argv)
    if args.consumers < 1 or args.partitions < 1 or args.seconds <= 0 or args.repeat < 1:
        p.error("--consumers, --partitions, --seconds and --repeat must be positive")
    return args


def one_run(broker: Broker, args: argparse.Namespace, i: int) -> dict[str, float]:
    topic = f"idle-{uuid.uuid4().hex[:8]}"
    ensure_topic(parse_broker_list([broker.url]), topic, args.partitions)
    consumers = [_consumer(broker.kafka, args.client, topic, n, args.partitions) for n in range(args.consumers)]
    try:
        def poll_for(seconds: float) -> None:
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                for poll, _ in consumers:
                    poll()

        def fetches() -> float:
            return broker.counter("kafka_requests_total", "api=Fetch,error=0")

        poll_for(args.settle_s)
        f0, incremental0 = fetches(), broker.counter("kafka_fetches_total", "session=incremental")
        cpu0, t0 = broker.cpu_seconds(), time.monotonic()
        poll_for(args.seconds)
        cpu, elapsed = broker.cpu_seconds() - cpu0, time.monotonic() - t0
        done, incremental = fetches() - f0, broker.counter("kafka_fetches_total", "session=incremental") - incremental0
    finally:
        for _, close in consumers:
            close()
    run = {"core_percent": cpu / elapsed * 100, "fetches_per_s": done / elapsed,
           "cpu_ms_per_fetch": cpu / max(done, 1) * 1000, "incremental_share": incremental / max(done, 1)}
    print(f"[idle] run {i + 1}/{args.repeat}: broker CPU {run['core_percent']:.1f}% of a core, "
          f"{run['fetches_per_s']:.1f} fetches/s, {run['cpu_ms_per_fetch']:.2f} ms of CPU per fetch, "
          f"{run['incremental_share']:.0%} of them incremental", flush=True)
    return run


def _consumer(bootstrap: str, client: str, topic: str, n: int, partitions: int
              ) -> tuple[Callable[[], object], Callable[[], None]]:
    """A consumer at the end of every partition: its poll (50 ms) and its close."""
    if client == "kafka-python":
        from kafka import KafkaConsumer
        from kafka import TopicPartition as KTP

        k = KafkaConsumer(bootstrap_servers=bootstrap, group_id=f"{topic}-{n}", enable_auto_commit=False)
        tps = [KTP(topic, p) for p in range(partitions)]
        k.assign(tps)
        k.seek_to_end(*tps)
        return (lambda: k.poll(timeout_ms=50)), k.close
    from confluent_kafka import OFFSET_END, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-{n}", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, OFFSET_END) for p in range(partitions)])
    return (lambda: c.poll(0.05)), c.close


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with ExitStack() as stack:
        env = stack_env(stack)
        if args.fetch_sessions is not None:
            env["LLOG_KAFKA_FETCH_SESSIONS"] = str(args.fetch_sessions)
        logs = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="llog-idle-")))
        broker = Broker(env, "both", logs / "broker.log", ["--kafka-port", "0"])
        stack.callback(broker.stop)
        runs = [one_run(broker, args, i) for i in range(args.repeat)]
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    print(f"{args.consumers} idle consumers x {args.partitions} partitions, medians of {args.repeat}: "
          f"broker CPU {med['core_percent']:.1f}% of a core, {med['fetches_per_s']:.1f} fetches/s, "
          f"{med['cpu_ms_per_fetch']:.2f} ms of CPU per fetch ({args.client}; "
          f"{med['incremental_share']:.0%} incremental)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
