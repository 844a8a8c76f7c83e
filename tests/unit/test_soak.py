"""``loadtest.soak``'s parts that need no servers: the checks on synthetic
series, the payload check on real batches, the sampler against fakes, the
picture, the scenario and the command line."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest
from PIL import Image

from loadtest import soak
from loadtest._harness.payloads import PayloadCheck, hammer_filler, hammer_record
from loadtest._harness.scenario import ScenarioError, load_scenario, parse_scenario
from loadtest._harness.soak_checks import (
    SoakLimits,
    catch_up_check,
    figure_lines,
    figures,
    flat_checks,
    least_squares_slope,
    object_rule,
    read_back_check,
)
from loadtest._harness.soak_plot import render_soak_plot
from loadtest._harness.soak_run import SoakOptions, grace_is_legal, soak_scenario, vacuum_settings
from loadtest._harness.soak_sampler import SoakSampler, object_kind
from server._errors import CorruptBatch
from server._storage.objectstore import ObjectInfo
from tests._records import stored

MIB = 1024 * 1024
T0 = 1_800_000_000_000


# -- series -------------------------------------------------------------------------------------


def _samples(minutes: float, every_s: float = 10.0, *, rss=lambda t: 100 * MIB, fds=lambda t: 40,
             threads=lambda t: 12, wal=lambda t: 500, deleted=lambda t: 10, noise_mib: float = 0.0,
             seed: int = 1) -> list[dict]:
    """Load-phase samples of one broker, Oxia and the objects; ``t`` in hours since the start."""
    rng = random.Random(seed)
    out = []
    for i in range(int(minutes * 60 / every_s) + 1):
        t = i * every_s / 3600
        proc = {"kind": "broker", "pid": 1, "cpu_s": i, "threads": threads(t), "alive": True,
                "rss_bytes": rss(t) + rng.uniform(-noise_mib, noise_mib) * MIB, "open_files": fds(t)}
        oxia = {**proc, "kind": "oxia", "rss_bytes": 50 * MIB + t * 10_000 * MIB}  # grows, never judged
        out.append({"ts_ms": T0 + int(t * 3_600_000), "phase": "load",
                    "processes": {"broker-1": proc, "oxia-standalone": oxia},
                    "objects": {"ok": True, "total": wal(t) + 7, "by_kind": {"wal-shared": wal(t), "compacted": 7}},
                    "vacuum": {"ok": True, "objects_deleted": deleted(t)},
                    "compaction": {"ok": True, "lag": {"lt:0": 3}}})
    return out


def test_least_squares_slope_of_a_line_and_of_too_little():
    assert least_squares_slope([(0, 1), (1, 3), (2, 5), (3, 7)]) == pytest.approx(2.0)
    assert least_squares_slope([(0, 1), (1, 2)]) is None
    assert least_squares_slope([(1, 1), (1, 2), (1, 3)]) is None


def test_flat_memory_and_files_pass_and_only_product_processes_are_judged():
    checks = flat_checks(_samples(60, noise_mib=6), SoakLimits())
    assert {c.name for c in checks} == {"RSS flat: broker-1", "open files flat: broker-1"}
    assert all(c.ok for c in checks), [c.line() for c in checks]
    rss = next(c for c in checks if c.name.startswith("RSS"))
    assert abs(rss.values["slope_per_hour"]) < 32 and rss.values["allowed_per_hour"] == 32


def test_a_leak_in_the_second_half_fails_with_its_slope_per_hour():
    leaking = _samples(60, rss=lambda t: 100 * MIB + max(0.0, t - 0.5) * 80 * MIB, fds=lambda t: 40 + int(t * 60))
    checks = {c.name: c for c in flat_checks(leaking, SoakLimits())}
    assert not checks["RSS flat: broker-1"].ok
    assert checks["RSS flat: broker-1"].values["slope_per_hour"] == pytest.approx(80, rel=0.05)
    assert "+80" in checks["RSS flat: broker-1"].detail and "MiB/hour" in checks["RSS flat: broker-1"].detail
    assert not checks["open files flat: broker-1"].ok  # a socket a minute: 60 fds/hour


def test_open_files_that_follow_connection_threads_are_not_a_leak():
    """The full soak's finding: under rising latency the clients held more connections, each a
    socket and a handler thread, so raw open files climbed 20-55 an hour and fell back when the
    load stopped. Judged beyond one per thread, that is flat; a leaked file is not."""
    busier = _samples(60, fds=lambda t: 40 + int(t * 50), threads=lambda t: 12 + int(t * 50))
    [files] = [c for c in flat_checks(busier, SoakLimits()) if c.name.startswith("open files")]
    assert files.ok and abs(files.values["slope_per_hour"]) < 2 and files.values["raw_slope_per_hour"] > 40
    assert "beyond one per thread" in files.detail and "raw +" in files.detail
    leaking = _samples(60, fds=lambda t: 40 + int(t * 80), threads=lambda t: 12 + int(t * 50))
    [files] = [c for c in flat_checks(leaking, SoakLimits()) if c.name.startswith("open files")]
    assert not files.ok and files.values["slope_per_hour"] == pytest.approx(30, abs=2)


def test_a_short_window_allows_the_noise_floor_not_a_steep_climb():
    noisy = _samples(2, noise_mib=3)
    (rss, _) = flat_checks(noisy, SoakLimits())
    assert rss.ok and rss.values["allowed_per_hour"] == pytest.approx(16 * 60, rel=0.01)
    climbing = _samples(2, rss=lambda t: 100 * MIB + t * 60 * 40 * MIB)  # 40 MiB a minute
    assert not flat_checks(climbing, SoakLimits())[0].ok


def test_wal_objects_levelling_off_once_vacuum_acts_pass():
    def sawtooth(t: float) -> int:  # up to ~1,000 after 3 minutes, then vacuum every 20 s
        return int(min(t * 3600, 180) * 5 + (t * 3600 % 20) * 5)

    check = object_rule(_samples(60, wal=sawtooth, deleted=lambda t: int(t * 1000)), SoakLimits(), 20.0)
    assert check.ok, check.detail
    assert check.values["vacuum_acted_before_last_third"] is True


def test_the_margin_is_one_vacuum_cycle_of_new_objects():
    def run(last_third_extra: int):
        def wal(t: float) -> int:
            return 1000 + (last_third_extra if t >= 40 / 60 else 0)

        samples = _samples(60, wal=wal, deleted=lambda t: int(5 * t * 3600) - wal(t))  # 5 made a second
        for s in samples:
            seconds = (s["ts_ms"] - T0) / 1000
            s["vacuum"].update(runs=int(seconds // 25), run_seconds=5.0 * int(seconds // 25))  # 5 s passes
        return object_rule(samples, SoakLimits(), 20.0)

    within = run(200)  # allowed: 1000 x 1.1 + 5/s x (20 s interval + 5 s pass)
    assert within.ok and within.values["objects_per_vacuum_cycle"] == pytest.approx(125, rel=0.02)
    assert within.values["allowed"] == pytest.approx(1225, rel=0.01)
    assert not run(300).ok


def test_wal_objects_growing_fail_and_so_does_a_run_vacuum_never_touched():
    growing = object_rule(_samples(60, wal=lambda t: int(t * 3600 * 5)), SoakLimits(), 20.0)
    assert not growing.ok and growing.values["max_last_third"] > 1.4 * growing.values["max_middle_third"]
    untouched = object_rule(_samples(60, deleted=lambda t: 0), SoakLimits(), 20.0)
    assert not untouched.ok and "vacuum deleted nothing" in untouched.detail


def test_compaction_catch_up_and_read_back_verdicts():
    assert catch_up_check({"lag": {"lt:0": 0, "lt:1": 0}, "after_s": 2.0}, SoakLimits()).ok
    behind = catch_up_check({"lag": {"lt:0": 0, "lt:1": 640}, "after_s": 120.0}, SoakLimits())
    assert not behind.ok and "lt:1 (640)" in behind.detail
    assert not catch_up_check({"lag": {}, "error": "Oxia did not answer"}, SoakLimits()).ok
    good = {"reconciliation": {"ok": True, "errors": [], "read_back": {
        "ran": True, "records_missing": 0, "acked_records": 100, "records_confirmed": 100}}}
    assert read_back_check(good, {"records_checked": 100, "bad_batches": 0}).ok
    assert not read_back_check(good, {"records_checked": 100, "bad_batches": 1, "problems": ["filler"]}).ok
    missing = {"reconciliation": {"ok": False, "errors": ["lt:3: acknowledged offsets 5-9 missing"],
                                  "read_back": {"ran": True, "records_missing": 5, "acked_records": 100}}}
    assert "lt:3" in read_back_check(missing, {"records_checked": 95, "bad_batches": 0}).detail


# -- payloads -----------------------------------------------------------------------------------


def test_the_filler_follows_the_hammers_formula():
    # newHammer: filler[i] = fillerLetter[(i + seed % 62) % 62]
    assert hammer_filler(17 + 5, 7) == b"hijkl"
    assert hammer_filler(17 + 3, 61) == b"9ab"
    assert hammer_record(0x1234, 20, 0) == b"0000000000001234|abc"


def test_the_payload_check_passes_the_hammers_records_and_names_what_differs():
    sent = 1_700_000_000 * 10**9
    check = PayloadCheck(64, 7, sent - 10**9, sent + 10**9)
    good = [hammer_record(sent + i, 64, 7) for i in range(5)]
    assert check(stored(good)) == good and check.records_checked == 5
    cases = {
        "bytes, not 64": good[:2] + [good[2][:-1]],
        "another filler": good[:2] + [good[2][:-1] + b"#"],
        "not 16 hex digits": [b"00000000000X1234|" + good[0][17:]],
        "outside the run": [hammer_record(sent + 5 * 10**9, 64, 7)],
    }
    for expected, records in cases.items():
        with pytest.raises(CorruptBatch, match="not one the hammer sent"):
            check(stored(records))
        assert expected in check.problems[-1]
    assert check.bad_batches == len(cases)


# -- the sampler --------------------------------------------------------------------------------


class _Reader:
    def high_watermark(self, topic: str, partition: int) -> int:
        return 100 + partition

    def compaction_cursor(self, topic: str, partition: int) -> int:
        return 101 if partition == 0 else 51


class _Objects:
    def list(self, bucket: str, prefix: str):
        assert (bucket, prefix) == ("llog", "run/")
        yield ObjectInfo("run/wal-shared/a", 10, 0)
        yield ObjectInfo("run/wal-shared/b", 10, 0)
        yield ObjectInfo("run/lt/partitions/0/data/compacted/c", 30, 0)
        yield ObjectInfo("run/stray", 1, 0)


def test_object_kinds_follow_the_spec_layouts():
    assert object_kind("r/wal-shared/u1", "r") == "wal-shared"
    assert object_kind("r/t/partitions/3/data/compacted/u2", "r") == "compacted"
    assert object_kind("r/t/partitions/3/data/wal/u3", "r") == "legacy-wal"
    assert object_kind("r/nested/wal-shared/u4", "r") == "other"
    assert object_kind("other/wal-shared/u5", "r") == "other"


def test_a_sample_holds_processes_objects_lag_and_vacuum(tmp_path: Path):
    stack = {"processes": [
        {"name": "broker-1", "kind": "broker", "pid": os.getpid(), "metrics_url": "http://b/metrics"},
        {"name": "compactor-1", "kind": "compactor", "pid": os.getpid(), "metrics_url": "http://c/metrics"},
    ]}
    scraped = []

    def scrape(url: str) -> dict:
        scraped.append(url)
        return {"ok": True, "error": None, "metrics": {"counters": {
            "vacuum_runs_total": {"dry_run=False,outcome=ok": 3, "dry_run=False,outcome=error": 1},
            "vacuum_objects_deleted_total": {"kind=wal-shared": 9}},
            "histograms": {"vacuum_run_seconds": {"": {"count": 4, "sum_s": 2.5}}}}}

    sampler = SoakSampler(stack, tmp_path / "s.jsonl", reader=_Reader(), objects=_Objects(), bucket="llog",
                          root="run", partitions=[("lt", 0), ("lt", 1)], scrape=scrape)
    sampler.load_until_ms = 0  # every sample after load stopped
    sample = sampler.sample_now()
    assert json.loads((tmp_path / "s.jsonl").read_text()) == sample
    assert sample["phase"] == "catch-up" and scraped == ["http://c/metrics"]
    me = sample["processes"]["broker-1"]
    assert me["alive"] and me["rss_bytes"] > 0 and me["threads"] >= 1 and me["open_files"] > 0
    assert sample["objects"]["by_kind"] == {"wal-shared": 2, "compacted": 1, "legacy-wal": 0, "other": 1}
    assert sample["objects"]["total"] == 4 and sample["objects"]["bytes"] == 51
    assert sample["compaction"]["lag"] == {"lt:0": 0, "lt:1": 51}
    assert sample["vacuum"] == {"ok": True, "runs": 4, "failed_runs": 1, "objects_deleted": 9, "run_seconds": 2.5}
    assert sampler.lags() == {"lt:0": 0, "lt:1": 51}


# -- the picture, the scenario, the command line ------------------------------------------------------


def test_the_picture_has_every_panel_drawn(tmp_path: Path):
    samples = _samples(2, noise_mib=2)
    for s in samples[-3:]:
        s["phase"] = "catch-up"
    windows = [{"window_start_ms": T0 + i * 10_000, "window_end_ms": T0 + (i + 1) * 10_000,
                "produce": {"records": 30_000}, "consume": {"records": 29_000}} for i in range(12)]
    path = render_soak_plot(samples, windows, tmp_path / "soak.png", "Soak · test")
    with Image.open(path) as png:
        width, height = png.size
        colours = png.convert("RGB").getcolors(maxcolors=1_000_000)
    assert width >= 1000 and height >= 8 * 300
    assert len(colours) > 50, "a blank or nearly blank picture"


def test_the_soak_scenario_ships_with_vacuum_running_and_options_override_it():
    scenario = load_scenario("soak")
    assert len(scenario.broker_roles()) == 3 and scenario.compactors == 1 and scenario.load.mode == "open"
    assert vacuum_settings(scenario) == (150_000, 20_000) and grace_is_legal(130_000) and not grace_is_legal(129_999)
    assert vacuum_settings(soak_scenario(SoakOptions())) == (150_000, 20_000)
    run = soak_scenario(SoakOptions(minutes=2, rate=500, vacuum_grace_ms=20_000, vacuum_interval_ms=5_000,
                                    broker_env=(("LLOG_TAIL_CACHE_MAX_BYTES", "1024"),)))
    assert run.duration_s == 120 and run.load.rate == 500
    assert dict(run.env.compactor) == {"LLOG_VACUUM_GRACE_MS": "20000", "LLOG_VACUUM_INTERVAL_MS": "5000",
                                       "LLOG_VACUUM_ALLOW_UNSAFE_GRACE": "true"}
    assert dict(run.env.broker) == {"LLOG_TAIL_CACHE_MAX_BYTES": "1024"}
    assert run.to_dict()["env"]["broker"] == {"LLOG_TAIL_CACHE_MAX_BYTES": "1024"}


@pytest.mark.parametrize("env, message", [
    ({"broker": {"PATH": "/x"}}, "only LLOG_"),
    ({"broker": {"LLOG_X": 1.5}}, "string or an integer"),
    ({"brokers": {}}, "unknown key"),
    ({"compactor": "LLOG_X=1"}, "must be a table"),
])
def test_a_bad_env_table_is_refused(env, message):
    with pytest.raises(ScenarioError, match=message):
        parse_scenario({"name": "x", "env": env})


def test_the_command_line_refuses_a_short_grace_without_saying_so(capsys: pytest.CaptureFixture[str]):
    with pytest.raises(SystemExit) as exit_info:
        soak.main(["--minutes", "2", "--vacuum-grace-ms", "20000"])
    assert exit_info.value.code == 2 and "--allow-short-grace" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:  # the grace is the compactor's setting, however it is given
        soak.main(["--compactor-env", "LLOG_VACUUM_GRACE_MS=60000"])
    assert exit_info.value.code == 2 and "60000 ms is below" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        soak.main(["--broker-env", "PATH=/tmp"])
    assert exit_info.value.code == 2


def test_the_reported_figures_say_how_fast_compacted_objects_grow_and_how_long_vacuum_takes():
    samples = _samples(60)
    for i, s in enumerate(samples):
        s["objects"]["by_kind"]["compacted"] = 7 + i * 2  # a sample every 10 s: 720 an hour
        passes = i // 2  # a pass every 20 s, pass k taking 1 + k / 100 s
        s["vacuum"].update(runs=passes, failed_runs=0, run_seconds=sum(1 + k / 100 for k in range(passes)))
    found = figures(samples)
    assert found["compacted_objects_per_hour"] == pytest.approx(720)
    assert found["vacuum_passes"] == (len(samples) - 1) // 2 and found["vacuum_failed_passes"] == 0
    first, middle, last = found["vacuum_mean_pass_s_by_third"]
    assert first < middle < last, "passes that slow down show it"
    assert "720" in " ".join(figure_lines(found))
