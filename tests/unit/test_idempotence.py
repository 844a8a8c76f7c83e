"""Idempotent producers (SPEC 7.12): the check, the state in meta/control,
the writer's reservations and the producer ids, over the in-memory stores."""

from __future__ import annotations

import json
import threading

import pytest

from server._config import OxiaConfig, ProducerStateConfig, S3Config
from server._errors import (
    ConcurrencyConflict,
    CorruptBatch,
    InvalidRequest,
    OutcomeUnknown,
    OutOfOrderSequence,
    ProducerFenced,
)
from server._log.producer_ids import ProducerIdentity, ProducerIds
from server._log.retire import retire_log
from server._protocol.kafka_batch import Record, build_batch, read_header
from server._protocol.keys import LogLayout
from server._protocol.producer_state import (
    MAX_BATCHES,
    ProducerBatch,
    ProducerEntry,
    ProducerStates,
    Verdict,
    check,
    prune,
    record,
)
from server._protocol.records import ControlRecord, LogState
from server._protocol.stored_batches import StoredBatches
from server._protocol.structs import ProducerSequence
from server._storage.metastore import InMemoryMetadataStore
from server._storage.objectstore import InMemoryObjectStore
from server.leaderless_log_reader import LeaderlessLogReader
from server.leaderless_log_writer import BatchingProducer, LeaderlessLogWriter, SharedAppendGroup
from tests._step_clock import StepClock, stepped_runtime

OXIA = OxiaConfig("fake:1", root_prefix="llog")
S3 = S3Config("llog")
LAYOUT = LogLayout("llog")
KEYS = LAYOUT.partition("orders", 0)


# -- the check ---------------------------------------------------------------------------------

def _entry(epoch: int, *batches: tuple[int, int, int]) -> ProducerEntry:
    return ProducerEntry(epoch, 0, tuple(batches))


STATE = _entry(1, (0, 4, 10), (5, 9, 20), (10, 10, 30))


@pytest.mark.parametrize("entry, batch, verdict, first_offset", [
    (None, ProducerBatch(7, 0, 0, 3), Verdict.APPEND, None),  # unknown here: its first batch
    (None, ProducerBatch(7, 0, 42, 3), Verdict.OUT_OF_ORDER, None),  # ... starts at 0 (no gap hides a lost one)
    (STATE, ProducerBatch(7, 0, 11, 1), Verdict.FENCED, None),  # an older epoch
    (STATE, ProducerBatch(7, 2, 0, 5), Verdict.APPEND, None),  # a new epoch starts at 0
    (STATE, ProducerBatch(7, 2, 11, 5), Verdict.OUT_OF_ORDER, None),  # ... and only there
    (STATE, ProducerBatch(7, 1, 11, 2), Verdict.APPEND, None),  # the next sequence
    (STATE, ProducerBatch(7, 1, 5, 5), Verdict.DUPLICATE, 20),  # a remembered batch: its offsets
    (STATE, ProducerBatch(7, 1, 10, 1), Verdict.DUPLICATE, 30),
    (STATE, ProducerBatch(7, 1, 2, 2), Verdict.OLD_DUPLICATE, None),  # inside what was appended, not one batch
    (STATE, ProducerBatch(7, 1, 12, 1), Verdict.OUT_OF_ORDER, None),  # a gap
    (STATE, ProducerBatch(7, 1, 9, 3), Verdict.OUT_OF_ORDER, None),  # straddles the last sequence
    (_entry(0, (0, 2**31 - 1, 5)), ProducerBatch(7, 0, 0, 1), Verdict.APPEND, None),  # sequences wrap to 0
])
def test_the_check_follows_kafkas_producer_state_rules(entry, batch, verdict, first_offset):
    got = check(entry, batch)
    assert got.verdict is verdict
    assert got.first_offset == first_offset
    if verdict in (Verdict.FENCED, Verdict.OUT_OF_ORDER):
        assert "producer 7" in got.reason


