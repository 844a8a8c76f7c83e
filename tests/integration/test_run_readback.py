"""``LibraryReadBack`` against the real Oxia and S3: records written with the
library writer are confirmed range by range; a range nobody wrote, and a
batch whose shared blob is deleted, are reported missing."""

from __future__ import annotations

from collections import defaultdict

import pytest

from loadtest._harness.readback import LibraryReadBack, check_read_back, merge_ranges
from server._config import S3Config
from server._protocol.keys import parse_s3_uri
from server._storage.objectstore import S3ObjectStore
from server.leaderless_log_writer import AppendResult, SharedAppendGroup

TOPIC = "lt"
PARTITIONS = 3
FLUSHES = 4
RECORDS = 25


@pytest.fixture
def results(writer) -> list[AppendResult]:
    """Four shared flushes of 25 records to each of three partitions."""
    for p in range(PARTITIONS):
        writer.initialize_partition(TOPIC, p)
    out: list[AppendResult] = []
    for flush in range(FLUSHES):
        groups = [SharedAppendGroup(TOPIC, p, [f"{flush}/{p}/{i}".encode() for i in range(RECORDS)])
                  for p in range(PARTITIONS)]
        out += writer.append_shared(groups)
    return out


def _acked(results: list[AppendResult]) -> dict[str, list[list[int]]]:
    """The client's ``acked`` map, as http_hammer writes it: merged inclusive ranges."""
    ranges: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for r in results:
        assert r.ok and r.start_offset is not None and r.end_offset is not None
        ranges[f"{r.topic}:{r.partition}"].append((r.start_offset, r.end_offset))
    return {key: [list(r) for r in merge_ranges(rs)] for key, rs in ranges.items()}


def test_every_acked_range_is_confirmed(llog_env, results) -> None:
    acked = _acked(results)
    assert acked == {f"{TOPIC}:{p}": [[1, FLUSHES * RECORDS]] for p in range(PARTITIONS)}
    with LibraryReadBack(llog_env) as read_back:
        result = check_read_back(read_back, acked, partitions=[f"{TOPIC}:{p}" for p in range(PARTITIONS + 1)])
    assert result["mismatches"] == []
    assert result["records_confirmed"] == result["acked_records"] == PARTITIONS * FLUSHES * RECORDS
    assert (result["records_missing"], result["unacked_offsets"]) == (0, 0)
    assert result["high_watermark_sum"] == PARTITIONS * FLUSHES * RECORDS


def test_a_fabricated_range_is_missing(llog_env, results) -> None:
    acked = _acked(results)
    end = FLUSHES * RECORDS
    acked[f"{TOPIC}:1"].append([end + 1, end + 40])  # acknowledged by nobody: past the log's end
    acked[f"{TOPIC}:9"] = [[1, 5]]  # a partition that was never written
    with LibraryReadBack(llog_env) as read_back:
        assert read_back.high_watermark(TOPIC, 1) == end
        result = check_read_back(read_back, acked)
    by_partition = {m["partition"]: m for m in result["mismatches"]}
    assert set(by_partition) == {f"{TOPIC}:1", f"{TOPIC}:9"}
    assert by_partition[f"{TOPIC}:1"]["missing"] == [[end + 1, end + 40]]
    assert by_partition[f"{TOPIC}:1"]["high_watermark"] == end
    assert by_partition[f"{TOPIC}:9"]["missing"] == [[1, 5]]
    assert result["records_missing"] == 45


def test_a_deleted_blob_is_missing(llog_env, results) -> None:
    lost = results[PARTITIONS * 2]  # the third flush's batch of partition 0
    assert (lost.partition, lost.start_offset, lost.end_offset) == (0, 2 * RECORDS + 1, 3 * RECORDS)
    bucket, key = parse_s3_uri(lost.wal_uri)
    store = S3ObjectStore(S3Config.from_env(llog_env))
    try:
        store.delete_many(bucket, [key])
    finally:
        store.close()
    with LibraryReadBack(llog_env) as read_back:
        assert read_back.missing_ranges(TOPIC, 0, 1, FLUSHES * RECORDS) == [(2 * RECORDS + 1, 3 * RECORDS)]
        # the shared blob also held the third batch of the other partitions
        assert read_back.missing_ranges(TOPIC, 1, 1, FLUSHES * RECORDS) == [(2 * RECORDS + 1, 3 * RECORDS)]
        assert read_back.missing_ranges(TOPIC, 2, 1, 2 * RECORDS) == []
