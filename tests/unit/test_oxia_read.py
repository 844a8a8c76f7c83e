"""``server._storage.oxia_read``: the Read RPC's bytes are betterproto2's,
byte for byte one way and value for value the other (oxia's own generated
messages are the reference), plus golden vectors and malformed answers."""

from __future__ import annotations

import random

import pytest
from oxia.internal.proto.io.streamnative.oxia import proto as pb

from server._errors import MetadataStoreError
from server._storage.oxia_read import GotKey, decode_read_response, encode_read_request

# ReadRequest{shard 3, gets [GetRequest{key "ab", include_value}]}
GOLDEN_REQUEST = bytes.fromhex("0803" "1206" "0a026162" "1001")
# ReadResponse{gets [GetResponse{version{version_id 300}, value "v", key "k"},
#                    GetResponse{status KEY_NOT_FOUND}]}
GOLDEN_RESPONSE = bytes.fromhex("0a0b" "1203" "08ac02" "1a0176" "22016b" "0a02" "0801")


def _reference_request(shard: int, keys: list[str]) -> bytes:
    return bytes(pb.ReadRequest(shard=shard, gets=[
        pb.GetRequest(key=k, comparison_type=pb.KeyComparisonType.EQUAL, include_value=True) for k in keys]))


def _expected(g: pb.GetResponse) -> GotKey:
    return GotKey(int(g.status), None if g.version is None else g.version.version_id, g.value, g.key)


def test_golden_vectors() -> None:
    assert encode_read_request(3, ["ab"]) == GOLDEN_REQUEST == _reference_request(3, ["ab"])
    assert decode_read_response(GOLDEN_RESPONSE) == [GotKey(0, 300, b"v", "k"), GotKey(1, None, None, None)]
    reference = pb.ReadResponse.parse(GOLDEN_RESPONSE)
    assert decode_read_response(GOLDEN_RESPONSE) == [_expected(g) for g in reference.gets]


@pytest.mark.parametrize("shard", [0, 1, 127, 128, 2**31, 2**63 - 1, -1])
def test_requests_are_betterproto2s_bytes(shard: int) -> None:
    keys = ["/llog/t/partitions/0/meta/control", "", "ключ/ü", "x" * 300]
    assert encode_read_request(shard, keys) == _reference_request(shard, keys)


def _random_response(rng: random.Random) -> pb.GetResponse:
    found = rng.random() < 0.7
    version = pb.Version(
        version_id=rng.choice([0, 1, rng.randrange(2**62), -rng.randrange(1, 2**62)]),
        modifications_count=rng.randrange(2**40), created_timestamp=rng.randrange(2**64),
        modified_timestamp=rng.randrange(2**64), session_id=rng.choice([None, rng.randrange(2**40)]),
        client_identity=rng.choice([None, "broker-1"])) if found else None
    return pb.GetResponse(
        status=pb.Status.OK if found else rng.choice([pb.Status.KEY_NOT_FOUND, pb.Status.UNEXPECTED_VERSION_ID]),
        version=version, value=rng.choice([None, b"", rng.randbytes(rng.randrange(1, 2000))]) if found else None,
        key=rng.choice([None, "k/" + str(rng.randrange(10**6))]),
        secondary_index_key=rng.choice([None, "idx"]))


def test_responses_decode_as_betterproto2_decodes_them() -> None:
    rng = random.Random(20261127)
    for _ in range(300):
        gets = [_random_response(rng) for _ in range(rng.randrange(0, 70))]
        data = bytes(pb.ReadResponse(gets=gets))
        assert decode_read_response(data) == [_expected(g) for g in pb.ReadResponse.parse(data).gets]


def test_unknown_fields_of_every_wire_type_are_read_past() -> None:
    inner = bytes(pb.GetResponse(version=pb.Version(version_id=9), value=b"v"))
    unknown = bytes.fromhex("b001" "05"  # field 22 varint 5
                            "b9010102030405060708"  # field 23 fixed64
                            "c20103616263"  # field 24 length-delimited "abc"
                            "cd0101020304")  # field 25 fixed32
    data = b"\x0a" + bytes([len(inner) + len(unknown)]) + inner + unknown + unknown
    assert decode_read_response(data) == [GotKey(0, 9, b"v", None)]


@pytest.mark.parametrize("data", [
    GOLDEN_RESPONSE[:-1],  # the last field cut short
    b"\x0a\x05\x08",  # a message longer than what follows
    b"\x0a\x02\x0b\x00",  # wire type 3 (groups are not in proto3)
    b"\x0a\x0b\x08" + b"\xff" * 10,  # a varint of eleven bytes
])
def test_malformed_responses_are_metadata_store_errors(data: bytes) -> None:
    with pytest.raises(MetadataStoreError, match="malformed|truncated"):
        decode_read_response(data)
