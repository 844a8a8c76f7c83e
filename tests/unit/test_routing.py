"""loadtest.routing: rendezvous owner sets, the routing manifest, and the remap rule."""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

import pytest

from loadtest.routing import (
    ManifestError,
    Router,
    RouterConfig,
    build_manifest,
    load_manifest,
    owner_set,
    remap_violations,
    rendezvous_score,
    write_manifest,
)

BROKERS = [(f"broker-{i}", f"http://127.0.0.1:{18080 + i}", "both") for i in range(1, 7)]


def _ids(n: int) -> list[str]:
    return [f"broker-{i}" for i in range(1, n + 1)]


# -- rendezvous --------------------------------------------------------------------------


def test_the_score_is_the_first_8_bytes_of_the_sha256_big_endian() -> None:
    digest = hashlib.sha256(b"lt\x003\x00broker-1\x007").digest()
    assert rendezvous_score("lt", 3, "broker-1", 7) == int.from_bytes(digest[:8], "big")


def test_owners_are_the_k_highest_scores_highest_first() -> None:
    ids = _ids(5)
    owners = owner_set("lt", 0, ids, 7, 3)
    scores = {b: rendezvous_score("lt", 0, b, 7) for b in ids}
    assert list(owners) == sorted(ids, key=lambda b: -scores[b])[:3]
    assert len(owners) == 3


def test_same_inputs_give_the_same_owners_whatever_the_broker_order() -> None:
    ids = _ids(6)
    for p in range(50):
        first = owner_set("lt", p, ids, 11, 2)
        assert owner_set("lt", p, list(reversed(ids)), 11, 2) == first
        assert owner_set("lt", p, random.Random(p).sample(ids, len(ids)), 11, 2) == first


def test_the_seed_and_topic_change_the_owners() -> None:
    ids = _ids(6)
    by_seed = [owner_set("lt", p, ids, 1, 2) for p in range(64)]
    assert by_seed != [owner_set("lt", p, ids, 2, 2) for p in range(64)]
    assert by_seed != [owner_set("other", p, ids, 1, 2) for p in range(64)]


@pytest.mark.parametrize("k", [1, 2, 3])
def test_adding_a_broker_moves_only_partitions_that_now_include_it(k: int) -> None:
    before_ids, after_ids = _ids(5), _ids(6)
    moved = 0
    for p in range(512):
        before = owner_set("lt", p, before_ids, 7, k)
        after = owner_set("lt", p, after_ids, 7, k)
        if set(after) != set(before):
            moved += 1
            assert "broker-6" in after, (p, before, after)
            # the newcomer took exactly one seat; the others kept theirs, in order
            assert [b for b in after if b != "broker-6"] == list(before[: k - 1])
        else:
            assert after == before
    assert moved > 0


def test_fewer_brokers_than_k_makes_every_broker_an_owner() -> None:
    assert set(owner_set("lt", 0, ["a", "b"], 7, 5)) == {"a", "b"}


def test_bad_owner_set_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        owner_set("lt", 0, ["a"], 7, 0)
    with pytest.raises(ValueError, match="repeat"):
        owner_set("lt", 0, ["a", "a"], 7, 1)


# -- manifest --------------------------------------------------------------------------


def _mixed() -> list[tuple[str, str, str]]:
    roles = ["write", "write", "both", "read", "read", "both", "write"]
    return [(f"broker-{i}", f"http://127.0.0.1:{18080 + i}", r) for i, r in enumerate(roles, 1)]


def test_produce_owners_never_include_read_brokers_and_read_owners_never_write_brokers() -> None:
    brokers = _mixed()
    roles = {b: r for b, _, r in brokers}
    m = build_manifest("lt", 64, brokers, 7, 3, "least_inflight")
    for entry in m["partitions"]:
        assert len(entry["owners"]) == 3 and len(entry["read_owners"]) == 3
        assert all(roles[b] in ("write", "both") for b in entry["owners"])
        assert all(roles[b] in ("read", "both") for b in entry["read_owners"])
        producers = [b for b, _, r in brokers if r != "read"]
        assert tuple(entry["owners"]) == owner_set("lt", entry["partition"], producers, 7, 3)


def test_the_manifest_has_the_readme_format() -> None:
    m = build_manifest("lt", 2, BROKERS[:2], 7, 2, "round_robin")
    assert set(m) == {"seed", "owners_per_partition", "selection", "brokers", "partitions"}
    assert m["brokers"][0] == {"broker_id": "broker-1", "url": "http://127.0.0.1:18081", "role": "both"}
    assert [set(e) for e in m["partitions"]] == [{"topic", "partition", "owners"}] * 2
    assert [e["partition"] for e in m["partitions"]] == [0, 1]


