"""Kafka RecordBatch v2, the ``kafka-batch-v2`` storage encoding (SPEC 6.3):
round trips, Kafka's own client library as the independent reference, and
every check a broker makes before storing a batch."""

from __future__ import annotations

import struct

import pytest

from server._errors import CorruptBatch
from server._protocol.kafka_batch import (
    HEADER_SIZE,
    Compression,
    Record,
    TimestampType,
    build_batch,
    check_batch,
    crc32c,
    decode_records,
    iter_records,
    kafka_offset,
    llog_offset,
    read_header,
    split_batches,
    with_base_offset,
)

RECORDS = [
    Record(b"v1", b"k1", (("trace", b"abc"), ("empty", b""), ("null", None)), 1_760_000_000_000),
    Record(None, b"k2", (), 1_760_000_000_005),           # a tombstone
    Record(b"", None, (("\u00e9t\u00e9", b"\x00\xff"),), 1_759_999_999_990),  # null key, earlier timestamp
]


def test_crc32c_is_castagnoli():
    assert crc32c(b"123456789") == 0xE3069283


def test_offsets_map_llog_one_to_kafka_zero():
    assert kafka_offset(1) == 0 and llog_offset(0) == 1
    assert all(llog_offset(kafka_offset(o)) == o for o in (1, 2, 10**12))


@pytest.mark.parametrize("codec", list(Compression))
def test_round_trip_with_every_compression(codec):
    batch = build_batch(RECORDS, compression=codec, producer_id=7, producer_epoch=1, base_sequence=40)
    h, records = decode_records(batch)
    assert (h.records_count, h.last_offset_delta, h.compression, h.size) == (3, 2, codec, len(batch))
    assert (h.base_timestamp, h.max_timestamp) == (1_760_000_000_000, 1_760_000_000_005)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (7, 1, 40)
    assert [(r.key, r.value, r.headers, r.timestamp_ms, r.offset_delta) for r in records] == [
        (r.key, r.value, r.headers, r.timestamp_ms, i) for i, r in enumerate(RECORDS)]


def test_base_offset_and_leader_epoch_are_outside_the_crc():
    batch = build_batch(RECORDS)
    moved = with_base_offset(batch, 41)
    assert read_header(moved).base_offset == 41 and check_batch(moved).crc == check_batch(batch).crc
    epoch = batch[:12] + struct.pack(">i", 9) + batch[16:]
    check_batch(epoch)
    for i in range(21, len(batch)):  # every byte from attributes on is covered
        flipped = bytearray(batch)
        flipped[i] ^= 0x01
        with pytest.raises(CorruptBatch):
            check_batch(bytes(flipped))


def test_kafka_python_reads_our_batches_and_we_read_its():
    from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

    for codec in (Compression.NONE, Compression.GZIP):
        ours = build_batch(RECORDS, compression=codec)
        theirs = list(DefaultRecordBatch(bytearray(ours)))
        assert DefaultRecordBatch(bytearray(ours)).validate_crc()
        assert [(r.offset, r.key, r.value, r.timestamp, list(r.headers)) for r in theirs] == [
            (i, r.key, r.value, r.timestamp_ms, list(r.headers)) for i, r in enumerate(RECORDS)]

        builder = DefaultRecordBatchBuilder(magic=2, compression_type=int(codec), is_transactional=False,
                                            producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                            batch_size=1 << 20)
        for i, r in enumerate(RECORDS):
            builder.append(i, timestamp=r.timestamp_ms, key=r.key, value=r.value, headers=list(r.headers))
        built = bytes(builder.build())
        _, records = decode_records(built)
        assert [(r.key, r.value, r.headers, r.timestamp_ms) for r in records] == [
            (r.key, r.value, r.headers, r.timestamp_ms) for r in RECORDS]
        if codec is Compression.NONE:  # same fields, same bytes (kafka-python writes leader epoch 0)
            assert built == build_batch(RECORDS, partition_leader_epoch=0)


def test_a_slice_of_several_batches_splits_and_iterates():
    a, b = build_batch(RECORDS[:1]), build_batch(RECORDS[1:], compression=Compression.ZSTD)
    joined = a + b
    assert [(pos, h.records_count) for pos, h in split_batches(joined)] == [(0, 1), (len(a), 2)]
    assert [r.key for _, r in iter_records(joined)] == [b"k1", b"k2", None]


def test_log_append_time_is_an_attribute_bit():
    h = read_header(build_batch(RECORDS, timestamp_type=TimestampType.LOG_APPEND_TIME))
    assert h.timestamp_type is TimestampType.LOG_APPEND_TIME and h.attributes == 0x08


def _bad(batch: bytes, at: int, fmt: str, value: int) -> bytes:
    out = bytearray(batch)
    struct.pack_into(fmt, out, at, value)
    if at >= 21:
        struct.pack_into(">I", out, 17, crc32c(bytes(out[21:])))
    return bytes(out)


@pytest.mark.parametrize("mutate, message", [
    (lambda b: b[:HEADER_SIZE - 1], "header bytes"),
    (lambda b: b[:-1], "batchLength"),
    (lambda b: _bad(b, 16, ">b", 1), "magic is 1"),
    (lambda b: _bad(b, 17, ">I", 0), "CRC-32C"),
    (lambda b: _bad(b, 57, ">i", 2), "recordsCount 2 with lastOffsetDelta 2"),
    (lambda b: _bad(_bad(b, 57, ">i", 0), 23, ">i", -1), "recordsCount 0"),
    (lambda b: _bad(b, 21, ">h", 5), "compression type 5"),
])
def test_a_broker_refuses_a_malformed_batch(mutate, message):
    with pytest.raises(CorruptBatch, match=message):
        check_batch(mutate(build_batch(RECORDS)))


def test_records_that_do_not_fill_their_batch_are_refused():
    batch = build_batch(RECORDS)
    # Claim 2 records where 3 are stored (header and CRC consistent): bytes are left over.
    short = _bad(_bad(batch, 57, ">i", 2), 23, ">i", 1)
    with pytest.raises(CorruptBatch, match="bytes left"):
        decode_records(short)
    garbage = _bad(build_batch([Record(b"x", timestamp_ms=5)], compression=Compression.GZIP), 61, ">i", 0x1F8B0000)
    with pytest.raises(CorruptBatch, match="decompress"):
        decode_records(garbage)
