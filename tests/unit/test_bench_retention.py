"""loadtest/bench_retention.py: its command line (the benchmark itself runs on a real stack)."""

from __future__ import annotations

import pytest

from loadtest.bench_retention import parse_args


def test_help_and_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        parse_args(["--help"])
    assert info.value.code == 0
    assert "retention pass" in capsys.readouterr().out
    args = parse_args([])
    assert (args.logs, args.entries, args.passes, args.repeat) == (64, 1000, 5, 3)


@pytest.mark.parametrize("flag", ["--logs", "--entries", "--passes", "--repeat"])
def test_a_count_below_one_is_refused(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        parse_args([flag, "0"])
    assert info.value.code == 2 and "must be positive" in capsys.readouterr().err
