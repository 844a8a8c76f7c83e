"""Kafka Connect (4.1, from Maven Central) against llog's Kafka listener on real Oxia + MinIO.

A distributed worker (``ConnectDistributed``) keeps its configs, offsets and
statuses in compacted topics it creates and checks (``cleanup.policy=compact``),
coordinates through the group protocol ("connect"), and runs the file
connectors: a source reads a file into a topic, a sink writes the topic to
another file. The records are read back through ``/consume`` too.
"""

from __future__ import annotations

import json
import socket
import subprocess
import urllib.request
from typing import Any

import pytest

from devstack import java, kafka_connect_classpath
from tests._waiting import wait_until

from .conftest import BrokerProcess

pytestmark = [pytest.mark.integration]

LINES = [f"line {i}: {'x' * (i % 7)}" for i in range(40)]


@pytest.fixture
def broker(broker_factory) -> BrokerProcess:
    return broker_factory(env={"LLOG_KAFKA_PORT": "0", "LLOG_KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS": "0"})


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_connect_worker_moves_a_file_through_a_topic_and_keeps_its_state_in_compacted_topics(
        broker, unique_topic, tmp_path):
    port = _free_port()
    internal = {kind: f"{unique_topic}-connect-{kind}" for kind in ("configs", "offsets", "status")}
    (tmp_path / "worker.properties").write_text("\n".join([
        f"bootstrap.servers={broker.kafka}", f"group.id={unique_topic}-connect", f"listeners=http://127.0.0.1:{port}",
        "key.converter=org.apache.kafka.connect.storage.StringConverter",
        "value.converter=org.apache.kafka.connect.storage.StringConverter",
        f"config.storage.topic={internal['configs']}", f"offset.storage.topic={internal['offsets']}",
        f"status.storage.topic={internal['status']}", "config.storage.replication.factor=1",
        "offset.storage.replication.factor=1", "status.storage.replication.factor=1", "offset.flush.interval.ms=1000",
    ]) + "\n")
    source, sink = tmp_path / "in.txt", tmp_path / "out.txt"
    source.write_text("\n".join(LINES) + "\n")
    log = open(tmp_path / "worker.log", "w")
    worker = subprocess.Popen([java(), "-cp", kafka_connect_classpath(), "org.apache.kafka.connect.cli.ConnectDistributed",
                               str(tmp_path / "worker.properties")], stdout=log, stderr=subprocess.STDOUT)

    def rest(method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as answer:
            return json.loads(answer.read() or b"null")

    def up() -> bool:
        assert worker.poll() is None, (tmp_path / "worker.log").read_text()[-3000:]
        try:
            return rest("GET", "/")["version"] is not None
        except OSError:
            return False

    try:
        wait_until(up, 60, "the Connect worker's REST API", interval_s=0.25)
        rest("POST", "/connectors", {"name": "file-in", "config": {
            "connector.class": "FileStreamSource", "file": str(source), "topic": unique_topic, "tasks.max": "1"}})
        rest("POST", "/connectors", {"name": "file-out", "config": {
            "connector.class": "FileStreamSink", "file": str(sink), "topics": unique_topic, "tasks.max": "1"}})
        wait_until(lambda: sink.exists() and sink.read_text().splitlines() == LINES, 60,
                   lambda: f"the sink file to hold every line: {sink.read_text() if sink.exists() else 'absent'}"
                           f"\n{(tmp_path / 'worker.log').read_text()[-2000:]}", interval_s=0.25)
        assert rest("GET", "/connectors/file-in/status")["connector"]["state"] == "RUNNING"
    finally:
        worker.terminate()
        try:
            worker.wait(30)
        finally:
            if worker.poll() is None:
                worker.kill()
            log.close()

    # What the source wrote, read through the HTTP contract; Connect's own topics compacted, as it checks.
    topics = {t["name"]: t for t in broker.client.request("GET", "/topics").json["topics"]}
    written = [v.decode() for p in range(topics[unique_topic]["partitions"])
               for _, v in broker.client.consume_all(unique_topic, p)]
    assert sorted(written) == sorted(LINES)
    assert {kind: topics[name]["config"]["cleanup.policy"] for kind, name in internal.items()} == {
        "configs": "compact", "offsets": "compact", "status": "compact"}
    assert topics[internal["configs"]]["partitions"] == 1
