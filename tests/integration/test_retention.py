"""Retention on real processes (SPEC 7.10): a broker, a compactor service with
retention and vacuum on, real Oxia and MinIO. A topic's retention.ms or
retention.bytes moves each log's start past its old compacted ranges; reads
below the start are refused with the start (library and /consume), everything
from it on stays intact, and vacuum deletes the objects below it."""

from __future__ import annotations

import pytest

from server._protocol.keys import LogLayout
from server._storage.billing import BucketUsageRefresher
from server._storage.objectstore import S3ObjectStore
from server._config import S3Config
from server._errors import OffsetOutOfRange
from tests._waiting import wait_until

from ._compactor_process import Service

pytestmark = pytest.mark.integration

SERVICE_ENV = {
    "LLOG_COMPACTOR_DISCOVERY_INTERVAL_MS": "200",
    "LLOG_RETENTION_INTERVAL_MS": "300",
    "LLOG_VACUUM_INTERVAL_MS": "300",
    "LLOG_VACUUM_GRACE_MS": "1000",
    "LLOG_VACUUM_ALLOW_UNSAFE_GRACE": "true",  # appends and compactions here take far less than a second
    "LLOG_COMPACTOR_MIN_BYTES_PER_RUN": "0",
}


def compacted_objects(llog_env, topic: str) -> dict[str, int]:
    """Compacted objects of ``topic:0`` in MinIO, key -> size."""
    store = S3ObjectStore(S3Config.from_env(llog_env))
    prefix = LogLayout(llog_env["LLOG_ROOT_PREFIX"]).partition(topic, 0).compacted_object("")
    try:
        return {o.key: o.size for o in store.list(S3Config.from_env(llog_env).bucket, prefix)}
    finally:
        store.close()


def stored_bytes(llog_env) -> int:
    """Storage as the billing estimate sees it: a fresh scan of the root prefix."""
    s3 = S3Config.from_env(llog_env)
    store = S3ObjectStore(s3)
    try:
        usage = BucketUsageRefresher(store, s3.bucket, llog_env["LLOG_ROOT_PREFIX"], max_age_s=0).usage()
        assert usage is not None
        return usage.stored_bytes
    finally:
        store.close()


def produce_and_compact(broker, reader, topic: str, values: list[str], **record) -> int:
    """Produce ``values`` as one batch and wait until they are compacted; returns their last offset."""
    reply = broker.client.produce([{"topic": topic, "partition": 0,
                                    "records": [{"value": v, **record} for v in values]}])
    assert reply.status == 200, reply.body
    end = reply.json["results"][0]["end_offset"]
    wait_until(lambda: reader.compaction_cursor(topic, 0) > end, 30, f"offsets up to {end} compacted")
    return end


def check_start(broker, reader, topic: str, start: int, want: list[str]) -> None:
    """Below ``start`` is refused with the start, through the library and /consume; from it on all is there."""
    with pytest.raises(OffsetOutOfRange) as info:
        reader.read_offset(topic, 0, start - 1)
    assert info.value.log_start_offset == start
    reply = broker.client.consume([{"topic": topic, "partition": 0, "fetch_offset": 1}], max_wait_ms=0)
    (res,) = reply.json["results"]
    assert (res["ok"], res["error_code"], res["log_start_offset"]) == (False, "OFFSET_OUT_OF_RANGE", start), res
    got = [r["value"] for r in broker.client.consume([{"topic": topic, "partition": 0, "fetch_offset": start}],
                                                      max_wait_ms=0).json["results"][0]["records"]]
    assert got == want
    assert [r.payload.decode() for r in reader.iter_from(topic, 0, start)] == want


# The broker reads a partition's log start again on every consume (default: once a second).
BROKER_ENV = {"LLOG_BROKER_LOG_START_REFRESH_MS": "0"}


