"""The topic catalogue on real Oxia + MinIO: the /topics routes of a broker
process (answers checked against openapi.yaml), produce and consume against
it, adoption of logs written through the library, and ``llog-admin``."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.integration.conftest import REPO

pytestmark = pytest.mark.integration


def test_create_produce_check_alter_grow_delete(broker_factory, unique_topic):
    client = broker_factory(env={"LLOG_TOPIC_DEFAULT_PARTITIONS": "1"}).client
    created = client.request("POST", "/topics", {"name": unique_topic, "partitions": 2,
                                                 "config": {"retention.ms": 60000}})
    assert created.status == 201, created.json
    topic = created.json["topic"]
    assert topic["partitions"] == 2 and topic["config"]["retention.ms"] == "60000"
    assert client.request("POST", "/topics", {"name": unique_topic}).status == 409

    assert client.produce([{"topic": unique_topic, "partition": 1, "records": ["a", "b"]}]).status == 200
    refused = client.produce([{"topic": unique_topic, "partition": 2, "records": ["c"]}])
    assert refused.status == 400 and refused.json["field"] == "partition", refused.json
    assert f"{unique_topic!r} has 2 partitions" in refused.json["error"]

    grown = client.request("PATCH", f"/topics/{unique_topic}", {"partitions": 3, "config": {"retention.bytes": 5}})
    assert grown.status == 200 and grown.json["topic"]["partitions"] == 3
    assert client.produce([{"topic": unique_topic, "partition": 2, "records": ["c"]}]).status == 200
    assert [v for _, v in client.consume_all(unique_topic, 1)] == [b"a", b"b"]
    assert unique_topic in [t["name"] for t in client.request("GET", "/topics").json["topics"]]

    assert client.request("DELETE", f"/topics/{unique_topic}").json["topic"]["state"] == "DELETING"
    assert client.request("GET", f"/topics/{unique_topic}").status == 404
    gone = client.produce([{"topic": unique_topic, "partition": 0, "records": ["late"]}])
    assert gone.status == 404 and gone.json["error_type"] == "UnknownTopic"
    part = client.consume([{"topic": unique_topic, "partition": 1, "fetch_offset": 1}]).json["results"][0]
    assert (part["ok"], part["error_code"]) == (False, "UNKNOWN_TOPIC_OR_PARTITION")


def test_auto_creation_and_its_switch(broker_factory, unique_topic):
    on = broker_factory(env={"LLOG_TOPIC_DEFAULT_PARTITIONS": "3"}).client
    assert on.produce([{"topic": unique_topic, "partition": 2, "records": ["x"]}]).status == 200
    assert on.request("GET", f"/topics/{unique_topic}").json["topic"]["partitions"] == 3
    off = broker_factory(env={"LLOG_AUTO_CREATE_TOPICS": "0"}).client
    refused = off.produce([{"topic": unique_topic + "-x", "partition": 0, "records": ["x"]}])
    assert refused.status == 404 and "LLOG_AUTO_CREATE_TOPICS is off" in refused.json["error"]


def test_logs_written_through_the_library_are_adopted(broker_factory, writer, unique_topic):
    from server.leaderless_log_writer import SharedAppendGroup

    writer.initialize_partition(unique_topic, 4)
    writer.append_shared([SharedAppendGroup(unique_topic, 4, [b"old"])])
    client = broker_factory(env={"LLOG_TOPIC_DEFAULT_RETENTION_MS": "1000"}).client
    assert client.consume_all(unique_topic, 4) == [(1, b"old")]
    topic = client.request("GET", f"/topics/{unique_topic}").json["topic"]
    assert topic["partitions"] == 5 and topic["config"]["retention.ms"] == "-1"


def test_llog_admin_manages_topics(llog_env, unique_topic):
    def admin(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "server.leaderless_log_admin", "topics", *argv],
                              env={**llog_env, "PYTHONPATH": str(REPO)}, cwd=REPO, capture_output=True,
                              text=True, timeout=60)

    done = admin("create", unique_topic, "--partitions", "4", "--config", "retention.ms=3600000")
    assert done.returncode == 0, done.stderr
    assert "partitions=4" in done.stdout
    described = json.loads(admin("describe", unique_topic, "--json").stdout)
    assert described["config"]["retention.ms"] == "3600000" and described["state"] == "ACTIVE"
    assert "partitions=6" in admin("alter", unique_topic, "--partitions", "6").stdout
    refused = admin("create", unique_topic)
    assert refused.returncode == 1 and "already exists" in refused.stderr
    assert admin("delete", unique_topic).returncode == 0
    missing = admin("describe", unique_topic)
    assert missing.returncode == 1 and "unknown topic" in missing.stderr
    assert "create" in admin("--help").stdout
