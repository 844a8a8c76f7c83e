"""``POST /topics/{name}/delete-records``: move partitions' log starts (Kafka's DeleteRecords, SPEC 7.13).

The body (JSON):

- ``partitions`` (required, a non-empty list, each partition once): objects
  ``{"partition": p, "before_offset": o}``; every record of ``p`` below offset
  ``o`` becomes unreadable, and ``o`` becomes the log start. ``before_offset``
  null or absent: every record in the log now (the high watermark + 1).

Answer 200 ``{"topic": name, "results": [...]}``, one item per partition in
the order asked: ``{"partition", "ok": true, "log_start_offset",
"high_watermark"}``, or ``ok: false`` with ``error_code``, ``error_type``,
``error``, ``retriable`` (and ``log_start_offset``/``high_watermark`` when the
error knows them): OFFSET_OUT_OF_RANGE for an offset past the log's end,
UNKNOWN_TOPIC_OR_PARTITION for a partition past the topic's count or never
written. An unknown topic is a 404 as a whole. A log start never moves back:
an offset at or below it answers the start as it is.
"""

from __future__ import annotations

from typing import Any

from .._errors import LlogError, OffsetOutOfRange
from .._http_server import Response
from .._protocol.http_json import MAX_INT32, MAX_INT64, InvalidField, int_field, only_fields, parse_json_body
from .._protocol.outcomes import error_code, error_type_of
from .record_deletion import RecordDeletion
from .topics import valid_topic_name

__all__ = ["delete_records_route"]

_FIELDS = ("partitions",)
_PARTITION_FIELDS = ("partition", "before_offset")


def delete_records_route(deletion: RecordDeletion, topics: Any, topic: str, body: bytes) -> Response:
    """``topics``: the broker's ``BrokerTopics``."""
    valid_topic_name(topic)
    asked = _parse(parse_json_body(body))
    topics.describe(topic)  # an unknown topic is a 404 as a whole, before anything moves
    return Response(200, {"topic": topic, "results": [_delete(deletion, topic, p, before) for p, before in asked]})


def _parse(doc: dict[str, Any]) -> list[tuple[int, int | None]]:
    only_fields(doc, _FIELDS)
    items = doc.get("partitions")
    if not isinstance(items, list) or not items:
        raise InvalidField("partitions must be a non-empty list of {\"partition\", \"before_offset\"}", "partitions")
    asked: list[tuple[int, int | None]] = []
    seen: set[int] = set()
    for i, item in enumerate(items):
        where = f"partitions[{i}]"
        if not isinstance(item, dict):
            raise InvalidField(f"{where} must be an object with partition and before_offset", where)
        only_fields(item, _PARTITION_FIELDS, where)
        partition = int_field(item, "partition", where, minimum=0, maximum=MAX_INT32)
        before = None if item.get("before_offset") is None else \
            int_field(item, "before_offset", where, minimum=1, maximum=MAX_INT64)  # offsets start at 1
        if partition in seen:
            raise InvalidField(f"partition {partition} is named twice", f"{where}.partition")
        seen.add(partition)
        asked.append((partition, before))
    return asked


def _delete(deletion: RecordDeletion, topic: str, partition: int, before: int | None) -> dict[str, Any]:
    try:
        moved = deletion.delete(topic, partition, before)
    except LlogError as exc:
        known = exc if isinstance(exc, OffsetOutOfRange) else None
        return {"partition": partition, "ok": False,
                "log_start_offset": None if known is None else known.log_start_offset,
                "high_watermark": None if known is None else known.high_watermark,
                "error_code": error_code(exc), "error_type": error_type_of(exc), "error": str(exc),
                "retriable": bool(exc.retriable)}
    return {"partition": partition, "ok": True, "log_start_offset": moved.log_start_offset,
            "high_watermark": moved.high_watermark}
