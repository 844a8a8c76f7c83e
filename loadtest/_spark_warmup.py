"""Spark warm-up of ``./quick_run.sh``: the session starts on a thread while
the stack, the services and the data set come up, then the produce path runs
on a sample without sending anything.

A fresh JVM runs the first full-size produce job at a third of its speed: the
JIT compiles JSON parsing and the row-to-Arrow hand-off while the job runs,
and the Python workers start and import the writer. The warm-up pays that
beside the set-up:

1. ``SAMPLE_ROWS`` order rows in two files (two tasks, so both Python workers
   of ``local[2]`` start) go through the produce job's own input path (schema
   inference, ``from_json`` of the key) into
   :class:`loadtest._discard_source.DiscardSource`, a Python data source
   whose writer imports the ``llog`` writer's modules and drops the Arrow
   batches. That is the same JVM and worker path as
   ``df.write.format("llog")`` up to the first request.
2. The ``llog`` writer runs on no rows, so its driver-side planning and
   commit (Python processes of their own) are started once.

Nothing reaches the broker. The sample is as large as the default data set
(or the generated one, when smaller: a run of a few thousand rows is over
before the JIT matters): with 50,000 rows the JIT still spent about 1 s of
CPU compiling during the first job, with 200,000 about 0.6 s, for half a
second more of warm-up.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from loadtest._pipeline import StepFailed, generate_orders

__all__ = ["SparkWarmup"]


class SparkWarmup:
    """Starts the Spark session on a thread while the rest of the set-up
    runs, then, once the broker is up, warms the produce path (module
    docstring). Nothing is written."""

    CONF = {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "4", "spark.driver.memory": "2g"}
    SAMPLE_ROWS = 200_000
    SAMPLE_FILES = 2

    def __init__(self, workdir: Path, sample_rows: int = SAMPLE_ROWS) -> None:
        self.workdir = workdir
        self.sample_rows = sample_rows
        self.spark = None
        self.session_s = self.warmup_s = 0.0
        self._broker_url: str | None = None
        self._broker_ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="spark-warmup", daemon=True)
        self._thread.start()

    def broker_ready(self, url: str) -> None:
        self._broker_url = url
        self._broker_ready.set()

    def _run(self) -> None:
        try:
            from pyspark.sql import functions as F

            from loadtest._discard_source import DiscardSource
            from server.spark.produce_job import ProduceOptions, load_input, prepare_records, spark_session

            started = time.monotonic()
            from devstack import spark_kafka_jars  # Spark's Kafka connector, for the read through the listener

            conf = {**self.CONF, "spark.jars": ",".join(spark_kafka_jars())}
            self.spark = spark_session("llog-quick-run", master="local[2]", conf=conf)
            self.session_s = time.monotonic() - started
            self._make_active()  # getOrCreate may have returned a session another thread made
            sample = self.workdir / "warmup"
            for i in range(self.SAMPLE_FILES):
                generate_orders(sample / f"part-{i}.jsonl", self.sample_rows // self.SAMPLE_FILES)
            self._broker_ready.wait()
            started = time.monotonic()
            options = ProduceOptions(topic="warmup", brokers=(self._broker_url,), partitions=8,
                                     key_column="customer_id", input_format="json")
            df, fmt = load_input(self.spark, str(sample), "json")
            records = prepare_records(df, options, fmt)
            self.spark.dataSource.register(DiscardSource)
            records.write.format(DiscardSource.name()).mode("append").save()
            # A filter Spark cannot fold away, so the writer's tasks do start and get no rows.
            (records.where(F.length("value") < 0).write.format("llog").mode("append")
             .option("topic", "warmup").option("brokers", self._broker_url).option("partitions", "8").save())
            self.warmup_s = time.monotonic() - started
        except BaseException as exc:  # handed to the main thread by result()
            self._error = exc

    def result(self, timeout_s: float):
        """The warm SparkSession (raises what the thread raised)."""
        self._broker_ready.set()  # never leave the thread waiting
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            raise StepFailed(f"Spark did not start within {timeout_s:.0f} s")
        if self._error is not None:
            raise self._error
        self._make_active()
        return self.spark

    def _make_active(self) -> None:
        # Spark keeps its active session per JVM thread, and the lookup of a
        # Python data source goes through it.
        jvm = self.spark._jvm  # type: ignore[union-attr]
        jvm.org.apache.spark.sql.SparkSession.setActiveSession(self.spark._jsparkSession)  # type: ignore[union-attr]

    def stop(self) -> None:
        self._broker_ready.set()
        self._thread.join()
        if self.spark is not None:
            self.spark.stop()
