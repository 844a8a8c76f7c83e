"""The first half of a shared append: the blob and its pending appends.

A flush writes one shared WAL blob (``encode_shared_blob``: one
``kafka-batch-v2`` body per partition group, the group's batches back to
back) and then commits each group.
:func:`build_staged` encodes the blob and the groups' pending-append
templates (offsets still 0: the commit assigns them); the writer PUTs the
blob and returns a :class:`StagedBlob`, which reserves nothing, so stages may
run concurrently and out of order while commits keep their order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from .._protocol.codec import encode_shared_blob
from .._protocol.kafka_batch import ENCODING
from .._protocol.records import EntryType, PendingAppend
from .._protocol.structs import AppendResult, SharedAppendGroup
from .._runtime import REAL_RUNTIME, Runtime

__all__ = ["StagedBlob", "build_staged"]


@dataclass(frozen=True)
class StagedBlob:
    """A shared WAL blob in S3 whose groups are not committed yet
    (:meth:`LeaderlessLogWriter.stage_shared`)."""

    groups: tuple[SharedAppendGroup, ...]
    templates: tuple[PendingAppend, ...]
    """Each group's pending append, offsets still 0: the commit assigns them."""
    failed: list[AppendResult] | None
    """Set when the PUT failed: every group's result, with the error."""


def build_staged(groups: Sequence[SharedAppendGroup], wal_uri: str, created_at_ms: int, *,
                 runtime: Runtime = REAL_RUNTIME) -> tuple[bytes, tuple[PendingAppend, ...]]:
    """The shared blob of ``groups`` and each group's pending-append template
    (``append_id`` from ``runtime.ids``)."""
    encoded = [g.encode(created_at_ms) for g in groups]
    bodies = [(g.topic, g.partition, len(e), e.data) for g, e in zip(groups, encoded)]
    blob, parts = encode_shared_blob(bodies, created_at_ms, ENCODING)
    templates = tuple(
        PendingAppend(
            append_id=str(runtime.ids.uuid4()), start_offset=0, end_offset=0, msg_count=len(e),
            entry_type=EntryType.WAL, data_key=wal_uri, encoding=ENCODING,
            byte_offset=part.body_offset, byte_length=part.body_length, created_at_ms=created_at_ms,
            max_timestamp_ms=e.max_timestamp,
        )
        for e, part in zip(encoded, parts)
    )
    return blob, templates
