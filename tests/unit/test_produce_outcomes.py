"""Honest append outcomes over the fakes (SPEC 7.3 C3-C5).

A group whose reservation landed is acknowledged with its offsets, whatever
happens after; an outcome the writer cannot decide is ``OutcomeUnknown``;
every other error is definite: nothing of the group is in the log.
"""

from __future__ import annotations

import pytest

from server._errors import MetadataStoreError, OutcomeUnknown, PartitionFenced, PartitionNotInitialized
from server._protocol.records import ControlRecord
from server._storage.metastore import InMemoryMetadataStore
from server._storage.objectstore import InMemoryObjectStore
from server.leaderless_log_reader import LeaderlessLogReader
from server.leaderless_log_writer import LeaderlessLogWriter, SharedAppendGroup

from .test_compactor_fakes import OXIA, S3, index

CONTROL = "llog/orders/partitions/0/meta/control"


@pytest.fixture
def stores():
    return InMemoryMetadataStore(), InMemoryObjectStore()


def writer(stores) -> LeaderlessLogWriter:
    meta, objs = stores
    w = LeaderlessLogWriter(OXIA, S3, metadata_store=meta, object_store=objs)
    w.initialize_partition("orders", 0)
    w.append_shared([SharedAppendGroup("orders", 0, [b"first"])])
    return w


def log_of(stores) -> list[bytes]:
    meta, objs = stores
    with LeaderlessLogReader(OXIA, S3, metadata_store=meta, object_store=objs) as r:
        return [x.payload for x in r.iter_from("orders", 0, 1)]


def append(w: LeaderlessLogWriter, *payloads: bytes):
    (res,) = w.append_shared_results([SharedAppendGroup("orders", 0, list(payloads))])
    return res


def fail_first_control_put(meta, marker: bytes, *, applied: bool, meanwhile=lambda: None) -> list[str]:
    """Make the first put of ``meta/control`` whose value contains ``marker``
    raise MetadataStoreError, after applying it (a lost reply) or without
    (a failure); ``meanwhile`` runs in between (another writer's work).
    Returns a list that holds the key once the fault fired."""
    real_put = meta.put
    fired: list[str] = []

    def put(key, value, pk, expected_version=None, ephemeral=False):
        if key != CONTROL or marker not in value or fired:
            return real_put(key, value, pk, expected_version, ephemeral)
        fired.append(key)
        meta.put = real_put
        if applied:
            real_put(key, value, pk, expected_version, ephemeral)
        meanwhile()
        raise MetadataStoreError("injected " + ("lost reply" if applied else "failure"))

    meta.put = put
    return fired


def test_a_reservation_that_landed_is_acknowledged_even_if_the_index_create_fails(stores):
    meta, _ = stores
    with writer(stores) as w:
        meta.fail_next("put", key_contains="/index/")
        res = append(w, b"a", b"b")
        assert res.ok and (res.start_offset, res.end_offset) == (2, 3)
        assert ControlRecord.decode(meta.get(CONTROL, "orders:0").value).pending is not None
        assert log_of(stores) == [b"first", b"a", b"b"]  # readable through pending
        assert append(w, b"c").start_offset == 4  # the next append materializes it
    assert index(meta) == [(1, 1, "WAL"), (2, 3, "WAL"), (4, 4, "WAL")]


def test_a_clear_that_fails_on_close_leaves_the_pending_for_the_next_writer(stores):
    meta, _ = stores
    with writer(stores) as w:
        failed = fail_first_control_put(meta, b'"pending":null', applied=False)  # the clear (C5) on close
        res = append(w, b"a")
        assert res.ok and res.start_offset == 2
        assert append(w, b"b").start_offset == 3
        assert not failed  # appends no longer clear their pending
    assert failed
    assert ControlRecord.decode(meta.get(CONTROL, "orders:0").value).pending.start_offset == 3
    assert log_of(stores) == [b"first", b"a", b"b"]
    with LeaderlessLogWriter(OXIA, S3, metadata_store=meta, object_store=stores[1]) as w:
        assert append(w, b"c").start_offset == 4  # GETs the left pending's key: materialized
    assert log_of(stores) == [b"first", b"a", b"b", b"c"]
    assert index(meta) == [(1, 1, "WAL"), (2, 2, "WAL"), (3, 3, "WAL"), (4, 4, "WAL")]


