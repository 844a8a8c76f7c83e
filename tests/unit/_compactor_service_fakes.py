"""The compactor service over the in-memory fakes: a scripted compactor, the
config and service builders, and a filled log. Shared by the
test_compactor_*.py modules that test the service's parts."""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import replace

from server._compaction.config import CompactorServiceConfig, VacuumConfig
from server._config import OxiaConfig, S3Config
from server._protocol.keys import TopicPartition
from server._protocol.records import CompactionCursor
from server.leaderless_log_compactor import CompactionOutcome, CompactionResult
from server.leaderless_log_compactor_server import CompactorService
from server.leaderless_log_metrics import LlogMetrics
from server.leaderless_log_writer import LeaderlessLogWriter, SharedAppendGroup

OXIA = OxiaConfig("fake:1", root_prefix="llog")
S3 = S3Config("llog")
A = TopicPartition("orders", 0)
B = TopicPartition("orders", 1)


def claim_key(tp: TopicPartition) -> str:
    return f"llog/{tp.topic}/partitions/{tp.partition}/meta/compactor-claim"


def result(tp: TopicPartition, outcome: CompactionOutcome, lag: int = 0) -> CompactionResult:
    return CompactionResult(tp.topic, tp.partition, outcome, high_watermark=lag, cursor=1)


class FakeCompactor:
    """Answers ``compact_once`` from a per-log script; records concurrency."""

    def __init__(self, behaviour=None, delay_s: float = 0.0) -> None:
        self.behaviour = behaviour or (lambda tp: result(tp, CompactionOutcome.NOTHING_TO_DO))
        self.delay_s = delay_s
        self.calls: Counter[TopicPartition] = Counter()
        self.running: Counter[TopicPartition] = Counter()
        self.max_running: Counter[TopicPartition] = Counter()
        self.lock = threading.Lock()
        self.closed = 0

    def compact_once(self, topic, partition, max_offsets=None):
        tp = TopicPartition(topic, partition)
        with self.lock:
            self.calls[tp] += 1
            self.running[tp] += 1
            self.max_running[tp] = max(self.max_running[tp], self.running[tp])
        try:
            if self.delay_s:
                time.sleep(self.delay_s)
            return self.behaviour(tp)
        finally:
            with self.lock:
                self.running[tp] -= 1

    def close(self):
        self.closed += 1


def config(**kw) -> CompactorServiceConfig:
    base = CompactorServiceConfig(
        compactor_id="me", port=0, targets=(A, B), workers=2, discovery_interval_ms=0,
        idle_sleep_ms=0, error_sleep_ms=0, idle_jitter_ms=0, error_jitter_ms=0,
        shutdown_timeout_ms=5_000, vacuum=VacuumConfig(interval_ms=0), max_delay_ms=0,
    )
    return replace(base, **kw)


def service(meta, objs, compactor=None, serve_http=False, **kw) -> CompactorService:
    fake = compactor or FakeCompactor()
    factory = kw.pop("compactor_factory", lambda: fake)
    metrics = kw.pop("metrics", None) or LlogMetrics()
    return CompactorService(
        config(**kw), OXIA, S3, metrics=metrics, metadata_store=meta, object_store=objs,
        compactor_factory=factory, serve_http=serve_http,
    )


def wait_for(cond, timeout=5.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


def fill(meta, objs, tps, batches=3):
    with LeaderlessLogWriter(OXIA, S3, metadata_store=meta, object_store=objs) as w:
        for tp in tps:
            w.initialize_partition(tp.topic, tp.partition)
        for b in range(batches):
            w.append_shared([SharedAppendGroup(tp.topic, tp.partition, [f"{tp}-{b}".encode()]) for tp in tps])


def cursor(meta, tp) -> int:
    rec = meta.get(f"llog/{tp.topic}/partitions/{tp.partition}/meta/compaction-cursor", str(tp))
    return CompactionCursor.decode(rec.value).offset


def real_service(meta, objs, **kw) -> CompactorService:
    return CompactorService(
        config(**kw), OXIA, S3, metadata_store=meta, object_store=objs, serve_http=False,
    )
