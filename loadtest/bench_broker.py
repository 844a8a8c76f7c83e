"""Benchmark the HTTP broker end to end (prints figures).

Starts a role-both broker process (and later a read-role one) against a real
Oxia + S3 stack and measures, with 1 KiB records on 64 partitions:

1. produce at saturation: concurrent HTTP clients, MB/s and latency p50/p99;
2. produce below saturation (a fixed request rate, half the saturated one by
   default): latency p50/p99;
3. end-to-end latency: a paced producer and long-polling consumers (tail
   cache, min_bytes=1); from the produce request's send and from its
   acknowledgement to the record's arrival at the consumer;
4. consume throughput at the hot tail: the same broker serves the newest
   records from its tail cache;
5. consume throughput catching up from S3: a fresh read-role broker (no
   cache) reads what phase 1 wrote.

Uses the stack named by LLOG_* in the environment, or starts a private local
stack (Oxia + MinIO) in a temporary directory when LLOG_OXIA_SERVICE_ADDRESS
is not set. Figures only; nothing here asserts a speed.

    python -m loadtest.bench_broker --seconds 8                 # binary produce bodies and consume answers
    python -m loadtest.bench_broker --seconds 8 --body json     # JSON produce bodies
    python -m loadtest.bench_broker --consume-body json         # JSON consume answers (phases 4-5)
    python -m loadtest.bench_broker --idempotent                # idempotent producers (SPEC 7.12) ...
    python -m loadtest.bench_broker --fresh-batches             # ... and their baseline: the same client work
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import queue
import random
import string
import sys
import tempfile
import threading
import time
import uuid
from contextlib import ExitStack
from pathlib import Path

from loadtest._common import Broker, put_bandwidth, run_threads, stack_env
from server._protocol.kafka_batch import build_values_batch, with_producer
from server._protocol.produce_binary import PRODUCE_BINARY_V2_CONTENT_TYPE, encode_binary_produce_v2
from server._protocol.consume_binary import CONSUME_BINARY_CONTENT_TYPE, parse_binary_consume
from server._config import BatchConfig
from server.client import ensure_topic, parse_broker_list
from typing import Any, Callable

MIB = 1024 * 1024


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m loadtest.bench_broker", description=__doc__.split("\n\n")[0])
    p.add_argument("--partitions", type=int, default=64, help="partitions (default 64)")
    p.add_argument("--record-bytes", type=int, default=1024, help="bytes per record (default 1024)")
    p.add_argument("--records-per-request", type=int, default=512, help="records per produce request (default 512)")
    p.add_argument("--partitions-per-request", type=int, default=8, help="partitions per produce request (default 8)")
    p.add_argument("--clients", type=int, default=24, help="concurrent produce clients (default 24)")
    p.add_argument("--seconds", type=float, default=8.0, help="saturated produce phase length (default 8)")
    p.add_argument("--paced-seconds", type=float, default=5.0, help="below-saturation phase length (default 5)")
    p.add_argument("--paced-fraction", type=float, default=0.5, help="paced rate as a fraction of saturation (default 0.5)")
    p.add_argument("--e2e-seconds", type=float, default=4.0, help="end-to-end phase length (default 4)")
    p.add_argument("--e2e-requests-per-s", type=float, default=50.0, help="paced produce requests/s in the end-to-end phase")
    p.add_argument("--consume-seconds", type=float, default=4.0, help="most time per consume phase (default 4)")
    p.add_argument("--batch-max-delay-ms", type=int, default=500, help="LLOG_BATCH_MAX_DELAY_MS (default 500)")
    p.add_argument("--batch-max-bytes", type=int, default=8 * MIB, help="LLOG_BATCH_MAX_BYTES (default 8 MiB)")
    p.add_argument("--batch-max-block-ms", type=int, default=BatchConfig().max_block_ms,
                   help=f"LLOG_BATCH_MAX_BLOCK_MS: how long a produce waits for room in a full buffer "
                        f"(default {BatchConfig().max_block_ms}; 0 refuses at once with 503)")
    p.add_argument("--body", choices=("json", "binary"), default="binary",
                   help="produce body of phases 1-2: binary (application/vnd.llog.produce.v2, default) or json")
    p.add_argument("--consume-body", choices=("json", "binary"), default="binary",
                   help="consume answer of phases 4-5: binary (Accept: application/vnd.llog.consume.v2, default) or json")
    p.add_argument("--idempotent", action="store_true",
                   help="each produce client is an idempotent producer (POST /producers, sequences per partition; "
                        "phases 1 and 2; binary bodies only)")
    p.add_argument("--fresh-batches", action="store_true",
                   help="build each request's batches as --idempotent does, without a producer id (its baseline)")
    p.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    args = p.parse_args(argv)
    if (args.idempotent or args.fresh_batches) and args.body != "binary":
        p.error("--idempotent sends binary bodies (the batch header carries the producer); drop --body json")
    return args


def pct(samples: list[float], q: float) -> float:
    if not samples:
        return 0.0
    s = sorted(samples)
    return s[min(len(s) - 1, int(q * len(s)))]


def ms(x: float) -> float:
    return round(x * 1000, 1)


# -- stack and brokers -----------------------------------------------------------------


class Client:
    def __init__(self, port: int) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)

    def post(
        self, path: str, body: bytes, content_type: str = "application/json", accept: str | None = None,
    ) -> tuple[int, bytes]:
        headers = {"Content-Type": content_type}
        if accept:
            headers["Accept"] = accept
        self.conn.request("POST", path, body=body, headers=headers)
        resp = self.conn.getresponse()
        return resp.status, resp.read()

    def get_json(self, path: str) -> Any:
        self.conn.request("GET", path)
        return json.loads(self.conn.getresponse().read())

    def close(self) -> None:
        self.conn.close()


def counter(metrics: dict, name: str, **labels: object) -> float:
    want = {f"{k}={v}" for k, v in labels.items()}
    return sum(v for lbl, v in metrics["counters"].get(name, {}).items() if want <= set(filter(None, lbl.split(","))))


# -- produce -----------------------------------------------------------------------------


def make_bodies(args: argparse.Namespace, topic: str, n: int) -> list[tuple[bytes, int]]:
    """Pre-encoded produce bodies, JSON or binary by ``--body`` (the client
    must not be the bottleneck)."""
    rnd = random.Random(7)
    record = "".join(rnd.choice(string.ascii_letters) for _ in range(args.record_bytes))
    per_tp = max(1, args.records_per_request // args.partitions_per_request)
    bodies = []
    for i in range(n):
        first = (i * args.partitions_per_request) % args.partitions
        parts = [(first + k) % args.partitions for k in range(args.partitions_per_request)]
        if args.body == "binary":
            batches = _batches([record.encode()] * per_tp)
            body = encode_binary_produce_v2([(topic, p, batches) for p in parts])
        else:
            body = json.dumps({"topic_partitions": [
                {"topic": topic, "partition": p, "records": [record] * per_tp} for p in parts
            ]}).encode()
        bodies.append((body, per_tp * args.partitions_per_request))
    return bodies


def _batches(values: list[bytes], max_batch_bytes: int = 1_000_000) -> bytes:
    """``values`` as RecordBatch v2 batches of at most about ``max_batch_bytes`` (the
    topic's max.message.bytes default is 1,048,588), built once per run."""
    per = max(1, max_batch_bytes // (len(values[0]) + 8))
    return b"".join(build_values_batch(values[i:i + per], int(time.time() * 1000)) for i in range(0, len(values), per))


class IdempotentBodies:
    """``--idempotent``: each client is an idempotent producer (``POST /producers``)
    with its own sequence per partition; the batch of a request's partition is
    built once and its producer fields patched per request (``with_producer``:
    the CRC recomputed, 64 KiB per batch at the defaults). ``--fresh-batches``
    does the same client work with no producer id (producerId -1), the
    baseline an idempotent run compares with: only the broker's work differs."""

    def __init__(self, args: argparse.Namespace, topic: str, port: int, clients: int) -> None:
        rnd = random.Random(7)
        record = "".join(rnd.choice(string.ascii_letters) for _ in range(args.record_bytes)).encode()
        self.per_tp = max(1, args.records_per_request // args.partitions_per_request)
        self.template = build_values_batch([record] * self.per_tp, int(time.time() * 1000))
        self.args, self.topic = args, topic
        if args.idempotent:
            c = Client(port)
            self.ids = [json.loads(c.post("/producers", b"{}", "application/json")[1]) for _ in range(clients)]
            c.close()
        else:
            self.ids = [{"producer_id": -1, "producer_epoch": -1}] * clients
        self.seqs: list[dict[int, int]] = [{} for _ in range(clients)]
        self.turn = list(range(clients))

    def next(self, client: int) -> tuple[bytes, int]:
        args, seqs, ident = self.args, self.seqs[client], self.ids[client]
        first = (self.turn[client] * args.partitions_per_request) % args.partitions
        self.turn[client] += len(self.turn)
        items = []
        for k in range(args.partitions_per_request):
            p = (first + k) % args.partitions
            seq = seqs.get(p, 0) if args.idempotent else -1
            seqs[p] = seq + self.per_tp
            items.append((self.topic, p, with_producer(self.template, ident["producer_id"], ident["producer_epoch"],
                                                        seq)))
        return encode_binary_produce_v2(items), self.per_tp * args.partitions_per_request


def produce_phase(
    port: int, bodies: list[tuple[bytes, int]], clients: int, seconds: float, rate_per_s: float | None, record_bytes: int,
    content_type: str = PRODUCE_BINARY_V2_CONTENT_TYPE, idempotent: IdempotentBodies | None = None,
) -> dict[str, float]:
    """``clients`` threads send bodies for ``seconds``; paced at ``rate_per_s``
    requests per second in total when given (open loop per client). With
    ``idempotent``, each client sends its producer's next batches, and a
    request not answered 200 again (the same sequences) until it is."""
    lat: list[float] = []
    records = 0
    errors = 0
    lock = threading.Lock()
    deadline = time.monotonic() + seconds

    def worker(i: int) -> None:
        nonlocal records, errors
        c = Client(port)
        k = i
        interval = clients / rate_per_s if rate_per_s else 0.0
        next_at = time.monotonic() + random.random() * interval
        mine: list[float] = []
        n = 0
        bad = 0
        resend: tuple[bytes, int] | None = None
        while time.monotonic() < deadline:
            if interval:
                delay = next_at - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                next_at += interval
            if resend is not None:
                body, count = resend
            elif idempotent is not None:
                body, count = idempotent.next(i)
            else:
                body, count = bodies[k % len(bodies)]
                k += clients
            t0 = time.monotonic()
            status, _ = c.post("/produce", body, content_type)
            resend = None
            if status == 200:
                mine.append(time.monotonic() - t0)
                n += count
            else:
                bad += 1
                resend = (body, count) if idempotent is not None else None
                time.sleep(0.01)
        c.close()
        with lock:
            lat.extend(mine)
            records += n
            errors += bad

    elapsed = run_threads(worker, range(clients), name="produce-client")
    return {
        "records": records,
        "seconds": round(elapsed, 2),
        "requests": len(lat),
        "requests_per_s": round(len(lat) / elapsed, 1),
        "mb_per_s": round(records * record_bytes / elapsed / 1e6, 2),
        "latency_p50_ms": ms(pct(lat, 0.5)),
        "latency_p99_ms": ms(pct(lat, 0.99)),
        "latency_max_ms": ms(max(lat, default=0.0)),
        "non_200": errors,
    }


# -- end to end -----------------------------------------------------------------------------


def _consume_loop(port: int, topic: str, offsets: dict[int, int], stop: Any, out: Any) -> None:
    """A long-polling consumer (own process): record id -> arrival time."""
    arrived: dict[str, float] = {}
    c = Client(port)
    while not stop.is_set():
        req = {"topic_partitions": [{"topic": topic, "partition": p, "fetch_offset": o} for p, o in offsets.items()],
               "max_wait_ms": 500, "min_bytes": 1}
        _, body = c.post("/consume", json.dumps(req).encode())
        now = time.monotonic()
        for r in json.loads(body)["results"]:
            offsets[r["partition"]] = r["next_fetch_offset"]
            for rec in r["records"]:
                arrived[rec["value"][:36]] = now
    c.close()
    out.put(arrived)


def e2e_phase(args: argparse.Namespace, port: int, topic: str) -> dict[str, float]:
    """Paced produce requests of one record per partition group; long-polling
    consumers (one per 16 partitions) timestamp each record's arrival."""
    sent: dict[str, tuple[float, float]] = {}  # record id -> (send, ack)
    arrived: dict[str, float] = {}
    lock = threading.Lock()
    pad = "x" * max(0, args.record_bytes - 40)
    groups = [list(range(g, min(g + 16, args.partitions))) for g in range(0, args.partitions, 16)]

    # Start every consumer at the current end of its partitions.
    c0 = Client(port)
    starts: dict[int, int] = {}
    for ps in groups:
        req = {"topic_partitions": [{"topic": topic, "partition": p, "fetch_offset": 1} for p in ps],
               "max_wait_ms": 0, "max_bytes": 1}
        for r in json.loads(c0.post("/consume", json.dumps(req).encode())[1])["results"]:
            starts[r["partition"]] = (r["high_watermark"] or 0) + 1
    c0.close()

    # Consumers run in their own process, so their arrival times are not
    # delayed by this process's producer threads (CLOCK_MONOTONIC is shared).
    ctx = multiprocessing.get_context("spawn")
    stop_evt = ctx.Event()
    results = ctx.Queue()
    consumers = [
        ctx.Process(target=_consume_loop, args=(port, topic, {p: starts[p] for p in ps}, stop_evt, results))
        for ps in groups
    ]
    for proc in consumers:
        proc.start()
    time.sleep(1.0)  # let them start and park in their first long-poll
    # Open loop: requests go out at a fixed rate from a pool of connections,
    # whatever their latency (a closed loop would wait out each batch delay).
    jobs: queue.Queue = queue.Queue()

    def sender() -> None:
        c = Client(port)
        while True:
            job = jobs.get()
            if job is None:
                break
            ids, body = job
            t0 = time.monotonic()
            status, _ = c.post("/produce", body)
            t1 = time.monotonic()
            if status == 200:
                with lock:
                    for rid in ids:
                        sent[rid] = (t0, t1)
        c.close()

    senders = [threading.Thread(target=sender) for _ in range(64)]
    for t in senders:
        t.start()
    deadline = time.monotonic() + args.e2e_seconds
    interval = 1.0 / args.e2e_requests_per_s
    next_at = time.monotonic()
    i = 0
    while time.monotonic() < deadline:
        delay = next_at - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        next_at += interval
        ids = [uuid.uuid4().hex[:36].ljust(36, "0") for _ in range(4)]
        tps = [{"topic": topic, "partition": (i * 4 + k) % args.partitions, "records": [ids[k] + pad]} for k in range(4)]
        i += 1
        jobs.put((ids, json.dumps({"topic_partitions": tps}).encode()))
    for _ in senders:
        jobs.put(None)
    for t in senders:
        t.join()
    time.sleep(1.0)
    stop_evt.set()
    for _ in consumers:
        arrived.update(results.get(timeout=30))
    for proc in consumers:
        proc.join(10)
    from_send = [arrived[k] - s for k, (s, _) in sent.items() if k in arrived]
    from_ack = [arrived[k] - a for k, (_, a) in sent.items() if k in arrived]
    return {
        "records_sent": len(sent),
        "records_received": sum(1 for k in sent if k in arrived),
        "send_to_consumer_p50_ms": ms(pct(from_send, 0.5)),
        "send_to_consumer_p99_ms": ms(pct(from_send, 0.99)),
        "ack_to_consumer_p50_ms": ms(pct(from_ack, 0.5)),
        "ack_to_consumer_p99_ms": ms(pct(from_ack, 0.99)),
        "consumer_before_ack_fraction": round(sum(1 for x in from_ack if x < 0) / max(1, len(from_ack)), 3),
    }


# -- consume throughput -------------------------------------------------------------------------


def consume_phase(
    port: int, topic: str, ranges: dict[int, tuple[int, int]], seconds: float, consumers: int = 4,
    max_bytes: int = 8 * MIB, answer: str = "binary",
) -> dict[str, float]:
    """Read ``ranges`` (partition -> [first, last]) with ``consumers`` threads,
    for at most ``seconds``; ``answer`` is the consume answer asked for
    (``binary``: parsed and checked, CRCs included; ``json``)."""
    accept = CONSUME_BINARY_CONTENT_TYPE if answer == "binary" else None
    deadline = time.monotonic() + seconds
    parts = sorted(ranges)
    size = -(-len(parts) // consumers)  # contiguous ranges, as consumer groups assign them
    shares = [parts[i:i + size] for i in range(0, len(parts), size)]
    total_records = 0
    total_bytes = 0
    lock = threading.Lock()

    def worker(ps: list[int]) -> None:
        nonlocal total_records, total_bytes
        c = Client(port)
        offsets = {p: ranges[p][0] for p in ps}
        n = b = 0
        while time.monotonic() < deadline:
            live = [p for p in ps if offsets[p] <= ranges[p][1]]
            if not live:
                break
            req = {"topic_partitions": [{"topic": topic, "partition": p, "fetch_offset": offsets[p]} for p in live],
                   "max_wait_ms": 0, "max_bytes": max_bytes}
            status, body = c.post("/consume", json.dumps(req).encode(), accept=accept)
            assert status == 200, body[:200]
            if accept:
                parsed = parse_binary_consume(body)
                for p in parsed.partitions:
                    assert p.ok, p.error
                    offsets[p.partition] = p.next_fetch_offset
                n += parsed.record_count
                b += parsed.payload_bytes
                continue
            doc = json.loads(body)
            for r in doc["results"]:
                assert r["ok"], r
                offsets[r["partition"]] = r["next_fetch_offset"]
            n += doc["record_count"]
            b += doc["payload_bytes"]
        c.close()
        with lock:
            total_records += n
            total_bytes += b

    elapsed = run_threads(worker, [s for s in shares if s], name="consume-client")
    return {
        "records": total_records,
        "seconds": round(elapsed, 2),
        "mb_per_s": round(total_bytes / elapsed / 1e6, 2),
        "records_per_s": round(total_records / elapsed),
    }


def high_watermarks(port: int, topic: str, partitions: int) -> dict[int, int]:
    c = Client(port)
    req = {"topic_partitions": [{"topic": topic, "partition": p, "fetch_offset": 1} for p in range(partitions)],
           "max_wait_ms": 0, "max_bytes": 1}
    doc = json.loads(c.post("/consume", json.dumps(req).encode())[1])
    c.close()
    return {r["partition"]: r["high_watermark"] or 0 for r in doc["results"]}


def broker_side(port: int) -> dict[str, float]:
    """Broker-side latencies over the recent samples: flush, queue wait, S3 PUT, Oxia CAS."""
    c = Client(port)
    h = c.get_json("/metrics")["histograms"]
    c.close()

    def q(name: str, label: str, key: str) -> float:
        return round(h.get(name, {}).get(label, {}).get(key, 0.0) * 1000, 1)

    return {
        "broker_flush_p50_ms": q("batcher_flush_seconds", "", "p50_s"),
        "broker_flush_p99_ms": q("batcher_flush_seconds", "", "p99_s"),
        "broker_queue_wait_p99_ms": q("batcher_queue_wait_seconds", "", "p99_s"),
        "broker_s3_put_p99_ms": q("s3_operation_seconds", "op=put", "p99_s"),
        "broker_oxia_cas_p99_ms": q("oxia_operation_seconds", "op=put_cas", "p99_s"),
    }


def storage_delta(port: int, fn: Callable[[], dict]) -> tuple[dict, dict[str, float]]:
    c = Client(port)
    before = c.get_json("/metrics")
    out = fn()
    after = c.get_json("/metrics")
    c.close()
    keys = {
        "s3_gets": lambda m: counter(m, "s3_operations_total", op="get") + counter(m, "s3_operations_total", op="range_get"),
        "oxia_ops": lambda m: counter(m, "oxia_operations_total"),
        "cache_hits": lambda m: counter(m, "tail_cache_lookups_total", result="hit"),
    }
    return out, {k: int(f(after) - f(before)) for k, f in keys.items()}


# -- main -----------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    topic = "bench"
    figures: dict[str, Any] = {"config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}}
    with ExitStack() as stack:
        env = stack_env(stack)
        env.update({
            "LLOG_BATCH_MAX_DELAY_MS": str(args.batch_max_delay_ms),
            "LLOG_BATCH_MAX_BYTES": str(args.batch_max_bytes),
            "LLOG_BATCH_MAX_BUFFER_BYTES": str(max(BatchConfig().max_buffer_bytes, 16 * args.batch_max_bytes)),
            "LLOG_BATCH_MAX_BLOCK_MS": str(args.batch_max_block_ms),
        })
        logs = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="llog-bench-logs-")))
        broker = Broker(env, "both", logs / "broker.log")
        stack.callback(broker.stop)
        ensure_topic(parse_broker_list(f"http://127.0.0.1:{broker.port}"), topic, args.partitions)
        bodies = make_bodies(args, topic, 256)
        ctype = PRODUCE_BINARY_V2_CONTENT_TYPE if args.body == "binary" else "application/json"
        print(f"[bench] broker on port {broker.port}; warming up (partition initialization) ...", flush=True)
        produce_phase(broker.port, bodies[:64], 8, 1.0, None, args.record_bytes, ctype)

        idem = IdempotentBodies(args, topic, broker.port, args.clients) if args.idempotent or args.fresh_batches else None
        print(f"[bench] 1. produce at saturation: {args.clients} clients{' (idempotent)' if idem else ''}, "
              f"{args.seconds:.0f}s ...", flush=True)
        cpu_before = broker.cpu_seconds()
        sat = produce_phase(broker.port, bodies, args.clients, args.seconds, None, args.record_bytes, ctype, idem)
        cpu = broker.cpu_seconds() - cpu_before
        # CPU per MB moves far less than MB/s when other work shares the cores.
        sat["broker_cpu_ms_per_mb"] = round(cpu * 1000 / max(1e-9, sat["records"] * args.record_bytes / 1e6), 2)
        sat["broker_cpu_cores"] = round(cpu / sat["seconds"], 2)
        figures["produce_saturated"] = {**sat, **broker_side(broker.port)}

        print("[bench] 1b. the S3 server's own PUT bandwidth (8 MiB objects; 1, 2 and 4 streams, 3 s each) ...",
              flush=True)
        figures["s3_put_bandwidth"] = {
            f"mb_per_s_{n}_stream{'s' if n > 1 else ''}": put_bandwidth(env, seconds=3.0, threads=n) for n in (1, 2, 4)
        }

        rate = sat["requests_per_s"] * args.paced_fraction
        print(f"[bench] 2. produce below saturation: {rate:.1f} requests/s, {args.paced_seconds:.0f}s ...", flush=True)
        figures["produce_paced"] = produce_phase(
            broker.port, bodies, args.clients, args.paced_seconds, rate, args.record_bytes, ctype, idem
        )

        print(f"[bench] 3. end to end: {args.e2e_requests_per_s:.0f} requests/s, long-polling consumers ...", flush=True)
        figures["end_to_end"] = e2e_phase(args, broker.port, topic)

        hws = high_watermarks(broker.port, topic, args.partitions)
        cached_bytes = 256 * MIB  # well inside the default 512 MiB tail cache
        per_p = max(1, cached_bytes // args.record_bytes // args.partitions)
        hot = {p: (max(1, hw - per_p + 1), hw) for p, hw in hws.items() if hw}
        print(f"[bench] 4. consume at the hot tail: newest {per_p} records of each partition ...", flush=True)
        out, delta = storage_delta(
            broker.port, lambda: consume_phase(broker.port, topic, hot, args.consume_seconds, answer=args.consume_body)
        )
        figures["consume_hot_tail"] = {**out, **delta}

        reader = Broker(env, "read", logs / "reader.log")
        stack.callback(reader.stop)
        old = {p: (1, hw) for p, hw in hws.items() if hw}
        print("[bench] 5. consume catching up from S3: fresh read-role broker, from offset 1 ...", flush=True)
        out, delta = storage_delta(
            reader.port, lambda: consume_phase(reader.port, topic, old, args.consume_seconds, answer=args.consume_body)
        )
        figures["consume_catch_up_s3"] = {**out, **delta}

    delay = args.batch_max_delay_ms
    print()
    for section, values in figures.items():
        if section == "config":
            continue
        print(section)
        for k, v in values.items():
            print(f"  {k:34s} {v}")
    print(f"\nsummary (a produce waits up to the {delay} ms batch delay, then one flush)")
    sat = figures["produce_saturated"]
    print(f"  produce at saturation              {sat['mb_per_s']} MB/s, "
          f"{sat['records'] / max(sat['seconds'], 1e-9):,.0f} records/s of {args.record_bytes} B")
    puts = figures["s3_put_bandwidth"]
    ingest = figures["produce_saturated"]["mb_per_s"]
    print(f"  S3 server's own PUT bandwidth      {puts['mb_per_s_1_stream']} / {puts['mb_per_s_2_streams']} / "
          f"{puts['mb_per_s_4_streams']} MB/s with 1 / 2 / 4 streams of 8 MiB PUTs")
    print("  ingest / PUT bandwidth             " + " / ".join(
        f"{ingest / max(v, 1e-9):.2f}" for v in puts.values()) + " (goal >= 0.80; the broker PUTs on up to "
          "LLOG_BATCH_MAX_INFLIGHT_FLUSHES, default 8, streams)")
    print(f"  paced p99                          {figures['produce_paced']['latency_p99_ms']} ms "
          f"({figures['produce_paced']['latency_p99_ms'] - delay:.0f} ms over the batch delay)")
    e2e = figures["end_to_end"]
    print(f"  hot-tail end-to-end p99            {e2e['ack_to_consumer_p99_ms']} ms from the produce ack, "
          f"{e2e['send_to_consumer_p99_ms']} ms from the produce send")
    print(f"  consume at the hot tail            {figures['consume_hot_tail']['mb_per_s']} MB/s "
          f"({args.consume_body} answers; goal >= 300)")
    print(f"  consume catching up from S3        {figures['consume_catch_up_s3']['mb_per_s']} MB/s (goal >= 150)")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
