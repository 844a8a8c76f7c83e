"""One soak run end to end: the flow of ``python -m loadtest.soak``.

1. the ``soak`` scenario (``loadtest/scenarios/soak.toml``) with the run's
   duration, rate and vacuum settings; its stack up (:func:`.run.start_stack`);
2. the metrics collector (``metrics-30s.jsonl``, every 30 s) and the soak
   sampler (``soak-samples.jsonl``, :mod:`.soak_sampler`) started; the Go
   hammer producing at the fixed rate with consumers following the tail;
3. load stopped: the sampler goes on while compaction catches up (every
   partition's lag at most the allowed one, or the catch-up timeout);
4. ``summary.json`` with the read-back of every acknowledged range through
   :class:`~.payloads.PayloadCheck` (every record's bytes checked);
5. the checks (:mod:`.soak_checks`) into ``soak.json``, ``soak.png``
   (:mod:`.soak_plot`) and the harness's plots; the stack down.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from server._compaction.config import DEFAULT_VACUUM_GRACE_MS, DEFAULT_VACUUM_INTERVAL_MS
from server._protocol.constants import MIN_SAFE_GRACE_MS

from .json_files import write_json_atomic
from .rundir import RESULTS_DIR
from .scenario import EnvSpec, Scenario, load_scenario
from .soak_checks import Check, SoakLimits, evaluate, figure_lines, figures

__all__ = ["SoakOptions", "SoakOutcome", "grace_is_legal", "run_soak", "soak_scenario", "vacuum_settings"]

COLLECTOR_INTERVAL_S = 30.0
SEND_TIME_SLACK_NS = 60 * 10**9
"""A record's send time may be this far outside the hammer's run (clock reads on either side)."""


@dataclass(frozen=True)
class SoakOptions:
    minutes: float = 60.0
    rate: int | None = None
    """Records per second (None: the scenario's)."""
    vacuum_grace_ms: int | None = None
    """LLOG_VACUUM_GRACE_MS of the compactor (None: the scenario's)."""
    vacuum_interval_ms: int | None = None
    """LLOG_VACUUM_INTERVAL_MS of the compactor (None: the scenario's)."""
    sample_interval_s: float = 10.0
    catch_up_timeout_s: float = 120.0
    broker_env: tuple[tuple[str, str], ...] = ()
    compactor_env: tuple[tuple[str, str], ...] = ()
    """Over the scenario's and the vacuum settings."""
    results_dir: Path = RESULTS_DIR
    limits: SoakLimits = field(default_factory=SoakLimits)


@dataclass(frozen=True)
class SoakOutcome:
    run_dir: Path
    checks: tuple[Check, ...]
    image: Path

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)


def soak_scenario(options: SoakOptions) -> Scenario:
    """The shipped ``soak`` scenario with the options' duration, rate and environment."""
    base = load_scenario("soak")
    load = base.load if options.rate is None else replace(base.load, rate=options.rate)
    vacuum = tuple((name, str(value)) for name, value in (("LLOG_VACUUM_GRACE_MS", options.vacuum_grace_ms),
                                                           ("LLOG_VACUUM_INTERVAL_MS", options.vacuum_interval_ms))
                   if value is not None)
    if options.vacuum_grace_ms is not None and not grace_is_legal(options.vacuum_grace_ms):
        # soak.py refused it unless --allow-short-grace; the compactor refuses it without the switch.
        vacuum += (("LLOG_VACUUM_ALLOW_UNSAFE_GRACE", "true"),)
    env = EnvSpec(broker=_merged(base.env.broker, options.broker_env),
                  compactor=_merged(base.env.compactor, vacuum + options.compactor_env))
    return replace(base, duration_s=options.minutes * 60, load=load, env=env)


