"""llog on Spark: the produce job and the ``llog`` data source.

- :func:`run_produce_job` feeds a DataFrame or input files to the brokers
  (``python -m server.spark.produce_job --help``); exactly once.
- :func:`register` adds the ``llog`` format: ``spark.read``/``readStream``
  straight from Oxia + S3, ``df.write`` through the brokers.
- :func:`spark_session` builds a session with sensible local defaults and
  the format registered.

Importing this package needs no PySpark: the produce job and the data
source are loaded on first use.
"""

from __future__ import annotations

from ..client import (
    BrokerUnreachable,
    ProduceError,
    ProduceFailed,
    ProducerConfig,
    ProduceStats,
    TaskProducer,
)
from ..client import murmur2, partition_for_key, to_positive

__all__ = [
    "run_produce_job",
    "ProduceOptions",
    "ProduceSummary",
    "PartitionRange",
    "ProduceError",
    "ProduceFailed",
    "ProduceJobFailed",
    "BrokerUnreachable",
    "ProducerConfig",
    "ProduceStats",
    "TaskProducer",
    "murmur2",
    "to_positive",
    "partition_for_key",
    "register",
    "spark_session",
]


_FROM_PRODUCE_JOB = {
    "run_produce_job", "ProduceOptions", "ProduceSummary", "PartitionRange", "ProduceJobFailed", "spark_session",
}


def __getattr__(name: str):  # noqa: ANN202 - PEP 562
    # Lazy, so that `python -m server.spark.produce_job` does not import the
    # module twice (runpy warns) and importing the package needs no pyspark.
    if name in _FROM_PRODUCE_JOB:
        from . import produce_job

        return getattr(produce_job, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def register(spark) -> None:  # noqa: ANN001 - pyspark is optional at import time
    """Register the ``llog`` data source format with ``spark``."""
    from .datasource import register as _register

    _register(spark)
