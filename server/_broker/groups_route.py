"""``/groups``: consumer groups' committed offsets (``server/_groups/offsets.py``).

    GET  /groups                              {"groups": [name, ...]}
    GET  /groups/{group}/offsets[?topic=T]    the group's offsets (an offset below its log's start
                                              answered as the start), 404 UnknownGroup
    POST /groups/{group}/offsets              {"offsets": [{"topic", "partition", "offset", "metadata"?}],
                                               "generation"?, "member_id"?}  -> {"group", "committed"}

``group`` is one path segment, percent-decoded (a ``/`` in a name is ``%2F``).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

from .._groups.offsets import GroupOffsets, MAX_METADATA_LENGTH
from .._http_server import Response, error_response
from .._errors import InvalidRequest, StaleGeneration, UnknownGroup
from .._protocol.outcomes import STALE_GENERATION, UNKNOWN_GROUP
from .._protocol.http_json import MAX_INT32, InvalidField, only_fields, parse_json_body
from .._protocol.keys import TopicPartition, validate_group, validate_topic

__all__ = ["groups_route"]

_COMMIT_FIELDS = ("offsets", "generation", "member_id")
_OFFSET_FIELDS = ("topic", "partition", "offset", "metadata")


def groups_route(offsets: GroupOffsets, body: bytes, method: str, group: str | None, query: str) -> Response:
    if group is None:
        return Response(200, {"groups": offsets.groups()})
    try:
        validate_group(group)
    except InvalidRequest as exc:
        raise InvalidField(exc.message, "group") from None
    if method == "GET":
        topic = _topic_query(query)
        try:
            found = offsets.fetch_bounded(group, topic)
        except UnknownGroup as exc:
            return error_response(UNKNOWN_GROUP, str(exc), "group")
        return Response(200, {"group": group, "offsets": [
            {"topic": tp.topic, "partition": tp.partition, "offset": c.offset, "metadata": c.metadata,
             "committed_at_ms": c.committed_at_ms} for tp, c in found.items()]})
    doc = parse_json_body(body)
    only_fields(doc, _COMMIT_FIELDS)
    items = doc.get("offsets")
    if not isinstance(items, list) or not items:
        raise InvalidField("offsets must be a non-empty array of {topic, partition, offset, metadata}", "offsets")
    generation, member = doc.get("generation"), doc.get("member_id")
    if generation is not None and (isinstance(generation, bool) or not isinstance(generation, int)):
        raise InvalidField(f"generation must be an integer, got {generation!r}", "generation")
    if member is not None and not isinstance(member, str):
        raise InvalidField(f"member_id must be a string, got {member!r}", "member_id")
    parsed = [_offset(item, i) for i, item in enumerate(items)]
    try:
        offsets.commit(group, parsed, generation=generation, member=member)
    except StaleGeneration as exc:
        return error_response(STALE_GENERATION, str(exc), exc.field)
    return Response(200, {"group": group, "committed": len(parsed)})


def _topic_query(query: str) -> str | None:
    topics = parse_qs(query, keep_blank_values=True).get("topic")
    if not topics:
        return None
    try:
        return validate_topic(topics[-1])
    except InvalidRequest as exc:
        raise InvalidField(exc.message, "topic") from None


def _offset(item: Any, i: int) -> tuple[TopicPartition, int, str]:
    where = f"offsets[{i}]"
    if not isinstance(item, dict):
        raise InvalidField(f"{where} must be an object", where)
    only_fields(item, _OFFSET_FIELDS, where)
    topic, partition, offset = item.get("topic"), item.get("partition"), item.get("offset")
    metadata = item.get("metadata", "")
    try:
        validate_topic(topic)
    except InvalidRequest as exc:
        raise InvalidField(exc.message, f"{where}.topic") from None
    if isinstance(partition, bool) or not isinstance(partition, int) or not 0 <= partition <= MAX_INT32:
        raise InvalidField(f"{where}.partition must be an integer 0..{MAX_INT32}, got {partition!r}",
                           f"{where}.partition")
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 1:
        raise InvalidField(f"{where}.offset must be an integer >= 1 (the next offset to consume), got {offset!r}",
                           f"{where}.offset")
    if metadata is None:
        metadata = ""
    if not isinstance(metadata, str) or len(metadata.encode("utf-8")) > MAX_METADATA_LENGTH:
        raise InvalidField(f"{where}.metadata must be a string of at most {MAX_METADATA_LENGTH} bytes",
                           f"{where}.metadata")
    return TopicPartition(topic, partition), offset, metadata
