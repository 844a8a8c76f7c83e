"""Benchmark llog's Kafka listener with Kafka's own tools, beside a single-node Kafka (prints figures).

Starts a role-both broker with its Kafka listener against a real Oxia + S3
stack, creates a topic, then runs Kafka's ProducerPerformance (1 KiB records,
each one of 1,000 values from a payload file, acks=all, idempotent, the
settings below) and ConsumerPerformance (the whole topic from the start: the
tail cache, then S3) as ``java -cp`` processes, and prints produce MB/s with
latency p50/p99, consume MB/s, the CPU per MB of each, and llog's MB per
flush (one WAL blob each). With ``--kafka`` (the default) the same runs go,
alternating, to a single-node Kafka 4.1 (KRaft, one local disk, the same jars
from Maven Central), so the client's own ceiling on this machine shows beside
llog's. Figures only; nothing here asserts a speed.

The producer settings are Kafka's own knobs for throughput, the same for any
broker: ``batch.size`` 1 MiB, ``linger.ms`` 50, ``max.request.size`` 16 MiB,
``buffer.memory`` 256 MiB, ``compression.type`` none. A diskless broker
acknowledges after an object-store PUT, so a client needs more bytes in
flight than against a disk broker (WarpStream and Inkless say the same).

    python -m loadtest.bench_kafka                            # 1 GB of 1 KiB records, 64 partitions
    python -m loadtest.bench_kafka --records 300000 --repeat 3
    python -m loadtest.bench_kafka --no-kafka                 # llog only
    python -m loadtest.bench_kafka --no-kafka --security SASL_SSL   # llog's listener over TLS + SCRAM

With ``--security SSL`` or ``SASL_SSL`` llog's listener serves TLS (and SCRAM-SHA-512
authentication) with throwaway certificates (``devstack/pki.py``), and both clients use
it; Kafka, when run beside, stays plaintext.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import resource
import string
import subprocess
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any
from statistics import median

from loadtest import _librdkafka_perf
from loadtest._common import Broker, stack_env
from loadtest._harness.procfs import clock_ticks, parse_cpu_times
from loadtest._kafka_server import KafkaServer

SECURITY = ("PLAINTEXT", "SSL", "SASL_SSL")
USER, PASSWORD = "bench", "bench-password"

PRODUCER_SETTINGS = ("acks=all", "batch.size=1048576", "linger.ms=50", "max.request.size=16777216",
                     "buffer.memory=268435456", "compression.type=none", "enable.idempotence=true")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m loadtest.bench_kafka", description=__doc__.split("\n\n")[0])
    p.add_argument("--records", type=int, default=1_000_000, help="records per run (default 1,000,000)")
    p.add_argument("--record-bytes", type=int, default=1024, help="bytes per record (default 1024)")
    p.add_argument("--partitions", type=int, default=64, help="partitions of the topic (default 64)")
    p.add_argument("--repeat", type=int, default=1, help="runs, each on a new topic; medians printed (default 1)")
    p.add_argument("--batch-max-delay-ms", type=int, default=100,
                   help="the broker's LLOG_BATCH_MAX_DELAY_MS (default 100)")
    p.add_argument("--no-kafka", dest="kafka", action="store_false",
                   help="do not run the same tools against a single-node Kafka beside llog")
    p.add_argument("--producer-setting", action="append", default=[], metavar="KEY=VALUE",
                   help="a producer setting added to (or replacing) the defaults, in the client's own names; "
                        "repeatable")
    p.add_argument("--topic-config", action="append", default=[], metavar="KEY=VALUE",
                   help="a config of the benchmark's topics (TopicCommand --config), e.g. max.message.bytes; "
                        "repeatable")
    p.add_argument("--payload", choices=("file", "generated"), default="file",
                   help="the Java producer's record values: 'file' (default) picks each from 1,000 distinct "
                        "values written once (--payload-file), 'generated' has the tool draw every byte of every "
                        "record anew (--record-size), which costs the tool more CPU than the broker spends")
    p.add_argument("--security", choices=SECURITY, default="PLAINTEXT",
                   help="llog's listener: PLAINTEXT (default), SSL (TLS) or SASL_SSL (TLS and SCRAM-SHA-512)")
    p.add_argument("--client", choices=("java", "librdkafka"), default="java",
                   help="Kafka's Java tools (default), or librdkafka in this process, whose C threads leave "
                        "more of the machine to the brokers (loadtest/_librdkafka_perf.py)")
    return p.parse_args(argv)


JVM = ("-XX:+UseParallelGC", "-Xms2g", "-Xmx2g")
"""The tools' JVM: a fixed heap and the throughput collector (ProducerPerformance is CPU-bound here)."""