def test_the_state_keeps_the_last_five_batches_and_a_new_epoch_starts_afresh():
    entry = None
    for i in range(8):
        entry = record(entry, ProducerBatch(7, 0, i * 2, 2), 100 + i * 2, now_ms=i)
    assert len(entry.batches) == MAX_BATCHES
    assert entry.batches[0] == (6, 7, 106) and entry.batches[-1] == (14, 15, 114)
    assert entry.last_ms == 7
    bumped = record(entry, ProducerBatch(7, 1, 0, 1), 200, now_ms=9)
    assert (bumped.epoch, bumped.batches) == (1, ((0, 0, 200),))


def test_prune_forgets_idle_producers_and_the_longest_idle_beyond_the_bound():
    producers = ProducerStates(entries={p: ProducerEntry(0, last_ms, ((0, 0, p),))
                                        for p, last_ms in ((1, 100), (2, 900), (3, 500), (4, 50))})
    assert sorted(prune(producers, now_ms=1000, expiry_ms=600, max_producers=10)) == [2, 3]
    assert sorted(prune(producers, now_ms=1000, expiry_ms=10_000, max_producers=2)) == [2, 3]
    assert prune(producers, now_ms=1000, expiry_ms=10_000, max_producers=10) is producers


def test_the_producers_round_trip_through_meta_control_as_one_string_each():
    entry = _entry(0, (0, 1, 1), (2, 2, 7))
    control = ControlRecord(LogState.OPEN, 8, None, producers=ProducerStates(entries={3: entry}))
    raw = control.encode()
    assert json.loads(raw)["producers"] == {"3": "0 0 0:1:1 2:2:7"}
    decoded = ControlRecord.decode(raw)
    assert decoded == control and decoded.producers[3] == entry and decoded.producers.last_ms(3) == 0
    assert "producers" not in json.loads(ControlRecord(LogState.OPEN, 8).encode())


@pytest.mark.parametrize("text", ["0", "0 5", "x 5 0:1:1", "0 5 0:1", "0 5 0:1:1:2", "0 5 a:b:c"])
def test_a_malformed_producer_entry_is_a_corrupt_record_when_it_is_read(text):
    control = ControlRecord.decode(json.dumps({"log_state": "OPEN", "sequence_counter": 2, "pending": None,
                                               "producers": {"7": text}}).encode())
    with pytest.raises(CorruptBatch, match="producer 7"):
        control.producers[7]


def test_producers_of_the_wrong_shape_make_the_record_corrupt():
    with pytest.raises(CorruptBatch):
        ControlRecord.decode(b'{"log_state":"OPEN","sequence_counter":2,"pending":null,"producers":{"7":[0]}}')


def test_the_record_stays_under_a_mebibyte_at_the_bound():
    worst = {pid: ProducerEntry(32767, 1_800_000_000_000, tuple((2**31 - 9, 2**31 - 1, 10**15) for _ in range(5)))
             for pid in range(10**15, 10**15 + 2_000)}  # the setting's upper bound, every number at its longest
    size = len(ControlRecord(LogState.OPEN, 10**15, None, producers=ProducerStates(entries=worst)).encode())
    assert size < 700 * 1024, size


# -- groups and batches ------------------------------------------------------------------------

def test_a_group_with_a_producer_becomes_one_batch_carrying_its_fields():
    g = SharedAppendGroup("orders", 0, [b"a", Record(b"b", key=b"k")], producer=ProducerSequence(5, 2, 40))
    batches = g.encode(1_000)
    assert batches.batch_count == 1
    h = read_header(batches.data)
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.records_count) == (5, 2, 40, 2)
    assert batches.producer_batches() == [ProducerBatch(5, 2, 40, 2)]


@pytest.mark.parametrize("fields, name", [((-1, 0, 0), "producer_id"), ((1, 40_000, 0), "producer_epoch"),
                                           ((1, 0, 2**31), "base_sequence"), ((1, True, 0), "producer_epoch")])
def test_a_producer_sequence_out_of_kafkas_ranges_is_refused_naming_the_field(fields, name):
    with pytest.raises(InvalidRequest, match=name):
        ProducerSequence(*fields)


def test_a_group_producer_must_be_a_producer_sequence():
    with pytest.raises(InvalidRequest, match="ProducerSequence"):
        SharedAppendGroup("orders", 0, [b"a"], producer=(5, 0, 0))


