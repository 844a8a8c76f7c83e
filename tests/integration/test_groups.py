"""Consumer groups' committed offsets on real Oxia + MinIO: commit, fetch and list
through a broker process (answers checked against openapi.yaml), their errors,
and ``llog-admin groups`` showing offsets, high watermarks and lag."""

from __future__ import annotations

import json
import subprocess
import sys
from urllib.parse import quote

import pytest

from tests.integration.conftest import REPO

pytestmark = pytest.mark.integration


def test_commit_fetch_list_and_the_console_shows_the_lag(broker_factory, llog_env, unique_topic):
    client = broker_factory().client
    assert client.produce([{"topic": unique_topic, "partition": 0, "records": ["a", "b", "c", "d"]},
                           {"topic": unique_topic, "partition": 1, "records": ["x"]}]).status == 200
    group = f"{unique_topic}/billing"  # a '/' in a name: one path segment, percent-encoded
    path = f"/groups/{quote(group, safe='')}/offsets"
    committed = client.request("POST", path, {"offsets": [
        {"topic": unique_topic, "partition": 0, "offset": 3, "metadata": "host-7"},
        {"topic": unique_topic, "partition": 1, "offset": 2}]})
    assert committed.status == 200 and committed.json == {"group": group, "committed": 2}
    fetched = client.request("GET", f"{path}?topic={unique_topic}")
    assert fetched.status == 200
    assert [(o["partition"], o["offset"], o["metadata"]) for o in fetched.json["offsets"]] == [
        (0, 3, "host-7"), (1, 2, "")]
    assert group in client.request("GET", "/groups").json["groups"]

    unknown = client.request("GET", "/groups/nobody-at-all/offsets")
    assert (unknown.status, unknown.json["error_type"], unknown.json["field"]) == (404, "UnknownGroup", "group")
    past = client.request("POST", path, {"offsets": [{"topic": unique_topic, "partition": 1, "offset": 3}]})
    assert (past.status, past.json["field"]) == (400, "offsets[0].offset")
    stale = client.request("POST", path, {"offsets": [{"topic": unique_topic, "partition": 0, "offset": 4}],
                                          "generation": 7, "member_id": "m-1"})
    assert (stale.status, stale.json["error_type"], stale.json["field"]) == (409, "StaleGeneration", "generation")

    def admin(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "server.leaderless_log_admin", "groups", *argv],
                              env={**llog_env, "PYTHONPATH": str(REPO)}, cwd=REPO, capture_output=True,
                              text=True, timeout=60)

    assert group in admin("list").stdout.splitlines()
    rows = json.loads(admin("describe", group, "--json").stdout)
    assert [(r["partition"], r["offset"], r["high_watermark"], r["lag"]) for r in rows] == [(0, 3, 4, 2), (1, 2, 1, 0)]
    table = admin("describe", group).stdout.splitlines()
    assert table[0].split()[:6] == ["GROUP", "TOPIC", "PARTITION", "OFFSET", "HIGH-WATERMARK", "LAG"]
    missing = admin("describe", "nobody-at-all")
    assert missing.returncode == 1 and "committed no offset" in missing.stderr
