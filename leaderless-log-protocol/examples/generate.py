#!/usr/bin/env python3
"""Generate or check the golden examples of the llog protocol.

Every file in this folder (except this script) is produced here from fixed
inputs -- fixed payloads, fixed ``created_at_ms``, fixed UUIDs -- by the
library's own encoders (``server._protocol.codec``, ``server._protocol.records``). The same
function also renders the generated blocks of ``../SPEC.md`` (hex dumps, the
field-by-field walk through a batch, the exact Oxia values), so the prose and
the bytes cannot drift apart.

Usage (from anywhere)::

    python leaderless-log-protocol/examples/generate.py --check   # exit 1 on any difference
    python leaderless-log-protocol/examples/generate.py --write   # rewrite files and SPEC blocks

File conventions:

* ``*.bin`` -- exact bytes as stored in S3.
* ``oxia-values/*.json`` except ``keys.json`` -- exact bytes of the Oxia value
  as the encoder produces it: compact JSON, **no trailing newline**.
* every other ``*.json`` (descriptions, ``keys.json``) -- human-oriented,
  two-space indent, one trailing newline; their byte form is not protocol.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
import zlib
from pathlib import Path
from typing import Any

EXAMPLES_DIR = Path(__file__).resolve().parent
PROTOCOL_DIR = EXAMPLES_DIR.parent
REPO_ROOT = PROTOCOL_DIR.parent
SPEC_PATH = PROTOCOL_DIR / "SPEC.md"

# The script runs as a file (the folder name has a '-', so it is no package):
# make the repository importable without PYTHONPATH.
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from server._protocol.codec import (  # noqa: E402
    BATCH_ENCODING,
    BATCH_HEADER_SIZE,
    decode_shared_header,
    encode_batch,
    encode_shared_blob,
)
from server._protocol.produce_binary import (  # noqa: E402
    PRODUCE_VERSION_2,
    encode_binary_produce,
    encode_binary_produce_v2,
    parse_binary_produce,
)
from server._protocol.stored_batches import StoredBatches  # noqa: E402
from server._protocol.http_json import ConsumedPartition  # noqa: E402
from server._protocol.consume_binary import encode_binary_consume, parse_binary_consume  # noqa: E402
from server._protocol.record_spans import spans_of  # noqa: E402
from server._protocol import kafka_batch as kb  # noqa: E402
from server._errors import PartitionNotInitialized  # noqa: E402
from server._protocol.keys import PRODUCERS_PARTITION_KEY, TOPICS_PARTITION_KEY, LogLayout  # noqa: E402
from server._protocol.producer_state import ProducerEntry, ProducerStates  # noqa: E402
from server._log.producer_ids import ProducerIdentity, encode_named, encode_next_id  # noqa: E402
from server._catalogue.record import TopicRecord  # noqa: E402
from server._catalogue.topic_config import TopicConfig  # noqa: E402
from server._protocol.records import (  # noqa: E402
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

__all__ = ["build_files", "build_spec_blocks", "check", "write", "main"]

# --- fixed inputs ---------------------------------------------------------

CREATED_AT_MS = 1_760_000_000_000
BUCKET = "leaderless-log-wal"
ROOT = "llog"
TOPIC = "orders"
WAL_BLOB_ID = "0b7e9f4c-2d3a-4e5f-8a6b-7c8d9e0f1a2b"
COMPACTED_BLOB_ID = "5d4c3b2a-1908-4f7e-b6d5-c4b3a2918070"
APPEND_ID = "9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d"
COMPACTION_ID = "c0ffee00-1234-4abc-8def-0123456789ab"
COMPACTOR_ID = "compactor-1"
TOPIC_ID = "7e57a11d-0c0f-4e1a-9b2c-3d4e5f607182"
COMPACTED_SIZE = 4096

BATCH_PAYLOADS: tuple[bytes, ...] = (b"alpha", b"", b"\x00\x01\xff")
SHARED_GROUPS: tuple[tuple[str, int, tuple[bytes, ...]], ...] = (
    (TOPIC, 0, (b"a", b"b")),
    (TOPIC, 1, (b"c",)),
)

# kafka-batch-v2 (SPEC 6.3): a key with headers (one with a null value), a
# tombstone (null value), a null key with a non-ASCII header key and an
# earlier timestamp than the first record.
KAFKA_RECORDS: tuple[kb.Record, ...] = (
    kb.Record(b"order-1", b"customer-42", (("source", b"web"), ("trace", None)), CREATED_AT_MS),
    kb.Record(None, b"customer-42", (), CREATED_AT_MS + 5),
    kb.Record(b"\x00\x01\xff", None, (("\u00e9t\u00e9", b""),), CREATED_AT_MS - 10),
)
KAFKA_FILE = "kafka-batch-v2-none.bin"
KAFKA_COMPRESSED = {c: f"kafka-batch-v2-{c.name.lower()}.bin" for c in kb.Compression if c is not kb.Compression.NONE}
"""Compressed vectors are *read* vectors: written once, then checked by decoding (a compressor's
output may change between library versions; what a reader must accept may not)."""

BATCH_FILE = "batch-3-records.bin"
SHARED_FILE = "shared-2-partitions.bin"
OXIA_DIR = "oxia-values"

_GENERATOR_NAME = Path(__file__).name
_BEGIN = "<!-- BEGIN GENERATED {name} -->"
_END = "<!-- END GENERATED {name} -->"


# --- helpers --------------------------------------------------------------


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _pretty(doc: Any) -> bytes:
    return (json.dumps(doc, indent=2) + "\n").encode("utf-8")


def hexdump(data: bytes) -> str:
    """``hexdump -C`` style listing: offset, 16 bytes in two groups, ASCII."""
    lines = []
    for off in range(0, len(data), 16):
        chunk = data[off:off + 16]
        left = " ".join(f"{b:02x}" for b in chunk[:8])
        right = " ".join(f"{b:02x}" for b in chunk[8:])
        text = "".join(chr(b) if 0x20 <= b < 0x7F else "." for b in chunk)
        lines.append(f"{off:08x}  {left:<23}  {right:<23}  |{text}|")
    lines.append(f"{len(data):08x}")
    return "\n".join(lines)


# --- the examples ---------------------------------------------------------


def _shared_blob() -> tuple[bytes, list]:
    """Two partitions' value-only records as the writer stores them: one RecordBatch v2 batch each."""
    groups = [(t, p, len(payloads), StoredBatches.of_values(list(payloads), CREATED_AT_MS).data)
              for t, p, payloads in SHARED_GROUPS]
    return encode_shared_blob(groups, CREATED_AT_MS, kb.ENCODING)