def vacuum_settings(scenario: Scenario) -> tuple[int, int]:
    """(grace, interval) in ms that the scenario's compactors run vacuum with."""
    env = dict(scenario.env.compactor)
    return (int(env.get("LLOG_VACUUM_GRACE_MS", DEFAULT_VACUUM_GRACE_MS)),
            int(env.get("LLOG_VACUUM_INTERVAL_MS", DEFAULT_VACUUM_INTERVAL_MS)))


def grace_is_legal(grace_ms: int) -> bool:
    """SPEC 7.0's rule, as the product checks it (``check_grace``)."""
    return grace_ms >= MIN_SAFE_GRACE_MS


def _merged(base: tuple[tuple[str, str], ...], over: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    return tuple({**dict(base), **dict(over)}.items())


def run_soak(options: SoakOptions, say: Callable[[str], None] = print) -> SoakOutcome:
    from .hammer import ensure_hammer
    from .run import RunOptions, start_stack

    scenario = soak_scenario(options)
    grace_ms, _ = vacuum_settings(scenario)
    if not grace_is_legal(grace_ms):
        say(f"vacuum grace {grace_ms} ms is below SPEC 7.0's 2 (D + skew) = {MIN_SAFE_GRACE_MS} ms: "
            "for a short test only (LLOG_VACUUM_ALLOW_UNSAFE_GRACE is set for the compactor)")
    ensure_hammer()  # built before the clock starts, so load begins when the schedule says
    stack = start_stack(scenario, RunOptions(results_dir=options.results_dir), say)
    try:
        return _run(stack, scenario, options, say)
    finally:
        stack.down()


def _run(stack: Any, scenario: Scenario, options: SoakOptions, say: Callable[[str], None]) -> SoakOutcome:
    from server._config import S3Config
    from server._storage.objectstore import S3ObjectStore
    from server.leaderless_log_reader import LeaderlessLogReader

    reader = LeaderlessLogReader.from_env(stack.llog_env)
    objects = S3ObjectStore(S3Config.from_env(stack.llog_env))
    sampler = _sampler(stack, scenario, options, reader, objects)
    try:
        try:
            window = _load(stack, scenario, options, sampler, say)
            catch_up = _catch_up(sampler, options, window[0] + scenario.duration_s, say)
        finally:
            sampler.stop()
        return _verdict(stack, scenario, options, reader, window, catch_up, say)
    finally:
        objects.close()
        reader.close()


def _sampler(stack: Any, scenario: Scenario, options: SoakOptions, reader: Any, objects: Any) -> Any:
    from loadtest.metrics_collector import scrape

    from .soak_sampler import SAMPLES_FILE, SoakSampler

    partitions = [(scenario.load.topic, p) for p in range(scenario.load.partitions)]
    return SoakSampler(stack.doc, stack.run_dir / SAMPLES_FILE, reader=reader, objects=objects,
                       bucket=stack.llog_env["LLOG_S3_BUCKET"], root=stack.root_prefix, partitions=partitions,
                       scrape=lambda url: scrape(url, timeout_s=5.0), interval_s=options.sample_interval_s)


def _load(stack: Any, scenario: Scenario, options: SoakOptions, sampler: Any,
          say: Callable[[str], None]) -> tuple[float, float]:
    """Drive the load; (start, end) in Unix seconds."""
    from loadtest.metrics_collector import MetricsCollector

    from .hammer import drive_scenario

    run_dir = stack.run_dir
    collector = MetricsCollector(stack.doc, run_dir / "metrics-30s.jsonl", interval_s=COLLECTOR_INTERVAL_S)
    collector.start()
    started = time.time()
    sampler.load_until_ms = (started + scenario.duration_s) * 1000
    sampler.start()
    say(f"load: {scenario.load.rate:,} records/s of {scenario.load.record_bytes} B for {options.minutes:g} min "
        f"on {scenario.load.partitions} partitions; samples every {options.sample_interval_s:g} s "
        f"in {run_dir / 'soak-samples.jsonl'}")
    try:
        drive_scenario(scenario, run_dir, say)
    finally:
        collector.sample_now()
        collector.stop()
    return started, time.time()


def _catch_up(sampler: Any, options: SoakOptions, load_stopped_s: float,
              say: Callable[[str], None]) -> dict[str, Any]:
    """Poll every partition's compaction lag until each is within the limit, or
    the timeout; both counted from when producing stopped (Unix seconds), which
    is before the hammer exits (its consumers drain first)."""
    lag: dict[str, int] | None = None
    while True:
        lag = sampler.lags() or lag
        waited = max(0.0, time.time() - load_stopped_s)
        if lag is not None and max(lag.values(), default=0) <= options.limits.max_lag:
            say(f"compaction caught up {waited:.1f} s after load stopped")
            break
        if waited >= options.catch_up_timeout_s:
            say(f"compaction still behind {waited:.0f} s after load stopped")
            break
        time.sleep(1.0)
    return {"lag": lag or {}, "after_s": round(waited, 1), "error": None if lag else "Oxia did not answer"}


def _verdict(stack: Any, scenario: Scenario, options: SoakOptions, reader: Any, window: tuple[float, float],
             catch_up: dict[str, Any], say: Callable[[str], None]) -> SoakOutcome:
    from .payloads import PayloadCheck
    from .plots import render_plots
    from .readback import LibraryReadBack
    from .run_files import load_run
    from .soak_plot import render_soak_plot
    from .summary import build_summary, format_summary

    run_dir = stack.run_dir
    check = PayloadCheck(scenario.load.record_bytes, scenario.load.seed,
                         int(window[0] * 1e9) - SEND_TIME_SLACK_NS, int(window[1] * 1e9) + SEND_TIME_SLACK_NS)
    say("reading back every acknowledged record (offsets and bytes)")
    with LibraryReadBack(reader=reader, decode=check) as read_back:
        summary = build_summary(run_dir, read_back=read_back)
    say(format_summary(summary))
    payloads = {"records_checked": check.records_checked, "bad_batches": check.bad_batches,
                "problems": check.problems}
    samples = [json.loads(line) for line in (run_dir / "soak-samples.jsonl").read_text().splitlines() if line]
    checks = evaluate(samples, summary=summary, payloads=payloads, catch_up=catch_up,
                      target_rate=float(scenario.load.rate), vacuum_interval_s=vacuum_settings(scenario)[1] / 1000,
                      limits=options.limits)
    windows = load_run(run_dir).client_windows
    image = render_soak_plot(samples, windows, run_dir / "soak.png", f"Soak  ·  {stack.run_id}")
    try:
        render_plots(run_dir)
    except Exception as exc:  # noqa: BLE001 - the harness's pictures must not cost the verdict
        say(f"plots failed: {type(exc).__name__}: {exc}")
    found = figures(samples)
    for line in figure_lines(found):
        say(line)
    outcome = SoakOutcome(run_dir, tuple(checks), image)
    write_json_atomic(run_dir / "soak.json", {
        "ok": outcome.ok, "checks": [c.to_json() for c in checks], "payloads": payloads, "catch_up": catch_up,
        "figures": found, "options": _options_json(options, scenario),
    })
    return outcome


def _options_json(options: SoakOptions, scenario: Scenario) -> dict[str, Any]:
    grace_ms, interval_ms = vacuum_settings(scenario)
    return {"minutes": options.minutes, "rate": scenario.load.rate, "record_bytes": scenario.load.record_bytes,
            "partitions": scenario.load.partitions, "vacuum_grace_ms": grace_ms,
            "vacuum_interval_ms": interval_ms, "grace_is_legal": grace_is_legal(grace_ms),
            "sample_interval_s": options.sample_interval_s, "catch_up_timeout_s": options.catch_up_timeout_s,
            "broker_env": dict(options.broker_env),
            "compactor_env": dict(options.compactor_env), "limits": asdict(options.limits)}
