"""The JSON values stored in Oxia, as frozen dataclasses.

Each class converts to and from the exact JSON of the protocol
(``leaderless-log-protocol/SPEC.md``); JSON shapes never leave this module.
Encoding is compact JSON with keys in declaration order, so the same value
always gives the same bytes (the golden examples rely on it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any, TypeVar

from .._errors import CorruptBatch
from .codec import BATCH_ENCODING
from .producer_state import NO_PRODUCERS, ProducerStates

__all__ = [
    "LogState",
    "EntryType",
    "CompactionState",
    "PendingAppend",
    "ControlRecord",
    "IndexEntry",
    "CompactionCursor",
    "CompactionRecord",
    "CompactorClaim",
    "dumps",
    "loads",
]


# StrEnums: a member is its JSON string (``LogState.OPEN == "OPEN"``), so the
# encoded values are the protocol's bytes, and a decoded value outside the
# enum is a corrupt record (SPEC 4: a field of the wrong type).


class LogState(StrEnum):
    """``meta/control.log_state`` (SPEC 4.1)."""

    OPEN = "OPEN"
    FENCED = "FENCED"
    """No reservation succeeds: ``sequence_counter`` stays put (SPEC 8.1.3)."""


class EntryType(StrEnum):
    """``index/{end_offset}.type`` (SPEC 4.3) and ``pending.entry_type`` (4.2)."""

    WAL = "WAL"
    """One append's batch, in a shared WAL blob or a legacy per-append object."""
    COMPACTED = "COMPACTED"
    """A compacted range in one ``data/compacted/`` object."""


class CompactionState(StrEnum):
    """``meta/compaction.state`` (SPEC 4.5): the next step a compaction performs."""

    WRITING_COMPACTED_INDEX = "WRITING_COMPACTED_INDEX"
    DELETING_OLD = "DELETING_OLD"
    UPDATING_CURSOR = "UPDATING_CURSOR"


E = TypeVar("E", LogState, EntryType, CompactionState)
# Decoding is on the read path: a dict lookup costs a tenth of an Enum call.
_MEMBERS: dict[type, dict[str, Any]] = {
    cls: {m.value: m for m in cls} for cls in (LogState, EntryType, CompactionState)
}


def _member(cls: type[E], value: object, field: str) -> E:
    """The member of ``cls`` named by a decoded JSON value."""
    try:
        return _MEMBERS[cls][value]  # type: ignore[index]
    except (KeyError, TypeError):
        raise ValueError(f"unknown {field} {value!r}") from None


