"""Writer, BatchingProducer and reader logic over the in-memory fakes.

These pin the protocol's step order and crash points precisely (a fault can
be injected into exactly one call); the same behaviour is tested against the
real Oxia and S3 in tests/integration.
"""

from __future__ import annotations

import threading

import pytest

from server._config import BatchConfig, OxiaConfig, S3Config
from server._errors import (
    AppendFailed,
    BackPressureRejected,
    CorruptBatch,
    InconsistentReadState,
    InvalidRequest,
    OffsetOutOfRange,
    PartitionFenced,
    PartitionNotInitialized,
    ProducerClosed,
)
from server._protocol.keys import LogLayout
from server._protocol.records import ControlRecord, IndexEntry
from server._storage.metastore import InMemoryMetadataStore
from server._storage.objectstore import InMemoryObjectStore
from server.leaderless_log_reader import LeaderlessLogReader
from server.leaderless_log_writer import BatchingProducer, LeaderlessLogWriter, SharedAppendGroup
from tests._waiting import wait_until

OXIA = OxiaConfig("fake:1", root_prefix="llog")
S3 = S3Config("llog")
KEYS = LogLayout("llog").partition("orders", 0)


@pytest.fixture
def stores():
    return InMemoryMetadataStore(), InMemoryObjectStore()


@pytest.fixture
def writer(stores):
    meta, objs = stores
    with LeaderlessLogWriter(OXIA, S3, metadata_store=meta, object_store=objs) as w:
        yield w


@pytest.fixture
def reader(stores):
    meta, objs = stores
    with LeaderlessLogReader(OXIA, S3, metadata_store=meta, object_store=objs) as r:
        yield r


def control(meta: InMemoryMetadataStore, topic="orders", partition=0) -> ControlRecord:
    rec = meta.get(f"llog/{topic}/partitions/{partition}/meta/control", f"{topic}:{partition}")
    assert rec is not None
    return ControlRecord.decode(rec.value)


def payloads(reader, topic="orders", partition=0, start=1):
    return [r.payload for r in reader.iter_from(topic, partition, start)]


def index_entries(meta: InMemoryMetadataStore) -> list[tuple[int, str]]:
    """``(end offset, type)`` of every index entry of orders:0."""
    return [(KEYS.index_offset(r.key), IndexEntry.decode(r.value).type)
            for r in meta.range_scan(KEYS.index(1), KEYS.index_end, KEYS.partition_key)]


def test_initialize_is_idempotent(writer, stores):
    meta, _ = stores
    assert writer.initialize_partition("orders", 0) is True
    assert writer.initialize_partition("orders", 0) is False
    c = control(meta)
    assert (c.log_state, c.sequence_counter, c.pending) == ("OPEN", 1, None)
    assert meta.get("llog/orders/partitions/0/meta/compaction-cursor", "orders:0").value == b'{"offset":1}'


def test_one_blob_many_partitions_offsets_per_partition(writer, reader, stores):
    _, objs = stores
    for p in range(4):
        writer.initialize_partition("orders", p)
    res = writer.append_shared(
        [SharedAppendGroup("orders", p, [f"{p}-{i}".encode() for i in range(p + 1)]) for p in range(4)]
    )
    assert objs.calls["put"] == 1
    assert len({r.wal_uri for r in res}) == 1
    assert [(r.start_offset, r.end_offset) for r in res] == [(1, 1), (1, 2), (1, 3), (1, 4)]
    assert res[2].index_key == "llog/orders/partitions/2/index/00000000000000000003"
    for p in range(4):
        assert payloads(reader, partition=p) == [f"{p}-{i}".encode() for i in range(p + 1)]


def test_steady_state_is_two_oxia_writes_per_partition_per_flush(writer, stores):
    meta, _ = stores
    for p in range(3):
        writer.initialize_partition("orders", p)
    writer.append_shared([SharedAppendGroup("orders", p, [b"warm"]) for p in range(3)])
    for flush in range(5):
        before = dict(meta.calls)
        writer.append_shared([SharedAppendGroup("orders", p, [b"a", b"b"]) for p in range(3)])
        spent = {k: v - before.get(k, 0) for k, v in meta.calls.items() if v - before.get(k, 0)}
        assert spent == {"put": 2 * 3}, flush  # per partition: reserve CAS, index create; no read
    # Our materialized pending lingers in meta/control until the next
    # reservation replaces it; its index entry exists.
    c = control(meta)
    assert c.pending is not None and c.pending.end_offset == 11
    assert meta.get(KEYS.index(11), KEYS.partition_key) is not None
    assert payloads(LeaderlessLogReader(OXIA, S3, metadata_store=meta, object_store=stores[1])) == (
        [b"warm"] + [b"a", b"b"] * 5)


