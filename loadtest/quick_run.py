"""The quick run: bring up Oxia + S3, write a few records, read them back.

Run through ``./quick_run.sh`` (which does the set-up first). Steps:

1. start a local Oxia (standalone) and MinIO with a bucket;
2. append records to topic ``orders`` (two partitions, one shared WAL blob)
   through a BatchingProducer;
3. read them back with the reader and check every byte;
4. print where the data lives (Oxia keys, S3 objects);
5. stop everything (``--keep`` leaves it running and says how to stop it).

Any mismatch fails loudly with the step that failed and exit code 1.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
import time
import uuid
from contextlib import ExitStack
from pathlib import Path

from server._config import BatchConfig
from server._errors import LlogError
from server.leaderless_log_metrics import LlogMetrics
from server.leaderless_log_reader import LeaderlessLogReader
from server.leaderless_log_writer import BatchingProducer, LeaderlessLogWriter, SharedAppendGroup

TOPIC = "orders"


class StepFailed(Exception):
    pass


def say(step: str, message: str) -> None:
    print(f"[quick-run] {step:<10} {message}", flush=True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="./quick_run.sh",
        description="Bring up a local llog stack (Oxia + MinIO), append records, read them back, "
        "show where they live, tear down.",
    )
    p.add_argument("--records", type=int, default=10, help="records per partition (default 10)")
    p.add_argument("--keep", action="store_true", help="leave the stack running and print how to use and stop it")
    p.add_argument("--data-dir", type=Path, help="stack data directory (default: a temporary directory)")
    args = p.parse_args(argv)
    if args.records < 1:
        p.error("--records must be >= 1")
    return args


def run(args: argparse.Namespace) -> int:
    from server.devstack import LocalStack

    started = time.monotonic()
    with ExitStack() as stack:
        data_dir = args.data_dir
        if data_dir is None:
            if args.keep:
                data_dir = Path(".llog-stack/quick-run").resolve()
            else:
                data_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="llog-quick-")))
        data_dir.mkdir(parents=True, exist_ok=True)

        say("stack", f"starting Oxia + MinIO in {data_dir} ...")
        # With --keep the servers must outlive this process.
        local = LocalStack(data_dir, die_with_parent=not args.keep)
        local.start()
        if not args.keep:
            stack.callback(local.stop)
        settings = local.settings
        # A fresh stack shows the default layout; a reused one gets its own root
        # so earlier runs' records do not mix in.
        root = "llog" if args.data_dir is None and not args.keep else f"quick-{uuid.uuid4().hex[:6]}"
        env = settings.env(root_prefix=root)
        say("stack", f"Oxia at {settings.oxia_address}, S3 at {settings.s3_endpoint_url} (bucket {settings.bucket})")

        metrics = LlogMetrics()
        expected = {
            p: [f'{{"order_id": {p * 1000 + i}, "amount": {i * 3 + 0.5}}}'.encode() for i in range(args.records)]
            for p in (0, 1)
        }
        say("append", f"writing {2 * args.records} records to {TOPIC}:0 and {TOPIC}:1 ...")
        with LeaderlessLogWriter.from_env(env, metrics=metrics) as writer:
            with BatchingProducer(writer, BatchConfig(max_delay_ms=50), metrics=metrics) as producer:
                results = producer.append_shared(
                    [SharedAppendGroup(TOPIC, p, payloads) for p, payloads in expected.items()], timeout=30
                )
        for r in results:
            if not r.ok:
                raise StepFailed(f"append to {r.topic}:{r.partition} failed: {r.error}")
            say("append", f"{r.topic}:{r.partition} offsets {r.start_offset}..{r.end_offset} -> {r.wal_uri}")
        if len({r.wal_uri for r in results}) != 1:
            raise StepFailed("the two partitions did not share one WAL blob")

        say("read", "reading everything back from Oxia + S3 ...")
        with LeaderlessLogReader.from_env(env, metrics=metrics) as reader:
            for p, want in expected.items():
                got = [rec.payload for rec in reader.iter_from(TOPIC, p, 1)]
                if got != want:
                    raise StepFailed(f"{TOPIC}:{p}: read back {len(got)} records that differ from the {len(want)} written")
                say("read", f"{TOPIC}:{p}: {len(got)} records match byte for byte (e.g. offset 1 = {got[0].decode()})")
            control = reader.control(TOPIC, 0)

        keys = writer.layout.partition(TOPIC, 0)
        print()
        print("Where the data lives")
        print(f"  Oxia {settings.oxia_address}, namespace default, partition key {keys.partition_key!r}:")
        print(f"    {keys.control}  = {control.encode().decode()}")
        print(f"    {keys.compaction_cursor}")
        print(f"    {keys.index(results[0].end_offset)}  (sparse index: batch end offset)")
        print(f"  S3 {settings.s3_endpoint_url}:")
        print(f"    {results[0].wal_uri}  (one shared LLS1 blob, both partitions)")
        print(f"  S3 PUTs {metrics.counter('s3_operations_total', op='put'):.0f}, "
              f"S3 GETs {metrics.counter('s3_operations_total', op='range_get'):.0f}, "
              f"Oxia calls {metrics.counter('oxia_operations_total'):.0f}, "
              f"elapsed {time.monotonic() - started:.1f}s")
        if args.keep:
            print()
            print("The stack keeps running. Use it from a shell with:")
            for k, v in env.items():
                print(f"  export {k}={shlex.quote(v)}")
            print(f"Stop it with:\n  $LLOG_PY -m server.devstack down --data-dir {shlex.quote(str(data_dir))}")
            local.detach()
        else:
            say("stack", "stopping (use --keep to leave it running)")
    say("done", "OK")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        return run(args)
    except StepFailed as exc:
        print(f"[quick-run] FAILED: {exc}", file=sys.stderr)
        return 1
    except LlogError as exc:
        print(f"[quick-run] FAILED: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