def _batch_description(data: bytes) -> dict[str, Any]:
    records = data[BATCH_HEADER_SIZE:]
    return {
        "file": BATCH_FILE,
        "encoding": BATCH_ENCODING,
        "total_length": len(data),
        "header": {
            "magic": "LLB1",
            "version": 1,
            "flags": 0,
            "record_count": len(BATCH_PAYLOADS),
            "records_length": len(records),
            "crc32": f"0x{zlib.crc32(records):08x}",
        },
        "count": len(BATCH_PAYLOADS),
        "crc32": f"0x{zlib.crc32(records):08x}",
        "payloads_base64": [_b64(p) for p in BATCH_PAYLOADS],
    }


def _shared_description(blob: bytes) -> dict[str, Any]:
    header = decode_shared_header(blob)
    header_json = blob[8:8 + header.header_length].decode("utf-8")
    partitions = []
    for (topic, partition, payloads), part in zip(SHARED_GROUPS, header.partitions):
        body = blob[part.body_offset:part.body_offset + part.body_length]
        partitions.append(
            {
                "topic": topic,
                "partition": partition,
                "msg_count": part.msg_count,
                "encoding": part.encoding,
                "body_offset": part.body_offset,
                "body_length": part.body_length,
                "body_batch_crc32c": f"0x{kb.check_batch(body).crc:08x}",
                "offsets_if_first_append": [1, len(payloads)],
                "payloads_base64": [_b64(p) for p in payloads],
            }
        )
    return {
        "file": SHARED_FILE,
        "total_length": len(blob),
        "magic": "LLS1",
        "header_length": header.header_length,
        "bodies_start": 8 + header.header_length,
        "header_json": header_json,
        "header": json.loads(header_json),
        "partitions": partitions,
        "example_uri": f"s3://{BUCKET}/{LogLayout(ROOT).shared_wal_object(WAL_BLOB_ID)}",
    }


