"""A local Oxia + S3 stack for tests and development (stdlib, boto3, oxia only).

``LocalStack`` runs Oxia (standalone, or a 3-server cluster with replication
factor 3) and MinIO (or versitygw, ``LLOG_DEVSTACK_S3=versitygw``) on
127.0.0.1, with all data in one directory; ``StackSettings.env()`` gives the
``LLOG_*`` variables that point the library at it. The binaries are built
once with the local Go toolchain into ``~/.cache/llog/bin``.

``PrometheusServer`` runs a Prometheus (Debian's package, unpacked into the
same cache by ``ensure_prometheus``) that scrapes the targets it is given
through file-based service discovery; ``query``/``query_range`` ask it.

Command line: ``python -m devstack {install,up,down,status,env,prometheus} --help``.
"""

from __future__ import annotations

from ._binaries import (
    OXIA_VERSIONS,
    PROMETHEUS_DEB_VERSION,
    S3_KINDS,
    bin_dir,
    cache_dir,
    ensure_oxia,
    ensure_prometheus,
    ensure_promtool,
    ensure_s3_server,
    file_lock,
)
from ._oxia import OxiaCluster, OxiaServerPorts, OxiaStandalone, shard_leaders
from ._gobuild import GoBuildError, ensure_go_binary, ensure_go_module_binary, kafka_go_clients
from ._node import kafkajs_program, node
from ._jars import ensure_jars, java, kafka_connect_classpath, kafka_tools_classpath, spark_kafka_jars
from ._process import ManagedProcess, StackError, die_with_parent_argv, free_ports
from ._prometheus import PrometheusQueryError, PrometheusServer, ScrapeTarget, query, query_range
from ._s3 import S3Server, ensure_bucket, s3_client
from ._stack import (
    OXIA_MODES,
    LocalStack,
    ProcessInfo,
    StackSettings,
    StackState,
    default_s3_kind,
    read_state,
    stop_from_state,
)

__all__ = [
    "ensure_jars",
    "java",
    "kafka_connect_classpath",
    "kafka_tools_classpath",
    "spark_kafka_jars",
    "file_lock",
    "GoBuildError",
    "ensure_go_binary",
    "ensure_go_module_binary",
    "kafka_go_clients",
    "kafkajs_program",
    "node",
    "LocalStack",
    "StackSettings",
    "StackState",
    "ProcessInfo",
    "StackError",
    "read_state",
    "stop_from_state",
    "default_s3_kind",
    "ensure_oxia",
    "ensure_s3_server",
    "ensure_prometheus",
    "ensure_promtool",
    "PrometheusServer",
    "ScrapeTarget",
    "PrometheusQueryError",
    "query",
    "query_range",
    "ensure_bucket",
    "s3_client",
    "shard_leaders",
    "cache_dir",
    "bin_dir",
    "free_ports",
    "die_with_parent_argv",
    "ManagedProcess",
    "OxiaStandalone",
    "OxiaCluster",
    "OxiaServerPorts",
    "S3Server",
    "OXIA_MODES",
    "OXIA_VERSIONS",
    "S3_KINDS",
    "PROMETHEUS_DEB_VERSION",
]
