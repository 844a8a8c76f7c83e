"""Vacuum against the real Oxia and S3 (SPEC 7.9).

Objects are made "old" with a small grace period (0-1000 ms) or a vacuum
clock that runs ahead, rather than by waiting; the one-shot command is run
as a real process.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from server._config import OxiaConfig, S3Config
from server._protocol.codec import encode_batch, encode_shared_blob
from server._protocol.keys import LogLayout
from server._storage.objectstore import S3ObjectStore
from server.leaderless_log_compactor import CompactionOutcome, LeaderlessLogCompactor
from server.leaderless_log_metrics import LlogMetrics
from server.leaderless_log_vacuum import KEEP_INDEXED, KEEP_YOUNG, Vacuum
from server.leaderless_log_writer import SharedAppendGroup

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]


class Crash(Exception):
    pass


@pytest.fixture
def s3(llog_env):
    store = S3ObjectStore(S3Config.from_env(llog_env))
    yield store
    store.close()


def vacuum(llog_env, grace_ms: int, **kw) -> Vacuum:
    kw.setdefault("allow_unsafe_grace", True)  # each test's writes are done before vacuum runs
    return Vacuum.from_env(llog_env, grace_ms=grace_ms, **kw)


def clock_ahead(ms: int):
    """A vacuum clock ``ms`` ahead of the real one: every object looks that much older."""
    return lambda: int(time.time() * 1000) + ms


def compact(llog_env, topic: str, partition: int, **kw):
    """One compaction run, then the next run on the now idle log: the writer
    left its last pending in meta/control (SPEC 7.3), and it pins its blob
    until that run clears it (7.7 K1). Returns the first run's result."""
    with LeaderlessLogCompactor.from_env(llog_env, **kw) as c:
        first = c.compact_once(topic, partition)
        c.compact_once(topic, partition)
        return first


def object_keys(s3, llog_env, part: str = "") -> set[str]:
    root = llog_env["LLOG_ROOT_PREFIX"]
    return {o.key for o in s3.list(llog_env["LLOG_S3_BUCKET"], f"{root}/") if part in o.key}


def payloads(reader, topic, partition):
    return [r.payload for r in reader.iter_from(topic, partition, 1)]


def two_partition_blob(writer, s3, llog_env) -> str:
    for p in (0, 1):
        writer.initialize_partition("orders", p)
    writer.append_shared([SharedAppendGroup("orders", 0, [b"a", b"b"]), SharedAppendGroup("orders", 1, [b"c"])])
    (blob,) = object_keys(s3, llog_env, "/wal-shared/")
    return blob


def test_blob_is_deleted_after_every_partition_in_it_is_compacted(writer, reader, s3, llog_env):
    blob = two_partition_blob(writer, s3, llog_env)
    assert compact(llog_env, "orders", 0).outcome == CompactionOutcome.COMPACTED
    assert compact(llog_env, "orders", 1).outcome == CompactionOutcome.COMPACTED
    metrics = LlogMetrics()
    with vacuum(llog_env, 0, metrics=metrics) as v:
        report = v.run_once()
    assert report.deleted_keys == (blob,)
    assert report.bytes_reclaimed > 0 and report.errors == ()
    assert report.kept == {KEEP_INDEXED: 2}  # the two compacted objects
    assert blob not in object_keys(s3, llog_env)
    assert len(object_keys(s3, llog_env, "/data/compacted/")) == 2
    assert payloads(reader, "orders", 0) == [b"a", b"b"]
    assert payloads(reader, "orders", 1) == [b"c"]
    # the header was read with two ranged GETs, and the delete went through
    assert metrics.counter("s3_operations_total", op="range_get") == 2
    assert metrics.counter("s3_operations_total", op="delete") == 1


def test_blob_with_one_uncompacted_slice_survives(writer, reader, s3, llog_env):
    blob = two_partition_blob(writer, s3, llog_env)
    compact(llog_env, "orders", 0)
    with vacuum(llog_env, 0) as v:
        report = v.run_once()
    assert report.deleted == ()
    assert report.kept == {KEEP_INDEXED: 2}
    assert blob in object_keys(s3, llog_env)
    assert payloads(reader, "orders", 1) == [b"c"]
    compact(llog_env, "orders", 1)
    with vacuum(llog_env, 0) as v:
        assert v.run_once().deleted_keys == (blob,)
    assert payloads(reader, "orders", 0) == [b"a", b"b"]
    assert payloads(reader, "orders", 1) == [b"c"]


def test_fresh_orphan_younger_than_the_grace_period_survives(s3, llog_env):
    bucket, root = llog_env["LLOG_S3_BUCKET"], llog_env["LLOG_ROOT_PREFIX"]
    orphan = f"{root}/wal-shared/{uuid.uuid4()}"  # as left by an append that crashed after its PUT
    blob, _ = encode_shared_blob([("orders", 0, 1, encode_batch([b"x"]))], int(time.time() * 1000))
    s3.put(bucket, orphan, blob)
    with vacuum(llog_env, 60_000) as v:
        report = v.run_once()
    assert report.kept == {KEEP_YOUNG: 1} and report.deleted == ()
    assert orphan in object_keys(s3, llog_env)
    with vacuum(llog_env, 0) as v:
        report = v.run_once()
    assert report.deleted_keys == (orphan,)
    assert report.bytes_reclaimed == len(blob)
    assert object_keys(s3, llog_env) == set()


