"""Consumer groups' committed offsets (``server/_groups/offsets.py``) and ``/groups``
through the broker's routes, over the in-memory stores."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from server._errors import InvalidRequest, StaleGeneration, UnknownGroup, UnknownTopic
from server._groups.offsets import CommittedOffset, GroupOffsets, describe
from server._protocol.keys import LogLayout, TopicPartition
from server._protocol.records import ControlRecord
from server.leaderless_log_writer import SharedAppendGroup
from tests.unit.test_broker import Cluster, doc

LAYOUT = LogLayout("llog")
T0, T1 = TopicPartition("orders", 0), TopicPartition("orders", 1)


@pytest.fixture
def cluster():
    with Cluster() as c:
        for p in (0, 1):
            c.writer.initialize_partition("orders", p)
        c.writer.append_shared([SharedAppendGroup("orders", 0, [b"a", b"b", b"c"]),
                                SharedAppendGroup("orders", 1, [b"x"])])
        yield c


def test_commit_fetch_list_and_lag(cluster):
    g = GroupOffsets(cluster.meta, LAYOUT)
    g.commit("billing", [(T0, 2, "m0"), (T1, 2, "")])
    g.commit("other/team", [(T0, 4, "")])
    assert g.groups() == ["billing", "other/team"]
    got = g.fetch("billing")
    assert {tp: c.offset for tp, c in got.items()} == {T0: 2, T1: 2} and got[T0].metadata == "m0"
    assert g.fetch("billing", "orders-2") == {}
    lags = {r.tp: r.lag for r in describe(g, "billing")}
    assert lags == {T0: 2, T1: 0}  # offsets 2 and 3 of orders:0 not consumed yet
    g.commit("billing", [(T0, 4, "done")])
    assert g.fetch("billing")[T0] == CommittedOffset(4, "done", g.fetch("billing")[T0].committed_at_ms)


def test_bad_commits_are_refused_and_store_nothing(cluster):
    g = GroupOffsets(cluster.meta, LAYOUT)
    with pytest.raises(InvalidRequest, match="past its high watermark"):
        g.commit("billing", [(T0, 2, ""), (T1, 3, "")])  # orders:1 holds 1 record: at most offset 2
    with pytest.raises(InvalidRequest, match=">= 1"):
        g.commit("billing", [(T0, 0, "")])
    with pytest.raises(UnknownTopic):
        g.commit("billing", [(TopicPartition("nope", 0), 1, "")])
    with pytest.raises(InvalidRequest, match="metadata"):
        g.commit("billing", [(T0, 1, "x" * 5000)])
    assert g.groups() == []
    with pytest.raises(UnknownGroup):
        describe(g, "billing")


def test_a_conditional_commit_checks_the_generation_and_member(cluster):
    g = GroupOffsets(cluster.meta, LAYOUT)
    with pytest.raises(StaleGeneration, match="no generation"):
        g.commit("billing", [(T0, 2, "")], generation=1, member="m-1")
    g.set_generation("billing", 3, ["m-1", "m-2"])
    g.commit("billing", [(T0, 2, "")], generation=3, member="m-2")
    with pytest.raises(StaleGeneration, match="generation 3, not 2"):
        g.commit("billing", [(T0, 3, "")], generation=2, member="m-1")
    with pytest.raises(StaleGeneration, match="not a member"):
        g.commit("billing", [(T0, 3, "")], generation=3, member="m-9")
    assert g.fetch("billing")[T0].offset == 2


def test_an_offset_below_the_log_start_is_fetched_as_the_start_and_a_deleted_topic_forgets_its_offsets(cluster):
    g = GroupOffsets(cluster.meta, LAYOUT)
    g.commit("billing", [(T0, 2, ""), (T1, 2, "")])
    keys = LAYOUT.keys(T0)
    rec = cluster.meta.get(keys.control, keys.partition_key)
    moved = ControlRecord.decode(rec.value)
    cluster.meta.put(keys.control, replace(moved, log_start_offset=3, log_start_at_ms=1).encode(), keys.partition_key,
                     expected_version=rec.version)
    assert g.fetch_bounded("billing")[T0].offset == 3
    assert g.fetch("billing")[T0].offset == 2  # stored as committed
    assert g.delete_topic("orders") == 2
    assert g.fetch("billing") == {}


def _post(broker, group: str, body: object):
    resp = broker.groups_route(json.dumps(body).encode(), "POST", group, "")
    return resp.status, doc(resp)


def test_the_routes_commit_fetch_and_list(cluster):
    b = cluster.broker()
    assert _post(b, "billing", {"offsets": [{"topic": "orders", "partition": 0, "offset": 3, "metadata": "m"}]}) == (
        200, {"group": "billing", "committed": 1})
    resp = b.groups_route(b"", "GET", "billing", "topic=orders")
    assert resp.status == 200
    (item,) = doc(resp)["offsets"]
    assert (item["topic"], item["partition"], item["offset"], item["metadata"]) == ("orders", 0, 3, "m")
    assert doc(b.groups_route(b"", "GET", None, ""))["groups"] == ["billing"]
    missing = b.groups_route(b"", "GET", "nobody", "")
    assert (missing.status, doc(missing)["error_type"], doc(missing)["field"]) == (404, "UnknownGroup", "group")


@pytest.mark.parametrize("body, field", [
    ({}, "offsets"),
    ({"offsets": []}, "offsets"),
    ({"offsets": [{"topic": "orders", "partition": 0}]}, "offsets[0].offset"),
    ({"offsets": [{"topic": "orders", "partition": 0, "offset": 99}]}, "offsets[0].offset"),
    ({"offsets": [{"topic": "orders", "partition": -1, "offset": 1}]}, "offsets[0].partition"),
    ({"offsets": [{"topic": "a/b", "partition": 0, "offset": 1}]}, "offsets[0].topic"),
    ({"offsets": [{"topic": "orders", "partition": 0, "offset": 1, "metadata": 5}]}, "offsets[0].metadata"),
    ({"offsets": [{"topic": "orders", "partition": 0, "offset": 1, "x": 1}]}, "offsets[0].x"),
    ({"offsets": [{"topic": "orders", "partition": 0, "offset": 1}], "generation": "1"}, "generation"),
    ({"offsets": [{"topic": "orders", "partition": 0, "offset": 1}], "member_id": 7}, "member_id"),
    ({"offsets": [{"topic": "orders", "partition": 0, "offset": 1}], "colour": 1}, "colour"),
])
def test_a_bad_commit_is_a_400_naming_the_field(cluster, body, field):
    status, answer = _post(cluster.broker(), "billing", body)
    assert status == 400, answer
    assert answer["field"] == field


def test_a_stale_generation_is_a_409_and_a_bad_group_or_topic_query_a_400(cluster):
    b = cluster.broker()
    status, answer = _post(b, "billing", {"offsets": [{"topic": "orders", "partition": 0, "offset": 1}],
                                         "generation": 4, "member_id": "m"})
    assert (status, answer["error_type"], answer["field"]) == (409, "StaleGeneration", "generation")
    GroupOffsets(cluster.meta, LAYOUT).set_generation("billing", 4, ["m-1"])
    status, answer = _post(b, "billing", {"offsets": [{"topic": "orders", "partition": 0, "offset": 1}],
                                         "generation": 4, "member_id": "m-9"})
    assert (status, answer["error_type"], answer["field"]) == (409, "StaleGeneration", "member_id")
    bad = b.groups_route(b"", "GET", "a\nb", "")
    assert (bad.status, doc(bad)["field"]) == (400, "group")
    bad = b.groups_route(b"", "GET", "billing", "topic=a/b")
    assert (bad.status, doc(bad)["field"]) == (400, "topic")


def test_the_console_lists_groups_and_describes_offsets_high_watermarks_and_lag(cluster):
    from server._admin.cli import parse_args, run_groups

    g = GroupOffsets(cluster.meta, LAYOUT)
    g.commit("billing", [(T0, 2, "m0"), (T1, 2, "")])
    assert run_groups(parse_args(["groups", "list"]), g) == ["billing"]
    head, row0, row1 = run_groups(parse_args(["groups", "describe", "billing"]), g)
    assert head.split()[:6] == ["GROUP", "TOPIC", "PARTITION", "OFFSET", "HIGH-WATERMARK", "LAG"]
    assert row0.split()[:6] == ["billing", "orders", "0", "2", "3", "2"] and row0.split()[6] == "m0"
    assert row1.split()[:6] == ["billing", "orders", "1", "2", "1", "0"]
    (doc_,) = run_groups(parse_args(["groups", "describe", "billing", "--json"]), g)
    assert [r["lag"] for r in json.loads(doc_)] == [2, 0]
    with pytest.raises(UnknownGroup):
        run_groups(parse_args(["groups", "describe", "nobody"]), g)


def test_the_compactor_services_pass_exports_each_groups_lag(cluster):
    import threading

    from server._compaction.retention_runner import RetentionRunner
    from server._metrics import LlogMetrics
    from server._runtime import REAL_RUNTIME

    GroupOffsets(cluster.meta, LAYOUT).commit("billing", [(T0, 2, ""), (T1, 2, "")])
    metrics = LlogMetrics()
    runner = RetentionRunner(cluster.meta, LAYOUT, lambda: [T0, T1], 0, threading.Event(), REAL_RUNTIME.rng, metrics)
    runner.run_once()
    text = metrics.prometheus_text().decode()
    lags = {line.split('partition="')[1].split('"')[0]: float(line.rsplit(" ", 1)[1])
            for line in text.splitlines() if line.startswith("llog_consumer_group_lag{") and 'group="billing"' in line}
    assert lags == {"0": 2.0, "1": 0.0}
