"""The Oxia JSON values: round trips, golden bytes, corrupt input."""

from __future__ import annotations

import json
from dataclasses import dataclass

from server._catalogue.record import TopicRecord
from pathlib import Path

import pytest

from server._log.producer_ids import ProducerIdentity, decode_named, decode_next_id, encode_named, encode_next_id

from server._errors import CorruptBatch
from server._protocol.codec import BATCH_ENCODING
from server._protocol.records import (
    CompactionCursor,
    CompactionRecord,
    CompactionState,
    CompactorClaim,
    ControlRecord,
    EntryType,
    IndexEntry,
    LogState,
    PendingAppend,
)

VALUES = Path(__file__).resolve().parents[2] / "leaderless-log-protocol" / "examples" / "oxia-values"
URI = "s3://bucket/llog/wal-shared/0b7e9f4c-2d3a-4e5f-8a6b-7c8d9e0f1a2b"

PENDING = PendingAppend(
    append_id="a1",
    start_offset=4,
    end_offset=6,
    msg_count=3,
    entry_type=EntryType.WAL,
    data_key=URI,
    encoding=BATCH_ENCODING,
    byte_offset=300,
    byte_length=45,
    created_at_ms=1_760_000_000_000,
)

# Which class decodes each golden value.
GOLDEN = {
    "control-open.json": ControlRecord,
    "control-pending.json": ControlRecord,
    "control-fenced.json": ControlRecord,
    "control-log-start.json": ControlRecord,
    "index-wal-shared.json": IndexEntry,
    "index-compacted.json": IndexEntry,
    "index-wal-legacy-v1.json": IndexEntry,
    "compaction-cursor.json": CompactionCursor,
    "compaction-deleting-old.json": CompactionRecord,
    "compactor-claim.json": CompactorClaim,
    "topic-orders.json": TopicRecord,
    "control-producers.json": ControlRecord,
    "producer-ids.json": None,  # set below: the producer-id records have functions, not classes
    "producer-named.json": None,
}


@dataclass(frozen=True)
class _NextId:
    next_id: int

    @classmethod
    def decode(cls, raw: bytes) -> _NextId:
        return cls(decode_next_id(raw))

    def encode(self) -> bytes:
        return encode_next_id(self.next_id)


@dataclass(frozen=True)
class _Named:
    identity: ProducerIdentity

    @classmethod
    def decode(cls, raw: bytes) -> _Named:
        return cls(decode_named(raw))

    def encode(self) -> bytes:
        return encode_named(self.identity)


GOLDEN["producer-ids.json"], GOLDEN["producer-named.json"] = _NextId, _Named


# --- round trips ----------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        ControlRecord(LogState.OPEN, 1, None),
        ControlRecord(LogState.OPEN, 7, PENDING),
        ControlRecord(LogState.FENCED, 7, None),
        ControlRecord(LogState.OPEN, 2**63 - 1, None),
        PENDING.index_entry(),
        IndexEntry(EntryType.COMPACTED, 10, URI, BATCH_ENCODING, None, None, 5),
        IndexEntry(EntryType.WAL, 1, URI, BATCH_ENCODING, 0, 0, 0),
        CompactionCursor(1),
        CompactionCursor(123456789),
        CompactionRecord("c1", CompactionState.WRITING_COMPACTED_INDEX, 1, 5, 5, URI, BATCH_ENCODING, 9, 4),
        CompactionRecord("c1", CompactionState.UPDATING_CURSOR, 1, 5, 5, URI, BATCH_ENCODING, 9, None),
        CompactorClaim("compactor-1", 42),
    ],
    ids=lambda v: type(v).__name__,
)
def test_round_trip(value) -> None:
    raw = value.encode()
    assert isinstance(raw, bytes)
    assert type(value).decode(raw) == value
    assert type(value).decode(raw).encode() == raw


def test_encoding_is_compact_and_ordered() -> None:
    raw = ControlRecord(LogState.OPEN, 1, None).encode()
    assert raw == b'{"log_state":"OPEN","sequence_counter":1,"pending":null}'
    entry = PENDING.index_entry().encode()
    assert list(json.loads(entry)) == [
        "type", "msg_count", "data_key", "encoding", "byte_offset", "byte_length", "created_at_ms",
    ]
    assert b" " not in entry


def test_pending_keeps_null_byte_range() -> None:
    legacy = PendingAppend("a", 1, 1, 1, EntryType.WAL, URI, BATCH_ENCODING, None, None, 0)
    doc = json.loads(ControlRecord(LogState.OPEN, 2, legacy).encode())
    assert doc["pending"]["byte_offset"] is None and doc["pending"]["byte_length"] is None