def test_read_owners_appear_only_with_read_role_brokers() -> None:
    no_read = build_manifest("lt", 4, [("w", "http://w", "write"), ("b", "http://b", "both")], 7, 1, "round_robin")
    assert all("read_owners" not in e for e in no_read["partitions"])
    # consumers still use read-capable brokers only: the role-both one
    cfg = RouterConfig.from_manifest(no_read, read=True)
    assert set(cfg.owners.values()) == {("b",)}


def test_manifest_round_trip(tmp_path: Path) -> None:
    m = build_manifest("lt", 16, _mixed(), 3, 2, "round_robin")
    write_manifest(tmp_path / "routing-manifest.json", m)
    assert load_manifest(tmp_path / "routing-manifest.json") == m
    assert not (tmp_path / "routing-manifest.json.tmp").exists()


def _broken(change) -> dict:
    m = build_manifest("lt", 4, _mixed(), 7, 2, "round_robin")
    change(m)
    return m


@pytest.mark.parametrize("change, message", [
    (lambda m: m.pop("seed"), "'seed' must be a int"),
    (lambda m: m.update(selection="random"), "'selection' must be one of round_robin, least_inflight"),
    (lambda m: m.update(owners_per_partition=0), "at least 1"),
    (lambda m: m["brokers"][0].update(role="leader"), r"brokers\[0\] \(broker-1\): role must be one of"),
    (lambda m: m["brokers"][1].update(broker_id="broker-1"), "listed twice"),
    (lambda m: m["brokers"][0].pop("url"), r"brokers\[0\] must be an object with broker_id, url and role"),
    (lambda m: m.update(partitions=[]), "non-empty list"),
    (lambda m: m["partitions"][1].update(partition=0), "lt/0 is listed twice"),
    (lambda m: m["partitions"][0].update(partition=-1), "integer >= 0"),
    (lambda m: m["partitions"][0].pop("read_owners"), "'read_owners' is missing"),
    (lambda m: m["partitions"][0].update(owners=["broker-9"]), "'broker-9' is not a broker of the manifest"),
    (lambda m: m["partitions"][0].update(owners=["broker-4"]), "'broker-4' has role 'read'"),
    (lambda m: m["partitions"][0].update(read_owners=["broker-1"]), "'broker-1' has role 'write'"),
    (lambda m: m["partitions"][0].update(owners=m["partitions"][0]["owners"][::-1]), "not the rendezvous owners"),
    (lambda m: m["partitions"][0].update(extra=1), "unknown keys"),
    (lambda m: [b.update(role="read") for b in m["brokers"]], "no broker can take produce requests"),
])
def test_load_manifest_names_the_fault(tmp_path: Path, change, message: str) -> None:
    path = tmp_path / "routing-manifest.json"
    path.write_text(json.dumps(_broken(change)))
    with pytest.raises(ManifestError, match=message) as info:
        load_manifest(path)
    assert str(path) in str(info.value)


def test_load_manifest_refuses_a_missing_file_and_bad_json(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="cannot read"):
        load_manifest(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ManifestError, match="is not JSON"):
        load_manifest(tmp_path / "bad.json")
    (tmp_path / "list.json").write_text("[]")
    with pytest.raises(ManifestError, match="must be a JSON object"):
        load_manifest(tmp_path / "list.json")


def test_build_manifest_refuses_bad_input() -> None:
    with pytest.raises(ManifestError, match="no broker can take produce"):
        build_manifest("lt", 4, [("r", "http://r", "read")], 7, 1, "round_robin")
    with pytest.raises(ManifestError, match="partitions must be a positive integer"):
        build_manifest("lt", 0, BROKERS, 7, 1, "round_robin")


# -- router ------------------------------------------------------------------------------


def _router(selection: str = "round_robin", n: int = 6, k: int = 3, partitions: int = 32) -> Router:
    m = build_manifest("lt", partitions, BROKERS[:n], 7, k, selection)
    return Router(RouterConfig.from_manifest(m), clock_ms=lambda: 42)


def test_round_robin_cycles_over_the_owner_set() -> None:
    r = _router("round_robin")
    owners = r.config.owners[("lt", 5)]
    picks = [r.pick("lt", 5) for _ in range(3 * len(owners))]
    assert picks == list(owners) * 3


def test_round_robin_skips_unavailable_owners() -> None:
    r = _router("round_robin")
    owners = r.config.owners[("lt", 5)]
    r.mark_unavailable(owners[1], "timeout")
    assert {r.pick("lt", 5) for _ in range(10)} == {owners[0], owners[2]}