def test_encoded_batches_carry_their_producer_in_the_header_and_bad_fields_are_refused():
    ok = StoredBatches.check(build_batch([Record(b"a")], now_ms=1, producer_id=3, producer_epoch=0, base_sequence=0))
    with pytest.raises(InvalidRequest, match="header"):
        SharedAppendGroup("orders", 0, ok, producer=ProducerSequence(3, 0, 0))
    with pytest.raises(CorruptBatch, match="producerEpoch -1"):
        StoredBatches.check(build_batch([Record(b"a")], now_ms=1, producer_id=3, producer_epoch=-1, base_sequence=0))
    assert ok.idempotent and not StoredBatches.check(build_batch([Record(b"a")], now_ms=1)).idempotent


# -- the writer --------------------------------------------------------------------------------

@pytest.fixture
def stores():
    return InMemoryMetadataStore(), InMemoryObjectStore()


def _writer(stores, **kw) -> LeaderlessLogWriter:
    meta, objs = stores
    w = LeaderlessLogWriter(OXIA, S3, metadata_store=meta, object_store=objs, **kw)
    w.initialize_partition("orders", 0)
    return w


def _control(meta) -> ControlRecord:
    return ControlRecord.decode(meta.get(KEYS.control, KEYS.partition_key).value)


def _values(stores) -> list[bytes]:
    meta, objs = stores
    with LeaderlessLogReader(OXIA, S3, metadata_store=meta, object_store=objs) as r:
        return [x.payload for x in r.iter_from("orders", 0, 1)]


def _idem(values, pid=7, epoch=0, seq=0, partition=0) -> SharedAppendGroup:
    return SharedAppendGroup("orders", partition, list(values), producer=ProducerSequence(pid, epoch, seq))


def _send(w, *groups):
    return w.append_shared_results(list(groups))


def test_each_batch_is_stored_once_and_a_duplicate_gets_its_first_offsets(stores):
    with _writer(stores) as w:
        (a,) = _send(w, _idem([b"a0", b"a1"], seq=0))
        (b,) = _send(w, _idem([b"b"], seq=2))
        (again,) = _send(w, _idem([b"a0", b"a1"], seq=0))
        assert (a.start_offset, a.end_offset, a.duplicate) == (1, 2, False)
        assert (b.start_offset, b.end_offset) == (3, 3)
        assert (again.start_offset, again.end_offset, again.duplicate, again.error) == (1, 2, True, None)
        for seq in range(3, 9):  # push the first batches out of the remembered five
            _send(w, _idem([b"x"], seq=seq))
        (old,) = _send(w, _idem([b"a0", b"a1"], seq=0))
        assert old.ok and old.duplicate and old.start_offset is None
    assert _values(stores) == [b"a0", b"a1", b"b"] + [b"x"] * 6
    assert w.metrics.counter("writer_duplicate_batches_total") == 2


def test_a_gap_or_a_stale_epoch_is_refused_and_nothing_of_it_is_stored(stores):
    with _writer(stores) as w:
        _send(w, _idem([b"a"], epoch=1, seq=0))
        (gap,) = _send(w, _idem([b"gap"], epoch=1, seq=5))
        (stale,) = _send(w, _idem([b"stale"], epoch=0, seq=1))
        (not_at_zero,) = _send(w, _idem([b"new"], epoch=2, seq=3))
        (bumped,) = _send(w, _idem([b"new"], epoch=2, seq=0))
        (zombie,) = _send(w, _idem([b"zombie"], epoch=1, seq=1))
    assert isinstance(gap.error, OutOfOrderSequence) and gap.error.retriable
    assert isinstance(stale.error, ProducerFenced) and not stale.error.retriable
    assert isinstance(not_at_zero.error, OutOfOrderSequence)
    assert bumped.ok and bumped.start_offset == 2
    assert isinstance(zombie.error, ProducerFenced)
    assert _values(stores) == [b"a", b"new"]
    assert _control(stores[0]).producers[7].epoch == 2


