"""One scenario run end to end: the flow of ``orchestrate.py run``.

1. a run directory with the resolved scenario, git and environment snapshots;
2. the stack up (Oxia, MinIO, brokers, compactors; ``stack.json``) and every
   partition initialized (``precreate``);
3. the routing manifest (owner sets by rendezvous hashing);
4. Prometheus on the live services when the scenario asks for it;
5. the metrics collector sampling every ``window_s``, the faults on their
   schedule, the Go hammer for ``duration_s``;
6. a final metrics sample, ``summary.json`` (roll-up and reconciliation,
   including a read-back of every acknowledged offset range), the plots and
   the dashboard PNGs;
7. the stack down (``--keep`` leaves it up for ``status`` and ``down``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from .faults import FaultInjector
from .rundir import RESULTS_DIR, new_run_dir, write_snapshots
from .scenario import Scenario
from .stack import RunStack

__all__ = ["RunOptions", "RunOutcome", "run_scenario", "start_stack"]


@dataclass(frozen=True)
class RunOptions:
    results_dir: Path = RESULTS_DIR
    keep: bool = False
    prometheus: bool | None = None
    """None: as the scenario says."""
    collector_interval_s: float | None = None
    """None: the scenario's window."""


@dataclass(frozen=True)
class RunOutcome:
    run_dir: Path
    summary: dict[str, Any]
    images: tuple[Path, ...]
    ok: bool


def start_stack(scenario: Scenario, options: RunOptions, say: Callable[[str], None],
                *, die_with_parent: bool = True) -> RunStack:
    """Steps 1-3: the run directory, the stack, the partitions, the manifest."""
    from loadtest.precreate import precreate
    from loadtest.routing import build_manifest, write_manifest

    run_id, run_dir = new_run_dir(scenario.name, options.results_dir)
    say(f"run {run_id} -> {run_dir}")
    stack = RunStack(scenario, run_dir, run_id, die_with_parent=die_with_parent, say=say)
    try:
        stack.up()
        write_snapshots(run_dir, scenario, stack.llog_env)
        precreate(stack.llog_env, scenario.load.topic, scenario.load.partitions, say=say)
        brokers = [(s.name, s.url, s.role) for s in stack.services.values() if s.kind == "broker"]
        manifest = build_manifest(scenario.load.topic, scenario.load.partitions, brokers, scenario.load.seed,
                                  scenario.load.owners_per_partition, scenario.load.selection)
        write_manifest(run_dir / "routing-manifest.json", manifest)
    except BaseException:
        stack.down()
        raise
    return stack


def run_scenario(scenario: Scenario, options: RunOptions, say: Callable[[str], None] = print) -> RunOutcome:
    # --keep leaves the processes running after we exit: they must not die with us.
    stack = start_stack(scenario, options, say, die_with_parent=not options.keep)
    run_dir = stack.run_dir
    observability = None
    faults = FaultInjector(stack, scenario.faults, run_dir / "faults.jsonl", say=say)
    images: list[Path] = []
    try:
        if options.prometheus if options.prometheus is not None else scenario.stack.prometheus:
            from loadtest.quick_observability import QuickObservability

            observability = QuickObservability(run_dir, say=say)
            observability.start(stack.doc)
        started_s = time.time()
        _drive_load(stack, scenario, options, faults, say)
        ended_s = time.time()
        summary = _finish(stack, say)
        images += _plots(run_dir, say)
        if observability is not None:
            images += observability.render(started_s - 5, ended_s + 5).images
    finally:
        if observability is not None:
            observability.stop()
        if options.keep:
            say(f"stack left running: python -m loadtest.orchestrate down --run-dir {run_dir}")
            stack.detach()
        else:
            stack.down()
        faults.stop()
    ok = bool(summary.get("reconciliation", {}).get("ok"))
    return RunOutcome(run_dir, summary, tuple(images), ok)


def _drive_load(stack: RunStack, scenario: Scenario, options: RunOptions, faults: FaultInjector,
                say: Callable[[str], None]) -> None:
    from loadtest._harness.hammer import drive_scenario
    from loadtest.metrics_collector import MetricsCollector

    run_dir = stack.run_dir
    interval = options.collector_interval_s or scenario.load.window_s
    collector = MetricsCollector(stack.doc, run_dir / "metrics-30s.jsonl", interval_s=interval)
    stack.listeners.append(collector.track)  # a restarted process has a new pid
    collector.start()
    faults.start()
    try:
        say(f"load: {scenario.load.mode} loop for {scenario.duration_s:.0f}s on {scenario.load.partitions} partitions")
        drive_scenario(scenario, run_dir, say)
    finally:
        collector.sample_now()
        collector.stop()
        stack.listeners.remove(collector.track)


def _finish(stack: RunStack, say: Callable[[str], None]) -> dict[str, Any]:
    from loadtest._harness.readback import LibraryReadBack
    from loadtest._harness.summary import build_summary, format_summary

    with LibraryReadBack(stack.llog_env) as read_back:
        summary = build_summary(stack.run_dir, read_back=read_back)
    say(format_summary(summary))
    return summary


def _plots(run_dir: Path, say: Callable[[str], None]) -> list[Path]:
    from loadtest._harness.plots import render_plots

    try:
        return list(render_plots(run_dir))
    except Exception as exc:  # noqa: BLE001 - pictures must not cost the run's summary
        say(f"plots failed: {type(exc).__name__}: {exc}")
        return []
