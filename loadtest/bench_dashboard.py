"""How long drawing the dashboard takes, without a Prometheus (prints figures).

Draws the repository's dashboard (``grafana/``) with ``dashboard.render`` from
canned answers: every query returns ``--series`` series of a sine over a
10-minute window at a 5 s step (so legends and ticks are as busy as a real
run's), ``--repeat`` times, and prints each run's seconds per row and in all,
then the median. The quick run and ``orchestrate run --prometheus`` draw the
same dashboard after a run.

    $LLOG_PY -m loadtest.bench_dashboard --repeat 3
"""

from __future__ import annotations

import argparse
import math
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

__all__ = ["main"]


def canned(series: int):
    """A ``query_range`` stand-in: ``series`` sine curves for every query."""
    def query(promql: str, *, start_s: float, end_s: float, step_s: float) -> dict[str, Any]:
        steps = [start_s + i * step_s for i in range(int((end_s - start_s) / step_s) + 1)]
        return {"resultType": "matrix", "result": [
            {"metric": {"instance": f"process-{i}"}, "values": [[t, f"{(i + 1) * 1e6 * (1 + math.sin(t / 60))}"]
                                                                 for t in steps]} for i in range(series)]}
    return query


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m loadtest.bench_dashboard", description=__doc__.split("\n\n")[0])
    p.add_argument("--repeat", type=int, default=3, help="runs (default 3); the median is printed")
    p.add_argument("--series", type=int, default=6, help="series each query answers (default 6)")
    args = p.parse_args(argv)
    from dashboard._model import load_dashboard
    from dashboard._panel_data import TimeRange
    from dashboard.render import DEFAULT_DASHBOARD, render

    dashboard = load_dashboard(DEFAULT_DASHBOARD)
    window = TimeRange(1_716_999_400.0, 1_717_000_000.0, 5.0)
    totals = []
    for run in range(args.repeat):
        rows: list[str] = []
        with tempfile.TemporaryDirectory(prefix="llog-bench-dashboard-") as out:
            started = time.perf_counter()
            result = render(dashboard, Path(out), canned(args.series), window, progress=rows.append)
            totals.append(time.perf_counter() - started)
        per_row = [line.rsplit("(", 1)[-1].rstrip(")") for line in rows]
        print(f"[bench] run {run + 1}: {len(result.images)} rows in {totals[-1]:.2f} s ({', '.join(per_row)})",
              flush=True)
    print(f"dashboard drawn in {statistics.median(totals):.2f} s (median of {len(totals)}: "
          f"{' '.join(f'{t:.2f}' for t in totals)})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
