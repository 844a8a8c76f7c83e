"""The hammer's Python side: HammerConfig -> command line, the build cache, and the
binary's refusal of bad flags (``loadtest/_harness/hammer.py``)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Iterator

import pytest

from devstack import cache_dir
from devstack import _gobuild as gobuild
from loadtest._harness.hammer import HAMMER_SOURCE, HammerConfig, ensure_hammer, hammer_config_for, hammer_key
from server._errors import ConfigError


def _flags(argv: list[str]) -> dict[str, str]:
    """``-name value`` pairs of a command line (after the binary)."""
    rest = argv[1:]
    assert len(rest) % 2 == 0, rest
    return {rest[i]: rest[i + 1] for i in range(0, len(rest), 2)}


def test_closed_config_argv() -> None:
    config = HammerConfig(mode="closed", concurrency=4, duration_s=4, record_bytes=200, records_per_request=20,
                          partitions_per_request=2, consumers=1, window_s=1, timeout_s=2.5, seed=9)
    argv = config.argv("/bin/hammer", Path("/run/routing-manifest.json"), Path("/run"))
    assert argv[0] == "/bin/hammer"
    flags = _flags(argv)
    assert flags["-manifest"] == "/run/routing-manifest.json" and flags["-out"] == "/run"
    assert flags["-mode"] == "closed" and flags["-concurrency"] == "4"
    assert flags["-duration"] == "4000ms" and flags["-window"] == "1000ms" and flags["-timeout"] == "2500ms"
    assert flags["-record-bytes"] == "200" and flags["-records-per-request"] == "20"
    assert flags["-partitions-per-request"] == "2" and flags["-consumers"] == "1" and flags["-seed"] == "9"
    assert "-topic" not in flags and "-selection" not in flags  # the manifest decides
    assert flags["-body"] == flags["-consume-body"] == "json"  # JSON unless asked
    binary = HammerConfig(body="binary", consume_body="binary").argv("h", "m", "o")
    assert _flags(binary)["-body"] == _flags(binary)["-consume-body"] == "binary"


def test_open_config_argv_with_topic_and_selection() -> None:
    config = HammerConfig(mode="open", rate_records_per_s=2500.5, max_inflight=64, duration_s=0.0005,
                          topic="lt", selection="least_inflight", consume_from="start")
    flags = _flags(config.argv("h", "m", "o"))
    assert flags["-mode"] == "open" and flags["-rate"] == "2500.5" and flags["-max-inflight"] == "64"
    assert flags["-duration"] == "500us"  # not a whole millisecond
    assert flags["-topic"] == "lt" and flags["-selection"] == "least_inflight" and flags["-consume-from"] == "start"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"mode": "half-open"},
        {"mode": "open", "rate_records_per_s": 0},
        {"concurrency": 0},
        {"duration_s": 0},
        {"record_bytes": 16},
        {"records_per_request": 0},
        {"selection": "random"},
        {"consume_from": "middle"},
        {"consume_body": "protobuf"},
        {"window_s": -1},
    ],
)
def test_config_refuses_bad_values(kwargs: dict) -> None:
    with pytest.raises(ConfigError):
        HammerConfig(**kwargs)


def test_config_for_a_scenario() -> None:
    load = SimpleNamespace(topic="lt", mode="closed", rate=0, concurrency=12, record_bytes=512,
                           records_per_request=64, partitions_per_request=3, consumers=1,
                           selection="round_robin", seed=7, window_s=5, timeout_s=10)
    config = hammer_config_for(SimpleNamespace(duration_s=45, load=load))
    assert (config.mode, config.concurrency, config.duration_s, config.partitions_per_request) == ("closed", 12, 45, 3)
    assert (config.topic, config.selection, config.seed, config.window_s) == ("lt", "round_robin", 7, 5)
    opened = hammer_config_for(SimpleNamespace(duration_s=10, load=SimpleNamespace(**{**vars(load), "mode": "open",
                                                                                    "rate": 5000})))
    assert opened.mode == "open" and opened.rate_records_per_s == 5000


def test_key_follows_source_and_go_version() -> None:
    base = hammer_key(b"package main", "go1.26.8")
    assert base == hammer_key(b"package main", "go1.26.8")
    assert base != hammer_key(b"package main ", "go1.26.8")
    assert base != hammer_key(b"package main", "go1.26.9")


# -- building (needs the Go toolchain) ---------------------------------------------------------


@pytest.fixture(scope="module")
def private_bin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A private LLOG_CACHE_DIR for the binaries of this module's tests, sharing the
    real Go build cache (so a build takes seconds)."""
    try:
        gobuild._find_go(HAMMER_SOURCE)
    except ConfigError as exc:
        pytest.skip(str(exc))
    cache = tmp_path_factory.mktemp("hammer-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GOCACHE", os.environ.get("GOCACHE") or str(cache_dir() / "go-build"))
        patch.setenv("LLOG_CACHE_DIR", str(cache))
        yield cache / "bin"


def test_ensure_hammer_builds_once(private_bin: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = ensure_hammer()
    assert first.parent == private_bin and os.access(first, os.X_OK)
    built_at = first.stat().st_mtime_ns

    def no_build(*args: object) -> None:
        raise AssertionError("ensure_hammer rebuilt a cached binary")

    monkeypatch.setattr(gobuild, "_build", no_build)
    assert ensure_hammer() == first
    assert first.stat().st_mtime_ns == built_at


def test_changed_source_gets_its_own_binary(private_bin: Path, tmp_path: Path) -> None:
    changed = tmp_path / "http_hammer.go"
    changed.write_bytes(HAMMER_SOURCE.read_bytes() + b"\n// changed\n")
    assert ensure_hammer(changed) != ensure_hammer()
    assert {p.name for p in private_bin.glob("http_hammer-*")} == {ensure_hammer(changed).name, ensure_hammer().name}


def test_binary_refuses_bad_flags_and_manifest(private_bin: Path, tmp_path: Path) -> None:
    binary = ensure_hammer()

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(binary), *args], capture_output=True, text=True, timeout=30)

    missing = run("-manifest", str(tmp_path / "nope.json"), "-out", str(tmp_path / "out"))
    assert missing.returncode == 2 and "cannot read the manifest" in missing.stderr
    (tmp_path / "bad.json").write_text('{"brokers": [], "partitions": []}')
    empty = run("-manifest", str(tmp_path / "bad.json"), "-out", str(tmp_path / "out"))
    assert empty.returncode == 2 and "names no brokers" in empty.stderr
    mode = run("-manifest", "m.json", "-out", "o", "-mode", "sideways")
    assert mode.returncode == 2 and "-mode must be open or closed" in mode.stderr
    unknown = run("-bogus")
    assert unknown.returncode == 2 and "flag provided but not defined" in unknown.stderr
    helped = run("-h")
    assert helped.returncode == 0 and "-records-per-request" in helped.stderr
    assert not (tmp_path / "out").exists()