class Secured:
    """What a client of a listener with ``--security`` needs: the broker's environment, a Java
    client properties file and librdkafka's settings (plaintext: none)."""

    def __init__(self, kind: str, directory: Path) -> None:
        self.env: dict[str, str] = {}
        self.java: dict[str, str] = {}
        self.librdkafka: dict[str, str] = {}
        if kind == "PLAINTEXT":
            return
        from devstack.pki import make_pki

        pki = make_pki(directory / "pki")
        self.env = pki.broker_env
        self.java = {"security.protocol": kind, "ssl.truststore.type": "PEM", "ssl.truststore.location": pki.ca}
        self.librdkafka = pki.librdkafka(kind)
        if kind == "SASL_SSL":
            users = directory / "kafka-users"
            users.write_text(f"{USER}:{PASSWORD}\n")
            self.env["LLOG_KAFKA_SASL_USERS"] = str(users)
            self.java.update({"sasl.mechanism": "SCRAM-SHA-512", "sasl.jaas.config":
                              "org.apache.kafka.common.security.scram.ScramLoginModule required "
                              f'username="{USER}" password="{PASSWORD}";'})
            self.librdkafka.update({"sasl.mechanism": "SCRAM-SHA-512", "sasl.username": USER,
                                    "sasl.password": PASSWORD})
        self.properties = directory / "client.properties"
        self.properties.write_text("".join(f"{k}={v}\n" for k, v in self.java.items()))

    def args(self, flag: str) -> list[str]:
        """``flag FILE`` for a Java tool (``--producer.config``, ``--consumer.config``,
        ``--command-config``), or nothing for plaintext."""
        return [flag, str(self.properties)] if self.java else []


PLAIN = Secured("PLAINTEXT", Path("."))


