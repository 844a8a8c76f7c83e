"""The tail cache: runs, gaps, limits, eviction, the shared directory, wake-ups."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from server._protocol.record_spans import spans_of, take_records
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
    w = FileTailCache(tmp_path, ns, 10_000, signals, writer=True, poll_ms=5)
    r = FileTailCache(tmp_path, ns, 10_000, TailSignals(), writer=False, poll_ms=5)
    yield w, r
    w.close()
    r.close()


def publish(cache, tp, start, payloads) -> None:
    cache.publish(tp, start, payloads)
    cache.flush()


# -- take_records ----------------------------------------------------------------------


def _taken(spans, limit: int, first_limit: int | None) -> tuple[list[tuple[int, bytes]], int]:
    got, nbytes = take_records(spans, limit, first_limit)
    return [item for span in got for item in span.items()], nbytes


def test_take_records_limits_and_oversized_first() -> None:
    items = [(1, b"x" * 40), (2, b"y" * 40), (3, b"z" * 40)]
    spans = spans_of(1, [p for _, p in items])
    assert _taken(spans, 100, 100) == (items[:2], 80)
    assert _taken(spans, 30, 30) == ([], 0)  # first too big for both limits
    assert _taken(spans, 30, 50) == (items[:1], 40)  # first fits the larger first limit
    assert _taken(spans, 0, None) == (items[:1], 40)  # nothing in the response yet: any size
    assert _taken([], 10, None) == ([], 0)
    # Across spans: the budget carries over; a span is cut inside, and nothing follows the cut.
    split = spans_of(1, [b"a" * 10, b"b" * 20]) + spans_of(3, [b"c" * 30, b"d"])
    assert _taken(split, 60, None) == ([(1, b"a" * 10), (2, b"b" * 20), (3, b"c" * 30)], 60)
    assert _taken(split, 59, None) == ([(1, b"a" * 10), (2, b"b" * 20)], 30)
    assert _taken([s.since(2) for s in split[:1]] + split[1:], 5, None) == ([(2, b"b" * 20)], 20)


@pytest.mark.parametrize("sizes", [[], [0], [0, 0, 5], [3, 0, 7, 1, 0, 12], [100] * 9])
def test_take_records_matches_a_record_by_record_walk(sizes: list[int]) -> None:
    """The binary search gives what adding one record at a time gives, for
    every limit, with and without a first-record allowance, from every offset."""
    payloads = [bytes([65 + i]) * n for i, n in enumerate(sizes)]
    for start in range(1, len(payloads) + 2):
        spans = [s.since(start) for s in spans_of(1, payloads) if s.last >= start]
        rest = list(enumerate(payloads, 1))[start - 1:]
        for limit in range(0, sum(sizes) + 3):
            for first_limit in (None, limit, limit + 50):
                want, total = [], 0
                for off, p in rest:
                    if want and total + len(p) > limit:
                        break
                    if not want and len(p) > limit and first_limit is not None and len(p) > first_limit:
                        break
                    want.append((off, p))
                    total += len(p)
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


@pytest.mark.parametrize("kind", ["memory", "file"])
def test_late_adjacent_slice_is_prepended_and_duplicates_ignored(kind: str, memory, shared) -> None:
    cache, look = (memory, memory) if kind == "memory" else shared
    publish(cache, TP, 4, recs(3, 4))  # 4..6 arrives before 1..3
    publish(cache, TP, 1, recs(3, 1))
    hit = look.lookup(TP, 1, BIG, None)
    assert [o for o, _ in hit.records] == [1, 2, 3, 4, 5, 6]
    assert hit.records == list(zip(range(1, 7), recs(3, 1) + recs(3, 4)))
    publish(cache, TP, 2, recs(2, 2))  # already known
    publish(cache, TP, 5, recs(4, 5))  # overlaps the end: 7, 8 are new
    hit = look.lookup(TP, 1, BIG, None)
    assert [o for o, _ in hit.records] == list(range(1, 9)) and hit.high_watermark == 8


@pytest.mark.parametrize("kind", ["memory", "file"])
def test_lookup_limits(kind: str, memory, shared) -> None:
    cache, look = (memory, memory) if kind == "memory" else shared
    publish(cache, TP, 1, recs(5, size=100))
    assert len(look.lookup(TP, 1, 250, 250).records) == 2
    hit = look.lookup(TP, 1, 50, 50)
    assert hit.kind == HIT and hit.records == [] and hit.high_watermark == 5
    assert len(look.lookup(TP, 1, 50, None).records) == 1  # first record alone, oversized


def test_memory_eviction_keeps_the_run_contiguous(signals: TailSignals) -> None:
    cache = MemoryTailCache(250, signals)
    for i in range(5):
        cache.publish(TP, 1 + 2 * i, recs(2, 1 + 2 * i, size=50))  # 100 bytes each
    assert cache.bytes_held <= 250
    assert cache.lookup(TP, 1, BIG, None).kind == MISS  # evicted: fall back
    hit = cache.lookup(TP, 7, BIG, None)
    assert [o for o, _ in hit.records] == [7, 8, 9, 10]
    assert cache.lookup(TP, 11, BIG, None)[:2] == (TAIL, 10)


def test_memory_slice_larger_than_the_cache_still_moves_the_tail(signals: TailSignals) -> None:
    cache = MemoryTailCache(100, signals)
    cache.publish(TP, 1, recs(2, size=10))
    cache.publish(TP, 3, recs(3, size=100))
    assert cache.lookup(TP, 1, BIG, None).kind == MISS
    assert cache.lookup(TP, 3, BIG, None).kind == MISS
    # The tail claim stays true: nothing is known past 5, not past 2.
    assert cache.lookup(TP, 6, BIG, None)[:2] == (TAIL, 5)
    assert cache.lookup(TP, 3 + 3, BIG, None).kind == TAIL


def test_null_cache_misses_but_wakes(signals: TailSignals) -> None:
    cache = NullTailCache(signals)
    waiter = signals.register([TP])
    cache.publish(TP, 1, [b"a"])
    assert cache.lookup(TP, 1, BIG, None).kind == MISS
    assert waiter.wait(1) and waiter.take_notified() == {TP}


# -- wake-ups -----------------------------------------------------------------------------


def test_publish_wakes_only_waiters_of_that_partition(memory: MemoryTailCache, signals: TailSignals) -> None:
    w0 = signals.register([TP])
    w1 = signals.register([TP1])
    memory.publish(TP, 1, [b"a"])  # notifies before it returns
    assert w0.wait(0) and w0.take_notified() == {TP}
    assert not w1.wait(0)
    signals.unregister(w0)
    memory.publish(TP, 2, [b"b"])
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
    cache = FileTailCache(tmp_path, ns, 400, signals, writer=True, poll_ms=5)
    try:
        for i in range(6):
            publish(cache, TP, 1 + 2 * i, recs(2, size=50))  # 128-byte segment files
        files = list((cache._dir / "orders" / "0").glob("*.seg"))
        assert cache.bytes_held <= 400
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
            writer.publish(TP, 1 + i, recs(1, 1 + i))
        writer.flush()
    finally:
        stop.set()
        t.join()
    assert not bad
    assert [o for o, _ in reader.lookup(TP, 1, BIG, None).records][-1] == 150
    assert not list((writer._dir / "orders" / "0").glob(".tmp-*"))
    assert os.path.exists(writer._dir / "orders" / "0" / "state")


@pytest.mark.parametrize("kind", ["memory", "file"])
def test_encoded_records_are_held_as_they_came(kind: str, memory, shared) -> None:
    """A binary produce's EncodedRecords go in without a per-record copy
    (memory: kept as they are; file: spliced into its batch) and come out
    byte for byte, overlapping a run already held included."""
    from server._protocol.produce_binary import encode_binary_produce, parse_binary_produce
    from server._protocol.codec import join_payloads

    cache, look = (memory, memory) if kind == "memory" else shared
    payloads = recs(6)
    body = encode_binary_produce([("orders", 0, payloads[:4]), ("orders", 0, payloads[4:])])
    first, second = (g.payloads for g in parse_binary_produce(body, max_records=10).groups)
    publish(cache, TP, 1, first)
    publish(cache, TP, 1, join_payloads([first, second]))  # overlaps 1-4, adds 5-6
    hit = look.lookup(TP, 1, BIG, None)
    assert hit.kind == HIT and [p for _, p in hit.records] == payloads
    if kind == "memory":
        assert memory.bytes_held == sum(len(p) for p in payloads)


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
            cache.publish(TP, 1 + 2 * i, [b"x" * 1024])  # the offset between went through another broker
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert cache.bytes_held == 1024
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