def test_retention_ms_moves_the_log_start_and_vacuum_deletes_below_it(broker_factory, reader, llog_env, tmp_path):
    broker = broker_factory(env=BROKER_ENV)
    assert broker.client.request("POST", "/topics", {"name": "ret-ms", "partitions": 1,
                                                     "config": {"retention.ms": 3000}}).status == 201
    svc = Service(llog_env, tmp_path, "svc-ret", extra_env=SERVICE_ENV)
    try:
        svc.wait_healthy()
        old_end = produce_and_compact(broker, reader, "ret-ms", ["old-1", "old-2"], timestamp_ms=1)  # long expired
        # Their records are 1 ms after the epoch: the next retention pass lets them go.
        wait_until(lambda: reader.log_start_offset("ret-ms", 0) == old_end + 1, 30, "the log start to move")
        new_end = produce_and_compact(broker, reader, "ret-ms", ["new-1", "new-2"])
        check_start(broker, reader, "ret-ms", old_end + 1, ["new-1", "new-2"])
        # Vacuum, a grace period after the move: the old range's object is gone, the new one stays.
        wait_until(lambda: len(compacted_objects(llog_env, "ret-ms")) == 1, 30, "vacuum to delete the old object")
        assert reader.log_start_offset("ret-ms", 0) == old_end + 1 and new_end == old_end + 2
        check_start(broker, reader, "ret-ms", old_end + 1, ["new-1", "new-2"])
        doc = svc.metrics()
        assert doc["counters"]["retention_advances_total"][""] >= 1
        assert doc["counters"]["vacuum_expired_entries_deleted_total"][""] >= 1
        assert doc["gauges"]["log_start_offset"]["partition=0,topic=ret-ms"] == old_end + 1
    finally:
        svc.close()


def test_retention_bytes_keeps_the_newest_ranges(broker_factory, reader, llog_env, tmp_path):
    broker = broker_factory(env=BROKER_ENV)
    svc = Service(llog_env, tmp_path, "svc-ret-b", extra_env=SERVICE_ENV)
    try:
        svc.wait_healthy()
        assert broker.client.request("POST", "/topics", {"name": "ret-b", "partitions": 1}).status == 201
        ends = [produce_and_compact(broker, reader, "ret-b", [f"r{i}-{k}" * 50 for k in range(3)]) for i in range(3)]
        sizes = sorted(compacted_objects(llog_env, "ret-b").values())
        assert len(sizes) == 3
        wait_until(lambda: stored_bytes(llog_env) == sum(sizes), 30, "vacuum to take the WAL objects")
        # Keep room for the newest two ranges only: the first goes, the other two stay.
        reply = broker.client.request("PATCH", "/topics/ret-b", {"config": {"retention.bytes": sizes[0] + sizes[1]}})
        assert reply.status == 200, reply.body
        wait_until(lambda: reader.log_start_offset("ret-b", 0) == ends[0] + 1, 30, "the log start to move")
        check_start(broker, reader, "ret-b", ends[0] + 1, [f"r{i}-{k}" * 50 for i in (1, 2) for k in range(3)])
        wait_until(lambda: len(compacted_objects(llog_env, "ret-b")) == 2, 30, "vacuum to delete the first object")
        assert reader.log_start_offset("ret-b", 0) == ends[0] + 1  # the rest stays: the rule holds
        # The billing estimate's storage falls by what retention let go.
        left = compacted_objects(llog_env, "ret-b")
        assert stored_bytes(llog_env) == sum(left.values()) < sum(sizes)
    finally:
        svc.close()


def test_a_deleted_topic_is_removed_and_its_name_comes_back_empty(broker_factory, reader, llog_env, tmp_path):
    """DELETE /topics/{name}: unknown at once; the compactor service retires its logs a
    grace period later, vacuum deletes their data, the record goes; the name created
    again shows none of the old records, and its offsets go on from where they were."""
    broker = broker_factory(env=BROKER_ENV)
    assert broker.client.request("POST", "/topics", {"name": "gone", "partitions": 2}).status == 201
    for p in (0, 1):
        reply = broker.client.produce([{"topic": "gone", "partition": p, "records": [f"old-{p}-{i}" for i in range(3)]}])
        assert reply.status == 200, reply.body
    svc = Service(llog_env, tmp_path, "svc-del", extra_env=SERVICE_ENV)
    try:
        svc.wait_healthy()
        assert broker.client.request("DELETE", "/topics/gone").status == 200
        reply = broker.client.consume([{"topic": "gone", "partition": 0, "fetch_offset": 1}], max_wait_ms=0)
        assert reply.json["results"][0]["error_code"] == "UNKNOWN_TOPIC_OR_PARTITION"
        assert broker.client.request("POST", "/topics", {"name": "gone", "partitions": 2}).status == 409

        def created() -> bool:
            return broker.client.request("POST", "/topics", {"name": "gone", "partitions": 2}).status == 201

        wait_until(created, 60, "the deleted topic's record to go, so the name can be created again")
        assert compacted_objects(llog_env, "gone") == {}
        assert [reader.log_start_offset("gone", p) for p in (0, 1)] == [4, 4]
        check_start(broker, reader, "gone", 4, [])  # none of the old records
        reply = broker.client.produce([{"topic": "gone", "partition": 0, "records": ["new"]}])
        assert reply.json["results"][0]["start_offset"] == 4
        check_start(broker, reader, "gone", 4, ["new"])
        assert svc.metrics()["counters"]["topics_removed_total"][""] == 1
    finally:
        svc.close()
