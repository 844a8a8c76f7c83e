"""The compactor service's configuration (config.py) and command line (cli.py)."""

from __future__ import annotations

import argparse

import pytest

from server._compaction.config import CompactorServiceConfig, VacuumConfig, parse_targets
from server._errors import ConfigError
from server._protocol.keys import TopicPartition
from server.leaderless_log_compactor_server import config_from_args, parse_args

from ._compactor_service_fakes import A, B


# -- configuration ----------------------------------------------------------------------------------------------


def test_config_defaults():
    c = CompactorServiceConfig.from_env({})
    assert (c.bind_host, c.port, c.workers, c.targets) == ("127.0.0.1", 8090, 2, ())
    assert (c.discovery_interval_ms, c.idle_sleep_ms, c.error_sleep_ms) == (30_000, 1_000, 5_000)
    assert (c.idle_jitter_ms, c.error_jitter_ms) == (500, 2_000)
    assert (c.max_offsets_per_run, c.max_bytes_per_run) == (100_000, 64 * 1024 * 1024)
    assert c.blob_cache_bytes == 128 * 1024 * 1024
    assert c.vacuum == VacuumConfig(3_600_000, 600_000, True)
    assert c.compactor_id.endswith(f"-{__import__('os').getpid()}")


def test_config_from_env():
    c = CompactorServiceConfig.from_env({
        "LLOG_COMPACTOR_ID": "c1", "LLOG_COMPACTOR_BIND_HOST": "0.0.0.0", "LLOG_COMPACTOR_PORT": "0",
        "LLOG_COMPACTOR_TARGETS": " orders:0, orders:1,,orders:0 ", "LLOG_COMPACTOR_WORKERS": "4",
        "LLOG_COMPACTOR_DISCOVERY_INTERVAL_MS": "0", "LLOG_COMPACTOR_IDLE_SLEEP_MS": "10",
        "LLOG_COMPACTOR_ERROR_SLEEP_MS": "20", "LLOG_COMPACTOR_IDLE_JITTER_MS": "1",
        "LLOG_COMPACTOR_ERROR_JITTER_MS": "2", "LLOG_COMPACTOR_MAX_OFFSETS_PER_RUN": "1_000",
        "LLOG_COMPACTOR_SHUTDOWN_TIMEOUT_MS": "3", "LLOG_VACUUM_GRACE_MS": "5", "LLOG_VACUUM_ALLOW_UNSAFE_GRACE": "1",
        "LLOG_VACUUM_INTERVAL_MS": "0", "LLOG_VACUUM_DELETE_REDUNDANT_ENTRIES": "0",
    })
    assert c == CompactorServiceConfig(
        compactor_id="c1", bind_host="0.0.0.0", port=0, targets=(A, B), workers=4, discovery_interval_ms=0,
        idle_sleep_ms=10, error_sleep_ms=20, idle_jitter_ms=1, error_jitter_ms=2, max_offsets_per_run=1000,
        max_bytes_per_run=64 * 1024 * 1024, shutdown_timeout_ms=3, vacuum=VacuumConfig(5, 0, False, True),
    )


@pytest.mark.parametrize(("name", "value"), [
    ("LLOG_COMPACTOR_WORKERS", "0"),
    ("LLOG_COMPACTOR_PORT", "70000"),
    ("LLOG_COMPACTOR_IDLE_SLEEP_MS", "-1"),
    ("LLOG_COMPACTOR_MAX_OFFSETS_PER_RUN", "0"),
    ("LLOG_COMPACTOR_TARGETS", "orders"),
    ("LLOG_COMPACTOR_TARGETS", "bad/topic:0"),
    ("LLOG_COMPACTOR_TARGETS", "orders:-1"),
    ("LLOG_VACUUM_GRACE_MS", "-5"),
    ("LLOG_COMPACTOR_BLOB_CACHE_BYTES", "-1"),
    ("LLOG_COMPACTOR_ERROR_SLEEP_MS", "soon"),
])
def test_config_errors_name_the_variable(name, value):
    with pytest.raises(ConfigError, match=name):
        CompactorServiceConfig.from_env({name: value})


def test_parse_targets():
    assert parse_targets(None) == ()
    assert parse_targets("a.b:3") == (TopicPartition("a.b", 3),)


def test_flags_override_the_environment():
    env = {"LLOG_COMPACTOR_PORT": "9000", "LLOG_COMPACTOR_TARGETS": "orders:0", "LLOG_VACUUM_GRACE_MS": "10",
           "LLOG_VACUUM_ALLOW_UNSAFE_GRACE": "true", "LLOG_COMPACTOR_WORKERS": "3"}
    args = parse_args(["--port", "0", "--targets", "x:1,x:2", "--vacuum-interval-ms", "0", "--once"])
    assert isinstance(args, argparse.Namespace) and args.once
    c = config_from_args(args, env)
    assert (c.port, c.targets, c.workers) == (0, (TopicPartition("x", 1), TopicPartition("x", 2)), 3)
    assert c.vacuum == VacuumConfig(grace_ms=10, interval_ms=0, allow_unsafe_grace=True)


def test_help_exits_zero(capsys):
    with pytest.raises(SystemExit) as info:
        parse_args(["--help"])
    assert info.value.code == 0
    assert "--targets" in capsys.readouterr().out
