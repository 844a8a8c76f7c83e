"""Redundant WAL entries inside compacted ranges (SPEC 8.2, O3) on real Oxia + S3.

First the interleaving that produced them, reproduced with the real writer,
compactor and reader by pausing one writer thread between its reservation
and its own index create; then a redundant entry left in place (as a crash
before the writer's clean-up leaves it) read through every path: the
library, ``/consume`` with and without the tail cache, and the Spark batch
and streaming sources.
"""

from __future__ import annotations

import threading
import uuid
from pathlib import Path

import pytest

from server._protocol.records import IndexEntry
from server._storage.metastore import EXPECT_ABSENT, OxiaMetadataStore
from server.leaderless_log_compactor import CompactionOutcome, LeaderlessLogCompactor
from server.leaderless_log_reader import LeaderlessLogReader, stored
from server.leaderless_log_writer import LeaderlessLogWriter, SharedAppendGroup

from ._spark_helpers import llog_options, spark  # noqa: F401

pytestmark = pytest.mark.integration


class PausingOxia:
    """An Oxia metadata store whose first index put from one named thread
    waits until released (everything else passes straight through)."""

    def __init__(self, inner: OxiaMetadataStore, thread_name: str) -> None:
        self._inner = inner
        self._thread_name = thread_name
        self._armed = True
        self.reached = threading.Event()
        self.release = threading.Event()

    def put(self, key, value, partition_key, expected_version=None, ephemeral=False):
        if self._armed and "/index/" in key and threading.current_thread().name == self._thread_name:
            self._armed = False
            self.reached.set()
            assert self.release.wait(30), "the test never released the paused writer"
        return self._inner.put(key, value, partition_key, expected_version, ephemeral)

    def __getattr__(self, name):
        return getattr(self._inner, name)


def index_of(reader: LeaderlessLogReader, topic: str) -> list[tuple[int, int, str]]:
    keys = reader.layout.partition(topic, 0)
    out = []
    for rec in reader._meta.range_scan(keys.index_prefix, keys.index_end, keys.partition_key):
        end = keys.index_offset(rec.key)
        entry = IndexEntry.decode(rec.value)
        out.append((entry.start_offset(end), end, entry.type))
    return out


