"""Initialize every partition of a load-test run before load starts.

Idempotent: a partition that exists is left alone (``initialize_partition``
creates ``meta/control`` and the compaction cursor only when absent), so it
is safe to run twice or against a log that already has data. Prints one
progress line per 10% and a summary (created / already there)::

    python -m loadtest.precreate --run-dir loadtest/results/<run>     # a run of orchestrate.py up
    python -m loadtest.precreate --topic lt --partitions 64           # LLOG_* from the environment
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

__all__ = ["PrecreateResult", "precreate", "main"]


@dataclass(frozen=True)
class PrecreateResult:
    topic: str
    partitions: int
    created: int
    existing: int
    seconds: float


def precreate(env: Mapping[str, str], topic: str, partitions: int, *,
              say: Callable[[str], None] = lambda line: print(line, file=sys.stderr)) -> PrecreateResult:
    from server.leaderless_log_writer import LeaderlessLogWriter

    started = time.monotonic()
    created = 0
    step = max(1, partitions // 10)
    with LeaderlessLogWriter.from_env(env) as writer:
        for p in range(partitions):
            created += bool(writer.initialize_partition(topic, p))
            if (p + 1) % step == 0 or p + 1 == partitions:
                say(f"[precreate] {topic}: {p + 1}/{partitions} partitions ready")
    result = PrecreateResult(topic, partitions, created, partitions - created, time.monotonic() - started)
    say(f"[precreate] {topic}: {result.created} created, {result.existing} already there, {result.seconds:.1f}s")
    return result


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m loadtest.precreate", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1],
    )
    parser.add_argument("--run-dir", type=Path, help="a run directory (stack.json, resolved-config.json)")
    parser.add_argument("--topic", help="topic (default: the run's load.topic)")
    parser.add_argument("--partitions", type=int, help="partitions 0..N-1 (default: the run's load.partitions)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    import os

    args = _parser().parse_args(argv)
    env: Mapping[str, str] = os.environ
    topic, partitions = args.topic, args.partitions
    if args.run_dir is not None:
        stack = json.loads((args.run_dir / "stack.json").read_text())
        config = json.loads((args.run_dir / "resolved-config.json").read_text())
        env = {**os.environ, **stack["llog_env"]}
        topic = topic or config["load"]["topic"]
        partitions = partitions if partitions is not None else config["load"]["partitions"]
    if not topic or not partitions or partitions < 1:
        print("precreate: give --run-dir, or --topic and --partitions (>= 1)", file=sys.stderr)
        return 2
    precreate(env, topic, partitions)
    return 0


if __name__ == "__main__":
    sys.exit(main())
