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

import struct
from dataclasses import dataclass
from typing import Sequence

from .._protocol.codec import encode_shared_blob
from .._protocol.kafka_batch import ENCODING
from .._protocol.producer_state import NO_PRODUCER_ID, ProducerBatch
from .._protocol.records import EntryType, PendingAppend
from .._protocol.stored_batches import StoredBatches
from .._protocol.structs import AppendResult, SharedAppendGroup
from .._runtime import REAL_RUNTIME, Runtime

__all__ = ["StagedBatch", "StagedBlob", "build_staged"]


@dataclass(frozen=True, slots=True)
class StagedBatch:
    """One batch of a group that holds an idempotent one: what its commit checks
    and, when it is appended alone or with its neighbours, what the pending
    append of that run covers (SPEC 7.12)."""

    count: int
    byte_lo: int
    """First byte inside the group's body."""
    byte_hi: int
    max_timestamp: int
    producer: ProducerBatch | None


@dataclass(frozen=True)
class StagedBlob:
    """A shared WAL blob in S3 whose groups are not committed yet
    (:meth:`LeaderlessLogWriter.stage_shared`)."""

    groups: tuple[SharedAppendGroup, ...]
    templates: tuple[PendingAppend, ...]
    """Each group's pending append, offsets still 0: the commit assigns them."""
    failed: list[AppendResult] | None
    """Set when the PUT failed: every group's result, with the error."""
    batches: tuple[tuple[StagedBatch, ...] | None, ...] = ()
    """Per group, its batches when one of them is idempotent (else None)."""


def build_staged(groups: Sequence[SharedAppendGroup], wal_uri: str, created_at_ms: int, *,
                 runtime: Runtime = REAL_RUNTIME
                 ) -> tuple[bytes, tuple[PendingAppend, ...], tuple[tuple[StagedBatch, ...] | None, ...]]:
    """The shared blob of ``groups``, each group's pending-append template
    (``append_id`` from ``runtime.ids``) and, for a group holding an idempotent
    batch, its batches."""
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
    return blob, templates, tuple(staged_batches(e) for e in encoded)


def staged_batches(batches: StoredBatches) -> tuple[StagedBatch, ...] | None:
    """The batches of a group when one of them is idempotent, else None (the common case: no work)."""
    if not batches.idempotent:
        return None
    out = []
    data, starts = batches.data, batches.byte_starts
    for i in range(batches.batch_count):
        lo, hi = starts[i], starts[i + 1]
        max_ts, pid, epoch, seq, count = _TAIL_OF_HEADER.unpack_from(data, lo + 35)
        producer = None if pid == NO_PRODUCER_ID else ProducerBatch(pid, epoch, seq, count)
        out.append(StagedBatch(count, lo, hi, max_ts, producer))
    return tuple(out)


_TAIL_OF_HEADER = struct.Struct(">qqhii")
"""maxTimestamp, producerId, producerEpoch, baseSequence, recordsCount: bytes 35-61 of a batch (SPEC 6.3)."""
