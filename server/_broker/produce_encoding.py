"""A produce's groups as the batches the broker stores, checked against their topic's config.

The broker encodes every group itself before it submits it (values and
record objects become one RecordBatch v2 batch stamped with the broker's
clock; a client's own batches stay as sent), so the bytes its tail cache
holds are the bytes the WAL blob holds. Per topic (the catalogue's config):

- ``max.message.bytes``: a record the broker encodes (key + value + headers)
  or a batch a client built may not be larger: 413 naming the group's
  records, as Kafka's MESSAGE_TOO_LARGE.
- ``message.timestamp.type=LogAppendTime``: every batch is stamped with the
  broker's time (Kafka sets the timestamp-type bit and ``maxTimestamp``, and
  a reader gives every record of the batch that time).
"""

from __future__ import annotations

from typing import Mapping, Sequence

from .._catalogue.topic_config import LOG_APPEND_TIME, TopicConfig
from .._protocol.codec import EncodedRecords
from .._protocol.http_json import TooLarge
from .._protocol.kafka_batch import Record
from .._protocol.stored_batches import StoredBatches
from .._protocol.structs import SharedAppendGroup

__all__ = ["encode_groups"]


def encode_groups(
    groups: Sequence[SharedAppendGroup], configs: Mapping[str, TopicConfig], now_ms: int
) -> list[SharedAppendGroup]:
    """``groups`` encoded as stored batches; a topic missing from ``configs`` gets no checks."""
    out = []
    for i, g in enumerate(groups):
        config = configs.get(g.topic)
        if config is not None:
            _check_size(g, config.max_message_bytes, f"topic_partitions[{i}].records")
        batches = g.encode(now_ms)
        if config is not None and config.message_timestamp_type == LOG_APPEND_TIME:
            batches = batches.with_log_append_time(now_ms)
        out.append(SharedAppendGroup(g.topic, g.partition, batches))
    return out


def _check_size(g: SharedAppendGroup, limit: int, field: str) -> None:
    payloads = g.payloads
    if isinstance(payloads, StoredBatches):
        starts = payloads.byte_starts
        largest = max(starts[i + 1] - starts[i] for i in range(payloads.batch_count))
        what = "a batch"
    elif isinstance(payloads, EncodedRecords):
        largest = max((_largest_of(part.starts) for part in payloads.parts), default=0)
        what = "a record"
    else:
        largest = max(_record_size(p) for p in payloads)
        what = "a record"
    if largest > limit:
        raise TooLarge(
            f"{what} of {largest} bytes for {g.topic}:{g.partition} is larger than the topic's "
            f"max.message.bytes {limit}; split it or raise the limit (PATCH /topics/{g.topic})",
            field, topic=g.topic, partition=g.partition,
        )


def _largest_of(starts) -> int:
    return max((starts[k + 1] - starts[k] - 4 for k in range(len(starts) - 1)), default=0)


def _record_size(p: bytes | Record) -> int:
    if isinstance(p, Record):
        return (len(p.value or b"") + len(p.key or b"")
                + sum(len(k) + len(v or b"") for k, v in p.headers))
    return len(p)