def test_a_refused_batch_in_a_shared_flush_never_blocks_the_others(stores):
    with _writer(stores) as w:
        _send(w, _idem([b"p7"], pid=7, seq=0))
        results = _send(
            w,
            _idem([b"p8-0"], pid=8, seq=0),
            _idem([b"p7-gap"], pid=7, seq=9),  # refused
            SharedAppendGroup("orders", 0, [b"plain"]),
            _idem([b"p7"], pid=7, seq=0),  # a duplicate
            _idem([b"p8-1"], pid=8, seq=1),
            SharedAppendGroup("orders", 1, [b"other log"]),
        )
    got = [(r.start_offset, r.end_offset, r.duplicate, type(r.error).__name__ if r.error else None) for r in results]
    assert got == [(2, 2, False, None), (None, None, False, "OutOfOrderSequence"), (3, 3, False, None),
                   (1, 1, True, None), (4, 4, False, None), (None, None, False, "PartitionNotInitialized")]
    assert _values(stores) == [b"p7", b"p8-0", b"plain", b"p8-1"]


def test_the_batching_producer_answers_each_submit_from_its_own_batch(stores):
    with _writer(stores) as w, BatchingProducer(w, auto_initialize=False) as p:
        # One flush: producer 7's batches 0..3 with a repeat and a gap among them, and plain values.
        futures = [p.submit([g]) for g in (
            _idem([b"0"], seq=0), _idem([b"1"], seq=1), _idem([b"1"], seq=1), SharedAppendGroup("orders", 0, [b"v"]),
            _idem([b"9"], seq=9), _idem([b"2", b"3"], seq=2))]
        p.flush()
        got = [f.result()[0] for f in futures]
    assert [(r.start_offset, r.end_offset, r.duplicate) for r in got] == [
        (1, 1, False), (2, 2, False), (2, 2, True), (3, 3, False), (None, None, False), (4, 5, False)]
    assert isinstance(got[4].error, OutOfOrderSequence)
    assert _values(stores) == [b"0", b"1", b"v", b"2", b"3"]


def test_a_lost_reservation_reply_and_the_retry_store_the_batch_once(stores):
    meta, _ = stores
    with _writer(stores) as w:
        _send(w, _idem([b"a"], seq=0))
        # The reservation lands but its reply is lost, and the store cannot be read to decide.
        meta.lose_reply_next("put", key_contains="meta/control")
        meta.fail_next("get", key_contains="meta/control")
        (unknown,) = _send(w, _idem([b"b"], seq=1))
        assert isinstance(unknown.error, OutcomeUnknown)
        (retry,) = _send(w, _idem([b"b"], seq=1))
        assert (retry.start_offset, retry.duplicate) == (2, True)
        # Lost again, and this time it did not land: the retry appends it.
        meta.fail_next("put", key_contains="meta/control")
        meta.fail_next("get", key_contains="meta/control")
        (unknown,) = _send(w, _idem([b"c"], seq=2))
        (retry,) = _send(w, _idem([b"c"], seq=2))
        assert (retry.start_offset, retry.duplicate) == (3, False)
    assert _values(stores) == [b"a", b"b", b"c"]


def test_a_refusal_is_decided_on_a_fresh_read_not_a_stale_cache(stores):
    with _writer(stores) as w1, _writer(stores) as w2:
        _send(w1, _idem([b"0"], seq=0))  # w1 caches the control: producer 7 at sequence 0
        _send(w2, _idem([b"1"], seq=1))  # another broker appends sequence 1
        (r,) = _send(w1, _idem([b"2"], seq=2))  # a gap in w1's copy, in order in Oxia
    assert r.ok and r.start_offset == 3
    assert _values(stores) == [b"0", b"1", b"2"]


def test_a_crash_after_the_reservation_leaves_the_state_right_for_the_next_writer(stores):
    meta, _ = stores
    with _writer(stores) as w1:
        meta.fail_next("put", key_contains="/index/")  # C4 fails: the pending is all there is
        (r,) = _send(w1, _idem([b"a", b"b"], seq=0))
        assert r.ok
    with _writer(stores) as w2:
        (dup,) = _send(w2, _idem([b"a", b"b"], seq=0))
        (nxt,) = _send(w2, _idem([b"c"], seq=2))
    assert (dup.start_offset, dup.duplicate) == (1, True)
    assert nxt.start_offset == 3
    assert _values(stores) == [b"a", b"b", b"c"]


