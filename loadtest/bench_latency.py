"""The broker against an object store with realistic latency (prints figures).

Runs ``bench_broker`` twice on one local stack, side by side: with the broker
talking to MinIO directly (loopback), and through ``s3_latency_proxy`` (built
from ``loadtest/s3_latency_proxy.go`` on first use), which adds an S3
Standard-like latency profile: an 8 MiB PUT about 200 ms at the median, a
GET's first byte about 30 ms, log-normal tails. Before that it measures the
profile itself (8 MiB PUTs and 1 MiB ranged GETs through the proxy) so the
printed figures say what "realistic" was. Prints, for each: produce MB/s at
saturation and the paced p99, and the checks of the performance goals:

- throughput through the proxy / on loopback (goal: >= 0.8);
- paced p99 through the proxy <= batch delay + PUT p99 + 100 ms.

    python -m loadtest.bench_latency --seconds 8
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Sequence

from loadtest._common import stack_env
from devstack import ensure_go_binary

PROXY_SOURCE = Path(__file__).resolve().parent / "s3_latency_proxy.go"
MIB = 1 << 20


def start_proxy(stack: ExitStack, upstream: str, extra: Sequence[str] = ()) -> str:
    """The proxy's URL; it is stopped when ``stack`` closes."""
    binary = ensure_go_binary(PROXY_SOURCE, "s3_latency_proxy")
    proc = subprocess.Popen([str(binary), "-upstream", upstream, *extra], stdout=subprocess.PIPE, text=True)
    stack.callback(lambda: (proc.terminate(), proc.wait(10)))
    line = proc.stdout.readline() if proc.stdout else ""
    if not line:
        raise RuntimeError(f"s3_latency_proxy did not start (exit {proc.poll()})")
    return "http://" + json.loads(line)["listening"]


def probe(env: dict[str, str], endpoint: str, puts: int, gets: int) -> dict[str, float]:
    """PUT and ranged GET latency through ``endpoint`` (ms percentiles)."""
    import boto3
    from botocore.config import Config

    s3 = boto3.client("s3", endpoint_url=endpoint, region_name=env.get("LLOG_S3_REGION_NAME", "us-east-1"),
                      aws_access_key_id=env["LLOG_S3_ACCESS_KEY_ID"],
                      aws_secret_access_key=env["LLOG_S3_SECRET_ACCESS_KEY"],
                      config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}))
    bucket, body = env["LLOG_S3_BUCKET"], os.urandom(8 * MIB)
    put_ms, get_ms = [], []
    for i in range(puts):
        started = time.perf_counter()
        s3.put_object(Bucket=bucket, Key=f"{env['LLOG_ROOT_PREFIX']}/probe/{i}", Body=body)
        put_ms.append((time.perf_counter() - started) * 1000)
    for i in range(gets):
        started = time.perf_counter()
        s3.get_object(Bucket=bucket, Key=f"{env['LLOG_ROOT_PREFIX']}/probe/{i % puts}",
                      Range=f"bytes={(i * MIB) % (7 * MIB)}-{(i * MIB) % (7 * MIB) + MIB - 1}")["Body"].read()
        get_ms.append((time.perf_counter() - started) * 1000)

    def pct(values: list[float], q: float) -> float:
        ordered = sorted(values)
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1)

    return {"put_8mib_p50_ms": pct(put_ms, 0.5), "put_8mib_p99_ms": pct(put_ms, 0.99),
            "get_1mib_p50_ms": pct(get_ms, 0.5), "get_1mib_p99_ms": pct(get_ms, 0.99)}


def bench_broker(env: dict[str, str], args: argparse.Namespace, label: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="llog-bench-latency-") as tmp:
        out = Path(tmp) / "figures.json"
        argv = [sys.executable, "-m", "loadtest.bench_broker", "--seconds", str(args.seconds),
                "--paced-seconds", str(args.paced_seconds), "--e2e-seconds", "2", "--consume-seconds", "2",
                "--batch-max-delay-ms", str(args.batch_max_delay_ms), "--clients", str(args.clients),
                "--records-per-request", str(args.records_per_request), "--json", str(out)]
        print(f"[bench] bench_broker {label} ...", flush=True)
        done = subprocess.run(argv, env={**os.environ, **env}, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"bench_broker ({label}) failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        return json.loads(out.read_text())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtest.bench_latency", description=__doc__.split("\n\n")[0],
                                     epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=8.0, help="saturated produce phase (default 8)")
    parser.add_argument("--paced-seconds", type=float, default=5.0, help="paced produce phase (default 5)")
    parser.add_argument("--batch-max-delay-ms", type=int, default=500)
    parser.add_argument("--clients", type=int, default=128,
                        help="concurrent produce clients (default 128: with a slower store, more requests must be in "
                             "flight for the same rate; 128 x 512 KiB covers 8 flushes of 8 MiB)")
    parser.add_argument("--records-per-request", type=int, default=512,
                        help="1 KiB records per produce request (default 512)")
    parser.add_argument("--probe-puts", type=int, default=12, help="8 MiB PUTs to measure the profile (default 12)")
    parser.add_argument("--proxy-arg", action="append", default=[], metavar="FLAG=VALUE",
                        help="pass a flag to the proxy, e.g. --proxy-arg=-put-base=120ms")
    args = parser.parse_args(argv)
    with ExitStack() as stack:
        env = stack_env(stack)
        proxy = start_proxy(stack, env["LLOG_S3_ENDPOINT_URL"], args.proxy_arg)
        print(f"[bench] latency proxy {proxy} -> {env['LLOG_S3_ENDPOINT_URL']}; measuring the profile ...", flush=True)
        profile = probe(env, proxy, args.probe_puts, 3 * args.probe_puts)
        direct = bench_broker(env, args, "on loopback")
        proxied = bench_broker({**env, "LLOG_S3_ENDPOINT_URL": proxy}, args, "through the latency proxy")
    ratio = proxied["produce_saturated"]["mb_per_s"] / max(direct["produce_saturated"]["mb_per_s"], 1e-9)
    bound = args.batch_max_delay_ms + profile["put_8mib_p99_ms"] + 100
    p99 = proxied["produce_paced"]["latency_p99_ms"]
    print("\nobject-store profile through the proxy (ms)")
    for k, v in profile.items():
        print(f"  {k:34s} {v}")
    print("\n                                      loopback   proxied")
    for key, name in (("mb_per_s", "produce at saturation (MB/s)"), ("latency_p99_ms", "produce p99 (ms)")):
        print(f"  {name:36s} {direct['produce_saturated'][key]:>8}  {proxied['produce_saturated'][key]:>8}")
    print(f"  {'paced p99 (ms)':36s} {direct['produce_paced']['latency_p99_ms']:>8}  {p99:>8}")
    print(f"\n  throughput ratio proxied/loopback    {ratio:.2f}   (goal >= 0.80)")
    print(f"  paced p99 through the proxy          {p99} ms <= {bound:.0f} ms "
          f"(batch delay {args.batch_max_delay_ms} + PUT p99 {profile['put_8mib_p99_ms']} + 100): "
          f"{'yes' if p99 <= bound else 'NO'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
