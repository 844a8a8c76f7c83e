"""Profile the broker process under ``bench_broker`` with py-spy (prints where its CPU goes).

Runs ``python -m loadtest.bench_broker`` with the given arguments, waits for
the phase named by ``--phase`` (the saturated produce by default; ``hot-tail``
and ``catch-up`` are the consume phases, the second on the read-role broker),
attaches ``py-spy record`` to the broker process serving it (a child of the
benchmark, never another process) for ``--seconds``, and prints:
the broker's CPU use over the window (``/proc/<pid>/stat``; 100% is one
core), then the samples of threads on a CPU (py-spy leaves out idle ones,
threads waiting for the GIL included; ``--gil``: only the thread holding
it) by category, by own time and by cumulative time. Line numbers stay in
the frames, so ``zlib.crc32`` inside ``encode_batch`` is its own line.

py-spy is not a dependency of llog; install it where you like (a throwaway
venv is enough, the binary is self-contained) and pass ``--py-spy``::

    python3 -m venv /tmp/pyspy && /tmp/pyspy/bin/pip install py-spy==0.4.3
    $LLOG_PY -m loadtest.profile_broker --py-spy /tmp/pyspy/bin/py-spy -- --seconds 8
    $LLOG_PY -m loadtest.profile_broker --py-spy /tmp/pyspy/bin/py-spy -- --seconds 8 --record-bytes 100
    $LLOG_PY -m loadtest.profile_broker --py-spy /tmp/pyspy/bin/py-spy --phase catch-up --seconds 3 -- --consume-seconds 4
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from loadtest._common import REPO, process_cpu_seconds

# First matching pattern (over the whole stack, innermost frame first) names
# a sample's category; the order puts the specific before the general.
CATEGORIES: tuple[tuple[str, str], ...] = (
    ("CRC (zlib.crc32)", r"crc32"),
    ("consume: batch decode (decode_batch)", r"decode_batch"),
    ("consume: answer encoding (per-record JSON)", r"consumed_partition_json|encode_value"),
    ("consume: answer encoding (binary)", r"consume_binary"),
    ("S3 GET (s3_lean)", r"LeanS3Client\.get "),
    ("produce body parse: JSON", r"json/decoder\.py|parse_json_body"),
    ("produce body parse: per-record (decode_record, base64)", r"decode_record|base64\.py"),
    ("produce body parse: binary", r"parse_binary_produce|_produce_binary"),
    ("produce body parse: group validation", r"normalize_payloads|SharedAppendGroup|parse_produce"),
    ("blob build (encode_batch, encode_shared_blob)", r"encode_batch|encode_shared_blob|splice"),
    ("S3 PUT (s3_lean, boto3/botocore)", r"LeanS3Client\.put |botocore/|boto3/|s3transfer/|urllib3/"),
    ("Oxia client (oxia, grpc, betterproto)", r"oxia/|grpc/|betterproto2/|oxia_compat"),
    ("tail cache", r"tail_cache"),
    ("consume: storage reads (consume_storage, reader)", r"consume_storage|_log/reader"),
    ("metrics (prometheus_client)", r"prometheus_client/|_metrics/"),
    ("answer JSON (encoder)", r"json/encoder\.py|append_result_json"),
    ("http.server / socket I/O", r"http/server\.py|socketserver\.py|socket\.py|http/client\.py|email/"),
    ("producer / writer bookkeeping", r"_log/producer\.py|_log/writer\.py"),
    ("threading / futures", r"threading\.py|concurrent/"),
)


# phase -> (the line bench_broker prints when it starts, the role of the broker serving it)
PHASES: dict[str, tuple[str, str]] = {
    "produce": ("1. produce at saturation", "both"),
    "hot-tail": ("4. consume at the hot tail", "both"),
    "catch-up": ("5. consume catching up from S3", "read"),
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m loadtest.profile_broker", description=__doc__.split("\n\n")[0])
    p.add_argument("--py-spy", default="py-spy", help="the py-spy binary (default: py-spy on PATH)")
    p.add_argument("--phase", choices=sorted(PHASES), default="produce",
                   help="the benchmark phase to profile (default produce, the saturated one)")
    p.add_argument("--seconds", type=float, default=6.0, help="profile window inside the phase (default 6)")
    p.add_argument("--rate", type=int, default=200, help="py-spy samples per second (default 200)")
    p.add_argument("--gil", action="store_true", help="sample only the thread holding the GIL")
    p.add_argument("--top", type=int, default=25, help="functions listed (default 25)")
    p.add_argument("--out", type=Path, help="keep py-spy's collapsed stacks here")
    p.add_argument("bench_args", nargs="*", help="arguments for bench_broker (after --)")
    return p.parse_args(argv)


def _broker_child(bench: subprocess.Popen, role: str = "both", timeout_s: float = 120.0) -> int:
    """The broker process of ``role`` the benchmark started (a child of it, possibly behind setpriv's exec)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        out = subprocess.run(["pgrep", "-P", str(bench.pid)], capture_output=True, text=True).stdout.split()
        for pid in out:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
            if b"leaderless_log_broker" in cmd and f"--role {role}".encode() in cmd:
                return int(pid)
        time.sleep(0.2)
    raise RuntimeError("the benchmark started no broker")


def _wait_for_line(path: Path, text: str, timeout_s: float = 300.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text():
            return
        time.sleep(0.2)
    raise RuntimeError(f"benchmark never printed {text!r}; see {path}")


def summarize(raw: str, top: int) -> str:
    """Own time, cumulative time and categories of py-spy's collapsed stacks."""
    own: Counter[str] = Counter()
    cum: Counter[str] = Counter()
    cats: Counter[str] = Counter()
    total = 0
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        n = int(count)
        frames = stack.split(";")
        total += n
        own[frames[-1]] += n
        for f in set(re.sub(r":\d+\)$", ")", f) for f in frames):
            cum[f] += n
        joined = ";".join(reversed(frames))
        cats[next((name for name, pat in CATEGORIES if re.search(pat, joined)), "other")] += n
    lines = [f"{total} samples"]
    for title, counts in (("by category", cats), ("own time (frame:line)", own), ("cumulative (function)", cum)):
        lines.append(f"\n{title}")
        for name, n in counts.most_common(top):
            lines.append(f"  {100 * n / max(1, total):5.1f}%  {name}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="llog-profile-") as tmp:
        log_path = Path(tmp) / "bench.log"
        raw_path = args.out or Path(tmp) / "stacks.txt"
        with open(log_path, "w") as log:
            bench = subprocess.Popen(
                [sys.executable, "-m", "loadtest.bench_broker", *args.bench_args],
                cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
            )
        try:
            line, role = PHASES[args.phase]
            _wait_for_line(log_path, line)
            pid = _broker_child(bench, role)
            time.sleep(1.0 if args.phase == "produce" else 0.2)  # past the phase's ramp-up
            cpu0, t0 = process_cpu_seconds(pid), time.monotonic()
            subprocess.run(
                [args.py_spy, "record", "--pid", str(pid), *(["--gil"] if args.gil else []), "--rate", str(args.rate), "--duration",
                 str(int(args.seconds)), "--format", "raw", "--output", str(raw_path)],
                check=True, capture_output=True,
            )
            cpu = (process_cpu_seconds(pid) - cpu0) / (time.monotonic() - t0)
            bench.wait()
        finally:
            if bench.poll() is None:
                bench.terminate()
                bench.wait(60)
        print(f"broker pid {pid}: {100 * cpu:.0f}% of one core over the window")
        print(summarize(raw_path.read_text(), args.top))
        print("\nbenchmark summary:")
        text = log_path.read_text()
        print(text[text.find("produce_saturated"):])
    return 0


if __name__ == "__main__":
    sys.exit(main())
