"""The Kafka listener's framing and tables (``server/_kafka/codec.py``, ``errors.py``, ``nodes.py``):
golden bytes of the frame, the versions advertised, the null check against the schemas,
the error-code table, node registration and the rendezvous rule."""

from __future__ import annotations

import collections
import struct

import pytest
from kafka.protocol.consumer import FetchRequest
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest

from server._errors import (
    BackPressureRejected, CorruptBatch, MetadataStoreError, OffsetOutOfRange, OutOfOrderSequence, ProducerClosed,
    ProducerFenced, StaleGeneration, TopicAlreadyExists, UnknownTopic,
)
from server._kafka.codec import APIS, MalformedFrame, decode_request, encode_framed, unsupported_api_versions
from server._kafka.errors import Code, error_code
from server._kafka.nodes import Node, Nodes, rendezvous
from server._protocol.http_json import TooLarge
from server._protocol.keys import LogLayout
from server._storage.metastore import InMemoryMetadataStore

ISSUE_RANGES = {  # the versions the listener advertises (KAFKA_API.md)
    18: (0, 4), 3: (0, 12), 0: (0, 11), 1: (4, 12), 2: (1, 7), 22: (0, 4), 23: (2, 4), 10: (0, 4), 11: (0, 9),
    14: (0, 5), 12: (0, 4), 13: (0, 5), 8: (2, 9), 9: (1, 9), 19: (2, 7), 20: (1, 6), 32: (1, 4), 60: (0, 1),
    15: (0, 5), 16: (0, 4), 37: (0, 3), 44: (0, 1), 42: (0, 2), 47: (0, 0), 21: (0, 2), 35: (1, 4), 61: (0, 0),
    29: (1, 3), 30: (1, 3), 31: (1, 3), 43: (0, 2), 45: (0, 0), 46: (0, 0), 48: (0, 1), 49: (0, 1),
    17: (1, 1), 36: (0, 2), 50: (0, 0), 51: (0, 0),
}


def test_the_advertised_versions_are_kafka_api_md_s():
    assert {k: (a.min_version, a.max_version) for k, a in APIS.items()} == ISSUE_RANGES
    assert APIS[0].served_from == 3 and not APIS[0].serves(2) and APIS[0].serves(3)


def test_every_advertised_api_has_a_handler():
    from server._kafka.service import HANDLERS

    assert set(HANDLERS) | {0} == set(APIS)  # Produce goes through KafkaService.begin


def test_the_unsupported_version_answer_is_api_versions_v0_byte_for_byte():
    # size, correlation id 7, error 35, 39 APIs of (key, min, max), no throttle (v0), no tagged fields.
    expected = struct.pack(">iihi", 4 + 2 + 4 + 6 * len(APIS), 7, 35, len(APIS)) + b"".join(
        struct.pack(">hhh", k, lo, hi) for k, (lo, hi) in sorted(ISSUE_RANGES.items()))
    assert bytes(unsupported_api_versions(7)) == expected
    assert expected.hex().startswith("000000f4000000070023000000270000")


def _frame(request, version: int, correlation_id: int = 5, client_id: str | None = "c") -> bytes:
    request.with_header(correlation_id=correlation_id, client_id=client_id)
    return request.encode(header=True)


@pytest.mark.parametrize("version", [0, 3, 4])
def test_request_headers_v1_and_v2_decode(version):
    req = decode_request(_frame(ApiVersionsRequest[version](client_software_name="t", client_software_version="1"),
                                version, 99))
    assert (req.api.name, req.version, req.correlation_id, req.client_id) == ("ApiVersions", version, 99, "c")


def test_a_flexible_response_frame_carries_its_size_correlation_id_and_tagged_fields():
    framed = encode_framed(APIS[18].response[3](error_code=0, api_keys=[], throttle_time_ms=0), 3, 0x01020304)
    (size,) = struct.unpack_from(">i", framed)
    assert size == len(framed) - 4
    assert framed[4:8] == b"\x01\x02\x03\x04"  # ApiVersions' response header stays v0 (KIP-511)


@pytest.mark.parametrize("frame, message", [
    (b"\x00\x12", "shorter than a request header"),
    (struct.pack(">hhi", 57, 0, 1), "API key 57 is not served"),
    (struct.pack(">hhi", 0, 2, 1), "Produce version 2 is not served (3-11)"),
    (struct.pack(">hhi", 3, 13, 1), "Metadata version 13 is not served (0-12)"),
    (struct.pack(">hhih", 3, 1, 1, -1) + b"\x00\x00", "the body does not decode"),
])
def test_what_cannot_be_served_is_a_malformed_frame_naming_why(frame, message):
    with pytest.raises(MalformedFrame, match=message.replace("(", r"\(").replace(")", r"\)")):
        decode_request(frame)


def test_a_null_where_the_schema_allows_none_is_refused():
    F = FetchRequest[4]
    fetch = F(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1, isolation_level=0, topics=None)
    with pytest.raises(MalformedFrame, match="topics is null"):
        decode_request(_frame(fetch, 4))
    # Metadata's topics may be null (every topic) from v1 on.
    assert decode_request(_frame(MetadataRequest[1](topics=None), 1)).body.topics is None


