"""Which columns of a DataFrame a write stores, checked as Kafka's sink checks them.

``df.write.format("llog")`` (and the produce job) take the columns of
Spark's Kafka sink: ``value`` (required; string or binary; a null is a
tombstone) and, when present, ``key`` (string or binary: stored, and hashed
for the partition unless there is a ``partition`` column), ``headers``
(array of struct<key string, value binary>), ``timestamp`` (timestamp, or
integer ms), ``partition`` (integer) and ``topic`` (string: used when no
``topic`` option is given, as Kafka's sink does). Any other column is
ignored, like Kafka's sink ignores it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from .._errors import ConfigError

__all__ = ["SinkColumns", "check_sink_columns"]


@dataclass(frozen=True)
class SinkColumns:
    """The names of the optional columns a write uses (None: absent)."""

    key: str | None = None
    partition: str | None = None
    headers: str | None = None
    timestamp: str | None = None
    topic: str | None = None


def check_sink_columns(fields: Mapping[str, Any], *, has_topic: bool) -> SinkColumns:
    """The columns of a schema ``{name: Spark DataType}``; ConfigError naming a column of the wrong type."""
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        ByteType,
        IntegerType,
        LongType,
        ShortType,
        StringType,
        StructType,
        TimestampNTZType,
        TimestampType,
    )

    def want(name: str, types: tuple, what: str) -> str | None:
        if name not in fields:
            return None
        if not isinstance(fields[name], types):
            raise ConfigError(f"column {name!r} must be {what}, got {fields[name].simpleString()} (cast it)")
        return name

    if "value" not in fields:
        raise ConfigError(f"the DataFrame needs a 'value' column (string or binary); it has {list(fields)}")
    want("value", (StringType, BinaryType), "string or binary")
    headers = want("headers", (ArrayType,), "array<struct<key string, value binary>>")
    if headers is not None:
        element = fields["headers"].elementType
        names = {f.name: f.dataType for f in element.fields} if isinstance(element, StructType) else {}
        if set(names) != {"key", "value"} or not isinstance(names["key"], StringType) or not isinstance(
                names["value"], (BinaryType, StringType)):
            raise ConfigError("column 'headers' must be array<struct<key string, value binary>>, got "
                              f"{fields['headers'].simpleString()}")
    topic = want("topic", (StringType,), "string")
    if topic is None and not has_topic:
        raise ConfigError('option "topic" is required unless the DataFrame has a topic column: '
                          '.option("topic", "orders")')
    return SinkColumns(
        key=want("key", (StringType, BinaryType), "string or binary"),
        partition=want("partition", (IntegerType, LongType, ShortType, ByteType), "an integer"),
        headers=headers,
        timestamp=want("timestamp", (TimestampType, TimestampNTZType, LongType), "a timestamp or integer ms"),
        topic=None if has_topic else topic,
    )