def test_close_clears_the_writers_own_pendings(stores):
    meta, objs = stores
    with LeaderlessLogWriter(OXIA, S3, metadata_store=meta, object_store=objs) as w:
        w.initialize_partition("orders", 0)
        w.append_shared([SharedAppendGroup("orders", 0, [b"x"])])
        assert control(meta).pending is not None
    c = control(meta)
    assert c.pending is None and c.sequence_counter == 2
    assert index_entries(meta) == [(1, "WAL")]


def test_a_second_writer_finds_a_materialized_pending_with_one_read(stores):
    meta, objs = stores
    a = LeaderlessLogWriter(OXIA, S3, metadata_store=meta, object_store=objs)
    b = LeaderlessLogWriter(OXIA, S3, metadata_store=meta, object_store=objs)
    a.initialize_partition("orders", 0)
    a.append_shared([SharedAppendGroup("orders", 0, [b"a1"])])
    before = dict(meta.calls)
    b.append_shared([SharedAppendGroup("orders", 0, [b"b1"])])
    spent = {k: v - before.get(k, 0) for k, v in meta.calls.items() if v - before.get(k, 0)}
    # control GET, GET of a's index key (present: no create), reserve CAS, index create
    assert spent == {"get": 2, "put": 2}
    # a's cached control is stale now: its CAS conflicts, it re-reads, finds b's
    # materialized pending (one more read) and appends after it.
    a.append_shared([SharedAppendGroup("orders", 0, [b"a2"])])
    assert [e for e, _ in index_entries(meta)] == [1, 2, 3]
    assert payloads(LeaderlessLogReader(OXIA, S3, metadata_store=meta, object_store=objs)) == [b"a1", b"b1", b"a2"]
    a.close()
    b.close()
    assert control(meta).pending is None


def test_append_to_uninitialized_partition_fails_only_that_group(writer, reader):
    writer.initialize_partition("orders", 0)
    with pytest.raises(AppendFailed) as info:
        writer.append_shared([SharedAppendGroup("orders", 0, [b"ok"]), SharedAppendGroup("orders", 9, [b"x"])])
    ok, bad = info.value.results
    assert ok.ok and ok.start_offset == 1
    assert isinstance(bad.error, PartitionNotInitialized)
    assert payloads(reader) == [b"ok"]


def test_crash_after_reserve_leaves_readable_pending_that_next_append_materializes(stores, reader):
    meta, objs = stores
    with LeaderlessLogWriter(OXIA, S3, metadata_store=meta, object_store=objs) as w1:
        w1.initialize_partition("orders", 0)
        w1.append_shared([SharedAppendGroup("orders", 0, [b"a"])])
        # The commit's index create fails: the writer "dies" after reserving.
        meta.fail_next("put", key_contains="/index/")
        # committed and acknowledged; the index create failed, so its pending stays
        assert w1.append_shared([SharedAppendGroup("orders", 0, [b"b", b"c"])])

    c = control(meta)
    assert c.pending is not None and (c.pending.start_offset, c.pending.end_offset) == (2, 3)
    assert meta.get("llog/orders/partitions/0/index/00000000000000000003", "orders:0") is None
    # The reader serves the pending tail.
    assert payloads(reader) == [b"a", b"b", b"c"]
    assert reader.read_offset("orders", 0, 3).payload == b"c"
    # A different writer's next append materializes it and moves on.
    with LeaderlessLogWriter(OXIA, S3, metadata_store=meta, object_store=objs) as w2:
        (r,) = w2.append_shared([SharedAppendGroup("orders", 0, [b"d"])])
    assert (r.start_offset, r.end_offset) == (4, 4)
    assert meta.get("llog/orders/partitions/0/index/00000000000000000003", "orders:0") is not None
    assert control(meta).pending is None
    assert payloads(reader) == [b"a", b"b", b"c", b"d"]


