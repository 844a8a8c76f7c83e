"""Writer and reader against the real Oxia and S3 servers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import boto3
import pytest
from botocore.config import Config

from server._config import BatchConfig
from server._errors import (
    AppendFailed,
    BackPressureRejected,
    CorruptBatch,
    InconsistentReadState,
    OffsetOutOfRange,
    PartitionFenced,
    PartitionNotInitialized,
)
from server._protocol.codec import decode_shared_header
from server._protocol.keys import parse_s3_uri
from server._protocol.records import ControlRecord
from server.leaderless_log_metrics import LlogMetrics
from server.leaderless_log_reader import LeaderlessLogReader
from server.leaderless_log_writer import BatchingProducer, LeaderlessLogWriter, SharedAppendGroup

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def s3(llog_env):
    client = boto3.client(
        "s3",
        endpoint_url=llog_env["LLOG_S3_ENDPOINT_URL"],
        aws_access_key_id=llog_env["LLOG_S3_ACCESS_KEY_ID"],
        aws_secret_access_key=llog_env["LLOG_S3_SECRET_ACCESS_KEY"],
        region_name=llog_env.get("LLOG_S3_REGION_NAME", "us-east-1"),
        config=Config(s3={"addressing_style": "path"}),
    )
    yield client
    client.close()


def all_payloads(reader, topic, partition):
    return [r.payload for r in reader.iter_from(topic, partition, 1)]


def run_script(env: dict[str, str], code: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    full_env = {**os.environ, **env, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        env=full_env, capture_output=True, text=True, timeout=timeout,
    )


def test_round_trip_strings_and_arbitrary_bytes(writer, reader):
    writer.initialize_partition("orders", 0)
    records = [b"", b"\x00", b"\x00\xff\x00", "héllo".encode(), bytes(range(256)), os.urandom(1 << 20)]
    res = writer.append_shared([SharedAppendGroup("orders", 0, records)])
    assert (res[0].start_offset, res[0].end_offset) == (1, len(records))
    res2 = writer.append_shared([SharedAppendGroup("orders", 0, ["a string"])])
    assert res2[0].start_offset == len(records) + 1
    assert all_payloads(reader, "orders", 0) == records + [b"a string"]
    assert reader.read_offset("orders", 0, 6).payload == records[5]
    assert reader.read_offset("orders", 0, 1).payload == b""
    assert [r.offset for r in reader.read_range("orders", 0, 2, 4)] == [2, 3, 4]


def test_many_partitions_share_one_blob(writer, reader, s3, llog_env):
    n = 40
    for p in range(n):
        writer.initialize_partition("events", p)
    metrics_before = writer.metrics.counter("s3_operations_total", op="put")
    res = writer.append_shared([SharedAppendGroup("events", p, [f"p{p}-{i}" for i in range(3)]) for p in range(n)])
    assert writer.metrics.counter("s3_operations_total", op="put") - metrics_before == 1
    uris = {r.wal_uri for r in res}
    assert len(uris) == 1
    bucket, key = parse_s3_uri(uris.pop())
    assert key.startswith(f"{llog_env['LLOG_ROOT_PREFIX']}/wal-shared/")
    header = decode_shared_header(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
    assert [(p.topic, p.partition, p.msg_count) for p in header.partitions] == [("events", p, 3) for p in range(n)]
    assert [(r.byte_offset, r.byte_length) for r in res] == [(p.body_offset, p.body_length) for p in header.partitions]
    for p in (0, 17, n - 1):
        assert all_payloads(reader, "events", p) == [f"p{p}-{i}".encode() for i in range(3)]


def test_forward_scan_uses_one_range_scan_not_one_call_per_record(writer, llog_env):
    writer.initialize_partition("scan", 0)
    for i in range(20):
        writer.append_shared([SharedAppendGroup("scan", 0, [f"{i}-{j}" for j in range(5)])])
    metrics = LlogMetrics()
    with LeaderlessLogReader.from_env(llog_env, metrics=metrics) as r:
        got = list(r.iter_from("scan", 0, 1))
    assert len(got) == 100 and [g.offset for g in got] == list(range(1, 101))
    assert metrics.counter("oxia_operations_total") == 2  # control get + one range scan
    assert metrics.counter("s3_operations_total", op="range_get") == 20  # one GET per batch


def test_concurrent_writer_processes_get_unique_contiguous_offsets(writer, reader, llog_env):
    writer.initialize_partition("contended", 0)
    code = """
        import sys
        from server.leaderless_log_writer import LeaderlessLogWriter, SharedAppendGroup
        name = sys.argv[1]
        with LeaderlessLogWriter.from_env() as w:
            for i in range(15):
                w.append_shared([SharedAppendGroup("contended", 0, [f"{name}:{i}:{j}" for j in range(3)])])
        print("done")
    """
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(code), f"w{k}"],
            env={**os.environ, **llog_env, "PYTHONPATH": str(REPO)},
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for k in range(4)
    ]
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    records = list(reader.iter_from("contended", 0, 1))
    assert [r.offset for r in records] == list(range(1, 4 * 15 * 3 + 1))
    texts = [r.payload.decode() for r in records]
    assert len(set(texts)) == len(texts)
    for k in range(4):
        mine = [t for t in texts if t.startswith(f"w{k}:")]
        assert mine == [f"w{k}:{i}:{j}" for i in range(15) for j in range(3)]  # per-writer order kept
    # every batch is contiguous: a writer's 3 records of one append sit together
    for idx in range(0, len(texts), 3):
        assert len({t.rsplit(":", 1)[0] for t in texts[idx:idx + 3]}) == 1


def test_writer_killed_after_reserve_before_index(writer, reader, llog_env):
    writer.initialize_partition("crash", 0)
    writer.append_shared([SharedAppendGroup("crash", 0, [b"before"])])
    code = """
        import os
        from server.leaderless_log_writer import LeaderlessLogWriter, SharedAppendGroup
        w = LeaderlessLogWriter.from_env()
        real_put = w._meta.put
        def put(key, value, partition_key, expected_version=None, ephemeral=False):
            if "/index/" in key:
                os._exit(17)  # the process dies between the reserve CAS and the index write
            return real_put(key, value, partition_key, expected_version, ephemeral)
        w._meta.put = put
        w.append_shared([SharedAppendGroup("crash", 0, [b"x", b"y"])])
    """
    proc = run_script(llog_env, code)
    assert proc.returncode == 17, proc.stderr
    control = reader.control("crash", 0)
    assert control.pending is not None and (control.pending.start_offset, control.pending.end_offset) == (2, 3)
    # The reader serves the logically committed tail from pending.
    assert all_payloads(reader, "crash", 0) == [b"before", b"x", b"y"]
    assert reader.read_offset("crash", 0, 3).payload == b"y"
    # This (other) writer's next append materializes it first.
    (r,) = writer.append_shared([SharedAppendGroup("crash", 0, [b"after"])])
    assert r.start_offset == 4
    # The crashed append's pending was replaced by ours, which stays until
    # this writer's next append (SPEC 7.3): materialized, its index key exists.
    assert reader.control("crash", 0).pending.start_offset == 4
    assert [b.end_offset for b in reader.scan_batches("crash", 0, 1, 4)] == [1, 3, 4]
    assert not any(b.from_pending for b in reader.scan_batches("crash", 0, 1, 4))
    assert all_payloads(reader, "crash", 0) == [b"before", b"x", b"y", b"after"]


def test_fence_then_append_fails_unfence_then_append_works(writer, reader):
    writer.initialize_partition("fenced", 0)
    writer.append_shared([SharedAppendGroup("fenced", 0, [b"1"])])
    writer.fence_partition("fenced", 0)
    with pytest.raises(AppendFailed) as info:
        writer.append_shared([SharedAppendGroup("fenced", 0, [b"refused"])])
    assert isinstance(info.value.results[0].error, PartitionFenced)
    assert reader.high_watermark("fenced", 0) == 1
    writer.unfence_partition("fenced", 0)
    writer.append_shared([SharedAppendGroup("fenced", 0, [b"2"])])
    assert all_payloads(reader, "fenced", 0) == [b"1", b"2"]


def test_corrupted_s3_bytes_raise_corruption_error(writer, reader, s3):
    writer.initialize_partition("corrupt", 0)
    (r,) = writer.append_shared([SharedAppendGroup("corrupt", 0, [b"precious data"])])
    bucket, key = parse_s3_uri(r.wal_uri)
    blob = bytearray(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
    blob[r.byte_offset + r.byte_length - 2] ^= 0x01
    s3.put_object(Bucket=bucket, Key=key, Body=bytes(blob))
    with pytest.raises(CorruptBatch) as info:
        reader.read_offset("corrupt", 0, 1)
    assert "CRC-32C mismatch" in str(info.value)
    # truncated object: the range GET returns fewer bytes than the entry says
    s3.put_object(Bucket=bucket, Key=key, Body=bytes(blob[: r.byte_offset + 10]))
    with pytest.raises(CorruptBatch):
        reader.read_offset("corrupt", 0, 1)


def test_reader_errors_against_real_oxia(writer, reader):
    with pytest.raises(PartitionNotInitialized):
        reader.read_offset("nothing", 0, 1)
    writer.initialize_partition("small", 0)
    writer.initialize_partition("small", 1)
    writer.append_shared([SharedAppendGroup("small", 0, [b"a"])])
    writer.append_shared([SharedAppendGroup("small", 1, [f"{i}" for i in range(10)])])
    with pytest.raises(OffsetOutOfRange):
        reader.read_offset("small", 0, 2)
    # Forge a high watermark past partition 0's index: the CEILING lands on
    # partition 0's meta/ keys or partition 1's index, and must not be used.
    w_meta = writer._meta
    rec = w_meta.get(f"{writer.layout.root}/small/partitions/0/meta/control", "small:0")
    w_meta.put(rec.key, ControlRecord("OPEN", 6, None).encode(), "small:0", expected_version=rec.version)
    with pytest.raises(InconsistentReadState):
        reader.read_offset("small", 0, 4)


def test_legacy_partition_local_wal_objects_stay_readable(writer, reader, s3, llog_env):
    from server._protocol.codec import encode_batch
    from server._protocol.records import IndexEntry

    root = llog_env["LLOG_ROOT_PREFIX"]
    bucket = llog_env["LLOG_S3_BUCKET"]
    writer.initialize_partition("legacy", 0)
    key = f"{root}/legacy/partitions/0/data/wal/0b5e7c1e"
    s3.put_object(Bucket=bucket, Key=key, Body=encode_batch([b"old-1", b"old-2"]))
    entry = IndexEntry("WAL", 2, f"s3://{bucket}/{key}", "bytes-batch-v1", None, None, 1)
    keys = writer.layout.partition("legacy", 0)
    writer._meta.put(keys.index(2), entry.encode(), keys.partition_key)
    rec = writer._meta.get(keys.control, keys.partition_key)
    writer._meta.put(keys.control, ControlRecord("OPEN", 3, None).encode(), keys.partition_key, expected_version=rec.version)
    writer._forget(keys.tp)
    writer.append_shared([SharedAppendGroup("legacy", 0, [b"new"])])
    assert all_payloads(reader, "legacy", 0) == [b"old-1", b"old-2", b"new"]


def test_batching_producer_backpressure_against_real_stack(writer, reader):
    writer.initialize_partition("bp", 0)
    # Nothing triggers a flush by itself: both submissions stay buffered.
    with BatchingProducer(writer, BatchConfig(max_bytes=4096, max_delay_ms=60_000, max_buffer_bytes=4096, max_block_ms=0)) as bp:
        first = bp.submit([SharedAppendGroup("bp", 0, [b"a" * 2000])])
        second = bp.submit([SharedAppendGroup("bp", 0, [b"b" * 2000])])
        with pytest.raises(BackPressureRejected):
            bp.submit([SharedAppendGroup("bp", 0, [b"c" * 100])])
        bp.flush(timeout=10)
        assert first.result(0)[0].ok and second.result(0)[0].ok
        # Once committed the buffer has room again.
        third = bp.submit([SharedAppendGroup("bp", 0, [b"d"])])
        bp.flush(timeout=10)
        assert third.result(0)[0].ok
    assert [p[:1] for p in all_payloads(reader, "bp", 0)] == [b"a", b"b", b"d"]


def test_invalid_input_writes_nothing(writer, s3, llog_env):
    from server._errors import InvalidRequest

    for topic, part, recs in [("", 0, [b"x"]), ("a/b", 0, [b"x"]), ("x" * 250, 0, [b"x"]), ("ok", -1, [b"x"]), ("ok", 0, [])]:
        with pytest.raises(InvalidRequest):
            writer.append_shared([SharedAppendGroup(topic, part, recs)])
    listed = s3.list_objects_v2(Bucket=llog_env["LLOG_S3_BUCKET"], Prefix=llog_env["LLOG_ROOT_PREFIX"] + "/")
    assert listed.get("KeyCount", 0) == 0


def test_env_config_errors_are_clear(llog_env):
    from server._errors import ConfigError

    env = {k: v for k, v in llog_env.items() if k != "LLOG_S3_BUCKET"}
    with pytest.raises(ConfigError, match="LLOG_S3_BUCKET"):
        LeaderlessLogWriter.from_env(env)
    with pytest.raises(ConfigError, match="LLOG_OXIA_SERVICE_ADDRESS"):
        LeaderlessLogReader.from_env({})
    assert json.dumps(ControlRecord("OPEN", 1).to_json())  # sanity: values are JSON-ready
