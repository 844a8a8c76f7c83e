"""The Spark session of llog jobs (:func:`spark_session`) and shipping the
``server`` package to executors (:func:`ship_code`); the produce job and the
benchmarks build their sessions here."""

from __future__ import annotations

import os
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["ship_code", "spark_session"]


def spark_session(
    app_name: str = "llog", master: str | None = None, conf: dict[str, str] | None = None
) -> SparkSession:
    """A SparkSession for llog jobs: local[*] unless a master is given or
    spark-submit set one, workers on this Python (``PYSPARK_PYTHON``), and
    the ``llog`` data source registered."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    elif "PYSPARK_GATEWAY_PORT" not in os.environ:  # not under spark-submit
        builder = builder.master("local[*]")
    defaults = {
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.execution.arrow.maxRecordsPerBatch": "10000",
        # JVM <-> Python worker traffic over a Unix socket instead of TCP
        # loopback: the llog read moves every record byte across it, and this
        # made spark.read.format("llog") ~15% faster on a 2-core VM (ARCHITECTURE.md).
        "spark.python.unix.domain.socket.enabled": "true",
        # Spark sizes file splits as (input + files x openCostInBytes) / cores:
        # with the default 4 MiB one 28 MB file on 2 cores splits 16 + 12 MB,
        # and the job waits for the larger task; 64 KiB splits it evenly
        # X
        # Many small files still pack into few tasks.
        "spark.sql.files.openCostInBytes": str(64 << 10),
    }
    for k, v in {**defaults, **(conf or {})}.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    from server.spark.datasource import register

    register(spark)
    return spark


def ship_code(spark: SparkSession) -> None:
    """Send the ``server`` package to the executors as a zip (spark-submit on
    a cluster has no checkout there)."""
    root = Path(__file__).resolve().parents[1]
    out = Path(tempfile.mkdtemp(prefix="llog-code-")) / "llog_server.zip"
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in root.rglob("*.py"):
            if "__pycache__" not in path.parts:
                zf.write(path, path.relative_to(root.parent))
    spark.sparkContext.addPyFile(str(out))