def test_fence_blocks_appends_and_unfence_reopens(writer, reader):
    writer.initialize_partition("orders", 0)
    writer.append_shared([SharedAppendGroup("orders", 0, [b"a"])])
    assert writer.fence_partition("orders", 0).log_state == "FENCED"
    with pytest.raises(AppendFailed) as info:
        writer.append_shared([SharedAppendGroup("orders", 0, [b"refused"])])
    assert isinstance(info.value.results[0].error, PartitionFenced)
    writer.unfence_partition("orders", 0)
    (r,) = writer.append_shared([SharedAppendGroup("orders", 0, [b"b"])])
    assert r.start_offset == 2
    assert payloads(reader) == [b"a", b"b"]


def test_invalid_input_is_rejected_before_any_write(writer, stores):
    meta, objs = stores
    bad = [
        lambda: SharedAppendGroup("", 0, [b"x"]),
        lambda: SharedAppendGroup("a/b", 0, [b"x"]),
        lambda: SharedAppendGroup("..", 0, [b"x"]),
        lambda: SharedAppendGroup("t" * 250, 0, [b"x"]),
        lambda: SharedAppendGroup("t", -1, [b"x"]),
        lambda: SharedAppendGroup("t", 1.5, [b"x"]),
        lambda: SharedAppendGroup("t", True, [b"x"]),
        lambda: SharedAppendGroup("t", 0, []),
        lambda: SharedAppendGroup("t", 0, b"not-a-list"),
        lambda: SharedAppendGroup("t", 0, [1, 2]),
        lambda: writer.append_shared([]),
    ]
    for make in bad:
        with pytest.raises(InvalidRequest):
            make()
    assert objs.calls == {} and meta.calls == {}


def test_reader_errors(writer, reader):
    with pytest.raises(PartitionNotInitialized):
        reader.read_offset("orders", 0, 1)
    writer.initialize_partition("orders", 0)
    writer.append_shared([SharedAppendGroup("orders", 0, [b"a", b"b"])])
    for off in (0, 3, -1):
        with pytest.raises(OffsetOutOfRange):
            reader.read_offset("orders", 0, off)
    assert list(reader.iter_from("orders", 0, 3)) == []
    assert [r.offset for r in reader.read_range("orders", 0, 2, 2)] == [2]


def test_corrupted_bytes_raise_corrupt_batch(writer, reader, stores):
    _, objs = stores
    writer.initialize_partition("orders", 0)
    (r,) = writer.append_shared([SharedAppendGroup("orders", 0, [b"hello world"])])
    (bucket, key), (blob, t) = next(iter(objs.objects.items()))
    flipped = bytearray(blob)
    flipped[-3] ^= 0x40
    objs.objects[(bucket, key)] = (bytes(flipped), t)
    with pytest.raises(CorruptBatch) as info:
        reader.read_offset("orders", 0, 1)
    assert "CRC-32C mismatch" in str(info.value) and info.value.partition == 0


def test_ceiling_answer_from_another_partition_is_not_trusted(writer, reader, stores):
    """A CEILING past this partition's last index key lands on its meta/ keys
    (and in real Oxia possibly another partition); the reader must notice."""
    meta, _ = stores
    writer.initialize_partition("orders", 0)
    writer.append_shared([SharedAppendGroup("orders", 0, [b"a"])])
    # Forge a high-watermark beyond the index without a pending: a gap.
    meta.put("llog/orders/partitions/0/meta/control", ControlRecord("OPEN", 5, None).encode(), "orders:0")
    with pytest.raises(InconsistentReadState):
        reader.read_offset("orders", 0, 3)
    with pytest.raises(InconsistentReadState):
        list(reader.iter_from("orders", 0, 1))


def test_transient_compaction_state_reads_the_same_records(writer, reader, stores):
    """COMPACTED end key written, lower WAL keys not yet deleted."""
    meta, objs = stores
    writer.initialize_partition("orders", 0)
    for chunk in ([b"a", b"b"], [b"c"], [b"d", b"e"]):
        writer.append_shared([SharedAppendGroup("orders", 0, chunk)])
    from server._protocol.codec import encode_batch

    objs.put("llog", "llog/orders/partitions/0/data/compacted/c1", encode_batch([b"a", b"b", b"c", b"d", b"e"]))
    entry = IndexEntry("COMPACTED", 5, "s3://llog/llog/orders/partitions/0/data/compacted/c1", "bytes-batch-v1", None, None, 1)
    meta.put("llog/orders/partitions/0/index/00000000000000000005", entry.encode(), "orders:0")
    assert payloads(reader) == [b"a", b"b", b"c", b"d", b"e"]
    assert [reader.read_offset("orders", 0, o).payload for o in range(1, 6)] == [b"a", b"b", b"c", b"d", b"e"]
    meta.delete_range(
        "llog/orders/partitions/0/index/00000000000000000001",
        "llog/orders/partitions/0/index/00000000000000000005",
        "orders:0",
    )
    assert payloads(reader, start=2) == [b"b", b"c", b"d", b"e"]
    assert reader.read_offset("orders", 0, 4).payload == b"d"