def _tool(cls: str, *args: str, timeout: float = 1800) -> str:
    from devstack import java, kafka_tools_classpath

    done = subprocess.run([java(), *JVM, "-cp", kafka_tools_classpath(), "org.apache.kafka.tools." + cls, *args],
                          capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{cls} failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return done.stdout


def _settings(extra: list[str]) -> list[str]:
    merged = dict(s.split("=", 1) for s in PRODUCER_SETTINGS)
    merged.update(s.split("=", 1) for s in extra)
    return [f"{k}={v}" for k, v in merged.items()]


class CpuSplit:
    """CPU seconds spent while a phase runs: the broker, the client, and the whole machine.

    The client is this process plus its finished children (the Java tools
    are waited for, the brokers are not), so librdkafka in this process and
    ``java -cp`` both count; the machine is every busy second of
    ``/proc/stat``, so machine - broker - client is Oxia, MinIO and the rest.
    """

    def __init__(self, broker: Any) -> None:
        self._broker = broker
        self._start = self._marks()

    def _marks(self) -> tuple[float, float, float]:
        own = [resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
        with open("/proc/stat") as f:
            host = parse_cpu_times(f.read(), clock_ticks())
        return (self._broker.cpu_seconds(), sum(r.ru_utime + r.ru_stime for r in own), host.user + host.system)

    def per_mb(self, mb: float) -> dict[str, float]:
        now = self._marks()
        broker, client, machine = (b - a for a, b in zip(self._start, now))
        return {"cpu_ms_per_mb": broker * 1000 / mb, "client_ms_per_mb": client * 1000 / mb,
                "machine_ms_per_mb": machine * 1000 / mb}


def produce(broker: Any, topic: str, args: argparse.Namespace) -> dict[str, float]:
    flushes = _flushes(broker)
    got = _produce(broker, topic, args)
    if flushes is not None:  # llog: how large its blobs were
        got["mb_per_flush"] = args.records * args.record_bytes / 1e6 / max(_flushes(broker) - flushes, 1)
    return got


def _flushes(broker: Any) -> float | None:
    """The broker's flushes so far (one WAL blob PUT each); None for Kafka."""
    return broker.counter("batcher_flushes_total") if hasattr(broker, "counter") else None


def _produce(broker: Any, topic: str, args: argparse.Namespace) -> dict[str, float]:
    cpu, t0 = CpuSplit(broker), time.monotonic()
    mb = args.records * args.record_bytes / 1e6
    if args.client == "librdkafka":
        got = _librdkafka_perf.produce(broker.kafka, topic, args.records, args.record_bytes,
                                       {**_secured(broker).librdkafka,
                                        **dict(kv.split("=", 1) for kv in args.producer_setting)})
        return {**got, **cpu.per_mb(mb), "seconds": time.monotonic() - t0}
    out = _tool("ProducerPerformance", "--topic", topic, "--num-records", str(args.records),
                *_payload_args(args), "--throughput", "-1", *_secured(broker).args("--producer.config"),
                "--producer-props",
                f"bootstrap.servers={broker.kafka}", *_settings(args.producer_setting))
    split = cpu.per_mb(mb)
    last = out.strip().splitlines()[-1]
    m = re.search(r"\(([\d.]+) MB/sec\).*?(\d+) ms 50th, \d+ ms 95th, (\d+) ms 99th", last)
    if m is None:
        raise SystemExit(f"cannot read ProducerPerformance's summary: {last!r}")
    return {"mb_s": float(m.group(1)) * 1.048576, "p50_ms": float(m.group(2)), "p99_ms": float(m.group(3)),
            **split, "seconds": time.monotonic() - t0}


PAYLOADS = 1000
"""Distinct record values in the payload file, so batches are not one value repeated."""


def _payload_args(args: argparse.Namespace) -> list[str]:
    """ProducerPerformance's arguments for the record values (``--payload``)."""
    if args.payload == "generated":
        return ["--record-size", str(args.record_bytes)]
    path = Path(tempfile.gettempdir()) / f"llog-bench-kafka-payloads-{args.record_bytes}.txt"
    if not path.exists():
        rng = random.Random(1)  # the tool's alphabet: A-Z, one byte each in UTF-8
        lines = ("".join(rng.choices(string.ascii_uppercase, k=args.record_bytes)) for _ in range(PAYLOADS))
        part = path.with_name(f"{path.name}.{os.getpid()}")
        part.write_text("\n".join(lines))
        os.replace(part, path)  # another run reading it sees the whole file
    return ["--payload-file", str(path)]


def consume(broker: Any, topic: str, args: argparse.Namespace) -> dict[str, float]:
    cpu = CpuSplit(broker)
    if args.client == "librdkafka":
        got = _librdkafka_perf.consume(broker.kafka, topic, args.partitions, args.records,
                                       _secured(broker).librdkafka)
        return {**got, **cpu.per_mb(got["records"] * args.record_bytes / 1e6)}
    out = _tool("ConsumerPerformance", "--bootstrap-server", broker.kafka, "--topic", topic, "--messages",
                str(args.records), "--timeout", "120000", *_secured(broker).args("--consumer.config"))
    header, row = out.strip().splitlines()[-2:]
    fields = dict(zip((h.strip() for h in header.split(",")), (v.strip() for v in row.split(","))))
    mb = int(fields["data.consumed.in.nMsg"]) * args.record_bytes / 1e6
    return {"mb_s": float(fields["fetch.MB.sec"]) * 1.048576, "records": float(fields["data.consumed.in.nMsg"]),
            **cpu.per_mb(mb)}


def one_run(target: Any, name: str, i: int, args: argparse.Namespace) -> tuple[dict, dict]:
    topic = f"bench-{i}-{int(time.time())}"
    _tool("TopicCommand", "--bootstrap-server", target.kafka, *_secured(target).args("--command-config"),
          "--create", "--topic", topic,
          "--partitions", str(args.partitions), *(a for kv in args.topic_config for a in ("--config", kv)))
    p = produce(target, topic, args)
    print(f"[bench] {name} run {i + 1}: produce {p['mb_s']:.1f} MB/s, p50 {p['p50_ms']:.0f} ms, "
          f"p99 {p['p99_ms']:.0f} ms, {_cpu_text(p)}"
          + (f", {p['mb_per_flush']:.1f} MB per flush" if "mb_per_flush" in p else ""), flush=True)
    c = consume(target, topic, args)
    print(f"[bench] {name} run {i + 1}: consume {c['mb_s']:.1f} MB/s ({c['records']:,.0f} records), "
          f"{_cpu_text(c)}", flush=True)
    return p, c


def _secured(target: Any) -> Secured:
    return getattr(target, "secured", PLAIN)


def _cpu_text(r: dict[str, float]) -> str:
    return (f"CPU ms/MB: broker {r['cpu_ms_per_mb']:.1f}, client {r['client_ms_per_mb']:.1f}, "
            f"machine {r['machine_ms_per_mb']:.1f}")


ROWS = (("produce MB/s", lambda r: r[0]["mb_s"]), ("produce p50 ms", lambda r: r[0]["p50_ms"]),
        ("produce p99 ms", lambda r: r[0]["p99_ms"]), ("produce broker CPU ms/MB", lambda r: r[0]["cpu_ms_per_mb"]),
        ("produce client CPU ms/MB", lambda r: r[0]["client_ms_per_mb"]),
        ("produce machine CPU ms/MB", lambda r: r[0]["machine_ms_per_mb"]),
        ("consume MB/s", lambda r: r[1]["mb_s"]), ("consume broker CPU ms/MB", lambda r: r[1]["cpu_ms_per_mb"]),
        ("consume client CPU ms/MB", lambda r: r[1]["client_ms_per_mb"]),
        ("consume machine CPU ms/MB", lambda r: r[1]["machine_ms_per_mb"]))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with ExitStack() as stack:
        env = {**stack_env(stack), "LLOG_BATCH_MAX_DELAY_MS": str(args.batch_max_delay_ms)}
        logs = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="llog-bench-kafka-")))
        secured = Secured(args.security, logs)
        llog = "llog" if args.security == "PLAINTEXT" else f"llog {args.security}"
        targets: dict[str, Any] = {llog: Broker({**env, **secured.env}, "both", logs / "broker.log",
                                                ["--kafka-port", "0"])}
        targets[llog].secured = secured
        stack.callback(targets[llog].stop)
        if args.kafka:
            targets["kafka"] = KafkaServer(logs / "kafka")
            stack.callback(targets["kafka"].stop)
        print(f"[bench] {llog} {targets[llog].url} (Kafka listener {targets[llog].kafka})"
              + (f", Kafka {targets['kafka'].kafka}" if args.kafka else "")
              + (f"; producer: {' '.join(_settings(args.producer_setting))}" if args.client == "java" else
                 f"; client librdkafka, producer: {_librdkafka_perf.PRODUCER} {args.producer_setting}"), flush=True)
        runs: dict[str, list] = {name: [] for name in targets}
        for i in range(args.repeat):
            for name, target in targets.items():  # alternating, so drift hits both alike
                runs[name].append(one_run(target, name, i, args))
        print(f"\n{args.client} client, {args.records:,} records of {args.record_bytes} B, {args.partitions} partitions, "
              f"{args.repeat} run(s) each (medians [all]):")
        print(f"  {'':<26} " + "  ".join(f"{name:>24}" for name in targets))
        for label, pick in ROWS:
            cells = []
            for name in targets:
                values = [pick(r) for r in runs[name]]
                cells.append(f"{median(values):8.1f} [{' '.join(f'{v:.0f}' for v in values)}]".rjust(24))
            print(f"  {label:<26} " + "  ".join(cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