def test_index_entry_omits_absent_byte_range() -> None:
    doc = json.loads(IndexEntry(EntryType.COMPACTED, 3, URI, BATCH_ENCODING, None, None, 1).encode())
    assert "byte_offset" not in doc and "byte_length" not in doc
    # The two fields travel together: one without the other is not written.
    doc = json.loads(IndexEntry(EntryType.WAL, 3, URI, BATCH_ENCODING, 5, None, 1).encode())
    assert "byte_offset" not in doc and "byte_length" not in doc


def test_pending_materializes_to_index_entry() -> None:
    entry = PENDING.index_entry()
    assert entry == IndexEntry(EntryType.WAL, 3, URI, BATCH_ENCODING, 300, 45, 1_760_000_000_000)
    assert entry.start_offset(PENDING.end_offset) == PENDING.start_offset


def test_control_properties() -> None:
    control = ControlRecord(LogState.OPEN, 7, PENDING)
    assert control.high_watermark == 6
    assert not control.fenced
    assert ControlRecord(LogState.FENCED, 1).fenced
    assert ControlRecord(LogState.OPEN, 1).high_watermark == 0
    assert control.with_pending(None) == ControlRecord(LogState.OPEN, 7, None)
    assert control.pending == PENDING  # with_pending returns a copy


def test_decoders_accept_other_field_order_whitespace_and_unknown_fields() -> None:
    raw = b'{ "pending" : null, "extra": [1, 2], "sequence_counter": 5, "log_state": "FENCED" }'
    assert ControlRecord.decode(raw) == ControlRecord(LogState.FENCED, 5, None)
    raw = b'{"offset": 3, "future": true}'
    assert CompactionCursor.decode(raw) == CompactionCursor(3)


def test_decoders_default_optional_fields() -> None:
    entry = IndexEntry.decode(b'{"type":"WAL","msg_count":1,"data_key":"s3://b/k"}')
    assert entry.encoding == BATCH_ENCODING
    assert entry.byte_offset is None and entry.byte_length is None
    assert entry.created_at_ms == 0
    record = CompactionRecord.decode(
        b'{"compaction_id":"c","state":"DELETING_OLD","start_offset":1,"end_offset":2,'
        b'"msg_count":2,"data_key":"s3://b/k"}'
    )
    assert record.last_entry_start_offset is None


# --- golden values --------------------------------------------------------


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_golden_value_decodes_and_reencodes_identically(name: str) -> None:
    raw = (VALUES / name).read_bytes()
    assert not raw.endswith(b"\n")
    value = GOLDEN[name].decode(raw)
    assert value.encode() == raw


def test_golden_keys_cover_every_value() -> None:
    keys = json.loads((VALUES / "keys.json").read_text(encoding="utf-8"))
    assert set(keys) == set(GOLDEN)
    for name, meta in keys.items():
        if name == "topic-orders.json":
            assert (meta["key"], meta["partition_key"]) == ("llog/__llog/topics/orders", "__llog/topics")
            continue
        if name.startswith("producer-"):
            assert meta["key"].startswith("llog/__llog/producer") and meta["partition_key"] == "__llog/producers"
            continue
        assert meta["key"].startswith("llog/orders/partitions/0/")
        assert meta["partition_key"] == "orders:0"
        assert meta["ephemeral"] is (name == "compactor-claim.json")


def test_states_decode_to_their_enums_and_encode_as_their_names() -> None:
    control = ControlRecord.decode(b'{"log_state":"FENCED","sequence_counter":5,"pending":null}')
    assert control.log_state is LogState.FENCED and control.fenced
    entry = IndexEntry.decode(b'{"type":"COMPACTED","msg_count":1,"data_key":"s3://b/k"}')
    assert entry.type is EntryType.COMPACTED
    record = CompactionRecord.decode(
        b'{"compaction_id":"c","state":"DELETING_OLD","start_offset":1,"end_offset":2,"msg_count":2,"data_key":"k"}'
    )
    assert record.state is CompactionState.DELETING_OLD
    # A member is its protocol string, so plain strings and members give the same bytes.
    assert ControlRecord(LogState.OPEN, 1).encode() == ControlRecord("OPEN", 1).encode()
    assert json.loads(IndexEntry(EntryType.WAL, 1, URI, BATCH_ENCODING, None, None, 0).encode())["type"] == "WAL"
    assert [s.value for s in CompactionState] == ["WRITING_COMPACTED_INDEX", "DELETING_OLD", "UPDATING_CURSOR"]


