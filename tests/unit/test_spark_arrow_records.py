"""Arrow record batches built from stored batches (server/spark/_arrow_records.py)
and the worker heap freeze (server/spark/_worker_heap.py), over the fakes."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from server._config import OxiaConfig, S3Config
from server._errors import InconsistentReadState
from server._protocol.codec import decode_batch_bounds
from server._storage.metastore import InMemoryMetadataStore
from server._storage.objectstore import InMemoryObjectStore
from server.leaderless_log_reader import LeaderlessLogReader, RecordRun
from server.leaderless_log_writer import LeaderlessLogWriter, SharedAppendGroup
from server.spark import _worker_heap
from server.spark._arrow_records import SCHEMA, record_batches

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
    runs = reader.iter_runs("t", partition, start, end, decode=decode_batch_bounds)
    return list(record_batches(runs, "t", partition, start, end, **limits))


@pytest.mark.parametrize("start,end", [(1, 60), (1, 1), (5, 40), (9, 38), (60, 60), (2, 59)])
@pytest.mark.parametrize("limits", [dict(max_records=10_000, max_bytes=8 << 20), dict(max_records=3, max_bytes=1 << 20),
                                    dict(max_records=1000, max_bytes=64)])
def test_batches_hold_exactly_the_range_in_order(log, start, end, limits):
    batches = _read(log, start, end, **limits)
    assert all(b.schema == SCHEMA for b in batches)
    table = pa.Table.from_batches(batches, SCHEMA)
    assert table.column("offset").to_pylist() == list(range(start, end + 1))
    assert table.column("value").to_pylist() == [_payload(i) for i in range(start, end + 1)]
    assert set(table.column("topic").to_pylist()) == {"t"}
    assert set(table.column("partition").to_pylist()) == {0}
    for b in batches:
        assert b.num_rows <= limits["max_records"]
        # About max_bytes: stored bytes (payload + 4-byte prefix) stay within it unless one record is bigger.
        stored = sum(len(v) + 4 for v in b.column("value").to_pylist())
        assert stored <= limits["max_bytes"] or b.num_rows == 1


def test_small_stored_batches_are_gathered_and_big_ones_sent_alone(log):
    sizes = [b.num_rows for b in _read(log, 1, 60, max_records=40, max_bytes=8 << 20)]
    # 1 + 7 gathered (8 < 40/4 = 10), then 30 alone (big), 2 + 20 -> 20 is big: 2 flushed first.
    assert sizes == [8, 30, 2, 20]


def test_a_record_bigger_than_max_bytes_gets_a_batch_of_its_own(log):
    (batch,) = _read(log, 1, 1, partition=1, max_records=10, max_bytes=1024)
    assert batch.column("value").to_pylist() == [b"x" * 100_000]
    assert batch.column("partition").to_pylist() == [1]


def test_a_gap_or_a_short_read_is_an_error_not_a_hole(log):
    runs = list(log.iter_runs("t", 0, 1, 60, decode=decode_batch_bounds))
    with pytest.raises(InconsistentReadState, match="expected offset 9, read 39"):
        list(record_batches(runs[:2] + runs[3:], "t", 0, 1, 60, max_records=100, max_bytes=1 << 20))
    with pytest.raises(InconsistentReadState, match="wanted up to 60"):
        list(record_batches(runs[:-1], "t", 0, 1, 60, max_records=100, max_bytes=1 << 20))


def test_run_with_trimmed_ends_from_a_hand_built_bounds():
    from server._protocol.codec import encode_batch

    bounds = decode_batch_bounds(encode_batch([b"a", b"bb", b"", b"dddd"]), 4)
    run = RecordRun("t", 3, 10, 11, 12, bounds)
    (batch,) = record_batches([run], "t", 3, 11, 12, max_records=10, max_bytes=100)
    assert batch.to_pydict() == {"topic": ["t", "t"], "partition": [3, 3], "offset": [11, 12], "value": [b"bb", b""]}


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