def _oxia_values(blob: bytes) -> dict[str, tuple[str, bytes, bool]]:
    """name -> (Oxia key, exact value bytes, ephemeral)."""
    layout = LogLayout(ROOT)
    keys = layout.partition(TOPIC, 0)
    parts = decode_shared_header(blob).partitions
    wal_uri = f"s3://{BUCKET}/{layout.shared_wal_object(WAL_BLOB_ID)}"
    compacted_uri = f"s3://{BUCKET}/{keys.compacted_object(COMPACTED_BLOB_ID)}"
    # orders:0's two records, reserved as offsets 1..2 of a fresh partition.
    pending = PendingAppend(
        append_id=APPEND_ID,
        start_offset=1,
        end_offset=2,
        msg_count=2,
        entry_type=EntryType.WAL,
        data_key=wal_uri,
        encoding=kb.ENCODING,
        byte_offset=parts[0].body_offset,
        byte_length=parts[0].body_length,
        created_at_ms=CREATED_AT_MS,
        max_timestamp_ms=CREATED_AT_MS,
    )
    # An entry the reference system wrote: bytes-batch-v1, no max timestamp (still read).
    legacy = IndexEntry(
        type=EntryType.WAL,
        msg_count=3,
        data_key=f"s3://{BUCKET}/{keys.legacy_wal_object(APPEND_ID)}",
        encoding=BATCH_ENCODING,
        byte_offset=None,
        byte_length=None,
        created_at_ms=CREATED_AT_MS,
    )
    compacted = IndexEntry(
        type=EntryType.COMPACTED,
        msg_count=5,
        data_key=compacted_uri,
        encoding=kb.ENCODING,
        byte_offset=None,
        byte_length=None,
        created_at_ms=CREATED_AT_MS,
        max_timestamp_ms=CREATED_AT_MS + 5,
        size_bytes=COMPACTED_SIZE,
    )
    compaction = CompactionRecord(
        compaction_id=COMPACTION_ID,
        state=CompactionState.DELETING_OLD,
        start_offset=1,
        end_offset=5,
        msg_count=5,
        data_key=compacted_uri,
        encoding=kb.ENCODING,
        created_at_ms=CREATED_AT_MS,
        last_entry_start_offset=4,
        max_timestamp_ms=CREATED_AT_MS + 5,
        size_bytes=COMPACTED_SIZE,
    )
    return {
        "control-open.json": (keys.control, ControlRecord(LogState.OPEN, 1, None).encode(), False),
        "control-pending.json": (keys.control, ControlRecord(LogState.OPEN, 3, pending).encode(), False),
        "control-fenced.json": (keys.control, ControlRecord(LogState.FENCED, 3, None).encode(), False),
        # Retention moved the log start past the compacted range 1..5 (SPEC 7.10).
        "control-log-start.json": (
            keys.control,
            ControlRecord(LogState.OPEN, 9, None, log_start_offset=6, log_start_at_ms=CREATED_AT_MS + 60_000).encode(),
            False,
        ),
        # Two idempotent producers' last batches (SPEC 7.12): producer 3 appended
        # sequences 0..1 at offsets 1..2, then 2..2 at 7; producer 9 (epoch 2) 0..3 at 3..6.
        "control-producers.json": (
            keys.control,
            ControlRecord(LogState.OPEN, 8, None, producers=ProducerStates(entries={
                3: ProducerEntry(0, CREATED_AT_MS + 20, ((0, 1, 1), (2, 2, 7))),
                9: ProducerEntry(2, CREATED_AT_MS + 10, ((0, 3, 3),)),
            })).encode(),
            False,
        ),
        "index-wal-shared.json": (keys.index(2), pending.index_entry().encode(), False),
        "index-compacted.json": (keys.index(5), compacted.encode(), False),
        "index-wal-legacy-v1.json": (keys.index(8), legacy.encode(), False),
        "compaction-cursor.json": (keys.compaction_cursor, CompactionCursor(1).encode(), False),
        "compaction-deleting-old.json": (keys.compaction, compaction.encode(), False),
        "compactor-claim.json": (
            keys.compactor_claim,
            CompactorClaim(COMPACTOR_ID, CREATED_AT_MS).encode(),
            True,
        ),
    }


