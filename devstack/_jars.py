"""Java classpaths from Maven Central, cached per user: Kafka's client, tools and Streams,
Kafka Connect, Spark's Kafka connector.

Each classpath is declared by a pom in ``scripts/maven/`` and resolved once
with ``mvn dependency:copy-dependencies`` into ``$LLOG_CACHE_DIR/jars/<name>-
<pom hash>/`` (a ``.complete`` stamp marks it done; a changed pom resolves
again). Maven's own repository (``~/.m2``) caches the downloads::

    jars/kafka-tools-<hash>/   kafka-clients, kafka-tools, kafka-streams and kafka_2.13 4.1.1 with their
                               dependencies: ProducerPerformance, ConsumerPerformance, the
                               console producer/consumer, TopicCommand, ConsumerGroupCommand,
                               and Kafka's broker (bench_kafka's comparison)
    jars/kafka-connect-<hash>/ connect-runtime and connect-file 4.1.1: Kafka Connect's
                               distributed worker and the file connectors
    jars/spark-kafka-<hash>/   spark-sql-kafka-0-10_2.13 4.2.0 for requirements.txt's pyspark,
                               with only what Spark does not ship (kafka-clients,
                               commons-pool2, spark-token-provider-kafka)

``python -m devstack install`` resolves them all when ``mvn`` is on PATH, and says
what is missing when it is not (only the Kafka compatibility tests, the Spark
Kafka steps and ``loadtest/bench_kafka.py`` need them).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from ._binaries import cache_dir, file_lock, progress
from ._process import StackError

__all__ = ["JARS", "ensure_jars", "kafka_tools_classpath", "kafka_connect_classpath", "spark_kafka_jars", "java"]

REPO = Path(__file__).resolve().parents[1]
POMS = REPO / "scripts" / "maven"
JARS = {
    "kafka-tools": ("kafka-tools.xml", ()),
    "kafka-connect": ("kafka-connect.xml", ()),
    "spark-kafka": ("spark-kafka.xml", ("-DincludeArtifactIds=spark-sql-kafka-0-10_2.13,"
                                        "spark-token-provider-kafka-0-10_2.13,kafka-clients,commons-pool2",)),
}


def _target(name: str) -> Path:
    pom, _ = JARS[name]
    digest = hashlib.sha256((POMS / pom).read_bytes()).hexdigest()[:12]
    return cache_dir() / "jars" / f"{name}-{digest}"


def ensure_jars(name: str) -> Path:
    """The directory of ``name``'s jars, resolving them with Maven on first use."""
    target = _target(name)
    if (target / ".complete").exists():
        return target
    mvn = shutil.which("mvn")
    if mvn is None:
        raise StackError(f"Maven (mvn) is needed to fetch the {name} jars from Maven Central: install it "
                         "(apt-get install maven) and run scripts/setup.sh again")
    target.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(target.parent / f".{name}.lock", name):
        if (target / ".complete").exists():
            return target
        pom, extra = JARS[name]
        tmp = target.with_name(f".{target.name}.tmp{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        progress("resolving the %s jars with Maven (first run: a minute or two)", name)
        log = target.parent / f"{name}.mvn.log"
        with open(log, "w") as out:
            done = subprocess.run([mvn, "-B", "-q", "-f", str(POMS / pom), "dependency:copy-dependencies",
                                   f"-DoutputDirectory={tmp}", *extra], stdout=out, stderr=subprocess.STDOUT,
                                  check=False)
        if done.returncode != 0 or not any(tmp.glob("*.jar")):
            raise StackError(f"mvn could not resolve the {name} jars (exit {done.returncode}); see {log}")
        (tmp / ".complete").touch()
        shutil.rmtree(target, ignore_errors=True)
        os.replace(tmp, target)
        progress("%s jars ready: %s", name, target)
    return target


def kafka_tools_classpath() -> str:
    """A ``java -cp`` value for Kafka's client and tools."""
    return str(ensure_jars("kafka-tools") / "*")


def kafka_connect_classpath() -> str:
    """A ``java -cp`` value for Kafka Connect's worker and the file connectors."""
    return str(ensure_jars("kafka-connect") / "*")


def spark_kafka_jars() -> list[str]:
    """The jar paths to give Spark (``spark.jars``) for ``format("kafka")``."""
    return sorted(str(p) for p in ensure_jars("spark-kafka").glob("*.jar"))


def java() -> str:
    """The ``java`` to run the tools with (JAVA_HOME's, else PATH's)."""
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not found:
        raise StackError("java is needed for Kafka's tools: install openjdk-17-jre-headless")
    return found
