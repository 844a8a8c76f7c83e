"""The tail cache: runs, gaps, limits, eviction, the shared directory, wake-ups."""

from __future__ import annotations

import os
import struct
import threading
from pathlib import Path

import pytest

from server._protocol.record_spans import spans_of, take_records
from server._protocol.stored_batches import StoredBatches
from server._broker.tail_cache import (
    HIT,
    MISS,
    TAIL,
    MemoryTailCache,
    NullTailCache,
    TailSignals,
)
from server._broker.tail_cache_file import FileTailCache, namespace_key
from server._errors import InvalidRequest
from server._protocol.keys import TopicPartition
from tests._records import one_per_record, stored, stored_size

TP = TopicPartition("orders", 0)
TP1 = TopicPartition("orders", 1)
BIG = 1 << 30


def recs(n: int, start: int = 1, size: int = 10) -> list[bytes]:
    return [bytes([65 + (start + i) % 26]) * size for i in range(n)]


@pytest.fixture
def signals() -> TailSignals:
    return TailSignals()


@pytest.fixture
def memory(signals: TailSignals) -> MemoryTailCache:
    return MemoryTailCache(10_000, signals)


@pytest.fixture
def shared(tmp_path: Path, signals: TailSignals):
    """A writer cache and a reader cache (own signals) on one directory."""
    ns = namespace_key("oxia:1", "default", "llog")
    w = FileTailCache(tmp_path, ns, 1 << 20, signals, writer=True, poll_ms=5)
    r = FileTailCache(tmp_path, ns, 1 << 20, TailSignals(), writer=False, poll_ms=5)
    yield w, r
    w.close()
    r.close()


def publish(cache, tp, start, payloads) -> None:
    """``payloads`` (values: one batch, as a produced group; or StoredBatches) published and flushed."""
    cache.publish(tp, start, payloads if isinstance(payloads, StoredBatches) else stored(payloads))
    cache.flush()


# -- take_records ----------------------------------------------------------------------


def _taken(spans, limit: int, first_limit: int | None) -> tuple[list[tuple[int, bytes]], int]:
    got, nbytes = take_records(spans, limit, first_limit)
    return [(offset, r.value) for span in got for offset, r in span.items()], nbytes


def size(value: bytes) -> int:
    """Bytes of ``value`` as a batch of its own (the unit of the limits)."""
    return stored_size([value])


