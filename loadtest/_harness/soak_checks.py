"""The soak run's verdict: what must hold after an hour of steady load, each a :class:`Check`.

Pure functions of the samples (``soak-samples.jsonl``, :mod:`.soak_sampler`),
the client's windows and the summary, so unit tests feed them series.

- **Flat RSS and open files** of every product process (brokers, compactor
  services): the least-squares slope over the second half of the load phase
  (after warm-up: caches filled, pools opened), in MiB/hour and fds/hour.
  Open files are judged beyond one per thread (``open_files - threads``): each
  HTTP connection is a socket and a handler thread, so the raw count follows
  the clients' concurrency (it rose by 20-55 an hour in the last half hour
  of the first full soak, as latency rose, and fell to its idle 22-25 when
  the load stopped) while a leaked file moves the difference; the raw slope
  is reported beside it. A
  slope passes up to ``max(threshold, floor / window)``: the threshold is
  what an hour-long run judges by; the floor is the growth a short window
  cannot tell from noise (a Python heap moves by a few MiB, a connection
  pool by a few sockets), so a 2-minute run only fails on a steep climb.
  Oxia and MinIO are shown, not judged (their memory follows the data).
- **Objects bounded by vacuum**: the garbage kinds (``wal-shared`` and
  ``legacy-wal``: WAL objects, unreferenced once compaction passes them) are
  counted every sample. With vacuum acting, their count levels off at about
  flush rate x (grace + vacuum interval) and then only saw-tooths between
  passes; without it, it grows linearly and its maximum over the last third
  of the load phase is 1.5x that over the middle third. The rule: the last
  third's maximum is at most the middle third's x (1 + ``objects_rel_margin``)
  plus one vacuum cycle's worth of new WAL objects (their creation rate, from
  the counts and vacuum's deletions, x (vacuum interval + mean pass time):
  where a peak falls against the passes moves it by up to that much), and
  vacuum must have deleted objects before the last third begins (else the
  rule judged a run vacuum never touched). Over an hour a third is ~50
  cycles, so only a count that keeps climbing fails; over 2 minutes a third
  is a few cycles and the rule is a loose one.
  Compacted objects are the log's data (one per compaction run, referenced
  for good): their growth is reported per hour, not judged.
- **Compaction caught up**: shortly after load stops (``catch_up_s``), every
  partition's ``high watermark - (cursor - 1)`` is at most ``max_lag``.
- **Read back**: the reconciliation of ``summary.json`` passed (every
  acknowledged offset range read back, every record's bytes checked by
  :class:`~.payloads.PayloadCheck`), and no batch held a foreign record.
- **Rate held**: the acknowledged produce rate over the load phase reached
  ``min_rate_fraction`` of the target (a soak that fell behind its own
  schedule did not test steady state).
- **Processes alive**: no process of the stack died.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Mapping, Sequence

__all__ = ["Check", "SoakLimits", "evaluate", "figure_lines", "figures", "least_squares_slope", "object_rule",
           "second_half"]

MIB = 1024 * 1024
PRODUCT_KINDS = ("broker", "compactor")
GARBAGE_KINDS = ("wal-shared", "legacy-wal")


@dataclass(frozen=True)
class SoakLimits:
    """What the checks allow (the defaults are the 60-minute run's)."""

    rss_mib_per_hour: float = 32.0
    rss_floor_mib: float = 16.0
    fds_per_hour: float = 10.0
    fds_floor: float = 8.0
    objects_rel_margin: float = 0.10
    max_lag: int = 0
    """Offsets a partition may still lack compaction once load stopped."""
    min_rate_fraction: float = 0.9


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    values: Mapping[str, Any] = field(default_factory=dict)

    def line(self) -> str:
        return f"{'PASS' if self.ok else 'FAIL'}  {self.name}: {self.detail}"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def least_squares_slope(points: Sequence[tuple[float, float]]) -> float | None:
    """The slope of the least-squares line through ``(x, y)`` points (None below 3 points or one x)."""
    if len(points) < 3:
        return None
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    if sxx == 0:
        return None
    return sum((x - mx) * (y - my) for x, y in points) / sxx


def load_samples(samples: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [s for s in samples if s.get("phase") == "load"]


def second_half(samples: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The load-phase samples from the middle of the load phase on."""
    load = load_samples(samples)
    if not load:
        return []
    middle = (load[0]["ts_ms"] + load[-1]["ts_ms"]) / 2
    return [s for s in load if s["ts_ms"] >= middle]


def _process_points(samples: Sequence[Mapping[str, Any]], name: str, key: str,
                    scale: float, minus: str | None = None) -> list[tuple[float, float]]:
    """``(hour, reading[key] / scale)`` per sample (``- reading[minus]`` when given)."""
    points = []
    for s in samples:
        reading = (s.get("processes") or {}).get(name) or {}
        if reading.get(key) is None or not reading.get("alive") or (minus and reading.get(minus) is None):
            continue
        value = reading[key] - (reading[minus] if minus else 0)
        points.append((s["ts_ms"] / 3_600_000, value / scale))
    return points


def flat_checks(samples: Sequence[Mapping[str, Any]], limits: SoakLimits) -> list[Check]:
    """RSS and open files of every product process, over the second half of the load phase."""
    half = second_half(samples)
    hours = (half[-1]["ts_ms"] - half[0]["ts_ms"]) / 3_600_000 if len(half) > 1 else 0.0
    names = sorted({n for s in half for n, p in (s.get("processes") or {}).items() if p.get("kind") in PRODUCT_KINDS})
    checks = []
    for what, key, minus, scale, per_hour, floor, unit in (
        ("RSS", "rss_bytes", None, MIB, limits.rss_mib_per_hour, limits.rss_floor_mib, "MiB/hour"),
        ("open files", "open_files", "threads", 1.0, limits.fds_per_hour, limits.fds_floor, "fds/hour"),
    ):
        allowed = max(per_hour, floor / hours) if hours > 0 else per_hour
        for name in names:
            slope = least_squares_slope(_process_points(half, name, key, scale, minus))
            if slope is None:
                checks.append(Check(f"{what} flat: {name}", False, "fewer than 3 samples in the second half"))
                continue
            raw = least_squares_slope(_process_points(half, name, key, scale)) if minus else slope
            beyond = f" beyond one per {minus[:-1]}" if minus else ""
            raw_text = f"; raw {raw:+.1f}" if minus and raw is not None else ""
            checks.append(Check(
                f"{what} flat: {name}", slope <= allowed,
                f"slope {slope:+.1f} {unit}{beyond} over the last {hours * 60:.1f} min{raw_text} (allowed "
                f"{allowed:.1f}: {per_hour:g} {unit}, or {floor:g} over the window)",
                {"slope_per_hour": round(slope, 3), "allowed_per_hour": round(allowed, 3), "window_s": hours * 3600,
                 **({"raw_slope_per_hour": None if raw is None else round(raw, 3)} if minus else {})}))
    return checks


def garbage_objects(sample: Mapping[str, Any]) -> int | None:
    objects = sample.get("objects") or {}
    if not objects.get("ok"):
        return None
    return sum(int(objects["by_kind"].get(k, 0)) for k in GARBAGE_KINDS)


def object_rule(samples: Sequence[Mapping[str, Any]], limits: SoakLimits, vacuum_interval_s: float) -> Check:
    """WAL objects level off once vacuum acts (see the module docstring)."""
    load = load_samples(samples)
    counted = [(s["ts_ms"], garbage_objects(s), s.get("vacuum") or {}) for s in load]
    counted = [(t, n, v) for t, n, v in counted if n is not None]
    if len(counted) < 6:
        return Check("objects bounded by vacuum", False, f"only {len(counted)} object counts in the load phase")
    start, end = counted[0][0], counted[-1][0]
    third = (end - start) / 3
    middle = [n for t, n, _ in counted if start + third <= t < start + 2 * third]
    last = [n for t, n, _ in counted if t >= start + 2 * third]
    acted = any(v.get("objects_deleted") for t, _, v in counted if t < start + 2 * third)
    cycle = _objects_per_cycle(counted, vacuum_interval_s)
    bound = max(middle) * (1 + limits.objects_rel_margin) + cycle
    ok = acted and max(last) <= bound
    why = "" if acted else "; vacuum deleted nothing before the last third (grace + interval too long for the run?)"
    return Check("objects bounded by vacuum", ok,
                 f"WAL objects: max {max(last)} over the last third, {max(middle)} over the middle third "
                 f"(allowed {bound:.0f}: +{limits.objects_rel_margin:.0%} and one vacuum cycle, {cycle:.0f}){why}",
                 {"max_middle_third": max(middle), "max_last_third": max(last), "allowed": round(bound, 1),
                  "objects_per_vacuum_cycle": round(cycle, 1), "vacuum_acted_before_last_third": acted})


def _objects_per_cycle(counted: Sequence[tuple[int, int, Mapping[str, Any]]], interval_s: float) -> float:
    """WAL objects made during one vacuum cycle (interval + mean pass): what is
    there now, less what was there first, plus what vacuum deleted, per second."""
    (t0, n0, v0), (t1, n1, v1) = counted[0], counted[-1]
    seconds = (t1 - t0) / 1000
    made = n1 - n0 + (v1.get("objects_deleted") or 0) - (v0.get("objects_deleted") or 0)
    passes = (v1.get("runs") or 0) - (v0.get("runs") or 0)
    pass_s = ((v1.get("run_seconds") or 0.0) - (v0.get("run_seconds") or 0.0)) / passes if passes > 0 else 0.0
    return max(0.0, made / seconds) * (interval_s + pass_s) if seconds > 0 else 0.0


def figures(samples: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """What is reported, not judged: how fast compacted objects accumulated
    over the second half (objects/hour), and vacuum's passes: how many, how
    many failed, and their mean duration over each third of the load phase
    (a pass that slows as the log grows shows here)."""
    points = [(s["ts_ms"] / 3_600_000, float(s["objects"]["by_kind"]["compacted"]))
              for s in second_half(samples) if (s.get("objects") or {}).get("ok")]
    slope = least_squares_slope(points)
    vacuum = [s["vacuum"] for s in samples if (s.get("vacuum") or {}).get("ok")]
    return {
        "compacted_objects_per_hour": None if slope is None else round(slope, 1),
        "compacted_objects_last": int(points[-1][1]) if points else None,
        "vacuum_passes": vacuum[-1]["runs"] if vacuum else None,
        "vacuum_failed_passes": vacuum[-1].get("failed_runs") if vacuum else None,
        "vacuum_mean_pass_s_by_third": _pass_seconds_by_third(load_samples(samples)),
    }


def _pass_seconds_by_third(load: Sequence[Mapping[str, Any]]) -> list[float | None]:
    readings = [(s["ts_ms"], s["vacuum"]) for s in load if (s.get("vacuum") or {}).get("ok")]
    if len(readings) < 2:
        return []
    start, end = readings[0][0], readings[-1][0]
    out: list[float | None] = []
    for i in range(3):
        part = [v for t, v in readings if start + i * (end - start) / 3 <= t <= start + (i + 1) * (end - start) / 3]
        runs = part[-1]["runs"] - part[0]["runs"] if len(part) > 1 else 0
        out.append(round((part[-1]["run_seconds"] - part[0]["run_seconds"]) / runs, 2) if runs > 0 else None)
    return out


def figure_lines(found: Mapping[str, Any]) -> list[str]:
    """:func:`figures` as lines to print."""
    return [f"compacted objects: {found['compacted_objects_last']} at the end, "
            f"{found['compacted_objects_per_hour']} more per hour (one per compaction run; the log's data)",
            f"vacuum: {found['vacuum_passes']} passes, {found['vacuum_failed_passes']} failed; mean pass "
            f"{' / '.join('-' if v is None else f'{v} s' for v in found['vacuum_mean_pass_s_by_third'])} "
            "over each third of the load"]


def evaluate(samples: Sequence[Mapping[str, Any]], *, summary: Mapping[str, Any], payloads: Mapping[str, Any],
             catch_up: Mapping[str, Any], target_rate: float, vacuum_interval_s: float,
             limits: SoakLimits) -> list[Check]:
    """Every check of the run, in the order they are printed."""
    checks = [read_back_check(summary, payloads), rate_check(summary, target_rate, limits)]
    checks += flat_checks(samples, limits)
    checks.append(object_rule(samples, limits, vacuum_interval_s))
    checks.append(catch_up_check(catch_up, limits))
    checks.append(alive_check(samples))
    return checks


def read_back_check(summary: Mapping[str, Any], payloads: Mapping[str, Any]) -> Check:
    rec = summary.get("reconciliation") or {}
    rb = rec.get("read_back") or {}
    ok = (bool(rec.get("ok")) and bool(rb.get("ran")) and rb.get("records_missing") == 0
          and payloads.get("bad_batches") == 0 and (rb.get("acked_records") or 0) > 0)
    detail = (f"{rb.get('records_confirmed', 0):,} of {rb.get('acked_records', 0):,} acknowledged records read "
              f"back; {payloads.get('records_checked', 0):,} records' bytes checked, "
              f"{payloads.get('bad_batches', 0)} batch(es) with a foreign record")
    if rec.get("errors"):
        detail += "; " + "; ".join(rec["errors"][:3])
    problems = list(payloads.get("problems") or [])
    if problems:
        detail += "; " + problems[0]
    return Check("acknowledged records read back", ok, detail,
                 {"acked_records": rb.get("acked_records"), "records_missing": rb.get("records_missing"),
                  "records_checked": payloads.get("records_checked"), "problems": problems})


def rate_check(summary: Mapping[str, Any], target_rate: float, limits: SoakLimits) -> Check:
    rate = ((summary.get("client") or {}).get("throughput") or {}).get("records_per_s") or 0.0
    ok = rate >= limits.min_rate_fraction * target_rate
    return Check("rate held", ok, f"{rate:,.0f} records/s acknowledged, target {target_rate:,.0f} "
                                  f"(at least {limits.min_rate_fraction:.0%})",
                 {"records_per_s": rate, "target": target_rate})


def catch_up_check(catch_up: Mapping[str, Any], limits: SoakLimits) -> Check:
    lag = catch_up.get("lag") or {}
    worst = max(lag.values()) if lag else None
    ok = worst is not None and worst <= limits.max_lag
    behind = sorted(((v, k) for k, v in lag.items() if v > limits.max_lag), reverse=True)[:5]
    detail = (f"max lag {worst} offsets over {len(lag)} partitions {catch_up.get('after_s', 0):.1f} s after load "
              f"stopped (allowed {limits.max_lag})")
    if behind:
        detail += "; behind: " + ", ".join(f"{k} ({v})" for v, k in behind)
    if worst is None:
        detail = f"no compaction lag could be read: {catch_up.get('error')}"
    return Check("compaction caught up", ok, detail, {"max_lag": worst, "after_s": catch_up.get("after_s")})


def alive_check(samples: Sequence[Mapping[str, Any]]) -> Check:
    dead = sorted({n for s in samples for n, p in (s.get("processes") or {}).items() if not p.get("alive")})
    return Check("processes alive", not dead, "every process alive in every sample" if not dead
                 else f"dead in some sample: {', '.join(dead)}", {"dead": dead})
