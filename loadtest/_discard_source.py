"""A Python data source that drops what it is given: the Spark warm-up of
``./quick_run.sh`` (:mod:`loadtest._spark_warmup`) writes its sample here.
Its own module so that Spark's Python workers import it by name."""

from __future__ import annotations

from typing import Any, Iterator

from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, WriterCommitMessage

__all__ = ["DiscardSource"]


class _DiscardWriter(DataSourceArrowWriter):
    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        import server.spark._write_source  # noqa: F401  the worker imports what the real write needs

        for _ in iterator:
            pass
        return WriterCommitMessage()


class DiscardSource(DataSource):
    """``df.write.format("llog-warmup-discard")``: Arrow batches to a Python
    worker, then dropped (Spark's ``noop`` sink stops before the Arrow hand-off)."""

    @classmethod
    def name(cls) -> str:
        return "llog-warmup-discard"

    def writer(self, schema: Any, overwrite: bool) -> _DiscardWriter:
        return _DiscardWriter()
