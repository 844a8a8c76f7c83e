"""The runtime seam (``server/_runtime.py``): nondeterminism enters through it only.

Two halves. The source check parses every module of ``server/_log``,
``server/_compaction`` and ``server/_retry.py`` and fails on any use of
``time``, ``uuid`` or ``random`` (or ``datetime``/``secrets``, the same
thing by other names): a new ``import time`` there would silently make the
simulator's runs of one seed differ. The wiring tests build the parts with a
fake runtime and check that the clock, ids and jitter they use are its, all
the way down to what they build.
"""

from __future__ import annotations

import ast
import random
import uuid
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path

import pytest

import server
from server._compaction.config import CompactorServiceConfig, VacuumConfig
from server._compaction.service import CompactorService
from server._config import BatchConfig, OxiaConfig, S3Config
from server._errors import ConcurrencyConflict
from server._protocol.constants import MAX_CLOCK_SKEW_MS, MIN_SAFE_GRACE_MS, REFERENCE_DEADLINE_MS, VACUUM_GRACE_MS
from server._protocol.keys import LogLayout, TopicPartition
from server._protocol.records import CompactorClaim
from server._retry import Backoff
from server._runtime import REAL_RUNTIME, Runtime, SystemClock, SystemIds
from server._storage.metastore import InMemoryMetadataStore
from server._storage.objectstore import InMemoryObjectStore
from server.leaderless_log_compactor import CompactionOutcome, LeaderlessLogCompactor
from server.leaderless_log_vacuum import Vacuum
from server.leaderless_log_writer import BatchingProducer, LeaderlessLogWriter, SharedAppendGroup

SERVER = Path(server.__file__).parent
SCOPE = sorted([*(SERVER / "_log").rglob("*.py"), *(SERVER / "_compaction").rglob("*.py"), SERVER / "_retry.py"])
FORBIDDEN = {"time", "uuid", "random", "datetime", "secrets"}

OXIA = OxiaConfig("fake:1", root_prefix="llog")
S3 = S3Config("llog")
TP = TopicPartition("orders", 0)