# -- BatchingProducer -----------------------------------------------------------


def test_producer_coalesces_threads_into_one_flush_and_fans_out(writer, reader, stores):
    _, objs = stores
    for p in range(3):
        writer.initialize_partition("orders", p)
    with BatchingProducer(writer, BatchConfig(max_bytes=1 << 20, max_delay_ms=200)) as bp:
        results: dict[int, list] = {}

        def worker(i: int) -> None:
            results[i] = bp.append_shared([SharedAppendGroup("orders", i % 3, [f"r{i}".encode(), b"+"])])

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(12)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert objs.calls["put"] == 1
    for p in range(3):
        got = sorted((r[0].start_offset, r[0].end_offset) for i, r in results.items() if i % 3 == p)
        assert got == [(1, 2), (3, 4), (5, 6), (7, 8)]
        data = payloads(reader, partition=p)
        for i, r in results.items():
            if i % 3 == p:
                assert data[r[0].start_offset - 1] == f"r{i}".encode()


def test_producer_flushes_on_size(writer, stores):
    _, objs = stores
    writer.initialize_partition("orders", 0)
    with BatchingProducer(writer, BatchConfig(max_bytes=100, max_delay_ms=60_000)) as bp:
        f = bp.submit([SharedAppendGroup("orders", 0, [b"x" * 100])])
        assert f.result(timeout=5)[0].ok


def _gated_puts(writer) -> threading.Event:
    """Hold every shared-blob PUT until the returned event is set."""
    gate = threading.Event()
    original = writer.stage_shared

    def slow(groups):
        gate.wait(10)
        return original(groups)

    writer.stage_shared = slow
    return gate


