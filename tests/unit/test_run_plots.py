"""``loadtest/_harness/plots.py``: pictures of a synthetic run (``tests/_run_dir.py``),
and of runs with nothing to draw, which must say "no data" rather than fail."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from loadtest._harness import plots
from loadtest._harness.plots import PLOT_NAMES, render_plots
from tests._run_dir import write_run

PANELS = 9
"""Panels over the five plots: 2 throughput, 2 latency, 1 errors, 2 compaction, 2 processes."""


@pytest.fixture
def notices(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The messages of every "no data" notice drawn."""
    seen: list[str] = []
    real = plots.notice

    def spy(ax, message, *args, **kwargs):
        seen.append(message)
        return real(ax, message, *args, **kwargs)

    monkeypatch.setattr(plots, "notice", spy)
    return seen


def _check_pngs(paths: list[Path], run_dir: Path) -> None:
    assert [p.name for p in paths] == [f"{name}.png" for name in PLOT_NAMES]
    for path in paths:
        assert path.parent == run_dir / "plots"
        with Image.open(path) as png:
            png.verify()
        with Image.open(path) as png:
            width, height = png.size
            assert png.format == "PNG"
            assert width == plots.WIDTH_PX and 400 <= height <= 1000, (path.name, png.size)
            assert len(png.getcolors(1 << 16) or range(1 << 16)) > 10  # drawn, not a blank page


def test_a_full_run_draws_every_panel(tmp_path: Path, notices: list[str]) -> None:
    run_dir = write_run(tmp_path / "run")
    paths = render_plots(run_dir)
    _check_pngs(paths, run_dir)
    assert notices == []


def test_a_restart_and_a_failed_scrape_still_draw(tmp_path: Path, notices: list[str]) -> None:
    run_dir = write_run(tmp_path / "run", broker_records={"broker-2": (0, 500, 1000, 200, 700, 1200)},
                        failed_scrapes={"broker-1": [3], "compactor-1": [1]})
    _check_pngs(render_plots(run_dir), run_dir)
    assert notices == []


def test_an_empty_run_directory_draws_no_data(tmp_path: Path, notices: list[str]) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    _check_pngs(render_plots(run_dir), run_dir)
    assert notices == ["no data"] * PANELS


def test_empty_artifacts_draw_no_data(tmp_path: Path, notices: list[str]) -> None:
    run_dir = write_run(tmp_path / "run")
    for name in ("client-30s.jsonl", "metrics-30s.jsonl", "remap-events.jsonl"):
        (run_dir / name).write_text("")
    _check_pngs(render_plots(run_dir), run_dir)
    assert notices == ["no data"] * PANELS


def test_metrics_without_client_windows(tmp_path: Path, notices: list[str]) -> None:
    run_dir = write_run(tmp_path / "run")
    (run_dir / "client-30s.jsonl").unlink()
    _check_pngs(render_plots(run_dir), run_dir)
    assert notices == ["no data"] * 3  # the two latency panels and the errors panel; throughput has the brokers
