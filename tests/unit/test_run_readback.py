"""``LibraryReadBack`` over the in-memory stores: what it reports missing when
the log has lost a batch's bytes, a batch's index entry, or ends early.

The same read-back against the real Oxia and S3 is in
``tests/integration/test_run_readback.py``.
"""

from __future__ import annotations

import pytest

from loadtest._harness.readback import LibraryReadBack
from server._protocol.keys import parse_s3_uri
from server._storage.metastore import InMemoryMetadataStore
from server._storage.objectstore import InMemoryObjectStore
from server.leaderless_log_reader import LeaderlessLogReader
from server.leaderless_log_writer import AppendResult, LeaderlessLogWriter, SharedAppendGroup

from .test_write_read_fakes import OXIA, S3


@pytest.fixture
def stores() -> tuple[InMemoryMetadataStore, InMemoryObjectStore]:
    return InMemoryMetadataStore(), InMemoryObjectStore()


@pytest.fixture
def batches(stores) -> list[list[AppendResult]]:
    """Three flushes of 10 records to each of lt:0 and lt:1: offsets 1-10, 11-20, 21-30."""
    meta, objs = stores
    with LeaderlessLogWriter(OXIA, S3, metadata_store=meta, object_store=objs) as writer:
        for p in (0, 1):
            writer.initialize_partition("lt", p)
        return [writer.append_shared([SharedAppendGroup("lt", p, [f"{b}-{i}".encode() for i in range(10)])
                                      for p in (0, 1)]) for b in range(3)]


@pytest.fixture
def read_back(stores, batches):
    meta, objs = stores
    with LeaderlessLogReader(OXIA, S3, metadata_store=meta, object_store=objs) as reader:
        yield LibraryReadBack(reader=reader)


def test_everything_acked_is_read(read_back, batches) -> None:
    assert [(r.start_offset, r.end_offset) for r in (b[0] for b in batches)] == [(1, 10), (11, 20), (21, 30)]
    assert read_back.high_watermark("lt", 0) == 30
    assert read_back.missing_ranges("lt", 0, 1, 30) == []
    assert read_back.missing_ranges("lt", 1, 5, 25) == []


def test_offsets_past_the_end_are_missing(read_back) -> None:
    assert read_back.missing_ranges("lt", 0, 25, 40) == [(31, 40)]
    assert read_back.high_watermark("lt", 7) == 0
    assert read_back.missing_ranges("lt", 7, 1, 3) == [(1, 3)]


def test_a_lost_blob_loses_its_batches(read_back, batches, stores) -> None:
    _, objs = stores
    bucket, key = parse_s3_uri(batches[1][0].wal_uri)
    objs.delete_many(bucket, [key])
    assert read_back.missing_ranges("lt", 0, 1, 30) == [(11, 20)]
    assert read_back.missing_ranges("lt", 1, 15, 30) == [(15, 20)]


def test_a_corrupt_blob_is_missing(read_back, batches, stores) -> None:
    _, objs = stores
    bucket, key = parse_s3_uri(batches[2][0].wal_uri)
    data, _ = objs.objects[(bucket, key)]
    objs.put(bucket, key, b"\0" * len(data))
    assert read_back.missing_ranges("lt", 0, 1, 30) == [(21, 30)]


def test_a_gap_in_the_index_is_missing(read_back, batches, stores) -> None:
    meta, _ = stores
    assert meta.delete(batches[1][0].index_key, "lt:0")
    assert read_back.missing_ranges("lt", 0, 1, 30) == [(11, 20)]
    assert read_back.missing_ranges("lt", 0, 12, 25) == [(12, 20)]
    assert read_back.missing_ranges("lt", 1, 1, 30) == []


def test_a_decoder_that_checks_the_bytes_counts_a_batch_with_a_foreign_record_missing(stores) -> None:
    from loadtest._harness.payloads import PayloadCheck, hammer_record

    meta, objs = stores
    sent = 1_700_000_000 * 10**9
    with LeaderlessLogWriter(OXIA, S3, metadata_store=meta, object_store=objs) as writer:
        writer.initialize_partition("lt", 0)
        for records in ([hammer_record(sent + i, 40, 7) for i in range(10)],
                        [hammer_record(sent, 40, 7)] * 9 + [b"not the hammer's"],
                        [hammer_record(sent, 40, 7)] * 10):
            writer.append_shared([SharedAppendGroup("lt", 0, records)])
    check = PayloadCheck(40, 7, sent, sent + 10**9)
    with LeaderlessLogReader(OXIA, S3, metadata_store=meta, object_store=objs) as reader:
        assert LibraryReadBack(reader=reader).missing_ranges("lt", 0, 1, 30) == []  # offsets alone: all there
        assert LibraryReadBack(reader=reader, decode=check).missing_ranges("lt", 0, 1, 30) == [(11, 20)]
    assert check.bad_batches >= 1 and "bytes, not 40" in check.problems[0]
    assert check.records_checked >= 20