def test_a_lost_reply_to_a_reservation_that_landed_is_acknowledged(stores):
    meta, _ = stores
    with writer(stores) as w:
        meta.lose_reply_next("put", key_contains="/meta/control")
        res = append(w, b"a")
        assert res.ok and res.start_offset == 2
    assert log_of(stores) == [b"first", b"a"]
    assert index(meta) == [(1, 1, "WAL"), (2, 2, "WAL")]


def test_a_failed_reservation_that_did_not_land_is_retried(stores):
    meta, _ = stores
    with writer(stores) as w:
        meta.fail_next("put", key_contains="/meta/control")
        res = append(w, b"a")
        assert res.ok and res.start_offset == 2
    assert log_of(stores) == [b"first", b"a"]


def test_a_lost_reply_that_cannot_be_resolved_is_outcome_unknown_and_the_records_may_be_there(stores):
    meta, _ = stores
    with writer(stores) as w:
        meta.lose_reply_next("put", key_contains="/meta/control")
        meta.fail_next("get", key_contains="/meta/control")
        res = append(w, b"a")
    assert isinstance(res.error, OutcomeUnknown) and res.error.retriable
    assert "may or may not" in str(res.error)
    assert log_of(stores) == [b"first", b"a"]  # it did land


def test_a_failure_that_cannot_be_resolved_is_outcome_unknown_even_if_nothing_landed(stores):
    meta, _ = stores
    with writer(stores) as w:
        meta.fail_next("put", key_contains="/meta/control")
        meta.fail_next("get", key_contains="/meta/control")
        res = append(w, b"a")
    assert isinstance(res.error, OutcomeUnknown)
    assert log_of(stores) == [b"first"]


def test_a_lost_reply_after_which_another_writer_took_over_is_acknowledged(stores):
    """Our reservation landed, its reply was lost, and before we re-read,
    another writer materialized our pending and appended: the index entry at
    our end offset is ours, so the append landed."""
    meta, objs = stores
    other = LeaderlessLogWriter(OXIA, S3, metadata_store=meta, object_store=objs)
    with writer(stores) as w:
        lost = fail_first_control_put(
            meta, b'"pending":{', applied=True,
            meanwhile=lambda: other.append_shared([SharedAppendGroup("orders", 0, [b"other"])]),
        )
        res = append(w, b"a", b"b")
    other.close()
    assert lost
    assert res.ok and (res.start_offset, res.end_offset) == (2, 3)
    assert log_of(stores) == [b"first", b"a", b"b", b"other"]


def test_a_lost_reply_of_a_reservation_another_writer_beat_is_retried(stores):
    """Our CAS failed (not applied), another writer took the offsets: the
    entry at our end offset belongs to another append, so ours did not land
    and is retried at new offsets."""
    meta, objs = stores
    other = LeaderlessLogWriter(OXIA, S3, metadata_store=meta, object_store=objs)
    with writer(stores) as w:
        failed = fail_first_control_put(meta, b'"pending":{', applied=False, meanwhile=lambda: (
            other.append_shared([SharedAppendGroup("orders", 0, [b"o1", b"o2"])]),
            other.append_shared([SharedAppendGroup("orders", 0, [b"o3"])]),
        ))
        res = append(w, b"a", b"b")
    other.close()
    assert failed
    assert res.ok and (res.start_offset, res.end_offset) == (5, 6)
    assert log_of(stores) == [b"first", b"o1", b"o2", b"o3", b"a", b"b"]


@pytest.mark.parametrize("case", ["fenced", "uninitialized", "blob_put_failed", "control_read_failed"])
def test_definite_failures_leave_nothing_in_the_log(stores, case):
    meta, objs = stores
    with writer(stores) as w:
        w._forget(w.layout.partition("orders", 0).tp)
        if case == "fenced":
            w.fence_partition("orders", 0)
            res = append(w, b"x")
            assert isinstance(res.error, PartitionFenced)
        elif case == "uninitialized":
            (res,) = w.append_shared_results([SharedAppendGroup("orders", 9, [b"x"])])
            assert isinstance(res.error, PartitionNotInitialized)
        elif case == "blob_put_failed":
            objs.buckets.clear()
            res = append(w, b"x")
            objs.buckets.add("llog")
        else:
            meta.fail_next("get", key_contains="/meta/control")
            res = append(w, b"x")
            assert isinstance(res.error, MetadataStoreError)
        assert res.error is not None and not isinstance(res.error, OutcomeUnknown)
    assert b"x" not in log_of(stores)
