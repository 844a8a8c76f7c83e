"""Arrow record batches built from stored batches (server/spark/_arrow_records.py)
and the worker heap freeze (server/spark/_worker_heap.py), over the fakes."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pytest

from server._config import OxiaConfig, S3Config
from server._errors import InconsistentReadState
from server._log.reader import stored
from server._protocol.kafka_batch import Record
from server._protocol.stored_batches import StoredBatches
from server._storage.metastore import InMemoryMetadataStore
from server._storage.objectstore import InMemoryObjectStore
from server.leaderless_log_reader import LeaderlessLogReader, RecordRun
from server.leaderless_log_writer import LeaderlessLogWriter, SharedAppendGroup
from server.spark import _worker_heap
from server.spark._arrow_records import HEADERS_SCHEMA, SCHEMA, arrow_schema, record_batches, row_bytes

OXIA = OxiaConfig("fake:1", root_prefix="llog")
S3 = S3Config("llog")


def _payload(i: int) -> bytes:
    return f"record-{i}|".encode() * (i % 5)  # lengths vary, some empty


@pytest.fixture
def log():
    """Topic "t" partition 0 holding 1..60 in stored batches of 1, 7, 30, 2, 20 records,
    and partition 1 holding one record of 100 kB."""
    meta, objs = InMemoryMetadataStore(), InMemoryObjectStore()
    with LeaderlessLogWriter(OXIA, S3, metadata_store=meta, object_store=objs) as w, \
            LeaderlessLogReader(OXIA, S3, metadata_store=meta, object_store=objs) as r:
        w.initialize_partition("t", 0)
        w.initialize_partition("t", 1)
        n = 1
        for size in (1, 7, 30, 2, 20):
            w.append_shared([SharedAppendGroup("t", 0, [_payload(i) for i in range(n, n + size)])])
            n += size
        w.append_shared([SharedAppendGroup("t", 1, [b"x" * 100_000])])
        yield r


def _read(reader, start, end, partition=0, **limits):
    runs = reader.iter_runs("t", partition, start, end, decode=stored)
    return list(record_batches(runs, "t", partition, start, end, **limits))


@pytest.mark.parametrize("start,end", [(1, 60), (1, 1), (5, 40), (9, 38), (60, 60), (2, 59)])
@pytest.mark.parametrize("limits", [dict(max_records=10_000, max_bytes=8 << 20), dict(max_records=3, max_bytes=1 << 20),
                                    dict(max_records=1000, max_bytes=64), dict(max_records=7, max_bytes=300)])
def test_batches_hold_exactly_the_range_in_order(log, start, end, limits):
    batches = _read(log, start, end, **limits)
    assert all(b.schema == SCHEMA for b in batches)
    table = pa.Table.from_batches(batches, SCHEMA)
    assert table.column("offset").to_pylist() == list(range(start, end + 1))
    assert table.column("value").to_pylist() == [_payload(i) for i in range(start, end + 1)]
    assert set(table.column("topic").to_pylist()) == {"t"}
    assert set(table.column("partition").to_pylist()) == {0}
    assert set(table.column("key").to_pylist()) == {None}
    assert set(table.column("timestampType").to_pylist()) == {0}
    for b in batches:
        assert b.num_rows <= limits["max_records"]
        # About max_bytes of Arrow data, unless one record is bigger.
        size = sum(len(v) for v in b.column("value").to_pylist()) + b.num_rows * (36 + len("t"))
        assert size <= limits["max_bytes"] or b.num_rows == 1
        assert b.nbytes <= max(limits["max_bytes"], size) * 1.25


def test_batches_are_filled_across_stored_batches(log):
    # Stored batches of 1, 7, 30, 2, 20 records: the Arrow batches ignore their bounds.
    assert [b.num_rows for b in _read(log, 1, 60, max_records=25, max_bytes=8 << 20)] == [25, 25, 10]
    # A byte limit cuts a batch where the next record would cross it.
    batches = _read(log, 1, 60, max_records=10_000, max_bytes=500)
    sizes = [sum(len(v) + 37 for v in b.column("value").to_pylist()) for b in batches]
    assert all(s <= 500 for s in sizes)
    assert all(s + len(_payload(b.column("offset")[-1].as_py() + 1)) + 37 > 500 for s, b in zip(sizes, batches[:-1]))


def test_a_record_bigger_than_max_bytes_gets_a_batch_of_its_own(log):
    (batch,) = _read(log, 1, 1, partition=1, max_records=10, max_bytes=1024)
    assert batch.column("value").to_pylist() == [b"x" * 100_000]
    assert batch.column("partition").to_pylist() == [1]


def test_a_gap_or_a_short_read_is_an_error_not_a_hole(log):
    runs = list(log.iter_runs("t", 0, 1, 60, decode=stored))
    with pytest.raises(InconsistentReadState, match="expected offset 9, read 39"):
        list(record_batches(runs[:2] + runs[3:], "t", 0, 1, 60, max_records=100, max_bytes=1 << 20))
    with pytest.raises(InconsistentReadState, match="wanted up to 60"):
        list(record_batches(runs[:-1], "t", 0, 1, 60, max_records=100, max_bytes=1 << 20))


def _ts(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, timezone.utc)


def test_key_headers_null_value_and_log_append_time_come_out_as_kafkas_columns():
    """Records written by the real writer and read by the real reader: a keyed
    record with headers, a tombstone (null value), an empty header list, and a
    LogAppendTime batch whose records all read as its append time."""
    meta, objs = InMemoryMetadataStore(), InMemoryObjectStore()
    create = [
        Record(b"v1", b"k1", (("h", b"x"), ("empty", None)), 1_700_000_000_123),
        Record(None, b"k2", (), 1_700_000_000_456),  # a tombstone, no headers
        Record(b"", None, (("only", b""),), 1_700_000_000_789),
    ]
    appended = StoredBatches.of_records([Record(b"late", b"k3", (), 5), Record(b"later", None)], now_ms=7) \
        .with_log_append_time(1_800_000_000_000)
    with LeaderlessLogWriter(OXIA, S3, metadata_store=meta, object_store=objs) as w, \
            LeaderlessLogReader(OXIA, S3, metadata_store=meta, object_store=objs) as r:
        w.initialize_partition("kv", 2)
        w.append_shared([SharedAppendGroup("kv", 2, create)])
        w.append_shared([SharedAppendGroup("kv", 2, appended)])
        runs = list(r.iter_runs("kv", 2, 1, 5, decode=stored))

    (plain,) = record_batches(runs, "kv", 2, 1, 5, max_records=100, max_bytes=1 << 20)
    (batch,) = record_batches(runs, "kv", 2, 1, 5, max_records=100, max_bytes=1 << 20, include_headers=True)
    assert plain.schema == SCHEMA and plain.schema.names == [
        "key", "value", "topic", "partition", "offset", "timestamp", "timestampType",
    ]
    assert batch.schema == HEADERS_SCHEMA and batch.schema.names[-1] == "headers"
    assert batch.schema.field("timestamp").type == pa.timestamp("us", tz="UTC")
    got = batch.to_pydict()
    assert got["key"] == [b"k1", b"k2", None, b"k3", None]
    assert got["value"] == [b"v1", None, b"", b"late", b"later"]
    assert got["topic"] == ["kv"] * 5 and got["partition"] == [2] * 5
    assert got["offset"] == [1, 2, 3, 4, 5]
    assert got["timestamp"] == [_ts(1_700_000_000_123), _ts(1_700_000_000_456), _ts(1_700_000_000_789),
                                _ts(1_800_000_000_000), _ts(1_800_000_000_000)]
    assert got["timestampType"] == [0, 0, 0, 1, 1]
    # Kafka's source: an array of {key, value} per record, null when a record has none.
    assert got["headers"] == [
        [{"key": "h", "value": b"x"}, {"key": "empty", "value": None}], None, [{"key": "only", "value": b""}],
        None, None,
    ]
    assert plain.to_pydict() == {k: v for k, v in got.items() if k != "headers"}


def test_run_with_trimmed_ends_from_hand_built_batches():
    batches = StoredBatches.join([
        StoredBatches.of_values([b"a", b"bb"], 1_000), StoredBatches.of_values([b"", b"dddd"], 2_000),
    ])
    run = RecordRun("t", 3, 10, 11, 12, batches)
    (batch,) = record_batches([run], "t", 3, 11, 12, max_records=10, max_bytes=1000)
    assert batch.to_pydict() == {
        "key": [None, None], "value": [b"bb", b""], "topic": ["t", "t"], "partition": [3, 3], "offset": [11, 12],
        "timestamp": [_ts(1_000), _ts(2_000)], "timestampType": [0, 0],
    }


def test_row_bytes_counts_key_value_headers_and_the_fixed_columns():
    r = Record(b"vvv", b"kk", (("hk", b"hv"), ("n", None)), 1)
    assert row_bytes(r, 5) == 36 + 5 + 2 + 3 + (12 + 2 + 2) + (12 + 1)
    assert row_bytes(Record(None), 0) == 36


def test_the_arrow_schemas_are_what_spark_expects_of_kafkas_schema():
    """Spark compares a Python source's first Arrow batch with the declared
    schema converted to Arrow; this is that conversion of Kafka's schema."""
    types = pytest.importorskip("pyspark.sql.types")
    from pyspark.sql.pandas.types import to_arrow_schema

    kafka = types.StructType([
        types.StructField("key", types.BinaryType()), types.StructField("value", types.BinaryType()),
        types.StructField("topic", types.StringType()), types.StructField("partition", types.IntegerType()),
        types.StructField("offset", types.LongType()), types.StructField("timestamp", types.TimestampType()),
        types.StructField("timestampType", types.IntegerType()),
    ])
    headers = types.ArrayType(types.StructType([
        types.StructField("key", types.StringType()), types.StructField("value", types.BinaryType()),
    ]))
    assert to_arrow_schema(kafka, timezone="UTC").equals(arrow_schema(False))
    assert to_arrow_schema(kafka.add("headers", headers), timezone="UTC").equals(arrow_schema(True))


