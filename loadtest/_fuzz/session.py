"""One fuzz run end to end: warm-up, baseline, the run, settle, read-back, report.

``run_fuzz(targets, options)`` is what ``python -m loadtest.fuzz_http`` and
the integration test call; it returns a :class:`Report` whose ``failures``
list every check that failed.
"""

from __future__ import annotations

import json
import random
import sys
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, TextIO

from server.client import ensure_topic, parse_broker_list
from . import wire
from .checks import ProcessWatch
from .ledger import Ledger
from .requests import Ctx, check_binary_encoding, http_request, marker_re
from .runner import Runner, Settings, Target, read_partition

__all__ = ["Options", "Report", "run_fuzz"]


@dataclass(frozen=True)
class Options:
    requests: int
    seed: int
    read_timeout_s: float
    """The services' HTTP read timeout (a stalled sender must be gone by then)."""
    warmup_requests: int = 400
    workers: int = 8
    partitions: int = 4
    rss_tolerance_mib: float = 32.0
    fd_tolerance: int = 8
    settle_timeout_s: float = 30.0
    nonce: str = field(default_factory=lambda: uuid.uuid4().hex[:6])
    """Names this run's topic and markers (fixed length, so the cases depend on the seed alone)."""


@dataclass
class Report:
    seed: int
    topic: str
    requests: int
    warmup_requests: int
    elapsed_s: float
    by_status: dict[str, int]
    by_kind: dict[str, dict[str, int]]
    health_probes: int
    resources: dict[str, Any]
    storage: dict[str, int]
    failures: list[str]

    @property
    def ok(self) -> bool:
        return not self.failures

    def render(self, max_failures: int = 40) -> str:
        lines = [f"fuzz run: seed {self.seed}, topic {self.topic}, {self.requests} requests "
                 f"(+{self.warmup_requests} warm-up) in {self.elapsed_s:.0f} s, {self.health_probes} health probes"]
        lines.append("requests per status: " + ", ".join(f"{k} {v}" for k, v in sorted(self.by_status.items())))
        lines.append("requests per mutation kind:")
        width = max((len(k) for k in self.by_kind), default=4)
        for kind, statuses in sorted(self.by_kind.items()):
            detail = ", ".join(f"{k} {v}" for k, v in sorted(statuses.items()))
            lines.append(f"  {kind:<{width}}  {sum(statuses.values()):>6}  ({detail})")
        for name, res in self.resources.items():
            lines.append(f"{name}: baseline {res['baseline']}, after {res['after']}, settled {res['settled']}")
        lines.append("storage: " + ", ".join(f"{k} {v}" for k, v in sorted(self.storage.items())))
        lines.append(f"checks: {'all passed' if self.ok else f'{len(self.failures)} failed'}")
        lines += [f"  FAIL {f}" for f in self.failures[:max_failures]]
        if len(self.failures) > max_failures:
            lines.append(f"  ... and {len(self.failures) - max_failures} more")
        return "\n".join(lines)


def _limits(broker: Target) -> tuple[int, int]:
    """(max_request_bytes, max_records_per_request) from the broker's /metrics info."""
    out = wire.exchange(broker.addr, http_request("GET", "/metrics"), [False], 30.0)
    info = json.loads(out.answers[0].body)["info"]
    return int(info["max_request_bytes"]), int(info["max_records_per_request"])


def _watches(targets: dict[str, Target], options: Options) -> list[ProcessWatch]:
    return [ProcessWatch(t.name, t.pid, rss_tolerance_bytes=int(options.rss_tolerance_mib * 2**20),
                         fd_tolerance=options.fd_tolerance, own_ports=(t.port,))
            for t in targets.values() if t.pid is not None]


def run_fuzz(targets: dict[str, Target], options: Options, log: TextIO = sys.stderr) -> Report:
    started = time.monotonic()
    broker = targets["broker"]
    max_bytes, max_records = _limits(broker)
    topic = f"fuzz-{options.seed}-{options.nonce}"
    ensure_topic(parse_broker_list(f"http://{broker.host}:{broker.port}"), topic, options.partitions)
    ctx = Ctx(options.nonce, topic, options.partitions, max_bytes, max_records)
    check_binary_encoding(random.Random(options.seed), Ctx(options.nonce, topic, options.partitions, max_bytes, max_records))
    ledger = Ledger(marker_re(options.nonce), max_records=max_records, max_request_bytes=max_bytes,
                    topics={topic: options.partitions})
    settings = Settings(read_timeout_s=options.read_timeout_s, workers=options.workers,
                        burst=max(100, min(500, options.requests // 10)))
    runner = Runner(settings, targets, ctx, ledger, log)
    print(f"[fuzz] seed {options.seed}, topic {topic}, broker {broker.host}:{broker.port}, compactor "
          f"{targets['compactor'].host}:{targets['compactor'].port}, read timeout {options.read_timeout_s:g} s",
          file=log, flush=True)

    runner.run(random.Random(f"{options.seed}-warm-up"), options.warmup_requests, "warm-up")
    warmup = runner.tally.requests
    watches = _watches(targets, options)
    baselines = {w.name: w.take_baseline() for w in watches}
    runner.tally.by_status.clear()
    runner.tally.by_kind.clear()
    runner.tally.requests = 0

    runner.run(random.Random(options.seed), options.requests)
    failures = [f.describe() for f in runner.tally.failures]
    resources: dict[str, Any] = {}
    for w in watches:
        settled, now = w.settle(options.settle_timeout_s)
        resources[w.name] = {"baseline": baselines[w.name].to_json(), "after": now.to_json(), "settled": settled}
        if not settled:
            failures.append(f"{w.name}: RSS and open fds did not return within {options.rss_tolerance_mib:g} MiB / "
                            f"{options.fd_tolerance} (outbound connections: {w.pool_tolerance}) of the baseline "
                            f"in {options.settle_timeout_s:g} s: "
                            f"{baselines[w.name].to_json()} -> {now.to_json()}")
    print(f"[fuzz] reading back {len(ledger.touched)} partitions ...", file=log, flush=True)
    failures += ledger.verify(lambda t, p: read_partition(broker, t, p))
    return Report(
        seed=options.seed, topic=topic, requests=runner.tally.requests, warmup_requests=warmup,
        elapsed_s=time.monotonic() - started, by_status=dict(runner.tally.by_status),
        by_kind={k: dict(v) for k, v in runner.tally.by_kind.items()}, health_probes=runner.tally.health_probes,
        resources=resources, storage=ledger.summary(), failures=failures,
    )
