"""The broker's JSON edge: request parsing and validation, record and result encoding.

Everything that turns HTTP bodies into typed values (and back) lives here,
so the broker module only routes and the consume service only reads.

Validation errors are :class:`InvalidField` (HTTP 400) or :class:`TooLarge`
(HTTP 413); both name the offending field with a JSON-path-like string such
as ``topic_partitions[2].partition``.

Bytes (a value, a key, a header value), both directions: a JSON string is
its UTF-8 bytes; an object ``{"base64": "..."}`` (exactly that one key,
standard alphabet, padded) is arbitrary bytes. Consume answers with a string
when the stored bytes are valid UTF-8 and with ``{"base64": ...}``
otherwise, so what was produced comes back byte for byte.

A produce record is bytes (its value: null key, no headers, the broker's
time) or an object with any of ``value``, ``key`` (bytes or null),
``headers`` (an array of ``{"key": string, "value": bytes or null}``) and
``timestamp_ms`` (an integer). A consumed record is always the object, with
``offset`` and ``timestamp_type`` besides.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from .._errors import InvalidRequest, LlogError
from .kafka_batch import Record, TimestampType
from .keys import validate_topic
from .outcomes import error_code, error_type_of
from .producer_state import MAX_EPOCH
from .structs import AppendResult, ProducerSequence, SharedAppendGroup
from .record_spans import RecordSpan

__all__ = [
    "InvalidField",
    "only_fields",
    "int_field",
    "TooLarge",
    "ConsumePartition",
    "ConsumeRequest",
    "ConsumedPartition",
    "consumed_partition_json",
    "error_code",
    "ProduceRequest",
    "parse_json_body",
    "parse_produce",
    "parse_consume",
    "decode_record",
    "encode_value",
    "record_json",
    "append_result_json",
    "DEFAULT_MAX_WAIT_MS",
    "DEFAULT_MIN_BYTES",
    "DEFAULT_MAX_BYTES",
    "DEFAULT_PARTITION_MAX_BYTES",
]

MAX_INT32 = 2**31 - 1
MAX_INT64 = 2**63 - 1
# Kafka's consumer defaults (fetch.max.wait.ms, fetch.min.bytes,
# fetch.max.bytes, max.partition.fetch.bytes).
DEFAULT_MAX_WAIT_MS = 500
DEFAULT_MIN_BYTES = 1
DEFAULT_MAX_BYTES = 50 * 1024 * 1024
DEFAULT_PARTITION_MAX_BYTES = 1024 * 1024


class InvalidField(InvalidRequest):
    """A request field is missing, has the wrong type or an invalid value (HTTP 400)."""

    def __init__(self, message: str, field: str | None, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.field = field


def only_fields(doc: Mapping[str, Any], allowed: Sequence[str], where: str | None = None) -> None:
    """InvalidField naming the first key of ``doc`` not in ``allowed`` (``where.key`` inside
    ``where``, an item of a request's list), and the keys that are."""
    for key in doc:
        if key not in allowed:
            raise InvalidField(f"unknown field {key!r}; allowed: {', '.join(allowed)}",
                               key if where is None else f"{where}.{key}")


class TooLarge(InvalidField):
    """The request exceeds a size limit of the broker (HTTP 413)."""


# -- JSON --------------------------------------------------------------------


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not valid JSON")


def parse_json_body(body: bytes) -> dict[str, Any]:
    """The request body, UTF-8 JSON text, as a JSON object; InvalidField(None)
    otherwise. The bytes are decoded as UTF-8 first: ``json.loads`` given
    bytes would also take UTF-16 and UTF-32 (and a byte-order mark)."""
    try:
        doc = json.loads(body.decode("utf-8"), parse_constant=_reject_constant)
    except UnicodeDecodeError as exc:
        raise InvalidField(f"request body is not UTF-8 JSON: {exc.reason}", None) from None
    except (ValueError, RecursionError) as exc:
        raise InvalidField(f"malformed JSON: {exc}", None) from None
    if not isinstance(doc, dict):
        raise InvalidField(f"request body must be a JSON object, got {_json_type(doc)}", None)
    return doc


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def int_field(
    obj: Mapping[str, Any], key: str, where: str, *, minimum: int, maximum: int, default: int | None = None
) -> int:
    """``obj[key]`` as an integer within its bounds (``default`` when absent; required without
    one); InvalidField naming ``where.key`` otherwise."""
    field = f"{where}.{key}" if where else key
    if key not in obj:
        if default is None:
            raise InvalidField(f"{field} is required", field)
        return default
    value = obj[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidField(f"{field} must be an integer, got {_json_type(value)} {value!r}", field)
    if not minimum <= value <= maximum:
        raise InvalidField(f"{field} must be between {minimum} and {maximum}, got {value}", field)
    return value


def _topic_field(obj: Mapping[str, Any], where: str) -> str:
    field = f"{where}.topic"
    if "topic" not in obj:
        raise InvalidField(f"{field} is required", field)
    topic = obj["topic"]
    if not isinstance(topic, str):
        raise InvalidField(f"{field} must be a string, got {_json_type(topic)}", field)
    try:
        return validate_topic(topic)
    except InvalidRequest as exc:
        raise InvalidField(f"{field}: {exc.message}", field) from None


def _topic_partitions(doc: Mapping[str, Any], *, allow_empty: bool = False) -> list[Any]:
    items = doc.get("topic_partitions")
    if "topic_partitions" not in doc:
        raise InvalidField("topic_partitions is required", "topic_partitions")
    if not isinstance(items, list):
        raise InvalidField(
            f"topic_partitions must be an array, got {_json_type(items)}", "topic_partitions"
        )
    if not items and not allow_empty:
        raise InvalidField(
            'topic_partitions must not be empty (only a flush-only request, "flush": true, may be)',
            "topic_partitions",
        )
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise InvalidField(
                f"topic_partitions[{i}] must be an object, got {_json_type(item)}", f"topic_partitions[{i}]"
            )
    return items


# -- records -------------------------------------------------------------------


def _decode_bytes(value: object, field: str) -> bytes:
    """A string or ``{"base64": ...}`` as bytes."""
    if isinstance(value, str):
        try:
            return value.encode("utf-8")
        except UnicodeEncodeError:
            # JSON allows escaped lone surrogates ("\ud800"); UTF-8 does not.
            raise InvalidField(
                f"{field} is not encodable as UTF-8 (lone surrogate); send bytes as {{\"base64\": ...}}",
                field,
            ) from None
    if isinstance(value, dict) and set(value) == {"base64"}:
        text = value["base64"]
        if not isinstance(text, str):
            raise InvalidField(f"{field}.base64 must be a string, got {_json_type(text)}", f"{field}.base64")
        try:
            return base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise InvalidField(f"{field}.base64 is not valid base64: {exc}", f"{field}.base64") from None
    raise InvalidField(f"{field} must be a string or {{\"base64\": ...}}, got {_json_type(value)}", field)


def _decode_nullable(doc: Mapping[str, Any], name: str, field: str) -> bytes | None:
    value = doc.get(name)
    return None if value is None else _decode_bytes(value, f"{field}.{name}")


_RECORD_KEYS = frozenset({"value", "key", "headers", "timestamp_ms"})


def decode_record(record: object, field: str) -> bytes | Record:
    """A produce record: a string or ``{"base64": ...}`` (a value) as bytes, a record object as a Record."""
    if not isinstance(record, dict) or set(record) == {"base64"}:
        if isinstance(record, (str, dict)):
            return _decode_bytes(record, field)
        raise InvalidField(
            f"{field} must be a string, {{\"base64\": ...}} or a record object "
            f"{{\"value\", \"key\", \"headers\", \"timestamp_ms\"}}, got {_json_type(record)}", field
        )
    unknown = set(record) - _RECORD_KEYS
    if unknown or not record:
        raise InvalidField(
            f"{field} must be {{\"base64\": ...}} or a record object with keys among value, key, headers, "
            f"timestamp_ms; got keys {sorted(record)}", field,
        )
    headers = record.get("headers", [])
    if not isinstance(headers, list):
        raise InvalidField(f"{field}.headers must be an array, got {_json_type(headers)}", f"{field}.headers")
    parsed = []
    for j, h in enumerate(headers):
        where = f"{field}.headers[{j}]"
        if not isinstance(h, dict) or not set(h) <= {"key", "value"} or not isinstance(h.get("key"), str):
            raise InvalidField(f"{where} must be an object {{\"key\": string, \"value\": bytes or null}}", where)
        parsed.append((h["key"], _decode_nullable(h, "value", where)))
    ts = record.get("timestamp_ms")
    if ts is not None and (isinstance(ts, bool) or not isinstance(ts, int) or not 0 <= ts <= MAX_INT64):
        raise InvalidField(f"{field}.timestamp_ms must be an integer 0..{MAX_INT64} (ms since the epoch), "
                           f"got {ts!r}", f"{field}.timestamp_ms")
    return Record(_decode_nullable(record, "value", field), _decode_nullable(record, "key", field),
                  tuple(parsed), ts)


def encode_value(payload: bytes | None) -> str | dict[str, str] | None:
    """Stored bytes for JSON: the text if they are UTF-8, else ``{"base64": ...}``; None stays null."""
    if payload is None:
        return None
    try:
        return payload.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(payload).decode("ascii")}


TIMESTAMP_TYPE_NAMES = {TimestampType.CREATE_TIME: "CreateTime", TimestampType.LOG_APPEND_TIME: "LogAppendTime"}
_TYPE_NAMES_BY_INT = {int(t): name for t, name in TIMESTAMP_TYPE_NAMES.items()}


def _records_json(part: ConsumedPartition) -> list[dict[str, Any]]:
    """Every record of the answer as JSON, straight from the batches' columns (the
    consume answer's per-record loop: locals, no Record objects)."""
    out: list[dict[str, Any]] = []
    add = out.append
    value_of = encode_value
    names = _TYPE_NAMES_BY_INT
    for span in part.spans:
        for offset, key, value, headers, ts, kind in span.rows():
            add({
                "offset": offset,
                "value": value_of(value),
                "key": None if key is None else value_of(key),
                "headers": [{"key": k, "value": value_of(v)} for k, v in headers] if headers else [],
                "timestamp_ms": ts,
                "timestamp_type": names[kind],
            })
    return out


def record_json(offset: int, r: Record) -> dict[str, Any]:
    """One consumed record: ``offset``, ``value``, ``key``, ``headers``, ``timestamp_ms``, ``timestamp_type``."""
    return {
        "offset": offset,
        "value": encode_value(r.value),
        "key": encode_value(r.key),
        "headers": [{"key": k, "value": encode_value(v)} for k, v in r.headers],
        "timestamp_ms": r.timestamp_ms,
        "timestamp_type": TIMESTAMP_TYPE_NAMES[r.timestamp_type],
    }


# -- produce -------------------------------------------------------------------


@dataclass(frozen=True)
class ProduceRequest:
    """A validated /produce body: one group per ``topic_partitions`` item, in order."""

    groups: tuple[SharedAppendGroup, ...]
    record_count: int
    payload_bytes: int
    flush: bool = False
    """The client asks for its batches to be flushed now, without waiting out
    the batch delay (a producer's ``flush()``: it has nothing more to add).
    With no groups it is a flush-only request: flush what the broker holds."""


def parse_produce(doc: Mapping[str, Any], *, max_records: int) -> ProduceRequest:
    flush = doc.get("flush", False)
    if not isinstance(flush, bool):
        raise InvalidField(f"flush must be a boolean, got {_json_type(flush)}", "flush")
    items = _topic_partitions(doc, allow_empty=flush)
    groups: list[SharedAppendGroup] = []
    total = 0
    nbytes = 0
    for i, item in enumerate(items):
        where = f"topic_partitions[{i}]"
        topic = _topic_field(item, where)
        partition = int_field(item, "partition", where, minimum=0, maximum=MAX_INT32)
        field = f"{where}.records"
        if "records" not in item:
            raise InvalidField(f"{field} is required", field)
        records = item["records"]
        if not isinstance(records, list):
            raise InvalidField(f"{field} must be an array, got {_json_type(records)}", field)
        if not records:
            raise InvalidField(f"{field} must not be empty", field)
        total += len(records)
        if total > max_records:
            raise TooLarge(
                f"the request holds more than {max_records} records "
                "(LLOG_BROKER_MAX_RECORDS_PER_REQUEST); split it",
                "topic_partitions",
            )
        payloads = [decode_record(r, f"{field}[{j}]") for j, r in enumerate(records)]
        nbytes += sum(len(p) if isinstance(p, bytes) else len(p.value or b"") + len(p.key or b"") for p in payloads)
        groups.append(SharedAppendGroup(topic, partition, payloads, producer=_producer_fields(item, where)))
    return ProduceRequest(tuple(groups), total, nbytes, flush)


_PRODUCER_FIELDS = (("producer_id", MAX_INT64), ("producer_epoch", MAX_EPOCH), ("base_sequence", MAX_INT32))


def _producer_fields(item: Mapping[str, Any], where: str) -> ProducerSequence | None:
    """An item's idempotence fields (SPEC 7.12): all three, or none."""
    given = [name for name, _ in _PRODUCER_FIELDS if name in item]
    if not given:
        return None
    if len(given) < len(_PRODUCER_FIELDS):
        missing = next(name for name, _ in _PRODUCER_FIELDS if name not in item)
        raise InvalidField(f"{where}.{missing} is required with {where}.{given[0]} (an idempotent batch carries "
                           "producer_id, producer_epoch and base_sequence)", f"{where}.{missing}")
    values = [int_field(item, name, where, minimum=0, maximum=top) for name, top in _PRODUCER_FIELDS]
    return ProducerSequence(*values)


def append_result_json(res: AppendResult) -> dict[str, Any]:
    """One ``results[]`` item of the produce response; an idempotent batch the
    log held already has ``duplicate: true`` with the offsets it got the first
    time (null when too old to be remembered)."""
    if res.error is None and res.duplicate:
        return {"topic": res.topic, "partition": res.partition, "ok": True, "duplicate": True,
                "start_offset": res.start_offset, "end_offset": res.end_offset, "count": res.count}
    if res.error is None:
        return {
            "topic": res.topic,
            "partition": res.partition,
            "ok": True,
            "start_offset": res.start_offset,
            "end_offset": res.end_offset,
            "count": res.count,
            "index_key": res.index_key,
            "wal_uri": res.wal_uri,
        }
    return {
        "topic": res.topic,
        "partition": res.partition,
        "ok": False,
        "count": res.count,
        "error_type": error_type_of(res.error),
        "error": str(res.error),
        "retriable": bool(res.error.retriable),
    }


# -- consume -------------------------------------------------------------------


@dataclass(frozen=True)
class ConsumePartition:
    """One ``topic_partitions`` item of a /consume request."""

    topic: str
    partition: int
    fetch_offset: int
    """First offset wanted (offsets start at 1)."""
    partition_max_bytes: int
    """Payload bytes this partition may return (one larger first record excepted)."""


@dataclass(frozen=True)
class ConsumeRequest:
    """A validated /consume body."""

    partitions: tuple[ConsumePartition, ...]
    max_wait_ms: int
    """Already capped by the broker's LLOG_BROKER_MAX_WAIT_MS."""
    min_bytes: int
    max_bytes: int


def parse_consume(doc: Mapping[str, Any], *, max_wait_ms_cap: int) -> ConsumeRequest:
    items = _topic_partitions(doc)
    parts: list[ConsumePartition] = []
    seen: set[tuple[str, int]] = set()
    for i, item in enumerate(items):
        where = f"topic_partitions[{i}]"
        topic = _topic_field(item, where)
        partition = int_field(item, "partition", where, minimum=0, maximum=MAX_INT32)
        if (topic, partition) in seen:
            raise InvalidField(
                f"{where} repeats {topic}:{partition}; name each topic-partition once", where
            )
        seen.add((topic, partition))
        # Any integer: an offset below the log start is a per-partition
        # OFFSET_OUT_OF_RANGE answer, not a malformed request.
        fetch_offset = int_field(item, "fetch_offset", where, minimum=-MAX_INT64, maximum=MAX_INT64)
        pmax = int_field(
            item, "partition_max_bytes", where, minimum=1, maximum=MAX_INT32, default=DEFAULT_PARTITION_MAX_BYTES
        )
        parts.append(ConsumePartition(topic, partition, fetch_offset, pmax))
    max_wait_ms = int_field(doc, "max_wait_ms", "", minimum=0, maximum=MAX_INT32, default=DEFAULT_MAX_WAIT_MS)
    min_bytes = int_field(doc, "min_bytes", "", minimum=0, maximum=MAX_INT32, default=DEFAULT_MIN_BYTES)
    max_bytes = int_field(doc, "max_bytes", "", minimum=1, maximum=MAX_INT32, default=DEFAULT_MAX_BYTES)
    return ConsumeRequest(tuple(parts), min(max_wait_ms, max_wait_ms_cap), min_bytes, max_bytes)


@dataclass(frozen=True)
class ConsumedPartition:
    """One partition's answer to a /consume request."""

    topic: str
    partition: int
    fetch_offset: int
    next_fetch_offset: int
    """Where the next request continues: one past the last record returned."""
    high_watermark: int | None
    """Last offset known to exist when the answer was built (None: unknown, on some errors)."""
    spans: tuple[RecordSpan, ...] = ()
    """The records, consecutive from ``fetch_offset``."""
    payload_bytes: int = 0
    error: LlogError | None = None
    log_start_offset: int = 1
    """The first offset of the log the broker knew of when it answered."""

    @property
    def records(self) -> tuple[tuple[int, Record], ...]:
        """``(offset, record)`` per record."""
        return tuple(item for span in self.spans for item in span.items())

    @property
    def record_count(self) -> int:
        return sum(span.count for span in self.spans)


LOG_START_OFFSET = 1


def consumed_partition_json(part: ConsumedPartition) -> dict[str, Any]:
    """One ``results[]`` item of the consume response."""
    body: dict[str, Any] = {
        "topic": part.topic,
        "partition": part.partition,
        "ok": part.error is None,
        "high_watermark": part.high_watermark,
        "log_start_offset": part.log_start_offset,
        "next_fetch_offset": part.next_fetch_offset,
        "records": _records_json(part),
    }
    if part.error is not None:
        body["error_code"] = error_code(part.error)
        body["error_type"] = error_type_of(part.error)
        body["error"] = str(part.error)
        body["retriable"] = bool(part.error.retriable)
    return body