def test_worker_heap_freezes_once_after_the_first_task(monkeypatch):
    monkeypatch.setattr(_worker_heap, "_frozen", False)
    try:
        assert list(_worker_heap.after_first_task(iter([1, 2]))) == [1, 2]
        assert gc.get_freeze_count() > 0
        assert _worker_heap.freeze_long_lived() is False  # only the first call freezes
    finally:
        gc.unfreeze()


_CHURN = """
import resource, sys
from server.spark import _worker_heap
if sys.argv[1] == "tuned":
    assert _worker_heap.keep_freed_memory() is True
    assert _worker_heap.keep_freed_memory() is False  # once per process
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
before = faults()
for _ in range(30):  # a read task's pattern: several 2 MiB bodies in flight, then all freed
    bodies = [b"x" * (2 << 20) for _ in range(6)]
    del bodies
print(faults() - before)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_a_reading_worker_keeps_freed_memory_instead_of_faulting_it_in_again():
    repo = str(Path(__file__).resolve().parents[2])

    def faults(mode: str) -> int:
        out = subprocess.run([sys.executable, "-c", _CHURN, mode], capture_output=True, text=True, check=True,
                             cwd=repo, env={**os.environ, "PYTHONPATH": repo})
        return int(out.stdout)

    default, tuned = faults("default"), faults("tuned")
    # 30 rounds x 12 MiB: by default most rounds fault their pages in again
    # (about 3k faults each); tuned, only the first round does.
    assert tuned * 4 < default, (tuned, default)
