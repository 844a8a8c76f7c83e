"""Input of the produce job: reading the files and shaping the rows into the
``key``/``value`` columns the ``llog`` writer takes; and the one telling line
of a Spark error (see :mod:`server.spark.produce_job`)."""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Any, Sequence

from .._errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from .produce_job import ProduceOptions

__all__ = ["FORMATS", "infer_format", "load_input", "prepare_records"]


FORMATS = ("json", "csv", "parquet", "text")
_EXTENSIONS = {
    ".json": "json", ".jsonl": "json", ".ndjson": "json",
    ".csv": "csv", ".parquet": "parquet", ".pq": "parquet", ".txt": "text",
}
_COMPRESSION = (".gz", ".bz2", ".zst", ".lz4", ".snappy", ".deflate")
KEY_COL = "key"
VALUE_COL = "value"
EXTRA_COLS = (("--timestamp-column", "timestamp_column", "timestamp"), ("--headers-column", "headers_column", "headers"),
              ("--partition-column", "partition_column", "partition"))
"""The optional columns: (flag, ProduceOptions field, the writer's column name)."""


# -- input ---------------------------------------------------------------------------------


def infer_format(paths: Sequence[str]) -> str:
    """The input format from the paths' extensions (compression suffixes skipped)."""
    found = set()
    for p in paths:
        name = p.rstrip("/").lower()
        for suffix in _COMPRESSION:
            if name.endswith(suffix):
                name = name[: -len(suffix)]
        fmt = _EXTENSIONS.get(os.path.splitext(name)[1])
        if fmt is None:
            raise ConfigError(
                f"cannot infer the input format of {p!r} from its extension; pass --format "
                f"({', '.join(FORMATS)})"
            )
        found.add(fmt)
    if len(found) != 1:
        raise ConfigError(f"inputs have different formats {sorted(found)}; pass one format with --format")
    return found.pop()


def load_input(
    spark: SparkSession, paths: str | Sequence[str], input_format: str | None = None, *, csv_header: bool = True
) -> tuple[DataFrame | _JsonLines, str]:
    """Read the input; returns ``(source, format)`` for :func:`prepare_records`.
    Unreadable input and malformed JSON are ConfigErrors raised here, before
    anything is sent.

    JSON lines come back as :class:`_JsonLines`: the verbatim lines (blank
    ones dropped, as Spark's JSON reader does) and the schema Spark inferred,
    which names the fields ``--key-column``/``--value-column`` may use.
    """
    from pyspark.errors import AnalysisException
    from pyspark.sql import functions as F

    paths = [paths] if isinstance(paths, str) else list(paths)
    if not paths:
        raise ConfigError("no input path given")
    fmt = input_format or infer_format(paths)
    if fmt not in FORMATS:
        raise ConfigError(f"unknown input format {fmt!r}; use one of {', '.join(FORMATS)}")
    try:
        if fmt == "json":
            # The inference pass reads every line (FAILFAST: a malformed line
            # fails here, before any write) and gives the fields for --key-column.
            schema = spark.read.json(paths, mode="FAILFAST").schema
            lines = spark.read.text(paths).where(F.length(F.trim(F.col("value"))) > 0)
            return _JsonLines(lines, schema), fmt
        if fmt == "csv":
            return spark.read.csv(paths, header=csv_header, mode="FAILFAST", inferSchema=False), fmt
        if fmt == "parquet":
            return spark.read.parquet(*paths), fmt
        return spark.read.text(paths), fmt
    except AnalysisException as exc:
        raise ConfigError(f"cannot read the input {paths} as {fmt}: {_first_line(str(exc))}") from exc
    except Exception as exc:
        if type(exc).__name__ in ("Py4JJavaError", "SparkException", "PythonException"):
            raise ConfigError(f"cannot read the input {paths} as {fmt}: {_spark_error_line(str(exc))}") from exc
        raise


class _JsonLines:
    """JSON lines: the verbatim lines and the schema Spark inferred for them."""

    def __init__(self, lines: DataFrame, schema: Any) -> None:
        self.lines = lines
        self.schema = schema