def build_files() -> dict[str, bytes]:
    """Every golden file, as ``{path relative to examples/: bytes}``."""
    batch = encode_batch(list(BATCH_PAYLOADS))
    blob, _ = _shared_blob()
    files: dict[str, bytes] = {
        BATCH_FILE: batch,
        "batch-3-records.json": _pretty(_batch_description(batch)),
        SHARED_FILE: blob,
        "shared-2-partitions.json": _pretty(_shared_description(blob)),
    }
    values = _oxia_values(blob)
    keys_doc = {}
    for name, (key, raw, ephemeral) in values.items():
        files[f"{OXIA_DIR}/{name}"] = raw
        keys_doc[name] = {"key": key, "partition_key": f"{TOPIC}:0", "ephemeral": ephemeral}
    topic = TopicRecord(TOPIC, TOPIC_ID, 12, CREATED_AT_MS, TopicConfig(retention_ms=604_800_000))
    files[f"{OXIA_DIR}/topic-orders.json"] = topic.encode()
    keys_doc["topic-orders.json"] = {"key": LogLayout(ROOT).topic_record(TOPIC), "partition_key": TOPICS_PARTITION_KEY,
                                     "ephemeral": False}
    layout = LogLayout(ROOT)
    files[f"{OXIA_DIR}/producer-ids.json"] = encode_next_id(10)
    keys_doc["producer-ids.json"] = {"key": layout.producer_ids_key, "partition_key": PRODUCERS_PARTITION_KEY,
                                     "ephemeral": False}
    files[f"{OXIA_DIR}/producer-named.json"] = encode_named(ProducerIdentity(9, 2))
    keys_doc["producer-named.json"] = {"key": layout.producer_name_key("spark-write-0"),
                                       "partition_key": PRODUCERS_PARTITION_KEY, "ephemeral": False}
    files[f"{OXIA_DIR}/keys.json"] = _pretty(keys_doc)
    body = encode_binary_produce(PRODUCE_GROUPS)
    files[PRODUCE_FILE] = body
    files["produce-body-2-batches.json"] = _pretty(_produce_description(body))
    kafka = kb.build_batch(KAFKA_RECORDS)
    body_v2 = encode_binary_produce_v2([(TOPIC, 0, kafka), (TOPIC, 7, kb.build_values_batch([b"c"], CREATED_AT_MS))])
    files[PRODUCE_V2_FILE] = body_v2
    files["produce-body-v2-2-groups.json"] = _pretty(_produce_v2_description(body_v2))
    files[KAFKA_FILE] = kafka
    files["kafka-batch-v2-none.json"] = _pretty(_kafka_description(kafka))
    for codec, name in KAFKA_COMPRESSED.items():
        files[name] = kb.build_batch(KAFKA_RECORDS, compression=codec)
    answer = b"".join(encode_binary_consume(*_consume_answer()))
    files[CONSUME_FILE] = answer
    files["consume-answer-2-partitions.json"] = _pretty(_consume_description(answer))
    return files


def _kafka_records(data: bytes) -> list[dict[str, Any]]:
    _, records = kb.decode_records(data)
    return [
        {
            "offset_delta": r.offset_delta,
            "timestamp_ms": r.timestamp_ms,
            "key_base64": None if r.key is None else _b64(r.key),
            "value_base64": None if r.value is None else _b64(r.value),
            "headers": [[k, None if v is None else _b64(v)] for k, v in r.headers],
        }
        for r in records
    ]


def _kafka_description(batch: bytes) -> dict[str, Any]:
    h = kb.check_batch(batch)
    return {
        "file": KAFKA_FILE,
        "encoding": kb.ENCODING,
        "total_length": len(batch),
        "header": {
            "base_offset": h.base_offset, "batch_length": h.batch_length,
            "partition_leader_epoch": h.partition_leader_epoch, "magic": h.magic, "crc32c": f"0x{h.crc:08x}",
            "attributes": h.attributes, "last_offset_delta": h.last_offset_delta,
            "base_timestamp": h.base_timestamp, "max_timestamp": h.max_timestamp, "producer_id": h.producer_id,
            "producer_epoch": h.producer_epoch, "base_sequence": h.base_sequence, "records_count": h.records_count,
        },
        "records": _kafka_records(batch),
        "same_records_compressed": sorted(KAFKA_COMPRESSED.values()),
    }