def dumps(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode("utf-8")


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not a number")


def loads(raw: bytes, what: str) -> dict[str, Any]:
    try:
        doc = json.loads(raw, parse_constant=_reject_constant)
    except ValueError as exc:
        raise CorruptBatch(f"unreadable {what} record: {exc}") from exc
    if not isinstance(doc, dict):
        raise CorruptBatch(f"unreadable {what} record: not a JSON object")
    return doc


def _opt_int(doc: dict[str, Any], name: str) -> int | None:
    value = doc.get(name)
    return None if value is None else int(value)


@dataclass(frozen=True)
class PendingAppend:
    """``meta/control.pending``: an append whose offsets are reserved but whose
    index entry may not exist yet. Authoritative during crash recovery."""

    append_id: str
    start_offset: int
    end_offset: int
    msg_count: int
    entry_type: EntryType
    data_key: str
    """Full ``s3://bucket/key`` URI of the blob holding the batch."""
    encoding: str
    byte_offset: int | None
    byte_length: int | None
    created_at_ms: int
    max_timestamp_ms: int | None = None
    """The batches' largest record timestamp (``kafka-batch-v2`` only)."""

    def to_json(self) -> dict[str, Any]:
        doc = {
            "append_id": self.append_id,
            "start_offset": self.start_offset,
            "end_offset": self.end_offset,
            "msg_count": self.msg_count,
            "entry_type": self.entry_type,
            "data_key": self.data_key,
            "encoding": self.encoding,
            "byte_offset": self.byte_offset,
            "byte_length": self.byte_length,
            "created_at_ms": self.created_at_ms,
        }
        if self.max_timestamp_ms is not None:
            doc["max_timestamp_ms"] = self.max_timestamp_ms
        return doc

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> PendingAppend:
        try:
            return cls(
                append_id=str(doc["append_id"]),
                start_offset=int(doc["start_offset"]),
                end_offset=int(doc["end_offset"]),
                msg_count=int(doc["msg_count"]),
                entry_type=_member(EntryType, doc.get("entry_type", EntryType.WAL), "entry_type"),
                data_key=str(doc["data_key"]),
                encoding=str(doc.get("encoding", BATCH_ENCODING)),
                byte_offset=_opt_int(doc, "byte_offset"),
                byte_length=_opt_int(doc, "byte_length"),
                created_at_ms=int(doc.get("created_at_ms", 0)),
                max_timestamp_ms=_opt_int(doc, "max_timestamp_ms"),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptBatch(f"unreadable pending append: {exc!r}") from exc

    def index_entry(self) -> IndexEntry:
        """The index entry this append materializes at ``end_offset``."""
        return IndexEntry(
            type=self.entry_type,
            msg_count=self.msg_count,
            data_key=self.data_key,
            encoding=self.encoding,
            byte_offset=self.byte_offset,
            byte_length=self.byte_length,
            created_at_ms=self.created_at_ms,
            max_timestamp_ms=self.max_timestamp_ms,
        )


@dataclass(frozen=True)
class ControlRecord:
    """``meta/control``: log state, the next offset to assign, the pending append."""

    log_state: LogState
    sequence_counter: int
    """The next offset to assign; the high watermark is ``sequence_counter - 1``."""
    pending: PendingAppend | None = None
    log_start_offset: int = 1
    """The first offset a reader may return (SPEC 7.10); retention moves it up."""
    log_start_at_ms: int | None = None
    """When ``log_start_offset`` last moved (vacuum deletes below it a grace period later)."""
    producers: ProducerStates = NO_PRODUCERS
    """Idempotent producers' last batches in this log, by producer id (SPEC 7.12;
    ``producer_state.py``). Written only by the reservation that appends their batches."""

    @property
    def high_watermark(self) -> int:
        return self.sequence_counter - 1

    @property
    def fenced(self) -> bool:
        return self.log_state == LogState.FENCED

    def with_pending(self, pending: PendingAppend | None) -> ControlRecord:
        return replace(self, pending=pending)

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "log_state": self.log_state,
            "sequence_counter": self.sequence_counter,
            "pending": None if self.pending is None else self.pending.to_json(),
        }
        if self.log_start_offset > 1:  # absent is 1: a log retention never touched keeps the seed's shape
            doc["log_start_offset"] = self.log_start_offset
            doc["log_start_at_ms"] = self.log_start_at_ms
        if self.producers:  # absent is none: a log without idempotent producers keeps the seed's shape
            doc["producers"] = self.producers.to_json()
        return doc

    def encode(self) -> bytes:
        return dumps(self.to_json())

    @classmethod
    def decode(cls, raw: bytes) -> ControlRecord:
        doc = loads(raw, "meta/control")
        try:
            pending = doc.get("pending")
            return cls(
                log_state=_member(LogState, doc["log_state"], "log_state"),
                sequence_counter=int(doc["sequence_counter"]),
                pending=None if pending is None else PendingAppend.from_json(pending),
                log_start_offset=int(doc.get("log_start_offset", 1)),
                log_start_at_ms=_opt_int(doc, "log_start_at_ms"),
                producers=ProducerStates.from_json(doc.get("producers")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptBatch(f"unreadable meta/control record: {exc!r}") from exc


@dataclass(frozen=True)
class IndexEntry:
    """``index/{end_offset_20d}``: one batch (WAL) or compacted range.

    The key names the end offset; the range is
    ``[end_offset - msg_count + 1, end_offset]``.
    """

    type: EntryType
    msg_count: int
    data_key: str
    encoding: str
    byte_offset: int | None
    """Slice start inside a shared WAL blob; None means the whole object."""
    byte_length: int | None
    created_at_ms: int
    max_timestamp_ms: int | None = None
    """The largest record timestamp of the entry (``kafka-batch-v2`` only):
    "the first offset with a timestamp at or after T" is one index scan."""
    size_bytes: int | None = None
    """A COMPACTED entry's object size (retention.bytes counts it; a WAL slice has ``byte_length``)."""

    def start_offset(self, end_offset: int) -> int:
        return end_offset - self.msg_count + 1

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "type": self.type,
            "msg_count": self.msg_count,
            "data_key": self.data_key,
            "encoding": self.encoding,
        }
        if self.byte_offset is not None and self.byte_length is not None:
            doc["byte_offset"] = self.byte_offset
            doc["byte_length"] = self.byte_length
        doc["created_at_ms"] = self.created_at_ms
        if self.max_timestamp_ms is not None:
            doc["max_timestamp_ms"] = self.max_timestamp_ms
        if self.size_bytes is not None:
            doc["size_bytes"] = self.size_bytes
        return doc

    def encode(self) -> bytes:
        return dumps(self.to_json())

    @classmethod
    def decode(cls, raw: bytes) -> IndexEntry:
        doc = loads(raw, "index")
        try:
            return cls(
                type=_member(EntryType, doc["type"], "index entry type"),
                msg_count=int(doc["msg_count"]),
                data_key=str(doc["data_key"]),
                encoding=str(doc.get("encoding", BATCH_ENCODING)),
                byte_offset=_opt_int(doc, "byte_offset"),
                byte_length=_opt_int(doc, "byte_length"),
                created_at_ms=int(doc.get("created_at_ms", 0)),
                max_timestamp_ms=_opt_int(doc, "max_timestamp_ms"),
                size_bytes=_opt_int(doc, "size_bytes"),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptBatch(f"unreadable index record: {exc!r}") from exc


@dataclass(frozen=True)
class CompactionCursor:
    """``meta/compaction-cursor``: the first offset not yet compacted."""

    offset: int

    def encode(self) -> bytes:
        return dumps({"offset": self.offset})

    @classmethod
    def decode(cls, raw: bytes) -> CompactionCursor:
        doc = loads(raw, "meta/compaction-cursor")
        try:
            return cls(int(doc["offset"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptBatch(f"unreadable compaction cursor: {exc!r}") from exc


@dataclass(frozen=True)
class CompactionRecord:
    """``meta/compaction``: the in-flight compaction, authoritative for resume."""

    compaction_id: str
    state: CompactionState
    start_offset: int
    end_offset: int
    msg_count: int
    data_key: str
    encoding: str
    created_at_ms: int
    last_entry_start_offset: int | None = None
    """Start offset of the last selected WAL entry (the end key's old range)."""
    max_timestamp_ms: int | None = None
    """The compacted range's largest record timestamp, copied to its index entry."""
    size_bytes: int | None = None
    """The compacted object's size, copied to its COMPACTED entry."""

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "compaction_id": self.compaction_id,
            "state": self.state,
            "start_offset": self.start_offset,
            "end_offset": self.end_offset,
            "msg_count": self.msg_count,
            "data_key": self.data_key,
            "encoding": self.encoding,
            "created_at_ms": self.created_at_ms,
        }
        if self.last_entry_start_offset is not None:
            doc["last_entry_start_offset"] = self.last_entry_start_offset
        if self.max_timestamp_ms is not None:
            doc["max_timestamp_ms"] = self.max_timestamp_ms
        if self.size_bytes is not None:
            doc["size_bytes"] = self.size_bytes
        return doc

    def encode(self) -> bytes:
        return dumps(self.to_json())

    @classmethod
    def decode(cls, raw: bytes) -> CompactionRecord:
        doc = loads(raw, "meta/compaction")
        try:
            return cls(
                compaction_id=str(doc["compaction_id"]),
                state=_member(CompactionState, doc["state"], "compaction state"),
                start_offset=int(doc["start_offset"]),
                end_offset=int(doc["end_offset"]),
                msg_count=int(doc["msg_count"]),
                data_key=str(doc["data_key"]),
                encoding=str(doc.get("encoding", BATCH_ENCODING)),
                created_at_ms=int(doc.get("created_at_ms", 0)),
                last_entry_start_offset=_opt_int(doc, "last_entry_start_offset"),
                max_timestamp_ms=_opt_int(doc, "max_timestamp_ms"),
                size_bytes=_opt_int(doc, "size_bytes"),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptBatch(f"unreadable compaction record: {exc!r}") from exc


@dataclass(frozen=True)
class CompactorClaim:
    """``meta/compactor-claim``: an ephemeral scheduling claim."""

    compactor_id: str
    claimed_at_ms: int

    def encode(self) -> bytes:
        return dumps({"compactor_id": self.compactor_id, "claimed_at_ms": self.claimed_at_ms})

    @classmethod
    def decode(cls, raw: bytes) -> CompactorClaim:
        doc = loads(raw, "meta/compactor-claim")
        try:
            return cls(str(doc["compactor_id"]), int(doc["claimed_at_ms"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptBatch(f"unreadable compactor claim: {exc!r}") from exc