def prepare_records(source: Any, options: ProduceOptions, fmt: str | None) -> DataFrame:
    """A DataFrame of ``value`` (string or binary) and, as the options name
    them, ``key``, ``timestamp``, ``headers`` and ``partition``: the columns
    the ``llog`` writer takes. Raises ConfigError for a missing column, before
    anything is sent."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    key, value = options.key_column, options.value_column
    extras = [(flag, getattr(options, field), name) for flag, field, name in EXTRA_COLS
              if getattr(options, field) is not None]
    named = [("--key-column", key), ("--value-column", value)] + [(flag, col) for flag, col, _ in extras]
    if isinstance(source, _JsonLines):
        names = source.schema.fieldNames()
        for opt, col in named:
            if col is not None and col not in names:
                raise ConfigError(f"{opt} {col!r} is not a field of the JSON input; fields: {', '.join(names)}")
        wanted = [c for c in dict.fromkeys([key, value] + [c for _, c, _ in extras]) if c is not None]
        line = F.col("value")
        cols = [line.alias("__llog_line")]
        if wanted:
            part = StructType([source.schema[c] for c in wanted])
            cols.append(F.from_json(line, part, {"mode": "FAILFAST"}).alias("__llog_parsed"))
        df = source.lines.select(*cols)
        out = []
        if key is not None:
            out.append(_as_key(df["__llog_parsed"][key], source.schema[key].dataType).alias(KEY_COL))
        v = df["__llog_line"] if value is None else _as_value(df["__llog_parsed"][value], source.schema[value].dataType)
        out.append(v.alias(VALUE_COL))
        out += [_as_extra(name, df["__llog_parsed"][col], source.schema[col].dataType).alias(name)
                for _, col, name in extras]
        return df.select(*out)

    df = source
    names = df.columns
    if fmt == "text" and (key is not None or extras):
        raise ConfigError("--key-column, --timestamp-column, --headers-column and --partition-column need "
                          "structured input (json, csv, parquet or a DataFrame), not text")
    for opt, col in named:
        if col is not None and col not in names:
            raise ConfigError(f"{opt} {col!r} is not a column of the input; columns: {', '.join(names)}")
    out = []
    if key is not None:
        out.append(_as_key(_column(df, key), df.schema[key].dataType).alias(KEY_COL))
    if value is not None:
        v = _as_value(_column(df, value), df.schema[value].dataType)
    elif fmt == "text":
        v = df["value"]
    elif not names:
        raise ConfigError("the input has no columns")
    else:
        v = F.to_json(F.struct(*[_column(df, c) for c in names]), {"ignoreNullFields": "false"})
    out.append(v.alias(VALUE_COL))
    out += [_as_extra(name, _column(df, col), df.schema[col].dataType).alias(name) for _, col, name in extras]
    return df.select(*out)


def _column(df: DataFrame, name: str) -> Any:
    """The top-level column ``name``, even when it holds dots or spaces (CSV headers)."""
    return df[f"`{name.replace('`', '``')}`"]


def _as_value(col: Any, dtype: Any) -> Any:
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, BinaryType, MapType, StringType, StructType

    if isinstance(dtype, (BinaryType, StringType)):
        return col
    if isinstance(dtype, (StructType, ArrayType, MapType)):
        return F.to_json(col)
    return col.cast("string")


def _as_extra(name: str, col: Any, dtype: Any) -> Any:
    """A timestamp, headers or partition column in the form the writer takes."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import MapType, NumericType, StringType, StructType

    if name == "timestamp":
        if isinstance(dtype, NumericType):
            return col.cast("long")  # ms since the epoch
        return F.to_timestamp(col) if isinstance(dtype, StringType) else col
    if name == "headers" and isinstance(dtype, MapType):
        return F.map_entries(col)
    if name == "headers" and isinstance(dtype, StructType):  # a JSON object: one header per field, in order
        return F.array(*[F.struct(F.lit(f.name).alias("key"), col[f.name].cast("string").cast("binary").alias("value"))
                         for f in dtype.fields])
    if name == "partition":
        return col.cast("int")
    return col


def _as_key(col: Any, dtype: Any) -> Any:
    from pyspark.sql.types import BinaryType, StringType

    # Non-string keys hash the UTF-8 bytes of their string form (not Kafka's
    # IntegerSerializer bytes): the same key always lands in the same partition.
    return col if isinstance(dtype, (BinaryType, StringType)) else col.cast("string")


# -- Spark errors ------------------------------------------------------------------------------


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else text


_ERROR_LINE = re.compile(
    r"^(?:[\w.]+\.)?(ProduceFailed|BrokerUnreachable|ProduceError|ValueError|ConfigError|InvalidRequest)"
    r": (.+)$",
    re.M,
)


def _spark_error_line(text: str) -> str:
    """The most telling line of a Spark task failure: the last llog error line
    of the Python traceback, else the first line."""
    found = _ERROR_LINE.findall(text)
    if found:
        kind, msg = found[-1]
        return f"{kind}: {msg}"
    for line in text.splitlines():
        if "Exception" in line or "Error" in line:
            return line.strip()
    return _first_line(text)
