"""Run load-test scenarios against a local llog stack, and audit them.

A scenario (``loadtest/scenarios/<name>.toml``, or a path) names the brokers
and their roles, Oxia standalone or a 3-server cluster, the topic and its
partitions, the load (open loop at a rate, or closed loop at a concurrency),
the record size, batch settings and faults. Every run writes
``loadtest/results/<UTC-timestamp>-<scenario>/``: the resolved scenario,
``stack.json``, git and environment snapshots, every process's log, the
routing manifest, the client's and the services' metrics, ``summary.json``
(with the reconciliation of acknowledged records against the brokers and a
read-back of every acknowledged offset range) and PNG plots.

Commands:

  run SCENARIO        up, precreate, collector + faults + Go hammer, summary, plots, down
  up SCENARIO         start the stack and leave it running (prints the run directory)
  status --run-dir D  the processes of a run and whether each is alive and healthy
  precreate --run-dir D   initialize every partition of the run (idempotent)
  down --run-dir D    stop every process of the run

Examples:

  python -m loadtest.orchestrate run smoke
  python -m loadtest.orchestrate run broker-loss --prometheus
  python -m loadtest.orchestrate up produce-3-brokers && python -m loadtest.orchestrate status --run-dir ...
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Sequence

from loadtest._harness.run import RunOptions, run_scenario, start_stack
from loadtest._harness.rundir import RESULTS_DIR
from loadtest._harness.scenario import SCENARIOS_DIR, ScenarioError, load_scenario
from loadtest._harness.stack import load_stack_json, stack_status, stop_stack_json

__all__ = ["main"]


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _cmd_run(args: argparse.Namespace) -> int:
    scenario = load_scenario(args.scenario)
    if args.duration is not None:
        from dataclasses import replace

        scenario = replace(scenario, duration_s=args.duration)
    options = RunOptions(results_dir=args.results_dir, keep=args.keep, prometheus=args.prometheus or None)
    outcome = run_scenario(scenario, options, say=_say)
    for image in outcome.images:
        print(image)
    print(outcome.run_dir / "summary.json")
    if not outcome.ok:
        _say("reconciliation FAILED: see summary.json (reconciliation.warnings)")
        return 1
    return 0


def _cmd_up(args: argparse.Namespace) -> int:
    scenario = load_scenario(args.scenario)
    stack = start_stack(scenario, RunOptions(results_dir=args.results_dir), _say, die_with_parent=False)
    stack.detach()
    print(stack.run_dir)
    _say(f"stop it with: python -m loadtest.orchestrate down --run-dir {stack.run_dir}")
    return 0


def _cmd_status(args: argparse.Namespace) -> int:
    rows = stack_status(load_stack_json(args.run_dir))
    for row in rows:
        health = "" if "healthy" not in row else ("  healthy" if row["healthy"] else "  NOT healthy")
        print(f"{row['name']:<22} {row['kind']:<17} pid {row['pid'] or '-':<8} "
              f"{'alive' if row['alive'] else 'DEAD '}{health}  {row['url'] or ''}")
    return 0 if all(r["alive"] for r in rows) else 3


def _cmd_precreate(args: argparse.Namespace) -> int:
    from loadtest.precreate import precreate

    stack = load_stack_json(args.run_dir)
    config = json.loads((args.run_dir / "resolved-config.json").read_text())
    precreate(stack["llog_env"], config["load"]["topic"], config["load"]["partitions"], say=_say)
    return 0


def _cmd_down(args: argparse.Namespace) -> int:
    stopped = stop_stack_json(load_stack_json(args.run_dir))
    _say(f"stopped: {', '.join(stopped) or 'nothing was running'}")
    return 0


def _parser() -> argparse.ArgumentParser:
    doc = __doc__ or ""
    parser = argparse.ArgumentParser(prog="python -m loadtest.orchestrate", description=doc.split("\n\n")[0],
                                     epilog=doc.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    shipped = ", ".join(sorted(p.stem for p in SCENARIOS_DIR.glob("*.toml")))
    run = sub.add_parser("run", help="run a scenario end to end and write its run directory")
    run.add_argument("scenario", help=f"a scenario name ({shipped}) or a .toml path")
    run.add_argument("--duration", type=float, help="override duration_s")
    run.add_argument("--prometheus", action="store_true", help="start Prometheus and render the dashboard PNGs")
    run.add_argument("--keep", action="store_true", help="leave the stack running after the run")
    up = sub.add_parser("up", help="start a scenario's stack and leave it running")
    up.add_argument("scenario", help=f"a scenario name ({shipped}) or a .toml path")
    for p in (run, up):
        p.add_argument("--results-dir", type=Path, default=RESULTS_DIR, help=f"where run directories go ({RESULTS_DIR})")
    for name, help_text in (("status", "show the processes of a run"), ("precreate", "initialize every partition"),
                            ("down", "stop every process of a run")):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("--run-dir", type=Path, required=True, help="the run directory (holds stack.json)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    handler = {"run": _cmd_run, "up": _cmd_up, "status": _cmd_status, "precreate": _cmd_precreate,
               "down": _cmd_down}[args.command]
    try:
        return handler(args)
    except ScenarioError as exc:
        _say(f"scenario error: {exc}")
        return 2


if __name__ == "__main__":
    sys.exit(main())
