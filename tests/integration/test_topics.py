"""The topic catalogue on real Oxia + MinIO: the /topics routes of a broker
process (answers checked against openapi.yaml), produce and consume against
it, adoption of logs written through the library, ``/topics/{name}/delete-records``
through one broker seen by another, and ``llog-admin``."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests._waiting import wait_until
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


def test_delete_records_through_one_broker_is_seen_by_another(broker_factory, unique_topic):
    a = broker_factory(env={"LLOG_TOPIC_DEFAULT_PARTITIONS": "2"}).client
    b = broker_factory(env={"LLOG_BROKER_LOG_START_REFRESH_MS": "200"}).client
    assert a.produce([{"topic": unique_topic, "partition": p, "records": [f"r{i}" for i in range(1, 11)]}
                      for p in (0, 1)]).status == 200
    assert [v for _, v in b.consume_all(unique_topic, 0)][:1] == [b"r1"]  # b knows the log from offset 1

    path = f"/topics/{unique_topic}/delete-records"
    moved = a.request("POST", path, {"partitions": [{"partition": 0, "before_offset": 6}, {"partition": 1},
                                                    {"partition": 2, "before_offset": 1}]})
    assert moved.status == 200, moved.json
    first, second, unknown = moved.json["results"]
    assert first == {"partition": 0, "ok": True, "log_start_offset": 6, "high_watermark": 10}
    assert second == {"partition": 1, "ok": True, "log_start_offset": 11, "high_watermark": 10}
    assert (unknown["ok"], unknown["error_code"]) == (False, "UNKNOWN_TOPIC_OR_PARTITION"), unknown

    def first_answer(client, partition):
        return client.consume([{"topic": unique_topic, "partition": partition, "fetch_offset": 1}],
                              max_wait_ms=0).json["results"][0]

    at_a = first_answer(a, 0)  # the broker that moved it refuses below the start at once
    assert (at_a["error_code"], at_a["log_start_offset"]) == ("OFFSET_OUT_OF_RANGE", 6), at_a
    wait_until(lambda: first_answer(b, 0).get("error_code") == "OFFSET_OUT_OF_RANGE", 10,
               "the other broker to read the new log start")
    assert [(o, v) for o, v in b.consume_all(unique_topic, 0, start=6)] == [(i, f"r{i}".encode()) for i in range(6, 11)]
    assert b.consume_all(unique_topic, 1, start=11) == []
    assert a.produce([{"topic": unique_topic, "partition": 1, "records": ["r11"]}]).status == 200
    assert b.consume_all(unique_topic, 1, start=11) == [(11, b"r11")]

    bad = a.request("POST", path, {"partitions": [{"partition": 0, "before_offset": 0}]})
    assert (bad.status, bad.json["field"]) == (400, "partitions[0].before_offset"), bad.json
    past = a.request("POST", path, {"partitions": [{"partition": 0, "before_offset": 99}]}).json["results"][0]
    assert (past["error_code"], past["log_start_offset"], past["high_watermark"]) == ("OFFSET_OUT_OF_RANGE", 6, 10)
    assert a.request("GET", path).status == 405
    assert a.request("POST", f"/topics/{unique_topic}-nope/delete-records", {"partitions": [{"partition": 0}]}
                     ).json["error_type"] == "UnknownTopic"


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
    states = json.loads(admin("describe", unique_topic, "--partitions", "--json").stdout)["partition_states"]
    assert [(s["partition"], s["state"], s["log_start_offset"], s["high_watermark"], s["stored_bytes"])
            for s in states] == [(p, "OPEN", 1, 0, 0) for p in range(6)]  # every partition initialized, empty
    refused = admin("create", unique_topic)
    assert refused.returncode == 1 and "already exists" in refused.stderr
    assert admin("delete", unique_topic).returncode == 0
    missing = admin("describe", unique_topic)
    assert missing.returncode == 1 and "unknown topic" in missing.stderr
    assert "create" in admin("--help").stdout
