"""The consume index cache: a consumer catching up scans the Oxia index
once, not once per request, and a compaction or vacuum at any point of a
catch-up never hides, repeats or reorders a record (the cached entries may
name objects the vacuum deleted)."""

from __future__ import annotations

import pytest

from server._broker.index_cache import IndexCache
from server._protocol.keys import TopicPartition
from server.leaderless_log_compactor import CompactionOutcome, LeaderlessLogCompactor
from server.leaderless_log_vacuum import Vacuum
from tests._records import one_per_record, stored_size
from tests.unit.test_broker_consume import OXIA, S3, Env, values
from tests.unit.test_vacuum import Objects

APPENDS, PER_APPEND, SIZE = 12, 3, 10
PAYLOADS = [bytes([65 + i % 26]) * SIZE for i in range(APPENDS * PER_APPEND)]
ONE = stored_size([b"x" * SIZE])
"""Bytes of one record as a batch of its own: the appends store one batch per
record, so a consumer's byte limit can stop it inside an index entry."""


@pytest.fixture
def env():
    e = Env("off", objects=Objects())  # no tail cache: every read goes to Oxia and S3
    e.writer.initialize_partition("t", 0)
    for i in range(APPENDS):  # one index entry per append
        e.elsewhere("t", 0, one_per_record(PAYLOADS[i * PER_APPEND:(i + 1) * PER_APPEND]))
    yield e
    e.close()


class Consumer:
    """Reads ``t:0`` a few records per request and checks each answer continues the last."""

    def __init__(self, env: Env, records_per_request: int = 2) -> None:
        self.env = env
        self.next = 1
        self.got: list[bytes] = []
        self.pmax = records_per_request * ONE

    def step(self) -> None:
        (part,) = self.env.consume(("t", 0, self.next), partition_max_bytes=self.pmax).partitions
        assert part.error is None, part.error
        offsets = [o for o, _ in part.records]
        assert offsets == list(range(self.next, self.next + len(offsets))), "a gap, a repeat or a reordering"
        assert part.next_fetch_offset == self.next + len(offsets)
        self.got += [r.value for _, r in part.records]
        self.next = part.next_fetch_offset

    def drain(self) -> list[bytes]:
        while self.next <= len(PAYLOADS):
            self.step()
        return self.got


def scans(env: Env) -> int:
    return env.meta.calls.get("range_scan", 0)


def test_a_catch_up_scans_the_index_once(env: Env) -> None:
    c = Consumer(env)
    c.step()
    assert scans(env) == 1
    assert c.drain() == PAYLOADS
    assert scans(env) == 1  # 18 requests, one scan: the rest came from the cache
    assert env.service.metrics.snapshot()["counters"]["consume_index_cache_lookups_total"] == {
        "result=miss": 1, "result=hit": 17,
    }
    # New records: the next scan starts past the cached entries.
    env.elsewhere("t", 0, [b"new"])
    (part,) = env.consume(("t", 0, c.next)).partitions
    assert values(part) == ((len(PAYLOADS) + 1, b"new"),) and scans(env) == 2
    # A consumer elsewhere in the log: resolved anew, the answer exact.
    (part,) = env.consume(("t", 0, 5), partition_max_bytes=ONE).partitions
    assert values(part) == ((5, PAYLOADS[4]),)


STEPS = ("blob_written", "record_created", "end_key_rewritten", "lower_keys_deleted", "cursor_advanced",
         "record_deleted")


@pytest.mark.parametrize("step", STEPS)
def test_compaction_and_vacuum_racing_a_catch_up_never_hide_records(
    env: Env, step: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A consumer has cached every WAL entry; at each durable step of a
    compaction (and after the vacuum that deletes the WAL objects) it reads
    on, and a second consumer starts over from offset 1."""
    index = env.service._storage.index
    forgotten: list[TopicPartition] = []
    forget = index.forget
    monkeypatch.setattr(index, "forget", lambda tp: (forgotten.append(tp), forget(tp)))
    first = Consumer(env)
    first.step()

    def hook(name: str) -> None:
        if name == step:
            first.step()

    with LeaderlessLogCompactor(OXIA, S3, metadata_store=env.meta, object_store=env.objs, step_hook=hook) as c:
        assert c.compact_once("t", 0).outcome == CompactionOutcome.COMPACTED
    first.step()
    with Vacuum(OXIA, S3, grace_ms=0, allow_unsafe_grace=True, now_ms=lambda: 2**62, metadata_store=env.meta, object_store=env.objs) as v:
        report = v.run_once()
    assert any(d.kind == "wal-shared" for d in report.deleted)  # the cached entries now name deleted objects
    assert first.drain() == PAYLOADS
    assert forgotten == [TopicPartition("t", 0)]  # a cached entry met its deleted object, once
    assert Consumer(env, records_per_request=5).drain() == PAYLOADS


def test_the_cache_holds_at_most_its_bound(env: Env) -> None:
    cache = IndexCache(env.reader, env.service.metrics, max_batches=5)
    env.writer.initialize_partition("t", 1)
    env.elsewhere("t", 1, [b"x"])
    control = env.reader.control("t", 0)
    assert len(list(cache.batches(TopicPartition("t", 0), 1, control))) == APPENDS
    assert [b.end_offset for b in cache.batches(TopicPartition("t", 0), 34, control)] == [36]  # the newest kept
    assert cache.batches(TopicPartition("t", 0), 1, control).__next__().start_offset == 1  # older ones: scanned
    list(cache.batches(TopicPartition("t", 1), 1, env.reader.control("t", 1)))
    assert cache._held <= 5