# -- the source check -----------------------------------------------------------------
def direct_uses(source: str) -> list[str]:
    """Every import of, or attribute read on, a FORBIDDEN module, as ``line: what``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [f"{node.lineno}: import {a.name}" for a in node.names if a.name.split(".")[0] in FORBIDDEN]
        elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] in FORBIDDEN:
            found.append(f"{node.lineno}: from {node.module} import ...")
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in FORBIDDEN:
            found.append(f"{node.lineno}: {node.value.id}.{node.attr}")
    return found


@pytest.mark.parametrize("path", SCOPE, ids=lambda p: str(p.relative_to(SERVER)))
def test_no_module_reads_the_clock_ids_or_randomness_directly(path):
    uses = direct_uses(path.read_text())
    assert uses == [], (
        f"{path.relative_to(SERVER.parent)} uses {uses}: take a `runtime: Runtime = REAL_RUNTIME` "
        "(server/_runtime.py) and use runtime.clock / runtime.ids / runtime.rng"
    )


def test_the_scope_is_the_whole_log_and_compaction_packages():
    names = {str(p.relative_to(SERVER)) for p in SCOPE}
    assert {"_retry.py", "_log/writer.py", "_log/producer.py", "_compaction/compactor.py",
            "_compaction/vacuum.py", "_compaction/service.py"} <= names


@pytest.mark.parametrize("snippet", [
    "import time",
    "import time as t",
    "from time import monotonic",
    "import random, os",
    "from uuid import uuid4 as new_id",
    "from datetime import datetime",
    "def f():\n    return time.monotonic()",
    "x: random.Random",
])
def test_the_source_check_catches_every_form(snippet):
    assert direct_uses(snippet)


def test_the_source_check_leaves_the_seam_alone():
    assert direct_uses("from .._runtime import REAL_RUNTIME\nx = self.runtime.clock.monotonic()\n") == []


# -- fakes ----------------------------------------------------------------------------
class FakeClock:
    """A clock that moves only when told; ``sleep`` moves it and is recorded."""

    def __init__(self, now_ms: int = 1_000_000) -> None:
        self.ms = float(now_ms)
        self.slept: list[float] = []

    def now_ms(self) -> int:
        return int(self.ms)

    def monotonic(self) -> float:
        return self.ms / 1000

    perf_counter = monotonic

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.ms += seconds * 1000


class CountingIds:
    """UUIDs 1, 2, 3, ... (as version 4), each remembered in ``issued``."""

    def __init__(self) -> None:
        self.issued: list[uuid.UUID] = []

    def uuid4(self) -> uuid.UUID:
        self.issued.append(uuid.UUID(int=len(self.issued) + 1, version=4))
        return self.issued[-1]


def fake_runtime(clock: FakeClock | None = None) -> Runtime:
    return Runtime(clock=clock or FakeClock(), ids=CountingIds(), rng=random.Random(7))


def ids_in(text: str) -> set[uuid.UUID]:
    """The uuids that appear in ``text`` (a key, a URI, a JSON value)."""
    found = set()
    for word in text.replace("/", " ").replace('"', " ").split():
        try:
            found.add(uuid.UUID(word))
        except ValueError:
            pass
    return found


# -- the real runtime -----------------------------------------------------------------
def test_the_real_runtime_is_the_machines():
    assert isinstance(REAL_RUNTIME.clock, SystemClock) and isinstance(REAL_RUNTIME.ids, SystemIds)
    assert REAL_RUNTIME.rng is random  # the shared generator: reseeded in a forked child
    a, b = REAL_RUNTIME.ids.uuid4(), REAL_RUNTIME.ids.uuid4()
    assert a != b and a.version == 4
    t0 = REAL_RUNTIME.clock.monotonic()
    assert REAL_RUNTIME.clock.monotonic() >= t0
    assert abs(REAL_RUNTIME.clock.now_ms() - SystemClock().now_ms()) < 60_000


def test_spec_constants_keep_their_rule():
    assert MIN_SAFE_GRACE_MS == 2 * (REFERENCE_DEADLINE_MS + MAX_CLOCK_SKEW_MS) <= VACUUM_GRACE_MS
    assert VacuumConfig().grace_ms == VACUUM_GRACE_MS
    assert LeaderlessLogWriter(OXIA, S3, metadata_store=InMemoryMetadataStore(),
                               object_store=InMemoryObjectStore()).max_reference_age_ms == REFERENCE_DEADLINE_MS


# -- Backoff --------------------------------------------------------------------------
def test_backoff_takes_its_start_deadline_sleep_and_jitter_from_its_runtime():
    clock = FakeClock()
    runtime = Runtime(clock=clock, ids=CountingIds(), rng=random.Random(3))
    backoff = Backoff(max_elapsed_ms=1_000, runtime=runtime)
    assert backoff.started_at == clock.monotonic()
    expected = random.Random(3)
    delays = []
    for attempt in range(1, 5):
        backoff = backoff.next()
        cap_ms = min(backoff.max_ms, backoff.initial_ms * 2 ** (attempt - 1))
        assert backoff.delay_s == expected.uniform(0, cap_ms) / 1000
        backoff.sleep()
        delays.append(backoff.delay_s)
    assert clock.slept == [d for d in delays if d > 0]
    assert backoff.runtime is runtime and backoff.started_at == 1_000.0  # next() keeps both
    assert not backoff.exhausted
    clock.ms += 1_000
    assert backoff.exhausted  # the elapsed budget runs on the runtime's clock


def test_backoff_without_a_runtime_uses_the_real_one():
    backoff = Backoff()
    assert backoff.runtime is REAL_RUNTIME
    assert abs(backoff.started_at - REAL_RUNTIME.clock.monotonic()) < 60


# -- the writer and producer ---------------------------------------------------------------
def test_writer_names_and_dates_its_blob_from_the_runtime_and_ages_it_on_that_clock():
    clock = FakeClock(now_ms=5_000_000)
    runtime = fake_runtime(clock)
    meta, objs = InMemoryMetadataStore(), InMemoryObjectStore()
    with LeaderlessLogWriter(OXIA, S3, metadata_store=meta, object_store=objs, runtime=runtime) as w:
        w.initialize_partition("orders", 0)
        staged = w.stage_shared([SharedAppendGroup("orders", 0, [b"a"])])
        (template,) = staged.templates
        assert template.created_at_ms == 5_000_000
        blob_id, append_id = runtime.ids.issued
        assert ids_in(template.data_key) == {blob_id} and template.append_id == str(append_id)
        clock.ms += REFERENCE_DEADLINE_MS + 1  # the commit comes too late (SPEC 7.0 D)
        (result,) = w.commit_staged(staged)
        assert isinstance(result.error, ConcurrencyConflict)
        (ok,) = w.append_shared([SharedAppendGroup("orders", 0, [b"b"])])
        assert ok.start_offset == 1


def test_producer_lingers_on_its_runtimes_clock():
    clock = FakeClock()
    runtime = fake_runtime(clock)
    meta, objs = InMemoryMetadataStore(), InMemoryObjectStore()
    writer = LeaderlessLogWriter(OXIA, S3, metadata_store=meta, object_store=objs, runtime=runtime)
    with BatchingProducer(writer, BatchConfig(max_delay_ms=50), owns_writer=True, runtime=runtime) as producer:
        future = producer.submit([SharedAppendGroup("orders", 0, [b"x"])])
        with pytest.raises(FutureTimeout):
            future.result(timeout=0.3)  # the runtime's clock stands still: not due yet
        with producer._cond:
            clock.ms += 50
            producer._cond.notify_all()
        (result,) = future.result(timeout=10)
        assert result.error is None and result.start_offset == 1


# -- compaction ---------------------------------------------------------------------------
def test_compactor_names_its_work_from_the_runtime_and_hands_it_to_its_reader():
    clock = FakeClock(now_ms=7_000_000)
    runtime = fake_runtime(clock)
    meta, objs = InMemoryMetadataStore(), InMemoryObjectStore()
    with LeaderlessLogWriter(OXIA, S3, metadata_store=meta, object_store=objs, runtime=runtime) as w:
        w.initialize_partition("orders", 0)
        w.append_shared([SharedAppendGroup("orders", 0, [b"a", b"b"])])
    issued = len(runtime.ids.issued)
    steps: list[str] = []

    def hook(step: str) -> None:
        if step == "record_created":
            rec = meta.get(keys.compaction, keys.partition_key)
            steps.append(rec.value.decode())

    keys = LogLayout("llog").keys(TP)
    with LeaderlessLogCompactor(OXIA, S3, metadata_store=meta, object_store=objs, runtime=runtime,
                                step_hook=hook) as c:
        assert c._reader.runtime is runtime
        result = c.compact_once("orders", 0)
    assert result.outcome is CompactionOutcome.COMPACTED
    object_id, compaction_id = runtime.ids.issued[issued:]
    assert ids_in(result.data_key) == {object_id}
    (record,) = steps
    assert ids_in(record) == {object_id, compaction_id} and '"created_at_ms":7000000' in record


def test_compactor_abandons_an_object_older_than_d_on_its_runtimes_clock():
    clock = FakeClock()
    runtime = fake_runtime(clock)
    meta, objs = InMemoryMetadataStore(), InMemoryObjectStore()
    with LeaderlessLogWriter(OXIA, S3, metadata_store=meta, object_store=objs, runtime=runtime) as w:
        w.initialize_partition("orders", 0)
        w.append_shared([SharedAppendGroup("orders", 0, [b"a"])])

    class SlowPut(InMemoryObjectStore):
        def put(self, bucket, key, data):
            clock.ms += REFERENCE_DEADLINE_MS + 1
            objs.put(bucket, key, data)

        def get(self, *args, **kwargs):
            return objs.get(*args, **kwargs)

    with LeaderlessLogCompactor(OXIA, S3, metadata_store=meta, object_store=SlowPut(), runtime=runtime) as c:
        assert c.compact_once("orders", 0).outcome is CompactionOutcome.ABANDONED


def test_vacuum_ages_objects_on_its_runtimes_clock():
    clock = FakeClock(now_ms=0)
    meta, objs = InMemoryMetadataStore(), InMemoryObjectStore()
    objs.put("llog", "llog/orders/partitions/0/data/compacted/x", b"orphan")  # LastModified 1 ms
    with Vacuum(OXIA, S3, grace_ms=MIN_SAFE_GRACE_MS, metadata_store=meta, object_store=objs,
                runtime=fake_runtime(clock)) as v:
        clock.ms = MIN_SAFE_GRACE_MS
        assert v.run_once().deleted == ()
        clock.ms = MIN_SAFE_GRACE_MS + 2
        assert [d.key for d in v.run_once().deleted] == ["llog/orders/partitions/0/data/compacted/x"]


def test_compactor_service_builds_every_part_with_its_runtime():
    clock = FakeClock(now_ms=9_000_000)
    runtime = fake_runtime(clock)
    meta, objs = InMemoryMetadataStore(), InMemoryObjectStore()
    config = CompactorServiceConfig(compactor_id="me", port=0, targets=(TP,), workers=1, discovery_interval_ms=0,
                                    vacuum=VacuumConfig(interval_ms=0, grace_ms=MIN_SAFE_GRACE_MS))
    with LeaderlessLogWriter(OXIA, S3, metadata_store=meta, object_store=objs) as w:
        w.initialize_partition("orders", 0)
    keys = LogLayout("llog").keys(TP)
    claims: list[CompactorClaim] = []

    class Watching(InMemoryMetadataStore):
        def put(self, key, value, partition_key, expected_version=None, ephemeral=False):
            if key == keys.compactor_claim:
                claims.append(CompactorClaim.decode(value))
            return meta.put(key, value, partition_key, expected_version=expected_version, ephemeral=ephemeral)

        def __getattr__(self, name):
            return getattr(meta, name)

    with CompactorService(config, OXIA, S3, metadata_store=Watching(), object_store=objs, serve_http=False,
                          runtime=runtime) as svc:
        assert svc.started_at_ms == 9_000_000
        assert svc._default_compactor().runtime is runtime
        assert svc._default_vacuum().runtime is runtime
        svc.attempt(TP)
    assert [c.claimed_at_ms for c in claims] == [9_000_000]