@pytest.mark.parametrize("exc, code", [
    (UnknownTopic("x"), Code.UNKNOWN_TOPIC_OR_PARTITION),
    (OffsetOutOfRange("x"), Code.OFFSET_OUT_OF_RANGE),
    (CorruptBatch("x"), Code.CORRUPT_MESSAGE),
    (TooLarge("x", "f"), Code.MESSAGE_TOO_LARGE),
    (OutOfOrderSequence("x"), Code.NOT_ENOUGH_REPLICAS),
    (ProducerFenced("x"), Code.INVALID_PRODUCER_EPOCH),
    (BackPressureRejected("x"), Code.REQUEST_TIMED_OUT),
    (ProducerClosed("x"), Code.NOT_LEADER_OR_FOLLOWER),
    (MetadataStoreError("x"), Code.KAFKA_STORAGE_ERROR),
    (StaleGeneration("x"), Code.ILLEGAL_GENERATION),
    (TopicAlreadyExists("x"), Code.TOPIC_ALREADY_EXISTS),
    (ValueError("a bug"), Code.UNKNOWN_SERVER_ERROR),
    (None, Code.NONE),
])
def test_each_outcome_has_its_kafka_error_code(exc, code):
    assert error_code(exc) == code


def test_a_retriable_llog_error_is_never_a_fatal_kafka_error():
    """Kafka clients retry NOT_ENOUGH_REPLICAS, REQUEST_TIMED_OUT, NOT_LEADER_OR_FOLLOWER and
    KAFKA_STORAGE_ERROR; the rest fail the batch."""
    retriable_codes = {Code.NOT_ENOUGH_REPLICAS, Code.REQUEST_TIMED_OUT, Code.NOT_LEADER_OR_FOLLOWER,
                       Code.KAFKA_STORAGE_ERROR, Code.UNKNOWN_TOPIC_OR_PARTITION}
    for cls in (OutOfOrderSequence, BackPressureRejected, MetadataStoreError, ProducerClosed):
        assert cls.retriable or cls is ProducerClosed
        assert error_code(cls("x")) in retriable_codes, cls


def test_nodes_register_take_the_next_id_on_a_clash_and_list_each_other():
    meta, layout = InMemoryMetadataStore(), LogLayout("llog")
    a = Nodes(meta, layout, broker_id="broker-a", host="h", port=1)
    a.register()
    clash = Nodes(meta, layout, broker_id="broker-b", host="h", port=2)
    clash.me = Node(a.me.node_id, "h", 2, "broker-b")  # the same 31-bit id as a's
    clash.register()
    assert clash.me.node_id == a.me.node_id + 1
    again = Nodes(meta, layout, broker_id="broker-a", host="h", port=1)
    again.register()  # a restarted broker keeps its id
    assert again.me.node_id == a.me.node_id
    assert [n.broker_id for n in a.refresh()] == ["broker-a", "broker-b"]


def test_a_broker_lost_from_the_list_is_put_back_by_its_refresh():
    meta, layout = InMemoryMetadataStore(), LogLayout("llog")
    a = Nodes(meta, layout, broker_id="broker-a", host="h", port=1)
    a.register()
    meta.delete(layout.broker_key(a.me.node_id), "__llog/brokers")  # as the end of its Oxia session does
    assert a.refresh() == (a.me,)
    assert meta.get(layout.broker_key(a.me.node_id), "__llog/brokers") is not None


def test_rendezvous_spreads_evenly_and_moves_only_the_leaving_node_s_share():
    nodes = [Node(i * 7 + 3, "h", i) for i in range(3)]
    keys = [f"orders\x00{p}" for p in range(3000)]
    before = {k: rendezvous(nodes, k) for k in keys}
    counts = collections.Counter(n.node_id for n in before.values())
    assert min(counts.values()) > 900
    after = {k: rendezvous(nodes[:2], k) for k in keys}
    moved = [k for k in keys if before[k] != after[k]]
    assert all(before[k] == nodes[2] for k in moved) and len(moved) == counts[nodes[2].node_id]


@pytest.mark.parametrize("version", [4, 11, 12])
def test_our_framing_is_kafka_python_s_own_encoding_byte_for_byte(version):
    """``encode_framed`` sizes its buffer and returns a view, and must encode exactly what
    ``ApiMessage.encode(header=True, framed=True)`` does."""
    from kafka.protocol.consumer import FetchResponse

    def answer():
        F = FetchResponse[version]
        part = F.FetchableTopicResponse.PartitionData(partition_index=3, error_code=0, high_watermark=7,
                                                      last_stable_offset=7, log_start_offset=0,
                                                      aborted_transactions=None, preferred_read_replica=-1,
                                                      records=b"r" * 300_000)
        return F(throttle_time_ms=0, error_code=0, session_id=0,
                 responses=[F.FetchableTopicResponse(topic="t", partitions=[part])])

    theirs = answer()
    theirs.with_header(correlation_id=9)
    assert bytes(encode_framed(answer(), version, 9, 300_000)) == bytes(theirs.encode(header=True, framed=True))
    for v in (0, 3):  # ApiVersions: header v0 even when the body is flexible
        mine = APIS[18].response[v](error_code=0, api_keys=[], throttle_time_ms=5)
        ref = APIS[18].response[v](error_code=0, api_keys=[], throttle_time_ms=5)
        ref.with_header(correlation_id=9)
        assert bytes(encode_framed(mine, v, 9)) == bytes(ref.encode(header=True, framed=True))
