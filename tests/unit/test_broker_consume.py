"""BrokerConsumeService over the in-memory fakes: cache first, validation of
tail claims, long-poll wake-ups, limits, one GET per shared blob.

No test here reads the clock. A long poll is observed through its waiter
(:class:`ObservedSignals`): a test acts once the request is blocked, and
checks how each wait ended (woken, or out of time). Running out of
``max_wait_ms`` is simulated: every wait then ends at once at its timeout.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Iterable

import pytest

from server._protocol.http_json import ConsumePartition, ConsumeRequest
from server._broker.consume import BrokerConsumeService
from server._broker.produce_encoding import encode_groups
from server._broker.tail_cache import MemoryTailCache, NullTailCache, TailSignals, TailWaiter
from server._config import BatchConfig, OxiaConfig, S3Config
from server._errors import ObjectNotFound, OffsetOutOfRange, PartitionNotInitialized
from server._protocol.keys import TopicPartition
from server._protocol.stored_batches import StoredBatches
from server._storage.metastore import InMemoryMetadataStore
from server._storage.objectstore import InMemoryObjectStore
from server.leaderless_log_reader import LeaderlessLogReader
from server.leaderless_log_writer import (
    BatchingProducer,
    LeaderlessLogWriter,
    SharedAppendGroup,
)
from tests._records import one_per_record, stored, stored_size

OXIA = OxiaConfig("fake:1", root_prefix="llog")
S3 = S3Config("llog")


class ObservedSignals(TailSignals):
    """TailSignals whose waiters report each wait: its timeout, and whether
    it ended woken (True) or out of time (False).

    ``time_runs_out``: every wait ends at once as if its timeout had passed
    (woken only if a notification came before), so ``max_wait_ms`` runs out
    without the test waiting for it.
    """

    def __init__(self) -> None:
        super().__init__()
        self.time_runs_out = False
        self.timeouts: list[float] = []
        self.waits: list[bool] = []
        self._entered = threading.Condition()

    def register(
        self, tps: Iterable[TopicPartition], tokens: dict[TopicPartition, object] | None = None
    ) -> TailWaiter:
        waiter = super().register(tps, tokens)
        real_wait = waiter.wait

        def wait(timeout_s: float) -> bool:
            with self._entered:
                self.timeouts.append(timeout_s)
                self._entered.notify_all()
            woke = real_wait(0 if self.time_runs_out else timeout_s)
            self.waits.append(woke)
            return woke

        waiter.wait = wait  # type: ignore[method-assign]
        return waiter

    def blocked(self, times: int = 1) -> None:
        """Until requests have started to wait ``times`` times in all."""
        with self._entered:
            assert self._entered.wait_for(lambda: len(self.timeouts) >= times, 10), (
                f"the request did not start wait number {times}"
            )


class Env:
    """A writer + producer + reader over one pair of fakes, and a consume
    service with a memory cache filled the way the broker fills it."""

    def __init__(self, cache: str = "memory", objects: InMemoryObjectStore | None = None) -> None:
        self.meta, self.objs = InMemoryMetadataStore(), objects or InMemoryObjectStore()
        self.writer = LeaderlessLogWriter(OXIA, S3, metadata_store=self.meta, object_store=self.objs)
        self.producer = BatchingProducer(self.writer, BatchConfig(max_delay_ms=1))
        self.reader = LeaderlessLogReader(OXIA, S3, metadata_store=self.meta, object_store=self.objs)
        self.signals = ObservedSignals()
        self.cache = MemoryTailCache(1 << 20, self.signals) if cache == "memory" else NullTailCache(self.signals)
        self.pending: set[TopicPartition] = set()  # partitions with a local flush "in flight"
        self._background = ThreadPoolExecutor(1, thread_name_prefix="test-long-poll")
        self.service = BrokerConsumeService(  # no log-start refresh due while a test runs
            self.reader, self.cache, self.signals, local_writes_pending=lambda tp: tp in self.pending,
            log_start_refresh_ms=60_000,
        )

    def produce(self, *groups: tuple[str, int, list[bytes] | StoredBatches]) -> list:
        """Through the producer, filling the cache (as the broker does: each
        group encoded once, as one batch unless it is batches already, and
        those very batches published)."""
        gs = [SharedAppendGroup(t, p, payloads) for t, p, payloads in groups]
        gs = encode_groups(gs, {}, self.producer.runtime.clock.now_ms())
        results = self.producer.append_shared(gs, timeout=10)
        for g, r in zip(gs, results):
            r.raise_for_error()
            self.cache.publish(g.tp, r.start_offset, g.payloads)
        return results

    def elsewhere(self, topic: str, partition: int, payloads: list[bytes]) -> None:
        """An append by 'another broker': Oxia and S3 only, not this cache."""
        self.writer.append_shared([SharedAppendGroup(topic, partition, payloads)])

    def consume(self, *parts: tuple[str, int, int], max_wait_ms: int = 0, min_bytes: int = 1,
                max_bytes: int = 1 << 30, partition_max_bytes: int = 1 << 20):
        req = ConsumeRequest(
            tuple(ConsumePartition(t, p, off, partition_max_bytes) for t, p, off in parts),
            max_wait_ms, min_bytes, max_bytes,
        )
        return self.service.consume(req)

    def long_poll(self, *parts: tuple[str, int, int], **kw) -> Future:
        """:meth:`consume` on another thread, returned once it blocks in its
        first wait: what the test does next can reach it only by a wake-up."""
        before = len(self.signals.timeouts)
        poll = self._background.submit(self.consume, *parts, **kw)
        self.signals.blocked(before + 1)
        return poll

    def storage_calls(self) -> int:
        return sum(self.meta.calls.values()) + sum(self.objs.calls.get(k, 0) for k in ("get", "range_get"))

    def close(self) -> None:
        self.service.close()  # wakes a long poll a failed test left waiting
        self._background.shutdown(wait=True)
        self.producer.close()
        self.reader.close()
        self.writer.close()


@pytest.fixture
def env():
    e = Env()
    yield e
    e.close()


def offsets(part) -> list[int]:
    return [o for o, _ in part.records]


def values(part) -> tuple[tuple[int, bytes | None], ...]:
    """``(offset, value)`` per record of ``part``."""
    return tuple((o, r.value) for o, r in part.records)


ONE = stored_size([b"a" * 100])
"""Bytes of a 100-byte record as a batch of its own."""


def test_a_cache_hit_touches_neither_oxia_nor_s3(env: Env) -> None:
    env.produce(("t", 0, [b"a", b"b", b"c"]))
    env.consume(("t", 0, 3))  # the partition's first consume reads its log start (once a second)
    before = env.storage_calls()
    (part,) = env.consume(("t", 0, 2)).partitions
    assert values(part) == ((2, b"b"), (3, b"c"))
    assert (part.next_fetch_offset, part.high_watermark) == (4, 3)
    # From inside the batch: the whole batch is the answer's bytes (Kafka semantics).
    assert part.payload_bytes == stored_size([b"a", b"b", b"c"])
    assert env.storage_calls() == before


def test_a_tail_claim_is_validated_once_and_finds_records_written_elsewhere(env: Env) -> None:
    env.produce(("t", 0, [b"a", b"b", b"c"]))
    env.elsewhere("t", 0, [b"d", b"e"])  # offsets 4, 5 through another broker
    (part,) = env.consume(("t", 0, 4), max_wait_ms=60_000).partitions
    assert env.signals.timeouts == []  # found at once, without waiting
    assert values(part) == ((4, b"d"), (5, b"e")) and part.high_watermark == 5


def test_a_confirmed_tail_waits_locally_without_polling_oxia(env: Env) -> None:
    env.produce(("t", 0, [b"a"]))
    env.consume(("t", 0, 1))  # the partition's first consume reads its log start (once a second)
    before = env.meta.calls.get("get", 0)
    env.signals.time_runs_out = True
    (part,) = env.consume(("t", 0, 2), max_wait_ms=60_000).partitions
    # One wait, for what was left of max_wait_ms, and nothing woke it.
    assert len(env.signals.timeouts) == 1 and 0 < env.signals.timeouts[0] <= 60
    assert env.signals.waits == [False]
    assert part.records == () and part.next_fetch_offset == 2 and part.error is None
    assert env.meta.calls.get("get", 0) - before == 1  # the one validation, no polling


@pytest.mark.parametrize("cache", ["memory", "off"])
def test_one_request_reads_a_partition_s_control_record_once(cache: str) -> None:
    """The log-start refresh (due at a partition's first fetch) reads the control record; the
    same request's check of the cache's tail claim (memory), or its storage read (off), uses
    that one. A claim's check counts as a refresh."""
    env = Env(cache)
    try:
        env.produce(("t", 0, [b"a"]))
        before = env.meta.calls.get("get", 0)
        (part,) = env.consume(("t", 0, 1 if cache == "off" else 2)).partitions
        assert part.error is None and values(part) == (((1, b"a"),) if cache == "off" else ())
        assert env.meta.calls.get("get", 0) - before == 1
        if cache == "memory":
            before = env.meta.calls.get("get", 0)
            env.consume(("t", 0, 2))
            assert env.meta.calls.get("get", 0) - before == 1  # the check, no refresh besides
    finally:
        env.close()


def test_long_poll_returns_when_a_record_arrives(env: Env) -> None:
    env.produce(("t", 0, [b"a"]))
    poll = env.long_poll(("t", 0, 2), max_wait_ms=60_000)
    env.produce(("t", 0, [b"b"]))
    (part,) = poll.result(timeout=10).partitions
    assert env.signals.waits == [True]  # woken by the publish, once
    assert values(part) == ((2, b"b"),)


@pytest.mark.parametrize("cache", ["memory", "off"])
def test_min_bytes_accumulates_across_wakeups(cache: str) -> None:
    env = Env(cache)
    try:
        env.produce(("t", 0, [b"a"]))
        poll = env.long_poll(("t", 0, 2), max_wait_ms=60_000, min_bytes=stored_size([b"x" * 10]) + 1)
        env.produce(("t", 0, [b"x" * 10]))
        env.signals.blocked(2)  # one batch is not enough: it waits again
        env.produce(("t", 0, [b"y" * 10]))
        (part,) = poll.result(timeout=10).partitions
        assert env.signals.waits == [True, True]
        assert values(part) == ((2, b"x" * 10), (3, b"y" * 10))
    finally:
        env.close()


@pytest.mark.parametrize("cache", ["memory", "off"])
def test_byte_limits(cache: str) -> None:
    env = Env(cache)
    try:
        # One batch per record, so the limits fall between records.
        env.produce(("t", 0, one_per_record([b"a" * 100] * 5)), ("t", 1, one_per_record([b"b" * 100] * 5)),
                    ("t", 2, [b"c" * 1000]))
        big_size = stored_size([b"c" * 1000])
        parts = env.consume(("t", 0, 1), ("t", 1, 1), partition_max_bytes=2 * ONE + ONE // 2).partitions
        assert [offsets(p) for p in parts] == [[1, 2], [1, 2]]
        assert [p.payload_bytes for p in parts] == [2 * ONE, 2 * ONE]
        parts = env.consume(("t", 0, 1), ("t", 1, 1), max_bytes=3 * ONE + ONE // 2).partitions
        assert [offsets(p) for p in parts] == [[1, 2, 3], []]
        assert parts[1].high_watermark == 5 and parts[1].next_fetch_offset == 1
        # An oversized first batch: alone when the response is empty, or when
        # it fits in what is left of max_bytes; never past max_bytes otherwise.
        (big,) = env.consume(("t", 2, 1), max_bytes=10, partition_max_bytes=10).partitions
        assert offsets(big) == [1] and big.payload_bytes == big_size
        parts = env.consume(("t", 0, 1), ("t", 2, 1), max_bytes=ONE + big_size,
                            partition_max_bytes=ONE - 1).partitions
        assert [offsets(p) for p in parts] == [[1], [1]]
        parts = env.consume(("t", 0, 1), ("t", 2, 1), max_bytes=ONE + big_size - 1,
                            partition_max_bytes=ONE - 1).partitions
        assert [offsets(p) for p in parts] == [[1], []]
    finally:
        env.close()


@pytest.mark.parametrize("cache", ["memory", "off"])
def test_partitions_of_one_shared_blob_cost_one_get(cache: str) -> None:
    env = Env(cache)
    try:
        env.produce(*[("t", p, [b"r%d" % p] * 3) for p in range(4)])  # one flush, one blob
        before = dict(env.objs.calls)
        env.cache = NullTailCache(env.signals)
        env.service.cache = env.cache  # force the storage path
        parts = env.consume(*[("t", p, 1) for p in range(4)]).partitions
        assert [p.records[0][1].value for p in parts] == [b"r0", b"r1", b"r2", b"r3"]
        gets = {k: env.objs.calls.get(k, 0) - before.get(k, 0) for k in ("get", "range_get")}
        assert gets == {"get": 0, "range_get": 1}
        # From inside a stored batch: the whole batch, its records from the offset on.
        (part,) = env.consume(("t", 1, 2)).partitions
        assert values(part) == ((2, b"r1"), (3, b"r1")) and part.payload_bytes == stored_size([b"r1"] * 3)
    finally:
        env.close()


def test_per_partition_errors(env: Env) -> None:
    env.produce(("t", 0, [b"a"]))
    parts = env.consume(("t", 0, 0), ("t", 9, 1), ("t", 0, 1), max_wait_ms=60_000).partitions
    assert env.signals.timeouts == []  # an error answers at once
    assert isinstance(parts[0].error, OffsetOutOfRange)
    assert isinstance(parts[1].error, PartitionNotInitialized)
    assert parts[2].error is None and offsets(parts[2]) == [1]


def test_an_offset_past_the_high_watermark_waits_and_keeps_its_offset(env: Env) -> None:
    env.produce(("t", 0, [b"a"]))
    env.signals.time_runs_out = True
    (part,) = env.consume(("t", 0, 7), max_wait_ms=60_000).partitions
    assert env.signals.waits == [False]  # it waited, until max_wait_ms ran out
    assert part.error is None and part.records == () and part.next_fetch_offset == 7
    assert part.high_watermark == 1


def test_a_missing_object_is_a_partition_error(env: Env) -> None:
    env.writer.initialize_partition("t", 0)
    env.elsewhere("t", 0, [b"a"])
    env.objs.objects.clear()
    (part,) = env.consume(("t", 0, 1)).partitions
    assert isinstance(part.error, ObjectNotFound)


def test_close_wakes_waiting_requests(env: Env) -> None:
    env.produce(("t", 0, [b"a"]))
    poll = env.long_poll(("t", 0, 2), max_wait_ms=60_000)
    env.service.close()
    (part,) = poll.result(timeout=10).partitions
    assert env.signals.waits == [True] and part.records == ()


def test_results_keep_request_order(env: Env) -> None:
    env.produce(("t", 1, [b"a"]), ("t", 0, [b"b"]))
    parts = env.consume(("t", 1, 1), ("t", 0, 1)).partitions
    assert [(p.topic, p.partition, values(p)) for p in parts] == [("t", 1, ((1, b"a"),)), ("t", 0, ((1, b"b"),))]


@pytest.mark.parametrize("cache", ["memory", "off"])
def test_a_partition_at_its_tail_does_not_hold_back_the_byte_budget(cache: str) -> None:
    env = Env(cache)
    try:
        env.produce(("t", 0, [b"a" * 100]), ("t", 1, one_per_record([b"b" * 100] * 3)))
        parts = env.consume(("t", 0, 2), ("t", 1, 1), max_bytes=2 * ONE + ONE // 2, partition_max_bytes=1000).partitions
        assert [offsets(p) for p in parts] == [[], [1, 2]]
    finally:
        env.close()


TP0 = TopicPartition("t", 0)


def in_flight(env: Env) -> None:
    """Records 2..3 committed in Oxia by 'our own' flush, not yet in the cache."""
    env.produce(("t", 0, [b"a"]))
    env.pending.add(TP0)
    env.elsewhere("t", 0, [b"b", b"c"])


def test_oxia_ahead_during_our_own_flush_waits_for_the_cache(env: Env) -> None:
    in_flight(env)

    def land() -> None:
        env.cache.publish(TP0, 2, stored([b"b", b"c"]))
        env.pending.discard(TP0)

    before = dict(env.objs.calls)
    poll = env.long_poll(("t", 0, 2), max_wait_ms=60_000)
    land()
    (part,) = poll.result(timeout=10).partitions
    assert env.signals.waits == [True]  # woken by our flush's publish
    assert values(part) == ((2, b"b"), (3, b"c"))
    assert env.objs.calls == before  # from the cache, not S3


def test_a_deferred_partition_reads_storage_when_our_flush_fails(env: Env) -> None:
    in_flight(env)

    def fail() -> None:
        env.pending.discard(TP0)
        env.signals.notify(TP0)

    poll = env.long_poll(("t", 0, 2), max_wait_ms=60_000)
    fail()
    (part,) = poll.result(timeout=10).partitions
    assert env.signals.waits == [True]  # woken by the failure, not out of time
    assert values(part) == ((2, b"b"), (3, b"c"))


def test_a_deferred_partition_reads_storage_at_the_deadline(env: Env) -> None:
    in_flight(env)
    env.signals.time_runs_out = True
    (part,) = env.consume(("t", 0, 2), max_wait_ms=60_000).partitions
    assert env.signals.waits == [False]  # max_wait_ms ran out, nothing woke it
    assert values(part) == ((2, b"b"), (3, b"c"))


def test_a_fetch_below_a_moved_log_start_is_refused_once_the_start_is_read_again(env: Env) -> None:
    """Retention moved the log start (SPEC 7.10) while the cache still holds the
    records: within the refresh time the broker may still answer them (its known
    start is 1); once it reads the start again, a fetch below it is
    OFFSET_OUT_OF_RANGE carrying the start, and a fetch at it is served."""
    from dataclasses import replace

    from server._errors import OffsetOutOfRange
    from server._protocol.records import ControlRecord

    env.produce(("t", 0, [b"a", b"b"]), ("t", 0, [b"c"]))
    assert [o for o, _ in values(env.consume(("t", 0, 1)).partitions[0])] == [1, 2, 3]
    keys = env.reader.layout.partition("t", 0)
    rec = env.meta.get(keys.control, keys.partition_key)
    moved = replace(ControlRecord.decode(rec.value), log_start_offset=3, log_start_at_ms=1)
    env.meta.put(keys.control, moved.encode(), keys.partition_key, expected_version=rec.version)
    (stale,) = env.consume(("t", 0, 1)).partitions  # read within the refresh time: the old start
    assert stale.error is None and stale.log_start_offset == 1
    env.service._log_start_refresh_s = 0  # as LLOG_BROKER_LOG_START_REFRESH_MS=0
    (part,) = env.consume(("t", 0, 1)).partitions
    assert isinstance(part.error, OffsetOutOfRange) and part.error.log_start_offset == 3
    assert part.log_start_offset == 3 and part.records == ()
    (part,) = env.consume(("t", 0, 3)).partitions
    assert values(part) == ((3, b"c"),) and part.log_start_offset == 3


def test_delete_records_through_this_broker_is_refused_below_at_once_and_served_from_inside_a_batch(
        env: Env) -> None:
    """DeleteRecords (SPEC 7.13) puts the start inside a batch: the broker that moved it
    refuses below it at once (no refresh due), and a fetch at it is answered from the
    tail cache and, for a batch another broker wrote, from storage, from the start on."""
    from server._broker.record_deletion import RecordDeletion
    from server._errors import OffsetOutOfRange, UnknownTopic
    from server._runtime import REAL_RUNTIME

    env.produce(("t", 0, [b"a", b"b", b"c", b"d"]))
    env.writer.initialize_partition("t", 1)
    env.elsewhere("t", 1, [b"w", b"x", b"y", b"z"])

    class Topics:
        def live_partition(self, topic, partition):
            if partition > 1:
                raise UnknownTopic("no such partition", topic=topic, partition=partition)
            return TopicPartition(topic, partition)

    deletion = RecordDeletion(env.meta, env.reader.layout, Topics(), REAL_RUNTIME, env.service)
    assert [deletion.delete("t", p, 3).log_start_offset for p in (0, 1)] == [3, 3]
    with pytest.raises(UnknownTopic):
        deletion.delete("t", 2, 1)
    for p in (0, 1):
        (below,) = env.consume(("t", p, 2)).partitions
        assert isinstance(below.error, OffsetOutOfRange) and below.log_start_offset == 3
    (cached,) = env.consume(("t", 0, 3)).partitions
    (stored,) = env.consume(("t", 1, 3)).partitions
    assert values(cached) == ((3, b"c"), (4, b"d")) and values(stored) == ((3, b"y"), (4, b"z"))
