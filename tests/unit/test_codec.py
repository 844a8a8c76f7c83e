"""bytes-batch-v1 and LLS1: round trips, golden vectors, every corruption."""

from __future__ import annotations

import base64
import json
import struct
import zlib
from pathlib import Path

import pytest

from server._errors import CorruptBatch, LlogError
from server._protocol.kafka_batch import ENCODING
from server._protocol.stored_batches import StoredBatches
from server._protocol.codec import (
    BATCH_ENCODING,
    BATCH_HEADER_SIZE,
    BATCH_MAGIC,
    SHARED_MAGIC,
    SharedBlobPart,
    batch_encoded_size,
    decode_batch,
    decode_batch_bounds,
    decode_shared_header,
    encode_batch,
    encode_shared_blob,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "leaderless-log-protocol" / "examples"
GOLDEN_PAYLOADS = [b"alpha", b"", b"\x00\x01\xff"]
ONE_MIB = 1024 * 1024


def _golden(name: str) -> bytes:
    return (EXAMPLES / name).read_bytes()


def _golden_doc(name: str) -> dict:
    return json.loads((EXAMPLES / name).read_text(encoding="utf-8"))


def _with_valid_crc(header_fields: tuple, records: bytes) -> bytes:
    """A batch whose records section is arbitrary but correctly checksummed."""
    magic, version, flags, count = header_fields
    return struct.pack(">4sHHIII", magic, version, flags, count, len(records), zlib.crc32(records)) + records


# --- bytes-batch-v1 round trips -------------------------------------------


@pytest.mark.parametrize(
    "payloads",
    [
        pytest.param([], id="no-records"),
        pytest.param([b""], id="one-empty"),
        pytest.param([b"", b"", b""], id="only-empty"),
        pytest.param([b"\x00"], id="nul-byte"),
        pytest.param([b"\x00" * 64, b"\xff" * 64], id="nul-and-ff-runs"),
        pytest.param(GOLDEN_PAYLOADS, id="golden"),
        pytest.param([bytes(range(256))], id="all-byte-values"),
        pytest.param(["héllo".encode()], id="utf8"),
    ],
)
def test_batch_round_trip(payloads: list[bytes]) -> None:
    data = encode_batch(payloads)
    assert len(data) == batch_encoded_size(payloads)
    assert decode_batch(data) == payloads
    assert decode_batch(data, expected_count=len(payloads)) == payloads


def test_batch_round_trip_one_mib_record() -> None:
    payload = bytes(range(256)) * (ONE_MIB // 256)
    data = encode_batch([payload])
    assert len(data) == BATCH_HEADER_SIZE + 4 + ONE_MIB
    assert decode_batch(data, expected_count=1) == [payload]


def test_batch_round_trip_many_records() -> None:
    payloads = [i.to_bytes(4, "big") * (i % 7) for i in range(20_000)]
    data = encode_batch(payloads)
    assert decode_batch(data, expected_count=len(payloads)) == payloads


def test_batch_accepts_memoryview_and_bytearray() -> None:
    data = encode_batch(GOLDEN_PAYLOADS)
    assert decode_batch(memoryview(data)) == GOLDEN_PAYLOADS
    assert decode_batch(bytearray(data)) == GOLDEN_PAYLOADS


def test_batch_decoded_payloads_are_bytes() -> None:
    out = decode_batch(memoryview(encode_batch([b"x"])))
    assert type(out[0]) is bytes


def test_batch_header_layout() -> None:
    data = encode_batch([b"ab", b"c"])
    magic, version, flags, count, length, crc = struct.unpack_from(">4sHHIII", data)
    assert (magic, version, flags, count) == (BATCH_MAGIC, 1, 0, 2)
    assert length == len(data) - BATCH_HEADER_SIZE == 4 + 2 + 4 + 1
    assert crc == zlib.crc32(data[BATCH_HEADER_SIZE:])
    assert data[BATCH_HEADER_SIZE:] == b"\x00\x00\x00\x02ab\x00\x00\x00\x01c"


def test_empty_batch_crc_is_zero() -> None:
    assert encode_batch([]) == BATCH_MAGIC + b"\x00\x01" + b"\x00" * 14


# --- bytes-batch-v1 as positions (decode_batch_bounds) ----------------------


@pytest.mark.parametrize(
    "payloads",
    [[], [b""], GOLDEN_PAYLOADS, [bytes(range(256))] * 3, [i.to_bytes(4, "big") * (i % 7) for i in range(5_000)]],
    ids=["no-records", "one-empty", "golden", "all-byte-values", "many"],
)
def test_bounds_locate_the_same_payloads_as_decode_batch(payloads: list[bytes]) -> None:
    data = encode_batch(payloads)
    bounds = decode_batch_bounds(data, len(payloads))
    assert bounds.count == len(payloads)
    assert [bounds.payload(i) for i in range(bounds.count)] == payloads
    assert bounds.starts[0] == 0 and bounds.starts[-1] == len(data) - BATCH_HEADER_SIZE
    # Each gap between neighbours is exactly a length prefix plus its payload.
    assert [bounds.starts[i + 1] - bounds.starts[i] - 4 for i in range(len(payloads))] == [len(p) for p in payloads]


def test_bounds_of_the_golden_batch() -> None:
    bounds = decode_batch_bounds(_golden("batch-3-records.bin"), 3)
    assert list(bounds.starts) == [0, 9, 13, 20]
    assert bytes(bounds.records) == _golden("batch-3-records.bin")[BATCH_HEADER_SIZE:]


def test_bounds_do_not_copy_the_records() -> None:
    data = bytearray(encode_batch([b"abc"]))
    bounds = decode_batch_bounds(data, 1)
    data[-1:] = b"Z"  # a view of the caller's buffer, not a copy
    assert bounds.payload(0) == b"abZ"


# --- bytes-batch-v1 golden ------------------------------------------------


def test_golden_batch_decodes_byte_for_byte() -> None:
    data = _golden("batch-3-records.bin")
    doc = _golden_doc("batch-3-records.json")
    expected = [base64.b64decode(p) for p in doc["payloads_base64"]]
    assert expected == GOLDEN_PAYLOADS
    assert decode_batch(data, expected_count=doc["count"]) == expected
    assert len(data) == doc["total_length"]
    assert f"0x{zlib.crc32(data[BATCH_HEADER_SIZE:]):08x}" == doc["crc32"]


def test_golden_batch_reencodes_identically() -> None:
    data = _golden("batch-3-records.bin")
    assert encode_batch(decode_batch(data)) == data


def test_golden_batch_known_bytes() -> None:
    # Independent of the encoder: the bytes spelled out in SPEC.md 6.1.
    expected = bytes.fromhex(
        "4c4c4231 0001 0000 00000003 00000014 405d6c23"
        "00000005 616c706861 00000000 00000003 0001ff"
    )
    assert _golden("batch-3-records.bin") == expected


# --- bytes-batch-v1 corruption --------------------------------------------


GOOD = encode_batch(GOLDEN_PAYLOADS)


def _expect_corrupt(data: bytes, match: str, **kwargs) -> CorruptBatch:
    """Both decoders refuse ``data`` with the same message."""
    with pytest.raises(CorruptBatch, match=match) as info:
        decode_batch(data, **kwargs)
    assert isinstance(info.value, LlogError)
    assert not info.value.retriable
    with pytest.raises(CorruptBatch) as bounds_info:
        decode_batch_bounds(data, kwargs.get("expected_count"))
    assert bounds_info.value.message == info.value.message
    return info.value


def test_bad_magic() -> None:
    _expect_corrupt(b"XXXX" + GOOD[4:], "magic")


def test_bad_version() -> None:
    _expect_corrupt(GOOD[:4] + b"\x00\x02" + GOOD[6:], "version")


def test_nonzero_flags() -> None:
    _expect_corrupt(GOOD[:6] + b"\x00\x01" + GOOD[8:], "flags")


@pytest.mark.parametrize("size", [0, 1, 4, 19])
def test_truncated_header(size: int) -> None:
    _expect_corrupt(GOOD[:size], "truncated")


@pytest.mark.parametrize("cut", [1, 3, 20])
def test_truncated_body(cut: int) -> None:
    _expect_corrupt(GOOD[:-cut], "length mismatch")


def test_header_only_of_nonempty_batch() -> None:
    _expect_corrupt(GOOD[:BATCH_HEADER_SIZE], "length mismatch")


@pytest.mark.parametrize("extra", [b"\x00", b"trailing bytes"])
def test_extra_trailing_bytes(extra: bytes) -> None:
    _expect_corrupt(GOOD + extra, "length mismatch")


def test_flipped_record_bit_fails_checksum() -> None:
    data = bytearray(GOOD)
    data[25] ^= 0x01
    _expect_corrupt(bytes(data), "checksum")


def test_flipped_crc_bit_fails_checksum() -> None:
    data = bytearray(GOOD)
    data[16] ^= 0x80
    _expect_corrupt(bytes(data), "checksum")


@pytest.mark.parametrize("bit", range(len(GOOD) * 8))
def test_every_single_bit_flip_is_detected(bit: int) -> None:
    data = bytearray(GOOD)
    data[bit // 8] ^= 1 << (bit % 8)
    with pytest.raises(CorruptBatch):
        decode_batch(bytes(data), expected_count=3)
    with pytest.raises(CorruptBatch):
        decode_batch_bounds(bytes(data), 3)


@pytest.mark.parametrize("expected", [0, 2, 4, 1000])
def test_count_mismatch_with_expected_count(expected: int) -> None:
    _expect_corrupt(GOOD, "index says", expected_count=expected)


def test_header_count_too_high_runs_out_of_records() -> None:
    records = GOOD[BATCH_HEADER_SIZE:]
    _expect_corrupt(_with_valid_crc((BATCH_MAGIC, 1, 0, 4), records), "ends inside")


def test_header_count_too_low_leaves_trailing_bytes() -> None:
    records = GOOD[BATCH_HEADER_SIZE:]
    _expect_corrupt(_with_valid_crc((BATCH_MAGIC, 1, 0, 2), records), "trailing")


def test_record_length_prefix_past_the_end() -> None:
    records = struct.pack(">I", 100) + b"short"
    _expect_corrupt(_with_valid_crc((BATCH_MAGIC, 1, 0, 1), records), "inside a record")


def test_records_end_inside_length_prefix() -> None:
    records = struct.pack(">I", 1) + b"x" + b"\x00\x00"
    _expect_corrupt(_with_valid_crc((BATCH_MAGIC, 1, 0, 2), records), "length prefix")


# --- LLS1 -----------------------------------------------------------------


def _groups(spec: list[tuple[str, int, list[bytes]]]) -> list[tuple[str, int, int, bytes]]:
    return [(t, p, len(payloads), encode_batch(payloads)) for t, p, payloads in spec]


def _assert_consistent(blob: bytes, parts: list[SharedBlobPart], groups) -> None:
    header = decode_shared_header(blob)
    assert header.version == 1
    assert list(header.partitions) == parts
    position = 8 + header.header_length
    for part, (topic, partition, count, body) in zip(parts, groups):
        # body_offset is absolute and the bodies are back to back.
        assert part.body_offset == position
        assert (part.topic, part.partition, part.msg_count) == (topic, partition, count)
        assert part.encoding == BATCH_ENCODING
        assert part.body_length == len(body)
        assert blob[part.body_offset:part.body_offset + part.body_length] == body
        assert len(decode_batch(blob[part.body_offset:part.body_offset + part.body_length], count)) == count
        position += part.body_length
    assert position == len(blob)


def test_shared_blob_round_trip() -> None:
    groups = _groups([("orders", 0, [b"a", b"b"]), ("orders", 1, [b"c"]), ("users", 7, [b"", b"\x00"])])
    blob, parts = encode_shared_blob(groups, created_at_ms=123)
    assert blob[:4] == SHARED_MAGIC
    assert decode_shared_header(blob).created_at_ms == 123
    _assert_consistent(blob, parts, groups)


@pytest.mark.parametrize("n_groups", [1, 2, 5, 13, 40, 120])
@pytest.mark.parametrize("body_size", [1, 37, 999])
def test_shared_header_fixed_point(n_groups: int, body_size: int) -> None:
    # Offsets cross digit boundaries (99 -> 100, 999 -> 1000 ...) as the
    # header grows; the encoder must still settle on a self-consistent header.
    groups = _groups([(f"t{i}", i, [b"x" * body_size]) for i in range(n_groups)])
    blob, parts = encode_shared_blob(groups, created_at_ms=1_760_000_000_000)
    _assert_consistent(blob, parts, groups)
    header = decode_shared_header(blob)
    assert struct.unpack_from(">I", blob, 4)[0] == header.header_length
    # The header JSON is compact and re-serializes to itself.
    raw = blob[8:8 + header.header_length]
    assert json.dumps(json.loads(raw), separators=(",", ":")).encode() == raw


def test_shared_blob_with_no_groups() -> None:
    blob, parts = encode_shared_blob([], created_at_ms=5)
    assert parts == []
    header = decode_shared_header(blob)
    assert header.partitions == ()
    assert len(blob) == 8 + header.header_length


def test_shared_header_needs_only_the_header_bytes() -> None:
    groups = _groups([("orders", 0, [b"a" * 1000])])
    blob, parts = encode_shared_blob(groups, created_at_ms=1)
    header_len = struct.unpack_from(">I", blob, 4)[0]
    assert decode_shared_header(blob[:8 + header_len]).partitions == tuple(parts)


def test_golden_shared_blob() -> None:
    blob = _golden("shared-2-partitions.bin")
    doc = _golden_doc("shared-2-partitions.json")
    header = decode_shared_header(blob)
    assert len(blob) == doc["total_length"]
    assert header.header_length == doc["header_length"]
    assert blob[8:8 + header.header_length].decode() == doc["header_json"]
    assert header.created_at_ms == doc["header"]["created_at_ms"]
    groups = []
    for part, expected in zip(header.partitions, doc["partitions"], strict=True):
        payloads = [base64.b64decode(p) for p in expected["payloads_base64"]]
        assert (part.topic, part.partition) == (expected["topic"], expected["partition"])
        assert (part.body_offset, part.body_length) == (expected["body_offset"], expected["body_length"])
        assert part.encoding == ENCODING
        body = blob[part.body_offset:part.body_offset + part.body_length]
        batches = StoredBatches.check(body, expected_count=part.msg_count)
        assert batches.values() == payloads
        groups.append((part.topic, part.partition, part.msg_count, body))
    # Re-encoding the decoded content gives the identical object.
    again, parts = encode_shared_blob(groups, header.created_at_ms, ENCODING)
    assert again == blob
    assert tuple(parts) == header.partitions
    assert StoredBatches.of_values(payloads, header.created_at_ms).data == body


# --- LLS1 corruption ------------------------------------------------------

GOOD_BLOB, _ = encode_shared_blob(_groups([("orders", 0, [b"a", b"b"])]), created_at_ms=1)


@pytest.mark.parametrize("size", [0, 3, 7])
def test_shared_truncated_prefix(size: int) -> None:
    with pytest.raises(CorruptBatch, match="prefix"):
        decode_shared_header(GOOD_BLOB[:size])


def test_shared_truncated_header() -> None:
    header_len = struct.unpack_from(">I", GOOD_BLOB, 4)[0]
    with pytest.raises(CorruptBatch, match="truncated LLS1 header"):
        decode_shared_header(GOOD_BLOB[:8 + header_len - 1])


def test_shared_bad_magic() -> None:
    with pytest.raises(CorruptBatch, match="magic"):
        decode_shared_header(b"LLB1" + GOOD_BLOB[4:])


def test_shared_huge_header_length() -> None:
    with pytest.raises(CorruptBatch, match="truncated"):
        decode_shared_header(SHARED_MAGIC + b"\xff\xff\xff\xff{}")


@pytest.mark.parametrize(
    "header",
    [
        pytest.param(b"not json", id="not-json"),
        pytest.param(b"\xff\xfe\x00", id="not-utf8"),
        pytest.param(b"[]", id="array"),
        pytest.param(b"17", id="number"),
        pytest.param(b"{}", id="empty-object"),
        pytest.param(b'{"version":1,"created_at_ms":1}', id="no-partitions"),
        pytest.param(b'{"version":1,"created_at_ms":1,"partitions":[{"topic":"t"}]}', id="partial-entry"),
        pytest.param(b'{"version":1,"created_at_ms":1,"partitions":["x"]}', id="entry-not-object"),
        pytest.param(
            b'{"version":1,"created_at_ms":1,"partitions":[{"topic":"t","partition":"zero",'
            b'"msg_count":1,"encoding":"bytes-batch-v1","body_offset":8,"body_length":1}]}',
            id="bad-int",
        ),
    ],
)
def test_shared_garbage_header(header: bytes) -> None:
    with pytest.raises(CorruptBatch):
        decode_shared_header(SHARED_MAGIC + struct.pack(">I", len(header)) + header)


def test_shared_random_garbage() -> None:
    garbage = bytes((i * 37 + 11) % 256 for i in range(500))
    with pytest.raises(CorruptBatch):
        decode_shared_header(garbage)


def test_shared_unknown_version_is_rejected() -> None:
    header = GOOD_BLOB[8:].split(b"LLB1")[0].replace(b'"version":1', b'"version":2')
    with pytest.raises(CorruptBatch):
        decode_shared_header(SHARED_MAGIC + struct.pack(">I", len(header)) + header)


def test_a_record_running_past_the_end_before_the_last_one() -> None:
    records = struct.pack(">I", 100) + b"short" + struct.pack(">I", 1) + b"x"
    _expect_corrupt(_with_valid_crc((BATCH_MAGIC, 1, 0, 2), records), "inside a record")
