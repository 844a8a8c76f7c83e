"""Settings that would break a SPEC safety condition are refused at start-up.

SPEC 7.0: a process may make the first reference to an object up to ``D``
after writing it, so vacuum's grace ``G`` must be at least ``2 (D + skew)``;
a shorter ``G`` deleted acknowledged records in a fault run (a writer paused
for a few seconds referenced a blob vacuum had just deleted). Each process
that reads one of these values refuses a bad one, naming the variable, the
value, the minimum and why.
"""

from __future__ import annotations

import pytest

from server._compaction.cli import config_from_args, parse_args
from server._compaction.config import CompactorServiceConfig, VacuumConfig
from server._compaction.vacuum_cli import main as vacuum_main
from server._config import OxiaConfig, S3Config
from server._errors import ConfigError
from server._protocol.constants import MAX_CLOCK_SKEW_MS, MIN_SAFE_GRACE_MS, REFERENCE_DEADLINE_MS
from server._storage.metastore import InMemoryMetadataStore
from server._storage.objectstore import InMemoryObjectStore
from server.leaderless_log_compactor import LeaderlessLogCompactor
from server.leaderless_log_vacuum import Vacuum
from server.leaderless_log_writer import LeaderlessLogWriter

OXIA = OxiaConfig(service_address="unused:1")
S3 = S3Config(bucket="llog")
STORES = {"metadata_store": InMemoryMetadataStore(), "object_store": InMemoryObjectStore()}


def _says_why(message: str, name: str, value: int) -> None:
    assert name in message and str(value) in message and str(MIN_SAFE_GRACE_MS) in message
    assert "SPEC 7.0" in message and "acknowledged records" in message


def test_the_minimum_grace_is_twice_the_reference_deadline_plus_skew():
    assert MIN_SAFE_GRACE_MS == 2 * (REFERENCE_DEADLINE_MS + MAX_CLOCK_SKEW_MS) == 130_000


@pytest.mark.parametrize("grace", [0, 3_000, 60_000, MIN_SAFE_GRACE_MS - 1])
def test_the_environment_refuses_a_short_grace(grace):
    with pytest.raises(ConfigError) as info:
        VacuumConfig.from_env({"LLOG_VACUUM_GRACE_MS": str(grace)})
    _says_why(str(info.value), "LLOG_VACUUM_GRACE_MS", grace)
    with pytest.raises(ConfigError):
        CompactorServiceConfig.from_env({"LLOG_VACUUM_GRACE_MS": str(grace)})


def test_the_minimum_itself_and_the_default_are_accepted():
    assert VacuumConfig.from_env({"LLOG_VACUUM_GRACE_MS": str(MIN_SAFE_GRACE_MS)}).grace_ms == MIN_SAFE_GRACE_MS
    assert VacuumConfig.from_env({}).grace_ms == 3_600_000


def test_an_unsafe_grace_needs_the_explicit_switch():
    config = VacuumConfig.from_env({"LLOG_VACUUM_GRACE_MS": "0", "LLOG_VACUUM_ALLOW_UNSAFE_GRACE": "true"})
    assert (config.grace_ms, config.allow_unsafe_grace) == (0, True)


def test_the_compactor_service_flags_refuse_a_short_grace():
    """The run that lost records: llog-compactor --vacuum-grace-ms 3000 --vacuum-interval-ms 1000."""
    args = parse_args(["--vacuum-grace-ms", "3000", "--vacuum-interval-ms", "1000"])
    with pytest.raises(ConfigError) as info:
        config_from_args(args, {})
    _says_why(str(info.value), "LLOG_VACUUM_GRACE_MS", 3000)


def test_llog_vacuum_exits_2_on_a_short_grace(capsys):
    code = vacuum_main(["--grace-ms", "3000"], env={"LLOG_OXIA_SERVICE_ADDRESS": "127.0.0.1:1",
                                                   "LLOG_S3_BUCKET": "llog"})
    assert code == 2
    _says_why(capsys.readouterr().err, "LLOG_VACUUM_GRACE_MS", 3000)


def test_the_vacuum_library_refuses_a_short_grace():
    with pytest.raises(ConfigError) as info:
        Vacuum(OXIA, S3, grace_ms=3_000, **STORES)
    assert "3000" in str(info.value) and str(MIN_SAFE_GRACE_MS) in str(info.value)
    Vacuum(OXIA, S3, grace_ms=3_000, allow_unsafe_grace=True, **STORES).close()
    Vacuum(OXIA, S3, grace_ms=MIN_SAFE_GRACE_MS, **STORES).close()


@pytest.mark.parametrize("cls", [LeaderlessLogWriter, LeaderlessLogCompactor])
def test_a_reference_deadline_longer_than_d_is_refused(cls):
    """Vacuum's grace is sized for D: a writer or compactor referencing older
    objects could reference one vacuum already deleted."""
    with pytest.raises(ConfigError) as info:
        cls(OXIA, S3, max_reference_age_ms=REFERENCE_DEADLINE_MS + 1, **STORES)
    assert "SPEC 7.0" in str(info.value) and str(REFERENCE_DEADLINE_MS + 1) in str(info.value)
    cls(OXIA, S3, max_reference_age_ms=1_000, **STORES).close()  # shorter is safe: it only abandons more