def _submit_in_thread(bp, payload: bytes) -> tuple[threading.Thread, list]:
    out: list = []

    def run():
        try:
            out.append(bp.submit([SharedAppendGroup("orders", 0, [payload])]).result(10))
        except Exception as exc:  # noqa: BLE001 - the test looks at it
            out.append(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


def test_producer_backpressure_waits_for_room_in_arrival_order(writer, reader):
    """A full buffer makes submits wait, oldest first: a small one that
    would fit now waits behind a large one that does not; both are admitted
    once the flush in the way commits, in that order."""
    writer.initialize_partition("orders", 0)
    bp = BatchingProducer(writer, BatchConfig(max_bytes=5, max_delay_ms=1, max_buffer_bytes=10, max_block_ms=10_000))
    try:
        gate = _gated_puts(writer)
        first = bp.submit([SharedAppendGroup("orders", 0, [b"11111"])])  # 5 of 10 bytes, flushing, held
        large, large_out = _submit_in_thread(bp, b"22222222")  # 5 + 8 > 10: waits
        wait_until(lambda: bp.metrics.counter("batcher_backpressure_waits_total") == 1, what="the large submit waiting")
        small, small_out = _submit_in_thread(bp, b"3")  # 5 + 1 fits, but the large one is older
        wait_until(lambda: bp.metrics.counter("batcher_backpressure_waits_total") == 2, what="the small submit waiting")
        assert bp.inflight_bytes == 5 and not large_out and not small_out
        gate.set()
        large.join(10)
        small.join(10)
        assert first.result(5)[0].ok and large_out[0][0].ok and small_out[0][0].ok
        assert bp.metrics.counter("batcher_backpressure_rejections_total") == 0
    finally:
        bp.close()
    assert payloads(reader) == [b"11111", b"22222222", b"3"]


@pytest.mark.parametrize("max_block_ms", [0, 50])
def test_producer_backpressure_refuses_after_max_block_ms_without_buffering(writer, reader, max_block_ms):
    writer.initialize_partition("orders", 0)
    bp = BatchingProducer(writer, BatchConfig(max_bytes=10, max_delay_ms=1, max_buffer_bytes=10,
                                              max_block_ms=max_block_ms))
    try:
        gate = _gated_puts(writer)
        first = bp.submit([SharedAppendGroup("orders", 0, [b"0123456789"])])
        with pytest.raises(BackPressureRejected, match="LLOG_BATCH_MAX_BLOCK_MS"):
            bp.submit([SharedAppendGroup("orders", 0, [b"z"])])
        assert bp.metrics.counter("batcher_backpressure_waits_total") == (1 if max_block_ms else 0)
        assert bp.metrics.counter("batcher_backpressure_rejections_total") == 1
        with pytest.raises(InvalidRequest):
            bp.submit([SharedAppendGroup("orders", 0, [b"x" * 11])])
        gate.set()
        assert first.result(5)[0].end_offset == 1
        # The refused submit left no waiter behind: the next one goes straight in.
        assert bp.submit([SharedAppendGroup("orders", 0, [b"z"])]).result(5)[0].ok
    finally:
        bp.close()
    assert payloads(reader) == [b"0123456789", b"z"]
    with pytest.raises(ProducerClosed):
        bp.submit([SharedAppendGroup("orders", 0, [b"late"])])


def test_producer_close_wakes_waiting_submits_with_producer_closed(writer, reader):
    writer.initialize_partition("orders", 0)
    bp = BatchingProducer(writer, BatchConfig(max_bytes=10, max_delay_ms=60_000, max_buffer_bytes=10,
                                              max_block_ms=60_000))
    gate = _gated_puts(writer)
    first = bp.submit([SharedAppendGroup("orders", 0, [b"0123456789"])])
    waiter, out = _submit_in_thread(bp, b"late")
    wait_until(lambda: bp.metrics.counter("batcher_backpressure_waits_total") == 1, what="the submit waiting")
    closer = threading.Thread(target=bp.close, daemon=True)
    closer.start()
    waiter.join(10)
    assert len(out) == 1 and isinstance(out[0], ProducerClosed)
    gate.set()  # close still flushes what was accepted
    closer.join(10)
    assert first.result(5)[0].ok
    assert payloads(reader) == [b"0123456789"]


def test_producer_initializes_partitions_lazily(writer, reader):
    with BatchingProducer(writer, BatchConfig(max_delay_ms=1)) as bp:
        (r,) = bp.append_shared([SharedAppendGroup("fresh", 3, [b"x"])], timeout=5)
    assert r.ok and r.start_offset == 1
    assert payloads(reader, topic="fresh", partition=3) == [b"x"]


def test_producer_close_flushes_buffered(writer, reader):
    writer.initialize_partition("orders", 0)
    bp = BatchingProducer(writer, BatchConfig(max_delay_ms=60_000))
    f = bp.submit([SharedAppendGroup("orders", 0, [b"late"])])
    bp.close()
    assert f.result(0)[0].ok
    assert payloads(reader) == [b"late"]


def test_a_pending_seen_in_a_stale_cache_is_never_materialized(stores, reader):
    """A writer that cached a control record holding someone's pending append
    must re-read before acting on it: by then the append may have been
    materialized, compacted and its key deleted, and re-creating the key
    would put a redundant WAL entry inside a compacted range."""
    meta, objs = stores
    with LeaderlessLogWriter(OXIA, S3, metadata_store=meta, object_store=objs) as crashed, \
            LeaderlessLogWriter(OXIA, S3, metadata_store=meta, object_store=objs) as stale, \
            LeaderlessLogWriter(OXIA, S3, metadata_store=meta, object_store=objs) as other:
        crashed.initialize_partition("orders", 0)
        crashed.append_shared([SharedAppendGroup("orders", 0, [b"a", b"b"])])
        meta.fail_next("put", key_contains="/index/")
        # committed and acknowledged; the index create failed, so its pending stays
        assert crashed.append_shared([SharedAppendGroup("orders", 0, [b"c"])])  # pending end=3
        stale.control_snapshot = stale._read_control(stale.layout.partition("orders", 0))  # caches the pending
        assert other.recover_pending("orders", 0) is True
        # A compaction of [1, 3] replaces key 3 with COMPACTED at 3 ... then a
        # later one of [1, 4] deletes key 3. Model the end state directly.
        other.append_shared([SharedAppendGroup("orders", 0, [b"d"])])
        from server._protocol.codec import encode_batch

        objs.put("llog", "llog/orders/partitions/0/data/compacted/c", encode_batch([b"a", b"b", b"c", b"d"]))
        entry = IndexEntry("COMPACTED", 4, "s3://llog/llog/orders/partitions/0/data/compacted/c", "bytes-batch-v1", None, None, 1)
        meta.put("llog/orders/partitions/0/index/00000000000000000004", entry.encode(), "orders:0")
        meta.delete_range("llog/orders/partitions/0/index/", "llog/orders/partitions/0/index/00000000000000000004", "orders:0")

        (r,) = stale.append_shared([SharedAppendGroup("orders", 0, [b"e"])])
    assert r.start_offset == 5
    assert meta.get("llog/orders/partitions/0/index/00000000000000000003", "orders:0") is None
    keys = [rec.key.rsplit("/", 1)[1] for rec in meta.range_scan("llog/orders/partitions/0/index/", "llog/orders/partitions/0/index/~", "orders:0")]
    assert keys == ["00000000000000000004", "00000000000000000005"]
    assert payloads(reader) == [b"a", b"b", b"c", b"d", b"e"]


def test_fetch_many_uses_one_get_per_blob_for_adjacent_slices(writer, reader, stores):
    _, objs = stores
    for p in range(3):
        writer.initialize_partition("orders", p)
    writer.append_shared([SharedAppendGroup("orders", p, [f"{p}-a".encode(), f"{p}-b".encode()]) for p in range(3)])
    writer.append_shared([SharedAppendGroup("orders", 0, [b"0-c"])])
    items = []
    for p in range(3):
        keys = reader.layout.partition("orders", p)
        items.extend((keys, b) for b in reader.scan_batches("orders", p, 1, 10))
    before = dict(objs.calls)
    decoded = reader.fetch_many(items)
    spent = {k: v - before.get(k, 0) for k, v in objs.calls.items() if v - before.get(k, 0)}
    assert spent == {"range_get": 2}  # one span over the first blob's three slices, one for the second blob
    assert [[r.value for r in d] for d in decoded] == [[b"0-a", b"0-b"], [b"0-c"], [b"1-a", b"1-b"], [b"2-a", b"2-b"]]


def test_iter_runs_hands_out_whole_batches_trimmed_to_the_range(writer, reader, stores):
    from server.leaderless_log_reader import stored

    writer.initialize_partition("orders", 0)
    for chunk in ([b"a", b"b", b"c"], [b"d"], [b"e", b"f", b"g"]):
        writer.append_shared([SharedAppendGroup("orders", 0, chunk)])
    runs = list(reader.iter_runs("orders", 0, 2, 6))
    assert [(r.base_offset, r.first, r.last, r.count) for r in runs] == [(1, 2, 3, 2), (4, 4, 4, 1), (5, 5, 6, 2)]
    # The whole decoded batch; first/last say what is wanted.
    assert [r.value for r in runs[0].records] == [b"a", b"b", b"c"]
    # Another decoder, same runs: the checked batches, not decoded.
    (bounded,) = reader.iter_runs("orders", 0, 7, decode=stored)
    assert (bounded.base_offset, bounded.first, bounded.last) == (5, 7, 7)
    assert len(bounded.records) == 3 and bounded.records.values()[7 - bounded.base_offset] == b"g"
    # Just past the high watermark: nothing; further: out of range, as iter_from.
    assert list(reader.iter_runs("orders", 0, 8)) == []
    with pytest.raises(OffsetOutOfRange):
        reader.iter_runs("orders", 0, 9)


def test_iter_runs_reports_corruption_from_any_decoder(writer, reader, stores):
    from server.leaderless_log_reader import stored

    _, objs = stores
    writer.initialize_partition("orders", 0)
    writer.append_shared([SharedAppendGroup("orders", 0, [b"hello world"])])
    (bucket, key), (blob, t) = next(iter(objs.objects.items()))
    flipped = bytearray(blob)
    flipped[-3] ^= 0x40
    objs.objects[(bucket, key)] = (bytes(flipped), t)
    with pytest.raises(CorruptBatch) as info:
        list(reader.iter_runs("orders", 0, 1, decode=stored))
    assert "CRC-32C mismatch" in str(info.value) and info.value.partition == 0
