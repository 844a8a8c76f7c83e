"""Fetch answers sent as buffers (``server/_kafka/gather.py``): byte for byte the plain
encoding at every Fetch version served, the fallback when a marker is not where the codec
put it, and ``send_parts`` resuming short writes over more buffers than one sendmsg takes."""

from __future__ import annotations

import random
import struct

import pytest
from kafka.protocol.consumer import FetchResponse

from server._kafka.codec import encode_framed
from server._kafka.gather import RecordParts, encode_gathered, send_parts

_FT = FetchResponse.FetchableTopicResponse
_FP = _FT.PartitionData


def _answer(version: int, records: list) -> object:
    """Three topics; each partition's records from ``records`` (RecordParts or bytes), cycled."""
    it = iter(records)
    topics = []
    for t in range(3):
        parts = [_FP(partition_index=p, error_code=0, high_watermark=-1 if p == 0 else 10 ** p,
                     last_stable_offset=-1, log_start_offset=0, aborted_transactions=None,
                     preferred_read_replica=-1, records=next(it)) for p in range(3)]
        topics.append(_FT(topic=f"topic-{t}", partitions=parts))
    return FetchResponse[version](throttle_time_ms=0, error_code=0, session_id=0, responses=topics)


def _pieces(rng: random.Random, i: int) -> list[bytes]:
    """Batch-like pieces: an 8-byte offset then a body, some bodies long enough for a 2-3 byte varint."""
    out = []
    for _ in range(rng.randrange(0, 4)):
        out += [struct.pack(">q", i), rng.randbytes(rng.choice([0, 1, 61, 127, 128, 20_000]))]
    return out


@pytest.mark.parametrize("version", range(4, 13))
def test_a_gathered_answer_is_the_plain_encoding_byte_for_byte(version):
    rng = random.Random(version)
    pieces = [_pieces(rng, i) for i in range(9)]
    plain = bytes(encode_framed(_answer(version, [b"".join(p) for p in pieces]), version, 77))
    gathered_records = [RecordParts(p) for p in pieces]
    response = _answer(version, gathered_records)
    out = encode_gathered(response, version, 77, gathered_records, response.flexible_version_q(version),
                          rng.randbytes(16))
    assert isinstance(out, list)
    assert b"".join(bytes(b) for b in out) == plain
    # The records are the caller's buffers, not copies of them.
    assert {id(p) for p in gathered_records[1].parts} <= {id(b) for b in out}


def test_a_marker_the_codec_did_not_write_falls_back_to_the_plain_encoding():
    # Sixteen 0xff bytes occur in the answer itself (partition 0's high watermark and last
    # stable offset, both -1), so the nonce is seen more often than there are records.
    pieces = [[b"\x01" * 100] for _ in range(9)]
    plain = bytes(encode_framed(_answer(12, [b"".join(p) for p in pieces]), 12, 5))
    records = [RecordParts(p) for p in pieces]
    out = encode_gathered(_answer(12, records), 12, 5, records, True, b"\xff" * 16)
    assert not isinstance(out, list) and bytes(out) == plain
    assert all(r.marker is None for r in records)


def test_record_parts_encode_plainly_outside_a_gathered_answer():
    def records():
        return [RecordParts([b"ab", memoryview(b"cdef")[1:]]) for _ in range(9)]

    assert bytes(encode_framed(_answer(11, records()), 11, 1)) == bytes(encode_framed(_answer(11, [b"abdef"] * 9), 11, 1))
    assert _answer(11, records()).encode(version=11) == _answer(11, [b"abdef"] * 9).encode(version=11)


class _ShortWrites:
    """A sendmsg that takes at most ``cap`` buffers (as IOV_MAX) and stops at a random byte."""

    def __init__(self, seed: int, cap: int = 1024) -> None:
        self.rng, self.cap, self.got, self.calls = random.Random(seed), cap, bytearray(), 0

    def __call__(self, bufs: list) -> int:
        assert 0 < len(bufs) <= self.cap
        self.calls += 1
        data = b"".join(bytes(b) for b in bufs)
        n = self.rng.randrange(1, len(data) + 1)
        self.got += data[:n]
        return n


@pytest.mark.parametrize("seed", range(5))
def test_send_parts_resumes_short_writes_over_more_buffers_than_one_call_takes(seed):
    rng = random.Random(seed)
    answer = [rng.randbytes(rng.randrange(0, 50)) for _ in range(3000)]
    send = _ShortWrites(seed)
    send_parts(None, answer, sendmsg=send)  # type: ignore[arg-type]
    assert bytes(send.got) == b"".join(answer)
    assert send.calls >= 3