def test_compacted_orphan_is_deleted_after_grace_and_dry_run_changes_nothing(writer, reader, s3, llog_env):
    writer.initialize_partition("orders", 0)
    writer.append_shared([SharedAppendGroup("orders", 0, [b"a", b"b"])])

    def crash(step):
        if step == "blob_written":
            raise Crash(step)  # a compactor dying between K4 and K5

    with pytest.raises(Crash):
        compact(llog_env, "orders", 0, step_hook=crash)
    (orphan,) = object_keys(s3, llog_env, "/data/compacted/")
    with vacuum(llog_env, 60_000) as v:
        assert v.run_once().kept == {KEEP_YOUNG: 2}  # the WAL blob and the orphan

    a_minute_later = clock_ahead(61_000)
    before = object_keys(s3, llog_env)
    with vacuum(llog_env, 60_000, now_ms=a_minute_later) as v:
        dry = v.run_once(dry_run=True)
    assert dry.dry_run and dry.deleted_keys == (orphan,) and dry.deleted[0].kind == "compacted"
    assert dry.deleted[0].age_ms >= 60_000
    assert object_keys(s3, llog_env) == before
    with vacuum(llog_env, 60_000, now_ms=a_minute_later) as v:
        real = v.run_once()
    assert (real.deleted_keys, real.bytes_reclaimed, real.kept) == (dry.deleted_keys, dry.bytes_reclaimed, dry.kept)
    assert object_keys(s3, llog_env) == before - {orphan}
    assert payloads(reader, "orders", 0) == [b"a", b"b"]
    # and the log still compacts normally afterwards
    assert compact(llog_env, "orders", 0).outcome == CompactionOutcome.COMPACTED
    assert payloads(reader, "orders", 0) == [b"a", b"b"]


def test_redundant_wal_entry_is_deleted_and_its_blob_freed(writer, reader, s3, llog_env):
    """A late materialization re-creates a WAL entry below the cursor (SPEC 7.2);
    vacuum removes it, so it no longer keeps its shared blob alive."""
    from server._storage.metastore import OxiaMetadataStore

    writer.initialize_partition("orders", 0)
    writer.append_shared([SharedAppendGroup("orders", 0, [b"a"])])
    keys = LogLayout(llog_env["LLOG_ROOT_PREFIX"]).partition("orders", 0)
    meta = OxiaMetadataStore(OxiaConfig.from_env(llog_env))
    try:
        first = meta.get(keys.index(1), keys.partition_key)
        writer.append_shared([SharedAppendGroup("orders", 0, [b"b"])])
        compact(llog_env, "orders", 0)
        meta.put(first.key, first.value, keys.partition_key, expected_version=-1)
        with vacuum(llog_env, 0) as v:
            report = v.run_once()
        assert report.redundant_entries == (first.key,)
        assert meta.get(first.key, keys.partition_key) is None
    finally:
        meta.close()
    assert len(report.deleted) == 2 and {d.kind for d in report.deleted} == {"wal-shared"}
    assert object_keys(s3, llog_env, "/wal-shared/") == set()
    assert payloads(reader, "orders", 0) == [b"a", b"b"]


def run_cli(llog_env, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "server.leaderless_log_vacuum", *args],
        env={**os.environ, **llog_env, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=60,
    )


def test_command_line_dry_run_then_real_run(writer, reader, s3, llog_env):
    blob = two_partition_blob(writer, s3, llog_env)
    compact(llog_env, "orders", 0)
    compact(llog_env, "orders", 1)
    size = next(o.size for o in s3.list(llog_env["LLOG_S3_BUCKET"], blob))

    dry = run_cli(llog_env, "--dry-run", "--grace-ms", "0", "--allow-unsafe-grace")
    assert dry.returncode == 0, dry.stderr
    assert f"would delete s3://{llog_env['LLOG_S3_BUCKET']}/{blob}  {size} B" in dry.stdout
    assert f"would delete 1 objects, {size} bytes" in dry.stdout
    assert blob in object_keys(s3, llog_env)

    young = run_cli(llog_env)  # default grace: one hour
    assert young.returncode == 0 and "deleted 0 objects, 0 bytes" in young.stdout and "young=3" in young.stdout

    real = run_cli(llog_env, "--grace-ms", "0", "--allow-unsafe-grace")
    assert real.returncode == 0, real.stderr
    assert f"deleted s3://{llog_env['LLOG_S3_BUCKET']}/{blob}" in real.stdout
    assert f"deleted 1 objects, {size} bytes" in real.stdout
    assert blob not in object_keys(s3, llog_env)
    assert payloads(reader, "orders", 0) == [b"a", b"b"]

    help_ = run_cli(llog_env, "--help")
    assert help_.returncode == 0 and "--dry-run" in help_.stdout
