"""A single-node Kafka (KRaft: broker and controller in one JVM) on local disk, for comparisons.

Kafka 4.1 from the same Maven jars as the tools (``devstack`` ``kafka-tools``):
``StorageTool format --standalone`` then ``kafka.Kafka`` with a properties file
in a temporary directory; one PLAINTEXT listener on a free port, replication 1
for the internal topics, the log on the local disk (``log.dirs``). Used by
``bench_kafka`` to run Kafka's tools against Kafka and against llog alike.
"""

from __future__ import annotations

import base64
import os
import socket
import subprocess
import time
import uuid
from pathlib import Path

from loadtest._common import process_cpu_seconds, terminate

__all__ = ["KafkaServer"]

START_TIMEOUT_S = 90.0


class KafkaServer:
    """One ``kafka.Kafka`` process; ``kafka`` is its bootstrap server."""

    def __init__(self, workdir: Path) -> None:
        from devstack import die_with_parent_argv, free_ports, java, kafka_tools_classpath

        workdir.mkdir(parents=True, exist_ok=True)
        port, controller = free_ports(2)
        props = workdir / "server.properties"
        props.write_text("\n".join([
            "process.roles=broker,controller", "node.id=1",
            f"controller.quorum.bootstrap.servers=127.0.0.1:{controller}",
            f"listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}",
            f"advertised.listeners=PLAINTEXT://127.0.0.1:{port}", "controller.listener.names=CONTROLLER",
            "inter.broker.listener.name=PLAINTEXT", f"log.dirs={workdir / 'data'}",
            "offsets.topic.replication.factor=1", "transaction.state.log.replication.factor=1",
            "transaction.state.log.min.isr=1", "group.initial.rebalance.delay.ms=0", "num.partitions=1", "",
        ]))
        cp = kafka_tools_classpath()
        cluster = "-"
        while cluster.startswith("-"):  # as Kafka's Uuid.randomUuid: a leading '-' reads as an option
            cluster = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        subprocess.run([java(), "-cp", cp, "kafka.tools.StorageTool", "format", "--standalone", "-t", cluster,
                        "-c", str(props)], check=True, capture_output=True, timeout=120)
        self._log = open(workdir / "kafka.log", "wb")
        self.proc = subprocess.Popen(
            die_with_parent_argv([java(), "-Xms1g", "-Xmx1g", "-XX:+UseG1GC", "-cp", cp, "kafka.Kafka", str(props)]),
            stdout=self._log, stderr=subprocess.STDOUT, env={**os.environ},
        )
        self.kafka = f"127.0.0.1:{port}"
        self.url = self.kafka
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"Kafka did not start; see {workdir / 'kafka.log'}") from None
                time.sleep(0.2)  # polling a port that is not open yet

    def cpu_seconds(self) -> float:
        return process_cpu_seconds(self.proc.pid)

    def stop(self) -> None:
        terminate(self.proc)
        self._log.close()
