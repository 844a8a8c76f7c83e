"""The load-test orchestrator's parts that need no servers: scenarios, run
directories, the fault schedule, the command line."""

from __future__ import annotations

import json
import threading
from datetime import datetime, timezone
from pathlib import Path

import pytest

from loadtest import orchestrate
from loadtest._harness.faults import FaultInjector
from loadtest._harness.rundir import masked_env, new_run_dir
from loadtest._harness.scenario import SCENARIOS_DIR, Fault, ScenarioError, load_scenario, parse_scenario

SHIPPED = sorted(p.stem for p in SCENARIOS_DIR.glob("*.toml"))


def test_the_six_scenarios_ship_and_load():
    assert SHIPPED == ["broker-loss", "oxia-cluster", "produce-3-brokers", "produce-consume-split", "smoke", "soak"]
    for name in SHIPPED:
        scenario = load_scenario(name)
        assert scenario.name == name and scenario.description
    smoke = load_scenario("smoke")
    assert (len(smoke.broker_roles()), smoke.load.partitions, smoke.duration_s) == (1, 8, 20.0)
    split = load_scenario("produce-consume-split")
    assert {r for _, r in split.broker_roles()} == {"write", "read"} and split.batch.shared_tail_cache
    loss = load_scenario("broker-loss")
    assert loss.faults == (Fault(at_s=15.0, target="broker-2", action="kill", restart_after_s=8.0),)
    assert load_scenario("oxia-cluster").stack.oxia == "cluster"


def test_defaults_fill_in_and_resolve_to_json():
    scenario = parse_scenario({"name": "tiny"})
    doc = scenario.to_dict()
    assert doc["load"]["mode"] == "closed" and doc["brokers"] == [{"role": "both", "count": 1}]
    json.dumps(doc)  # resolved-config.json


@pytest.mark.parametrize("doc, message", [
    ({}, "`name` is required"),
    ({"name": "x", "durration_s": 5}, "unknown key"),
    ({"name": "x", "load": {"partition": 4}}, "load.partition"),
    ({"name": "x", "load": {"partitions": "8"}}, "`load.partitions` must be int"),
    ({"name": "x", "load": {"mode": "open"}}, "`load.rate`"),
    ({"name": "x", "brokers": [{"role": "read"}]}, "role write or both"),
    ({"name": "x", "brokers": [{"role": "writer"}]}, "`brokers[0].role`"),
    ({"name": "x", "faults": [{"at_s": 1, "target": "broker-9"}]}, "not a process of this scenario"),
    ({"name": "x", "faults": [{"at_s": 99, "target": "broker-1"}]}, "within the run"),
    ({"name": "x", "load": {"record_bytes": 8}}, "send time"),
])
def test_a_bad_scenario_is_refused_naming_the_key(doc, message):
    with pytest.raises(ScenarioError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_scenario(doc)


def test_an_unknown_scenario_name_lists_the_shipped_ones():
    with pytest.raises(ScenarioError, match="smoke"):
        load_scenario("no-such-scenario")


def test_run_directories_are_named_by_utc_time_and_scenario(tmp_path: Path):
    now = datetime(2026, 11, 24, 2, 15, 0, tzinfo=timezone.utc)
    run_id, path = new_run_dir("smoke", tmp_path, now)
    assert run_id == "20261124T021500Z-smoke" and path == tmp_path / run_id and (path / "logs").is_dir()
    again, _ = new_run_dir("smoke", tmp_path, now)
    assert again == "20261124T021500Z-smoke-2"


def test_environment_snapshots_mask_secrets():
    env = masked_env({"LLOG_S3_SECRET_ACCESS_KEY": "s3cr3t", "LLOG_S3_ACCESS_KEY_ID": "id", "LLOG_ROOT_PREFIX": "p",
                      "HOME": "/root"})
    assert env == {"LLOG_ROOT_PREFIX": "p", "LLOG_S3_ACCESS_KEY_ID": "***", "LLOG_S3_SECRET_ACCESS_KEY": "***"}


class _FakeStack:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.done = threading.Event()

    def kill(self, target: str, *, hard: bool = True) -> None:
        self.calls.append(("kill" if hard else "stop", target))

    def restart(self, target: str) -> None:
        self.calls.append(("restart", target))
        if target == "broker-1":
            raise RuntimeError("port in use")
        self.done.set()


def test_faults_run_in_time_order_and_are_logged(tmp_path: Path):
    stack = _FakeStack()
    faults = [Fault(at_s=0.0, target="broker-1", action="stop", restart_after_s=0.005),
              Fault(at_s=0.0, target="broker-2", restart_after_s=0.01)]
    injector = FaultInjector(stack, faults, tmp_path / "faults.jsonl", say=lambda line: None)
    injector.start()
    assert stack.done.wait(10)
    injector.stop()
    assert stack.calls == [("stop", "broker-1"), ("kill", "broker-2"), ("restart", "broker-1"), ("restart", "broker-2")]
    lines = [json.loads(line) for line in (tmp_path / "faults.jsonl").read_text().splitlines()]
    assert [(e["action"], e["target"], e["ok"]) for e in lines] == [
        ("stop", "broker-1", True), ("kill", "broker-2", True), ("restart", "broker-1", False),
        ("restart", "broker-2", True)]
    assert "port in use" in lines[2]["error"]


@pytest.mark.parametrize("command", ["run", "up", "status", "precreate", "down"])
def test_every_command_has_help(command, capsys):
    with pytest.raises(SystemExit) as exit_info:
        orchestrate.main([command, "--help"])
    assert exit_info.value.code == 0
    assert "usage: python -m loadtest.orchestrate " + command in capsys.readouterr().out


def test_a_scenario_error_is_a_clear_message_and_exit_2(capsys):
    assert orchestrate.main(["run", "no-such-scenario"]) == 2
    assert "scenario error: no scenario 'no-such-scenario'" in capsys.readouterr().err


def test_every_series_of_a_run_carries_the_run_shape_as_scrape_labels(tmp_path):
    """The product exports nothing about load tests: the harness labels each
    target of a run with its shape, and Prometheus puts those labels on every
    series it scrapes (file_sd target group labels)."""
    from loadtest._harness.stack import RunStack
    from loadtest.quick_observability import scrape_targets

    scenario = parse_scenario({"name": "shape", "brokers": [{"role": "both", "count": 2}],
                               "load": {"mode": "open", "rate": 5000, "partitions": 4, "record_bytes": 100}})
    labels = RunStack(scenario, tmp_path, "20261124T0100Z-shape", say=lambda line: None).scrape_labels()
    assert labels == {"scenario": "shape", "run_id": "20261124T0100Z-shape", "brokers": "2", "partitions": "4",
                      "target_records_per_second": "5000", "concurrency": "0", "record_bytes": "100"}
    stack = {"run_id": "20261124T0100Z-shape", "scrape_labels": labels, "processes": [
        {"kind": "oxia", "host": "127.0.0.1", "port": None},
        {"kind": "broker", "host": "127.0.0.1", "port": 9001},
        {"kind": "compactor", "host": "127.0.0.1", "port": 9002},
    ]}
    groups = [t.file_sd_group() for t in scrape_targets(stack)]
    assert [g["targets"] for g in groups] == [["127.0.0.1:9001"], ["127.0.0.1:9002"]]
    assert all(g["labels"] == {**labels, "job": job, "__metrics_path__": "/metrics/prometheus"}
               for g, job in zip(groups, ("broker", "compactor")))