def test_least_inflight_picks_the_least_loaded_owner() -> None:
    r = _router("least_inflight")
    a, b, c = r.config.owners[("lt", 0)]
    assert r.pick("lt", 0) == a  # all idle: owner order
    r.started(a)
    r.started(a)
    r.started(b)
    assert r.pick("lt", 0) == c
    r.started(c)
    r.started(c)
    assert r.pick("lt", 0) == b
    r.finished(a)
    r.finished(a)
    assert r.pick("lt", 0) == a
    assert r.inflight(c) == 2


def test_finishing_more_than_started_is_an_error() -> None:
    with pytest.raises(ValueError, match="finished more"):
        _router().finished("broker-1")


def test_remap_events_have_the_readme_shape() -> None:
    r = _router(partitions=8)
    events = r.mark_unavailable("broker-1", "connect")
    assert events and all(set(e) == {"ts_ms", "topic", "partition", "from", "to", "reason"} for e in events)
    assert {e["ts_ms"] for e in events} == {42}
    assert all(e["from"] == "broker-1" and e["reason"] == "connect" for e in events)
    assert [e["partition"] for e in events] == sorted(
        p for (_, p), owners in r.config.owners.items() if "broker-1" in owners)
    assert r.mark_unavailable("broker-1", "timeout") == []  # already out


def test_to_is_none_when_no_owner_is_left_and_owners_come_back() -> None:
    r = _router(k=2, partitions=4)
    a, b = r.config.owners[("lt", 0)]
    r.mark_unavailable(a, "http_503", ts_ms=1)
    (ev,) = [e for e in r.mark_unavailable(b, "connect", ts_ms=2) if e["partition"] == 0]
    assert ev == {"ts_ms": 2, "topic": "lt", "partition": 0, "from": b, "to": None, "reason": "connect"}
    assert r.pick("lt", 0) is None and r.current("lt", 0) is None
    (back,) = [e for e in r.mark_available(b, ts_ms=3) if e["partition"] == 0]
    assert back == {"ts_ms": 3, "topic": "lt", "partition": 0, "from": None, "to": b, "reason": "recovered"}
    (home,) = [e for e in r.mark_available(a, ts_ms=4) if e["partition"] == 0]
    assert (home["from"], home["to"]) == (b, a)
    assert r.current("lt", 0) == a  # the first owner has its partition back
    assert r.mark_available(a) == []


def test_remap_stays_in_the_original_owner_set_under_random_failures() -> None:
    rng = random.Random(20261124)
    for trial in range(30):
        n, k = rng.randint(2, 8), rng.randint(1, 4)
        brokers = [(f"b{i}", f"http://b{i}", rng.choice(["write", "both", "both"])) for i in range(n)]
        brokers[0] = ("b0", "http://b0", "both")
        m = build_manifest("lt", 24, brokers, rng.randint(0, 99), k, rng.choice(["round_robin", "least_inflight"]))
        cfg = RouterConfig.from_manifest(m)
        r, events = Router(cfg, clock_ms=lambda: 0), []
        for step in range(60):
            b = rng.choice(brokers)[0]
            events += r.mark_unavailable(b, rng.choice(["connect", "timeout", "http_503"])) if rng.random() < 0.6 \
                else r.mark_available(b)
            for (topic, p), owners in cfg.owners.items():
                picked = r.pick(topic, p)
                live = [o for o in owners if r.is_available(o)]
                assert (picked is None) == (not live), (trial, step)
                assert picked is None or picked in live, (trial, step, picked, owners)
        assert remap_violations(cfg, events) == [], trial
        for e in events:
            assert e["from"] != e["to"]


def test_remap_violations_names_events_outside_the_owner_set() -> None:
    r = _router(partitions=4)
    owners = r.config.owners[("lt", 0)]
    outsider = next(b for b, _, _ in BROKERS if b not in owners)
    bad = [
        {"ts_ms": 0, "topic": "lt", "partition": 0, "from": owners[0], "to": outsider, "reason": "connect"},
        {"ts_ms": 0, "topic": "lt", "partition": 99, "from": None, "to": None, "reason": "connect"},
        {"ts_ms": 0, "topic": "lt", "partition": 0, "from": owners[0], "to": owners[1], "reason": "whim"},
    ]
    problems = remap_violations(r.config, bad)
    assert len(problems) == 3
    assert "outside its owner set" in problems[0] and "not in the routing manifest" in problems[1]
    assert "unknown reason" in problems[2]


def test_mark_unavailable_needs_a_failure_reason() -> None:
    with pytest.raises(ValueError, match="reason"):
        _router().mark_unavailable("broker-1", "recovered")