def test_idle_producers_expire_and_the_state_is_bounded_per_partition(stores):
    clock = StepClock(1_000_000)
    cfg = ProducerStateConfig(expiration_ms=60_000, max_per_partition=2)
    with _writer(stores, producer_state=cfg, runtime=stepped_runtime(clock)) as w:
        for pid in (1, 2, 3):
            _send(w, _idem([b"x"], pid=pid, seq=0))
            clock.now += 1
        assert sorted(_control(stores[0]).producers) == [2, 3]
        clock.now += 60_001
        _send(w, SharedAppendGroup("orders", 0, [b"plain"]))
        assert len(_control(stores[0]).producers) == 0
        # A forgotten producer must start over: its next sequence is refused, sequence 0 of a new epoch appended.
        (late,) = _send(w, _idem([b"late"], pid=2, seq=1))
        (again,) = _send(w, _idem([b"again"], pid=2, epoch=1, seq=0))
    assert isinstance(late.error, OutOfOrderSequence) and "re-initialize" in str(late.error)
    assert again.ok and not again.duplicate


def test_retiring_a_log_drops_its_producers(stores):
    meta, _ = stores
    with _writer(stores) as w:
        _send(w, _idem([b"a"], seq=0))
    assert retire_log(meta, KEYS, now_ms=1)
    assert len(_control(meta).producers) == 0


def test_concurrent_writers_never_store_a_batch_twice(stores):
    """Four writers send every batch of two producers, all at once: each is stored once."""
    errors: list[BaseException] = []
    writers = [_writer(stores) for _ in range(4)]

    def send(w):
        try:
            for seq in range(12):
                for pid in (1, 2):
                    while True:
                        (r,) = _send(w, _idem([f"{pid}-{seq}".encode()], pid=pid, seq=seq))
                        if not isinstance(r.error, (OutOfOrderSequence, ConcurrencyConflict)):
                            assert r.ok, r.error
                            break
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=send, args=(w,)) for w in writers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for w in writers:
        w.close()
    assert not errors
    values = _values(stores)
    assert sorted(values) == sorted(f"{p}-{s}".encode() for p in (1, 2) for s in range(12))
    for pid in (1, 2):
        assert [v for v in values if v.startswith(f"{pid}-".encode())] == [f"{pid}-{s}".encode() for s in range(12)]


# -- producer ids ------------------------------------------------------------------------------

def test_producer_ids_are_unique_and_a_name_bumps_its_epoch(stores):
    meta, _ = stores
    ids, other = ProducerIds(meta, LAYOUT), ProducerIds(meta, LAYOUT)
    assert [ids.init().producer_id, other.init().producer_id, ids.init().producer_id] == [0, 1, 2]
    first = ids.init("spark-job-3")
    assert first == ProducerIdentity(3, 0)
    assert other.init("spark-job-3") == ProducerIdentity(3, 1)
    assert ids.init("spark-job-3", bump=False) == ProducerIdentity(3, 1)
    assert ids.init(producer_id=3, producer_epoch=1) == ProducerIdentity(3, 2)
    assert ids.init("a/b c") != ids.init("a_b c")  # a name is one key segment, whatever it holds


def test_a_name_at_the_last_epoch_gets_a_fresh_id(stores):
    meta, _ = stores
    ids = ProducerIds(meta, LAYOUT)
    key = LAYOUT.producer_name_key("n")
    meta.put(key, b'{"producer_id":5,"epoch":32767}', "__llog/producers")
    assert ids.init("n") == ProducerIdentity(0, 0)
    assert ids.init(producer_id=9, producer_epoch=32767).producer_epoch == 0


def test_a_lost_reply_while_allocating_never_repeats_an_id(stores):
    meta, _ = stores
    ids = ProducerIds(meta, LAYOUT)
    ids.init()
    meta.lose_reply_next("put", key_contains="producer-ids")
    with pytest.raises(Exception):
        ids.init()
    assert ids.init().producer_id == 2


@pytest.mark.parametrize("kwargs, message", [
    ({"name": ""}, "producer name"),
    ({"name": "a\nb"}, "producer name"),
    ({"producer_id": 3}, "together"),
    ({"producer_id": -1, "producer_epoch": 0}, "producer_id -1"),
])
def test_bad_producer_init_arguments_are_refused(stores, kwargs, message):
    with pytest.raises(InvalidRequest, match=message):
        ProducerIds(stores[0], LAYOUT).init(**kwargs)
