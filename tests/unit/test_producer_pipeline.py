"""The BatchingProducer's pipelined flushes: the PUT of one flush overlaps the
commits of the one before, commits keep the order flushes were taken in (a
partition's offsets follow submission order), and a failed PUT fails only
its own flush."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from server._config import BatchConfig, OxiaConfig, S3Config
from server._errors import ObjectStoreError
from server._storage.metastore import InMemoryMetadataStore
from server._storage.objectstore import InMemoryObjectStore
from server.leaderless_log_reader import LeaderlessLogReader
from server.leaderless_log_writer import BatchingProducer, LeaderlessLogWriter, SharedAppendGroup
from tests._exposition import sample_value

OXIA = OxiaConfig("fake:1", root_prefix="llog")
S3 = S3Config("llog")
WAIT_S = 10


class GatedWriter(LeaderlessLogWriter):
    """Each stage (PUT) and commit can be held at a gate; ``calls`` records the order they began."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls: list[str] = []
        self.stage_gates: list[threading.Event] = []
        self.commit_gates: list[threading.Event] = []
        self.began = threading.Condition()

    def _gate(self, kind: str, gates: list[threading.Event]) -> None:
        with self.began:
            n = sum(1 for c in self.calls if c.startswith(kind))
            self.calls.append(f"{kind}{n + 1}")
            self.began.notify_all()
        if n < len(gates):
            assert gates[n].wait(WAIT_S), f"the test never opened {kind} {n + 1}"

    def stage_shared(self, groups):
        self._gate("put", self.stage_gates)
        return super().stage_shared(groups)

    def commit_staged(self, staged):
        self._gate("commit", self.commit_gates)
        return super().commit_staged(staged)

    def wait_for(self, call: str) -> None:
        with self.began:
            assert self.began.wait_for(lambda: call in self.calls, WAIT_S), f"{call} never began: {self.calls}"


@pytest.fixture
def stores():
    return InMemoryMetadataStore(), InMemoryObjectStore()


def _producer(stores, depth: int) -> tuple[GatedWriter, BatchingProducer]:
    meta, objs = stores
    writer = GatedWriter(OXIA, S3, metadata_store=meta, object_store=objs)
    producer = BatchingProducer(writer, BatchConfig(max_bytes=1, max_delay_ms=0, max_inflight_flushes=depth),
                                owns_writer=True)
    return writer, producer


def _offsets(future) -> list[tuple[int, int]]:
    return [(r.start_offset, r.end_offset) for r in future.result(WAIT_S)]


def test_the_next_put_overlaps_the_commits_before_it(stores):
    writer, producer = _producer(stores, depth=2)
    release_commit = threading.Event()
    writer.commit_gates.append(release_commit)
    with producer:
        first = producer.submit([SharedAppendGroup("t", 0, [b"a", b"b"])])
        writer.wait_for("commit1")  # flush 1 is committing, held
        second = producer.submit([SharedAppendGroup("t", 0, [b"c"])])
        writer.wait_for("put2")  # ... and flush 2's PUT ran meanwhile
        assert not first.done() and not second.done()
        release_commit.set()
        assert _offsets(first) == [(1, 2)] and _offsets(second) == [(3, 3)]
    assert writer.calls[:3] == ["put1", "commit1", "put2"]


def test_commits_keep_the_order_flushes_were_taken_in(stores):
    writer, producer = _producer(stores, depth=2)
    slow_put = threading.Event()
    writer.stage_gates.append(slow_put)
    with producer:
        first = producer.submit([SharedAppendGroup("t", 0, [b"first"])])
        writer.wait_for("put1")
        second = producer.submit([SharedAppendGroup("t", 0, [b"second"])])
        writer.wait_for("put2")  # the second PUT finishes first ...
        assert "commit1" not in writer.calls  # ... but nothing commits before flush 1
        slow_put.set()
        assert _offsets(first) == [(1, 1)] and _offsets(second) == [(2, 2)]
    meta, objs = stores
    with LeaderlessLogReader(OXIA, S3, metadata_store=meta, object_store=objs) as reader:
        assert [r.payload for r in reader.iter_from("t", 0, 1)] == [b"first", b"second"]


def test_one_flush_at_a_time_waits_for_the_commits(stores):
    writer, producer = _producer(stores, depth=1)
    release_commit = threading.Event()
    writer.commit_gates.append(release_commit)
    with producer:
        first = producer.submit([SharedAppendGroup("t", 0, [b"a"])])
        writer.wait_for("commit1")
        second = producer.submit([SharedAppendGroup("t", 0, [b"b"])])
        assert "put2" not in writer.calls
        release_commit.set()
        assert _offsets(first) == [(1, 1)] and _offsets(second) == [(2, 2)]
    assert writer.calls[:3] == ["put1", "commit1", "put2"]


class FailingPuts(InMemoryObjectStore):
    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures

    def put(self, bucket: str, key: str, data: bytes) -> None:
        if self.failures:
            self.failures -= 1
            raise ObjectStoreError("S3 unavailable")
        super().put(bucket, key, data)


def test_a_failed_put_fails_only_its_own_flush():
    writer, producer = _producer((InMemoryMetadataStore(), FailingPuts(1)), depth=2)
    with producer:
        (failed,) = producer.submit([SharedAppendGroup("t", 0, [b"lost"])]).result(WAIT_S)
        (ok,) = producer.submit([SharedAppendGroup("t", 0, [b"kept"])]).result(WAIT_S)
    assert isinstance(failed.error, ObjectStoreError) and ok.error is None and ok.start_offset == 1


def test_a_flush_request_flushes_without_waiting_out_the_batch_delay(stores):
    """A submit with ``flush`` (a client's producer.flush()) starts the flush
    at once: with an hour of batch delay the plain submit stays queued until
    the flushing one arrives, then both commit, in submission order."""
    meta, objs = stores
    writer = LeaderlessLogWriter(OXIA, S3, metadata_store=meta, object_store=objs)
    producer = BatchingProducer(writer, BatchConfig(max_delay_ms=3_600_000), owns_writer=True)
    try:
        plain = producer.submit([SharedAppendGroup("t", 0, [b"a"])])
        assert not plain.done()
        flushing = producer.submit([SharedAppendGroup("t", 0, [b"b", b"c"])], flush=True)
        assert _offsets(flushing) == [(2, 3)] and _offsets(plain) == [(1, 1)]
        text = producer.metrics.prometheus_text()
        assert sample_value(text, "llog_batcher_flush_requests_total") == 1
    finally:
        producer.close(WAIT_S)