def _kafka_walkthrough(batch: bytes) -> str:
    h = kb.check_batch(batch)
    fields = [
        (0, 8, "baseOffset", str(h.base_offset)), (8, 4, "batchLength", f"{h.batch_length} (total - 12)"),
        (12, 4, "partitionLeaderEpoch", str(h.partition_leader_epoch)), (16, 1, "magic", str(h.magic)),
        (17, 4, "crc (CRC-32C of [21, end))", f"0x{h.crc:08x}"), (21, 2, "attributes", str(h.attributes)),
        (23, 4, "lastOffsetDelta", str(h.last_offset_delta)), (27, 8, "baseTimestamp", str(h.base_timestamp)),
        (35, 8, "maxTimestamp", str(h.max_timestamp)), (43, 8, "producerId", str(h.producer_id)),
        (51, 2, "producerEpoch", str(h.producer_epoch)), (53, 4, "baseSequence", str(h.base_sequence)),
        (57, 4, "recordsCount", str(h.records_count)),
    ]
    lines = ["| offset | size | field | bytes (hex) | value |", "|---|---|---|---|---|"]
    for off, size, field, value in fields:
        hexed = " ".join(f"{b:02x}" for b in batch[off:off + size])
        lines.append(f"| {off} | {size} | {field} | `{hexed}` | `{value}` |")
    lines.append("")
    lines.append(f"Records: bytes [61, {len(batch)}), {len(batch) - kb.HEADER_SIZE} bytes; total {len(batch)}.")
    return "\n".join(lines)


# The broker's binary /produce body (server/_protocol/produce_binary.py): not stored,
# but pinned the same way, since clients in other languages build it.
PRODUCE_FILE = "produce-body-2-batches.bin"
PRODUCE_GROUPS: tuple[tuple[str, int, tuple[bytes, ...]], ...] = (
    (TOPIC, 0, BATCH_PAYLOADS),
    (TOPIC, 7, (b"c",)),
)


def _produce_description(body: bytes) -> dict[str, Any]:
    request = parse_binary_produce(body, max_records=100)
    return {
        "file": PRODUCE_FILE,
        "content_type": "application/vnd.llog.produce.v1",
        "total_length": len(body),
        "header": {"magic": "LLP1", "version": 1, "flags": 0, "batch_count": len(request.groups)},
        "batches": [
            {
                "topic": g.topic,
                "partition": g.partition,
                "record_count": len(g.payloads),
                "payloads_base64": [base64.b64encode(p).decode("ascii") for p in g.payloads],
            }
            for g in request.groups
        ],
    }


PRODUCE_V2_FILE = "produce-body-v2-2-groups.bin"


def _produce_v2_description(body: bytes) -> dict[str, Any]:
    request = parse_binary_produce(body, max_records=100, version=PRODUCE_VERSION_2)
    return {
        "file": PRODUCE_V2_FILE,
        "content_type": "application/vnd.llog.produce.v2",
        "total_length": len(body),
        "header": {"magic": "LLP1", "version": 2, "flags": 0, "batch_count": len(request.groups)},
        "groups": [
            {
                "topic": g.topic,
                "partition": g.partition,
                "batches_length": g.payloads.nbytes,
                "records": _kafka_records(bytes(g.payloads.data)),
            }
            for g in request.groups
        ],
    }


# The broker's binary /consume answer (server/_protocol/consume_binary.py): one
# partition with the three records of KAFKA_FILE at offsets 11..13, fetched
# from offset 12 (inside the batch: the whole batch comes, first_offset says
# where to start), one never written (an error).
CONSUME_FILE = "consume-answer-2-partitions.bin"


def _consume_answer() -> tuple[tuple[ConsumedPartition, ...], int, int, int]:
    batches = StoredBatches.check(kb.build_batch(KAFKA_RECORDS))
    spans = tuple(s.since(12) for s in spans_of(11, batches))
    missing = PartitionNotInitialized("partition is not initialized", topic=TOPIC, partition=9)
    parts = (
        ConsumedPartition(TOPIC, 0, 12, 14, 13, spans, batches.nbytes),
        ConsumedPartition(TOPIC, 9, 1, 1, None, error=missing),
    )
    return parts, 2, batches.nbytes, 0


