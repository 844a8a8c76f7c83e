"""Time the broker's produce path in-process, JSON body against binary (prints figures).

What a produce body costs the broker's CPU from its bytes to the WAL blob's
records, with no server, Oxia or S3: parse and validate the body
(``parse_produce_body``), then join a flush's groups per partition and encode
them as the blob's batches (``join_payloads`` + ``encode_batch``, as the
producer and the writer do). One core, no contention from the network, so it
isolates what the body format changes; the end-to-end figures are
``bench_broker``'s.

    python -m loadtest.bench_produce_parse
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from server._protocol.produce_binary import PRODUCE_BINARY_CONTENT_TYPE, encode_binary_produce, parse_produce_body
from server._protocol.codec import encode_batch, join_payloads


def _bodies(record_bytes: int, records: int, partitions: int) -> dict[str, bytes]:
    record = "r" * record_bytes
    per = records // partitions
    groups = [("bench", p, [record.encode()] * per) for p in range(partitions)]
    doc = {"topic_partitions": [{"topic": t, "partition": p, "records": [record] * per} for t, p, _ in groups]}
    return {"json": json.dumps(doc).encode(), "binary": encode_binary_produce(groups)}


def _time(fn, min_s: float = 1.0) -> float:
    """Seconds per call (best of 3 rounds of at least ``min_s`` / 3 each)."""
    best = float("inf")
    for _ in range(3):
        n, start = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - start) < min_s / 3:
            fn()
            n += 1
        best = min(best, elapsed / n)
    return best


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m loadtest.bench_produce_parse", description=__doc__.split("\n\n")[0])
    p.add_argument("--partitions", type=int, default=8, help="batches per request (default 8)")
    args = p.parse_args(argv)
    print(f"{'shape':28s} {'body':7s} {'parse ms':>9s} {'+ encode ms':>12s} {'MB/s of payload':>16s}")
    for record_bytes, records in ((1024, 512), (100, 512), (100, 8192)):
        for kind, body in _bodies(record_bytes, records, args.partitions).items():
            ctype = PRODUCE_BINARY_CONTENT_TYPE if kind == "binary" else "application/json"

            def parse():
                return parse_produce_body(body, ctype, max_records=100_000)

            def parse_and_encode():
                for g in parse().groups:
                    encode_batch(join_payloads([g.payloads, g.payloads]))  # a flush joins submissions

            t_parse, t_all = _time(parse), _time(parse_and_encode)
            mb = record_bytes * records / 1e6
            print(f"{f'{records} x {record_bytes} B':28s} {kind:7s} {t_parse * 1e3:9.2f} {t_all * 1e3:12.2f} "
                  f"{mb / t_all:16.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