def test_golden_story_is_consistent() -> None:
    pending_control = ControlRecord.decode((VALUES / "control-pending.json").read_bytes())
    wal_entry = IndexEntry.decode((VALUES / "index-wal-shared.json").read_bytes())
    assert pending_control.pending is not None
    assert pending_control.sequence_counter == pending_control.pending.end_offset + 1
    assert pending_control.pending.index_entry() == wal_entry
    compaction = CompactionRecord.decode((VALUES / "compaction-deleting-old.json").read_bytes())
    compacted = IndexEntry.decode((VALUES / "index-compacted.json").read_bytes())
    assert compacted.type == EntryType.COMPACTED
    assert compacted.data_key == compaction.data_key
    assert compacted.start_offset(compaction.end_offset) == compaction.start_offset
    assert compaction.msg_count == compaction.end_offset - compaction.start_offset + 1
    assert CompactionCursor.decode((VALUES / "compaction-cursor.json").read_bytes()).offset == compaction.start_offset


# --- corrupt values -------------------------------------------------------

CORRUPT = [
    pytest.param(ControlRecord, b"", id="control-empty"),
    pytest.param(ControlRecord, b"not json", id="control-garbage"),
    pytest.param(ControlRecord, b"\xff\xfe", id="control-not-utf8"),
    pytest.param(ControlRecord, b"[1,2]", id="control-array"),
    pytest.param(ControlRecord, b'"OPEN"', id="control-string"),
    pytest.param(ControlRecord, b"null", id="control-null"),
    pytest.param(ControlRecord, b'{"log_state":"OPEN"}', id="control-missing-counter"),
    pytest.param(ControlRecord, b'{"sequence_counter":1}', id="control-missing-state"),
    pytest.param(ControlRecord, b'{"log_state":"open","sequence_counter":1}', id="control-unknown-state"),
    pytest.param(ControlRecord, b'{"log_state":"OPEN","sequence_counter":"x"}', id="control-bad-int"),
    pytest.param(ControlRecord, b'{"log_state":"OPEN","sequence_counter":null}', id="control-null-int"),
    pytest.param(ControlRecord, b'{"log_state":"OPEN","sequence_counter":1,"pending":{}}', id="pending-empty"),
    pytest.param(ControlRecord, b'{"log_state":"OPEN","sequence_counter":1,"pending":"p"}', id="pending-string"),
    pytest.param(ControlRecord, b'{"log_state":"OPEN","sequence_counter":1,"pending":[1]}', id="pending-array"),
    pytest.param(ControlRecord, b'{"log_state":"OPEN","sequence_counter":1,"pending":5}', id="pending-number"),
    pytest.param(
        ControlRecord,
        b'{"log_state":"OPEN","sequence_counter":3,"pending":{"append_id":"a","start_offset":1,'
        b'"end_offset":"two","msg_count":2,"data_key":"s3://b/k"}}',
        id="pending-bad-int",
    ),
    pytest.param(
        ControlRecord,
        b'{"log_state":"OPEN","sequence_counter":2,"pending":{"append_id":"a","start_offset":1,'
        b'"end_offset":1,"msg_count":1,"entry_type":"COMPACTED?","data_key":"s3://b/k"}}',
        id="pending-unknown-entry-type",
    ),
    pytest.param(IndexEntry, b"{", id="index-truncated"),
    pytest.param(IndexEntry, b'{"type":"wal","msg_count":1,"data_key":"s3://b/k"}', id="index-unknown-type"),
    pytest.param(IndexEntry, b'{"type":"WAL","msg_count":1}', id="index-missing-data-key"),
    pytest.param(IndexEntry, b'{"type":"WAL","data_key":"s3://b/k"}', id="index-missing-count"),
    pytest.param(IndexEntry, b'{"type":"WAL","msg_count":1,"data_key":"s3://b/k","byte_offset":"x"}', id="index-bad-offset"),
    pytest.param(CompactionCursor, b"{}", id="cursor-empty"),
    pytest.param(CompactionCursor, b'{"offset":[]}', id="cursor-list"),
    pytest.param(CompactionCursor, b'{"offset":NaN}', id="cursor-nan"),
    pytest.param(CompactionRecord, b'{"compaction_id":"c"}', id="compaction-partial"),
    pytest.param(CompactionRecord, b"true", id="compaction-bool"),
    pytest.param(
        CompactionRecord,
        b'{"compaction_id":"c","state":"DONE","start_offset":1,"end_offset":2,"msg_count":2,"data_key":"s3://b/k"}',
        id="compaction-unknown-state",
    ),
    pytest.param(CompactorClaim, b'{"compactor_id":"x"}', id="claim-missing-time"),
    pytest.param(CompactorClaim, b"3", id="claim-number"),
]


@pytest.mark.parametrize(("cls", "raw"), CORRUPT)
def test_corrupt_values_raise_corrupt_batch(cls, raw: bytes) -> None:
    with pytest.raises(CorruptBatch):
        cls.decode(raw)


@pytest.mark.parametrize("raw", [b'{"offset":Infinity}', b'{"offset":-Infinity}'])
def test_infinity_raises_corrupt_batch(raw: bytes) -> None:
    with pytest.raises(CorruptBatch):
        CompactionCursor.decode(raw)