def library_reads(reader: LeaderlessLogReader, topic: str, want: list[bytes]) -> None:
    n = len(want)
    assert [reader.read_offset(topic, 0, o).payload for o in range(1, n + 1)] == want
    assert [r.payload for r in reader.read_range(topic, 0, 1, n)] == want
    for start in (1, 2, n // 2, n):
        assert [r.payload for r in reader.iter_from(topic, 0, start)] == want[start - 1:]
    runs = list(reader.iter_runs(topic, 0, 1, decode=stored))
    assert sum(run.count for run in runs) == n and runs[-1].last == n


def test_a_stalled_writer_on_real_stores_leaves_every_offset_readable(llog_env, oxia_config) -> None:
    topic = f"o3-{uuid.uuid4().hex[:8]}"
    paused = PausingOxia(OxiaMetadataStore(oxia_config), "writer-A")
    with LeaderlessLogWriter.from_env(llog_env) as setup:
        setup.initialize_partition(topic, 0)
        setup.append_shared([SharedAppendGroup(topic, 0, [b"a", b"b"])])
    writer_a = LeaderlessLogWriter.from_env(llog_env, metadata_store=paused)
    result: dict = {}
    thread = threading.Thread(
        target=lambda: result.update(r=writer_a.append_shared_results([SharedAppendGroup(topic, 0, [b"A1", b"A2"])])),
        name="writer-A",
    )
    thread.start()
    try:
        assert paused.reached.wait(30), "writer A never reached its index create"
        with LeaderlessLogWriter.from_env(llog_env) as writer_b:
            writer_b.append_shared([SharedAppendGroup(topic, 0, [b"B1"])])  # materializes A's pending
        with LeaderlessLogCompactor.from_env(llog_env) as compactor:
            assert compactor.compact_once(topic, 0).outcome is CompactionOutcome.COMPACTED
    finally:
        paused.release.set()
        thread.join(30)
        writer_a.close()
        paused._inner.close()
    (res,) = result["r"]
    assert res.ok and (res.start_offset, res.end_offset) == (3, 4)
    with LeaderlessLogReader.from_env(llog_env) as reader:
        assert index_of(reader, topic) == [(1, 5, "COMPACTED")], "the late create must be undone"
        library_reads(reader, topic, [b"a", b"b", b"A1", b"A2", b"B1"])


def leave_redundant_entry(llog_env, topic: str, produce) -> list[bytes]:
    """Six batches through ``produce``, compaction of the first twelve
    offsets, then the WAL entry of batch 7..9 put back create-if-absent, as a
    late materializer that crashed before its clean-up leaves it."""
    want = []
    for b in range(6):
        batch = [f"{b}.{i}".encode() for i in range(3)]
        produce(batch)
        want += batch
    with LeaderlessLogReader.from_env(llog_env) as reader:
        keys = reader.layout.partition(topic, 0)
        stale = reader._meta.get(keys.index(9), keys.partition_key)
        assert stale is not None
    with LeaderlessLogCompactor.from_env(llog_env, max_offsets_per_run=12) as compactor:
        assert compactor.compact_once(topic, 0).end_offset == 12
    with LeaderlessLogReader.from_env(llog_env) as reader:
        reader._meta.put(keys.index(9), stale.value, keys.partition_key, expected_version=EXPECT_ABSENT)
        assert index_of(reader, topic) == [(7, 9, "WAL"), (1, 12, "COMPACTED"), (13, 15, "WAL"), (16, 18, "WAL")]
    return want


@pytest.mark.parametrize("cache", ["memory", "off"])
def test_consume_and_the_library_read_past_a_redundant_entry(llog_env, broker_factory, cache) -> None:
    topic = f"o3c-{uuid.uuid4().hex[:8]}"
    env = {"LLOG_TAIL_CACHE_MAX_BYTES": "0"} if cache == "off" else {}
    broker = broker_factory(env=env)
    assert broker.info["tail_cache"] == cache

    def produce(batch: list[bytes]) -> None:
        reply = broker.client.produce([{"topic": topic, "partition": 0, "records": [v.decode() for v in batch]}])
        assert reply.status == 200, reply.body

    want = leave_redundant_entry(llog_env, topic, produce)
    with LeaderlessLogReader.from_env(llog_env) as reader:
        library_reads(reader, topic, want)
    for start in (1, 2, 10, 13):
        got = broker.client.consume_all(topic, 0, start=start)
        assert got == [(o, want[o - 1]) for o in range(start, len(want) + 1)]


def test_spark_batch_and_stream_read_past_a_redundant_entry(spark, llog_env, tmp_path: Path) -> None:  # noqa: F811
    topic = f"o3s-{uuid.uuid4().hex[:8]}"
    with LeaderlessLogWriter.from_env(llog_env) as w:
        w.initialize_partition(topic, 0)
        want = leave_redundant_entry(llog_env, topic, lambda batch: w.append_shared([SharedAppendGroup(topic, 0, batch)]))

    options = {**llog_options(llog_env), "topic": topic}
    rows = spark.read.format("llog").options(**options, maxRecordsPerPartition="4").load().collect()
    assert sorted((r.offset, r.value) for r in rows) == [(o, want[o - 1]) for o in range(1, len(want) + 1)]

    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    query = (
        spark.readStream.format("llog").options(**options).option("startingOffsets", "earliest")
        .option("maxRecordsPerTrigger", "5").load()
        .writeStream.format("parquet").option("checkpointLocation", str(ckpt)).option("path", str(out))
        .trigger(availableNow=True).start()
    )
    assert query.awaitTermination(120)
    assert query.exception() is None
    streamed = spark.read.parquet(str(out)).collect()
    assert sorted((r.offset, r.value) for r in streamed) == [(o, want[o - 1]) for o in range(1, len(want) + 1)]