def _consume_description(answer: bytes) -> dict[str, Any]:
    parsed = parse_binary_consume(answer)
    partitions = []
    for p in parsed.partitions:
        item: dict[str, Any] = {
            "topic": p.topic,
            "partition": p.partition,
            "ok": p.ok,
            "high_watermark": p.high_watermark,
            "log_start_offset": p.log_start_offset,
            "next_fetch_offset": p.next_fetch_offset,
            "first_offset": p.first_offset,
            "record_count": p.record_count,
            "batch_base": p.batch_base,
            "batches_length": p.batches.nbytes,
            "records": [{"offset": o, "key_base64": None if r.key is None else _b64(r.key),
                         "value_base64": None if r.value is None else _b64(r.value),
                         "headers": [[k, None if v is None else _b64(v)] for k, v in r.headers],
                         "timestamp_ms": r.timestamp_ms} for o, r in p.records()],
        }
        if p.error is not None:
            item["error"] = {
                "error_code": p.error.error_code,
                "error_type": p.error.error_type,
                "error": p.error.error,
                "retriable": p.error.retriable,
            }
        partitions.append(item)
    return {
        "file": CONSUME_FILE,
        "content_type": "application/vnd.llog.consume.v2",
        "total_length": len(answer),
        "header": {
            "magic": "LLC1",
            "version": 2,
            "flags": 0,
            "partition_count": len(parsed.partitions),
            "record_count": parsed.record_count,
            "payload_bytes": parsed.payload_bytes,
            "waited_ms": parsed.waited_ms,
        },
        "partitions": partitions,
    }


# --- SPEC.md blocks -------------------------------------------------------


def _batch_walkthrough(batch: bytes) -> str:
    rows = [
        ("0", "4", "magic", batch[0:4], '"LLB1"'),
        ("4", "2", "version", batch[4:6], "1"),
        ("6", "2", "flags", batch[6:8], "0"),
        ("8", "4", "record_count", batch[8:12], str(int.from_bytes(batch[8:12], "big"))),
        ("12", "4", "records_length", batch[12:16], str(int.from_bytes(batch[12:16], "big"))),
        ("16", "4", "crc32", batch[16:20], f"0x{int.from_bytes(batch[16:20], 'big'):08x}"),
    ]
    pos = BATCH_HEADER_SIZE
    for i, payload in enumerate(BATCH_PAYLOADS):
        rows.append((str(pos), "4", f"record[{i}].length", batch[pos:pos + 4], str(len(payload))))
        pos += 4
        if payload:
            rows.append((str(pos), str(len(payload)), f"record[{i}].payload", payload, repr(payload)))
        else:
            rows.append((str(pos), "0", f"record[{i}].payload", b"", "b'' (empty)"))
        pos += len(payload)
    lines = ["| offset | size | field | bytes (hex) | value |", "|---|---|---|---|---|"]
    for off, size, field, raw, value in rows:
        hexed = " ".join(f"{b:02x}" for b in raw) or "(none)"
        lines.append(f"| {off} | {size} | {field} | `{hexed}` | `{value}` |")
    lines.append("")
    lines.append(f"Total length: 20 + {len(batch) - BATCH_HEADER_SIZE} = {len(batch)} bytes.")
    return "\n".join(lines)


def _fenced(text: str, lang: str = "") -> str:
    return f"```{lang}\n{text}\n```"


def build_spec_blocks(files: dict[str, bytes] | None = None) -> dict[str, str]:
    """The generated blocks of SPEC.md, ``{block name: markdown}``."""
    files = build_files() if files is None else files
    batch = files[BATCH_FILE]
    blob = files[SHARED_FILE]
    header = decode_shared_header(blob)
    keys_doc = json.loads(files[f"{OXIA_DIR}/keys.json"])
    oxia_lines = []
    for name, meta in keys_doc.items():
        value = files[f"{OXIA_DIR}/{name}"].decode("utf-8")
        oxia_lines.append(f"# {name}  key={meta['key']}  partition_key={meta['partition_key']}"
                          + ("  (ephemeral)" if meta["ephemeral"] else ""))
        oxia_lines.append(value)
    part_lines = []
    for part in header.partitions:
        part_lines.append(
            f"- `{part.topic}:{part.partition}`: {part.msg_count} "
            f"record{'s' if part.msg_count != 1 else ''}, "
            f"bytes `[{part.body_offset}, {part.body_offset + part.body_length})` "
            f"(body_offset {part.body_offset}, body_length {part.body_length})"
        )
    shared_text = "\n".join(
        [
            f"Header length H = {header.header_length}; bodies start at 8 + H = "
            f"{8 + header.header_length}; total {len(blob)} bytes. Header JSON:",
            "",
            _fenced(blob[8:8 + header.header_length].decode("utf-8"), "json"),
            "",
            *part_lines,
        ]
    )
    return {
        "batch-walkthrough": _batch_walkthrough(batch),
        f"hexdump {BATCH_FILE}": _fenced(hexdump(batch)),
        "shared-layout": shared_text,
        f"hexdump {SHARED_FILE}": _fenced(hexdump(blob)),
        "oxia-values": _fenced("\n".join(oxia_lines)),
        "kafka-walkthrough": _kafka_walkthrough(files[KAFKA_FILE]),
        f"hexdump {KAFKA_FILE}": _fenced(hexdump(files[KAFKA_FILE])),
    }