def test_take_records_limits_and_oversized_first() -> None:
    items = [(1, b"x" * 40), (2, b"y" * 40), (3, b"z" * 40)]
    spans = spans_of(1, one_per_record([p for _, p in items]))
    one = size(b"x" * 40)
    assert _taken(spans, 2 * one + one // 2, 2 * one + one // 2) == (items[:2], 2 * one)
    assert _taken(spans, one - 1, one - 1) == ([], 0)  # first too big for both limits
    assert _taken(spans, one - 1, one) == (items[:1], one)  # first fits the larger first limit
    assert _taken(spans, 0, None) == (items[:1], one)  # nothing in the response yet: any size
    assert _taken([], 10, None) == ([], 0)
    # Across spans: the budget carries over; a span is cut inside, and nothing follows the cut.
    split = spans_of(1, one_per_record([b"a" * 10, b"b" * 20])) + spans_of(3, one_per_record([b"c" * 30, b"d"]))
    three = size(b"a" * 10) + size(b"b" * 20) + size(b"c" * 30)
    assert _taken(split, three, None) == ([(1, b"a" * 10), (2, b"b" * 20), (3, b"c" * 30)], three)
    assert _taken(split, three - 1, None) == ([(1, b"a" * 10), (2, b"b" * 20)], three - size(b"c" * 30))
    assert _taken([s.since(2) for s in split[:1]] + split[1:], 5, None) == ([(2, b"b" * 20)], size(b"b" * 20))


def test_take_records_moves_whole_batches() -> None:
    """The unit is the batch (Kafka): a fetch from inside a batch gets the whole
    batch (its bytes counted), the records before the fetch offset skipped by
    the reader; a batch is never split by a limit."""
    values = [b"a" * 10, b"b" * 10, b"c" * 10]
    batch = stored(values)
    (span,) = spans_of(1, StoredBatches.join([batch, stored([b"d" * 10])]))
    inside = span.since(2)
    assert (inside.first, inside.batch_base, inside.last, inside.count) == (2, 1, 4, 3)
    assert inside.payload_bytes == span.payload_bytes  # the first batch is still whole
    assert _taken([inside], batch.nbytes, None) == ([(2, b"b" * 10), (3, b"c" * 10)], batch.nbytes)
    assert _taken([inside], batch.nbytes - 1, batch.nbytes - 1) == ([], 0)  # never a part of a batch
    assert _taken([inside], 0, None) == ([(2, b"b" * 10), (3, b"c" * 10)], batch.nbytes)  # oversized first
    assert _taken([span.since(4)], 1 << 20, None) == ([(4, b"d" * 10)], size(b"d" * 10))


@pytest.mark.parametrize("sizes", [[], [0], [0, 0, 5], [3, 0, 7, 1, 0, 12], [100] * 9])
def test_take_records_matches_a_record_by_record_walk(sizes: list[int]) -> None:
    """The binary search gives what adding one batch (here: one record) at a
    time gives, for every limit that matters (each sum of consecutive batch
    sizes, one either side, and so for the first-batch allowance of 50 more),
    with and without a first-batch allowance, from every offset."""
    payloads = [bytes([65 + i]) * n for i, n in enumerate(sizes)]
    batches = one_per_record(payloads)
    batch_sizes = [size(p) for p in payloads]
    sums = {sum(batch_sizes[i:j]) for i in range(len(sizes) + 1) for j in range(i, len(sizes) + 1)}
    limits = sorted({max(0, n + d) for n in sums for d in (-51, -50, -49, -1, 0, 1)} | {batches.nbytes + 2})
    for start in range(1, len(payloads) + 2):
        spans = [s.since(start) for s in spans_of(1, batches) if s.last >= start]
        rest = list(enumerate(payloads, 1))[start - 1:]
        for limit in limits:
            for first_limit in (None, limit, limit + 50):
                want, total = [], 0
                for off, p in rest:
                    n = size(p)
                    if want and total + n > limit:
                        break
                    if not want and n > limit and first_limit is not None and n > first_limit:
                        break
                    want.append((off, p))
                    total += n
                assert _taken(spans, limit, first_limit) == (want, total), (start, limit, first_limit)


# -- memory ------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["memory", "file"])
def test_hit_tail_and_miss(kind: str, memory, shared) -> None:
    cache, look = (memory, memory) if kind == "memory" else shared
    assert look.lookup(TP, 1, BIG, None).kind == MISS
    publish(cache, TP, 1, recs(3))
    publish(cache, TP, 4, recs(2, 4))
    hit = look.lookup(TP, 2, BIG, None)
    assert hit.kind == HIT and hit.high_watermark == 5
    assert hit.records == [(o, p) for o, p in zip(range(2, 6), (recs(3) + recs(2, 4))[1:])]
    assert look.lookup(TP, 6, BIG, None)[:2] == (TAIL, 5)
    assert look.lookup(TP, 7, BIG, None).kind == MISS  # past the known tail: ask Oxia
    assert look.lookup(TP1, 1, BIG, None).kind == MISS


@pytest.mark.parametrize("kind", ["memory", "file"])
def test_gap_starts_a_new_run(kind: str, memory, shared) -> None:
    cache, look = (memory, memory) if kind == "memory" else shared
    publish(cache, TP, 1, recs(3))
    publish(cache, TP, 10, recs(2, 10))  # 4..9 were written through another broker
    assert look.lookup(TP, 2, BIG, None).kind == MISS
    assert look.lookup(TP, 4, BIG, None).kind == MISS
    hit = look.lookup(TP, 10, BIG, None)
    assert hit.kind == HIT and [o for o, _ in hit.records] == [10, 11]
    assert look.lookup(TP, 12, BIG, None)[:2] == (TAIL, 11)


def follow_each_other(hit) -> bool:
    """Whether the batches of a HIT's spans hold consecutive offsets, no
    offset twice (what the binary consume answer's baseOffsets must do)."""
    return all(b.batch_base == a.last + 1 for a, b in zip(hit.spans, hit.spans[1:]))


@pytest.mark.parametrize("kind", ["memory", "file"])
def test_late_adjacent_slice_is_prepended_and_duplicates_ignored(kind: str, memory, shared) -> None:
    cache, look = (memory, memory) if kind == "memory" else shared
    publish(cache, TP, 4, recs(3, 4))  # 4..6 arrives before 1..3
    publish(cache, TP, 1, recs(3, 1))
    hit = look.lookup(TP, 1, BIG, None)
    assert [o for o, _ in hit.records] == [1, 2, 3, 4, 5, 6]
    assert hit.records == list(zip(range(1, 7), recs(3, 1) + recs(3, 4)))
    publish(cache, TP, 2, recs(2, 2))  # already known
    publish(cache, TP, 5, one_per_record(recs(4, 5)))  # overlaps the end at a batch boundary: 7, 8 are new
    hit = look.lookup(TP, 1, BIG, None)
    assert [o for o, _ in hit.records] == list(range(1, 9)) and hit.high_watermark == 8
    assert hit.records == list(zip(range(1, 9), recs(8, 1))) and follow_each_other(hit)


@pytest.mark.parametrize("kind", ["memory", "file"])
def test_a_slice_overlapping_the_end_inside_a_batch_restarts_the_run_at_that_batch(
    kind: str, memory, shared
) -> None:
    """A batch is never split, and kept whole behind the run's own 5, 6 it would
    answer them twice: the run starts over at the batch."""
    cache, look = (memory, memory) if kind == "memory" else shared
    publish(cache, TP, 1, recs(3, 1))
    publish(cache, TP, 4, recs(3, 4))
    publish(cache, TP, 5, recs(4, 5))  # one batch 5..8: 7, 8 are new
    assert look.lookup(TP, 4, BIG, None).kind == MISS
    hit = look.lookup(TP, 5, BIG, None)
    assert hit.kind == HIT and hit.high_watermark == 8
    assert hit.records == list(zip(range(5, 9), recs(4, 5))) and follow_each_other(hit)
    assert look.lookup(TP, 9, BIG, None)[:2] == (TAIL, 8)


@pytest.mark.parametrize("kind", ["memory", "file"])
def test_lookup_limits(kind: str, memory, shared) -> None:
    cache, look = (memory, memory) if kind == "memory" else shared
    publish(cache, TP, 1, one_per_record(recs(5, size=100)))
    one = stored_size(recs(1, size=100))
    assert len(look.lookup(TP, 1, 2 * one + one // 2, 2 * one + one // 2).records) == 2
    hit = look.lookup(TP, 1, 50, 50)
    assert hit.kind == HIT and hit.records == [] and hit.high_watermark == 5
    assert len(look.lookup(TP, 1, 50, None).records) == 1  # first batch alone, oversized
    # One batch of several records is never split by a limit.
    publish(cache, TP, 6, recs(3, 6, size=100))
    assert look.lookup(TP, 7, 50, None).records == list(zip((7, 8), recs(2, 7, size=100)))
    assert look.lookup(TP, 7, stored_size(recs(3, size=100)) - 1, 0).records == []


def test_memory_eviction_keeps_the_run_contiguous(signals: TailSignals) -> None:
    each = stored_size(recs(2, size=50))
    cache = MemoryTailCache(each * 5 // 2, signals)  # room for two slices, not three
    for i in range(5):
        cache.publish(TP, 1 + 2 * i, stored(recs(2, 1 + 2 * i, size=50)))
    assert cache.bytes_held == 2 * each
    assert cache.lookup(TP, 1, BIG, None).kind == MISS  # evicted: fall back
    hit = cache.lookup(TP, 7, BIG, None)
    assert [o for o, _ in hit.records] == [7, 8, 9, 10]
    assert cache.lookup(TP, 11, BIG, None)[:2] == (TAIL, 10)


def test_memory_slice_larger_than_the_cache_still_moves_the_tail(signals: TailSignals) -> None:
    cache = MemoryTailCache(stored_size(recs(2, size=10)), signals)
    cache.publish(TP, 1, stored(recs(2, size=10)))
    assert cache.lookup(TP, 1, BIG, None).kind == HIT  # a slice of the cache's size is held
    cache.publish(TP, 3, stored(recs(3, size=100)))
    assert cache.lookup(TP, 1, BIG, None).kind == MISS
    assert cache.lookup(TP, 3, BIG, None).kind == MISS
    # The tail claim stays true: nothing is known past 5, not past 2.
    assert cache.lookup(TP, 6, BIG, None)[:2] == (TAIL, 5)
    assert cache.lookup(TP, 3 + 3, BIG, None).kind == TAIL


def test_null_cache_misses_but_wakes(signals: TailSignals) -> None:
    cache = NullTailCache(signals)
    waiter = signals.register([TP])
    cache.publish(TP, 1, stored([b"a"]))
    assert cache.lookup(TP, 1, BIG, None).kind == MISS
    assert waiter.wait(1) and waiter.take_notified() == {TP}


# -- wake-ups -----------------------------------------------------------------------------


def test_publish_wakes_only_waiters_of_that_partition(memory: MemoryTailCache, signals: TailSignals) -> None:
    w0 = signals.register([TP])
    w1 = signals.register([TP1])
    memory.publish(TP, 1, stored([b"a"]))  # notifies before it returns
    assert w0.wait(0) and w0.take_notified() == {TP}
    assert not w1.wait(0)
    signals.unregister(w0)
    memory.publish(TP, 2, stored([b"b"]))
    assert not w0.wait(0)


def test_close_wakes_everyone(signals: TailSignals) -> None:
    w = signals.register([TP])
    signals.close()
    assert w.wait(1)
    assert signals.register([TP1]).wait(0)  # registering after close returns at once


def test_file_poller_wakes_a_reader_process_waiter(shared) -> None:
    writer, _ = shared
    reader_signals = TailSignals()
    reader = FileTailCache(writer._dir.parents[1], writer._dir.name, 10_000, reader_signals, writer=False, poll_ms=5)
    try:
        waiter = reader_signals.register([TP], {TP: reader.watch_token(TP)})
        publish(writer, TP, 1, [b"a"])
        assert waiter.wait(10), "the poller did not notice the publish"
        assert waiter.take_notified() == {TP}
        assert reader.lookup(TP, 1, BIG, None).records == [(1, b"a")]
    finally:
        reader.close()


# -- the shared directory ------------------------------------------------------------------


def test_file_entries_are_whole_files_under_the_validated_topic(shared, tmp_path: Path) -> None:
    writer, reader = shared
    publish(writer, TP, 1, recs(3))
    pdir = writer._dir / "orders" / "0"
    names = sorted(p.name for p in pdir.iterdir())
    assert names == [".lock", "00000000000000000001-00000000000000000003.seg", "state"]
    # A segment: the i64 offset of its first batch's first record, then the batches as stored.
    seg = (pdir / names[1]).read_bytes()
    assert seg == struct.pack(">q", 1) + bytes(stored(recs(3)).data)
    assert str(pdir).startswith(str(tmp_path))
    with pytest.raises(InvalidRequest):
        TopicPartition("..", 0)
    with pytest.raises(InvalidRequest):
        TopicPartition("a/b", 0)


def test_corrupt_or_missing_files_are_misses(shared) -> None:
    writer, reader = shared
    publish(writer, TP, 1, recs(3))
    pdir = writer._dir / "orders" / "0"
    seg = pdir / "00000000000000000001-00000000000000000003.seg"
    data = seg.read_bytes()
    seg.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))  # a flipped bit
    assert reader.lookup(TP, 1, BIG, None).kind == MISS
    seg.write_bytes(struct.pack(">q", 2) + data[8:])  # first record after the name's start
    assert reader.lookup(TP, 1, BIG, None).kind == MISS
    seg.write_bytes(struct.pack(">q", 0) + data[8:])  # one record short of what the name says
    assert reader.lookup(TP, 1, BIG, None).kind == MISS
    seg.write_bytes(data)
    assert reader.lookup(TP, 1, BIG, None).records == list(zip((1, 2, 3), recs(3)))  # the damage was all
    seg.write_bytes(data[:10])  # torn (cannot happen through os.replace, but still)
    assert reader.lookup(TP, 1, BIG, None).kind == MISS
    seg.unlink()
    assert reader.lookup(TP, 1, BIG, None).kind == MISS
    (pdir / "state").write_text("garbage")
    assert reader.lookup(TP, 4, BIG, None).kind == MISS
    (pdir / "state").unlink()
    assert reader.lookup(TP, 4, BIG, None).kind == MISS


def test_file_eviction_bounds_bytes_and_updates_the_state(tmp_path: Path, signals: TailSignals) -> None:
    ns = namespace_key("oxia:1", "default", "llog")
    each = 8 + stored_size(recs(2, size=50))  # a segment file: its offset, then the batch
    cache = FileTailCache(tmp_path, ns, 3 * each + each // 2, signals, writer=True, poll_ms=5)
    try:
        for i in range(6):
            publish(cache, TP, 1 + 2 * i, recs(2, size=50))
        files = list((cache._dir / "orders" / "0").glob("*.seg"))
        assert cache.bytes_held == 3 * each
        assert sum(f.stat().st_size for f in files) == cache.bytes_held
        assert cache.lookup(TP, 1, BIG, None).kind == MISS
        assert [o for o, _ in cache.lookup(TP, 9, BIG, None).records] == [9, 10, 11, 12]
    finally:
        cache.close()


def test_a_new_writer_clears_what_an_old_one_left(tmp_path: Path, signals: TailSignals) -> None:
    ns = namespace_key("oxia:1", "default", "llog")
    old = FileTailCache(tmp_path, ns, 10_000, signals, writer=True)
    publish(old, TP, 1, recs(3))
    old.close()
    new = FileTailCache(tmp_path, ns, 10_000, signals, writer=True)
    try:
        assert new.lookup(TP, 1, BIG, None).kind == MISS
    finally:
        new.close()


def test_logs_do_not_share_entries(tmp_path: Path, signals: TailSignals) -> None:
    a = FileTailCache(tmp_path, namespace_key("oxia:1", "default", "a"), 10_000, signals, writer=True)
    b = FileTailCache(tmp_path, namespace_key("oxia:1", "default", "b"), 10_000, signals, writer=True)
    try:
        publish(a, TP, 1, [b"a"])
        assert b.lookup(TP, 1, BIG, None).kind == MISS
    finally:
        a.close()
        b.close()


def test_readers_never_see_a_torn_entry_while_a_writer_publishes(shared) -> None:
    writer, reader = shared
    stop = threading.Event()
    bad: list[str] = []

    def read() -> None:
        while not stop.is_set():
            look = reader.lookup(TP, 1, BIG, None)
            if look.kind == HIT:
                offs = [o for o, _ in look.records]
                if offs != list(range(1, len(offs) + 1)) or any(p != recs(1, o)[0] for o, p in look.records):
                    bad.append(repr(offs[:5]))

    t = threading.Thread(target=read)
    t.start()
    try:
        for i in range(150):
            writer.publish(TP, 1 + i, stored(recs(1, 1 + i)))
        writer.flush()
    finally:
        stop.set()
        t.join()
    assert not bad
    assert [o for o, _ in reader.lookup(TP, 1, BIG, None).records][-1] == 150
    assert not list((writer._dir / "orders" / "0").glob(".tmp-*"))
    assert os.path.exists(writer._dir / "orders" / "0" / "state")


def held_bytes(hit) -> bytes:
    """The stored bytes of the batches a lookup answered with."""
    return b"".join(
        bytes(memoryview(s.batches.data)[s.batches.byte_starts[s.lo]:s.batches.byte_starts[s.hi]]) for s in hit.spans
    )


@pytest.mark.parametrize("kind", ["memory", "file"])
def test_encoded_records_are_held_as_they_came(kind: str, memory, shared) -> None:
    """A binary produce's batches go in as they are (memory: the very
    batches; file: copied whole into the segment) and come out byte for byte,
    overlapping a run already held included."""
    from server._protocol.produce_binary import encode_binary_produce_v2, parse_binary_produce

    cache, look = (memory, memory) if kind == "memory" else shared
    payloads = recs(6)
    sent = [stored(payloads[:4], ts=7), stored(payloads[4:], ts=8)]
    body = encode_binary_produce_v2([("orders", 0, bytes(b.data)) for b in sent])
    first, second = (g.payloads for g in parse_binary_produce(body, max_records=10, version=2).groups)
    publish(cache, TP, 1, first)
    publish(cache, TP, 1, StoredBatches.join([first, second]))  # overlaps 1-4, adds 5-6
    hit = look.lookup(TP, 1, BIG, None)
    assert hit.kind == HIT and [p for _, p in hit.records] == payloads
    assert held_bytes(hit) == b"".join(bytes(b.data) for b in sent)
    assert [r.timestamp_ms for s in hit.spans for _, r in s.items()] == [7] * 4 + [8] * 2
    if kind == "memory":
        assert memory.bytes_held == sum(b.nbytes for b in sent)


# -- runs dropped at a gap are forgotten ------------------------------------------------------------


def test_memory_runs_dropped_at_a_gap_do_not_keep_their_records(signals: TailSignals) -> None:
    """With two owners a partition's offsets alternate between brokers, so each
    publish finds a gap and drops the run before it, far below the byte cap. The
    records of a dropped run must go with it (they stayed referenced from the
    eviction queue, which only moves past the cap: a broker's memory grew by
    every record it produced, ~170 MiB/hour at 300 records/s in the soak run)."""
    import tracemalloc

    cache = MemoryTailCache(1 << 20, signals)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(4000):
            cache.publish(TP, 1 + 2 * i, stored([b"x" * 1024]))  # the offset between went through another broker
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert cache.bytes_held == stored_size([b"x" * 1024])
    assert grown < 1 << 20, f"{grown / 2**20:.1f} MiB held for 1 KiB of cached records"
    hit = cache.lookup(TP, 1 + 2 * 3999, BIG, None)
    assert hit.kind == HIT and hit.records == [(1 + 2 * 3999, b"x" * 1024)]
    assert cache.lookup(TP, 1, BIG, None).kind == MISS


def test_file_runs_dropped_at_a_gap_leave_no_bookkeeping(tmp_path: Path, signals: TailSignals) -> None:
    ns = namespace_key("oxia:1", "default", "llog")
    cache = FileTailCache(tmp_path, ns, 1 << 20, signals, writer=True, poll_ms=5)
    try:
        for i in range(600):
            publish(cache, TP, 1 + 2 * i, recs(1, 1 + 2 * i))
        assert len(list((cache._dir / "orders" / "0").glob("*.seg"))) == 1
        assert len(cache._fifo) <= 100, "an eviction entry kept for every segment ever written"
        assert [o for o, _ in cache.lookup(TP, 1 + 2 * 599, BIG, None).records] == [1 + 2 * 599]
    finally:
        cache.close()