def render_spec(text: str, blocks: dict[str, str]) -> tuple[str, list[str]]:
    """Replace each generated block's body in ``text``; report missing markers."""
    problems = []
    for name, body in blocks.items():
        begin, end = _BEGIN.format(name=name), _END.format(name=name)
        i = text.find(begin)
        j = text.find(end)
        if i < 0 or j < i:
            problems.append(f"SPEC.md: markers for generated block {name!r} are missing")
            continue
        text = text[: i + len(begin)] + "\n" + body + "\n" + text[j:]
    return text, problems


# --- check / write --------------------------------------------------------


def _on_disk(examples_dir: Path) -> set[str]:
    found = set()
    for path in examples_dir.rglob("*"):
        if path.is_dir() or "__pycache__" in path.parts or path.name == _GENERATOR_NAME:
            continue
        found.add(path.relative_to(examples_dir).as_posix())
    return found


def check(examples_dir: Path = EXAMPLES_DIR, spec_path: Path = SPEC_PATH) -> list[str]:
    """Compare the checked-in files and SPEC blocks with a fresh build.

    Returns a list of problems; empty means everything matches byte for byte.
    """
    files = build_files()
    problems = []
    for rel, expected in files.items():
        path = examples_dir / rel
        if not path.is_file():
            problems.append(f"{rel}: missing")
        elif rel in KAFKA_COMPRESSED.values():
            problems.extend(_check_read_vector(rel, path.read_bytes()))
        elif path.read_bytes() != expected:
            problems.append(f"{rel}: differs from the generated bytes")
    for rel in sorted(_on_disk(examples_dir) - set(files)):
        problems.append(f"{rel}: not produced by {_GENERATOR_NAME} (stale file?)")
    if not spec_path.is_file():
        problems.append(f"{spec_path.name}: missing")
    else:
        current = spec_path.read_text(encoding="utf-8")
        rendered, missing = render_spec(current, build_spec_blocks(files))
        problems.extend(missing)
        if not missing and rendered != current:
            problems.append(f"{spec_path.name}: a generated block (hex dump, walkthrough or values) is stale")
    return problems


def _check_read_vector(rel: str, data: bytes) -> list[str]:
    """A compressed vector must decode (CRC, header, records) to exactly ``KAFKA_RECORDS``."""
    codec = next(c for c, name in KAFKA_COMPRESSED.items() if name == rel)
    try:
        h = kb.check_batch(data)
        same = _kafka_records(data) == _kafka_records(kb.build_batch(KAFKA_RECORDS))
    except Exception as exc:  # noqa: BLE001 - any failure is a finding
        return [f"{rel}: does not decode: {exc}"]
    if h.compression is not codec or not same:
        return [f"{rel}: decodes to other records or another compression than {codec.name.lower()}"]
    return []


def write(examples_dir: Path = EXAMPLES_DIR, spec_path: Path = SPEC_PATH) -> list[str]:
    """Rewrite the golden files and SPEC blocks; return what changed."""
    files = build_files()
    changed = []
    for rel, data in files.items():
        path = examples_dir / rel
        if path.is_file() and (path.read_bytes() == data or rel in KAFKA_COMPRESSED.values()):
            continue  # a read vector, once written, stays
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        changed.append(rel)
    current = spec_path.read_text(encoding="utf-8")
    rendered, missing = render_spec(current, build_spec_blocks(files))
    if missing:
        raise SystemExit("\n".join(missing))
    if rendered != current:
        spec_path.write_text(rendered, encoding="utf-8")
        changed.append(spec_path.name)
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="verify files and SPEC blocks; exit 1 on a difference")
    mode.add_argument("--write", action="store_true", help="rewrite files and SPEC blocks")
    args = parser.parse_args(argv)
    if args.write:
        for rel in write():
            print(f"wrote {rel}")
        return 0
    problems = check()
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        print(f"golden examples are out of date; run {_GENERATOR_NAME} --write", file=sys.stderr)
        return 1
    print("golden examples match")
    return 0


if __name__ == "__main__":
    sys.exit(main())
