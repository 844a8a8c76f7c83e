"""Settings declared once (server/_settings.py): from_env, validation, flags,
``--help`` and ``.env.example`` all follow the declarations."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import re
from pathlib import Path

import pytest

import server
from server import _env_example
from server._broker import cli as broker_cli
from server._compaction import cli as compactor_cli
from server._compaction import vacuum_cli
from server._compaction.config import CompactionLimits, CompactorServiceConfig, VacuumConfig
from server._config import OxiaConfig, S3Config
from server._errors import ConfigError
from server._settings import (
    Flags,
    check_settings,
    declared,
    env_value,
    from_env,
    nested,
    same_as,
    setting,
)

REPO = Path(server.__file__).resolve().parents[1]
ENV_EXAMPLE = REPO / ".env.example"


def _config_classes() -> list[type]:
    """Every dataclass in server/ with a declared setting (spark included)."""
    found: dict[str, type] = {}
    for path in sorted((REPO / "server").rglob("*.py")):
        name = ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
        if name.startswith("server.spark"):
            pytest.importorskip("pyspark")
        module = importlib.import_module(name)
        for value in vars(module).values():
            if isinstance(value, type) and dataclasses.is_dataclass(value) and declared(value):
                found[f"{value.__module__}.{value.__qualname__}"] = value
    return list(found.values())


CONFIGS = _config_classes()


def _variables() -> dict[str, list]:
    by_env: dict[str, list] = {}
    for config in CONFIGS:
        for d in declared(config):
            if d.setting.env:
                by_env.setdefault(d.setting.env, []).append(d)
    return by_env


# -- declared once --------------------------------------------------------------------------------


def test_the_product_configs_are_found():
    names = {c.__name__ for c in CONFIGS}
    assert {"OxiaConfig", "S3Config", "BatchConfig", "BrokerConfig", "CompactorServiceConfig", "VacuumConfig",
            "CompactionLimits", "S3Prices", "ProducerConfig", "ProduceOptions"} <= names


def test_every_variable_is_declared_once():
    """A config that carries another's setting (same_as) shares the very declaration."""
    for env, decls in _variables().items():
        assert len({id(d.setting) for d in decls}) == 1, f"{env} is declared {len(decls)} times"
        assert len({repr(d.default) for d in decls}) == 1, f"{env} has two defaults"


def test_only_llog_variables_and_no_load_test_ones():
    names = set(_variables())
    assert all(n.startswith("LLOG_") for n in names)
    assert not [n for n in names if n.startswith("LLOG_LOADTEST")]


# -- .env.example ---------------------------------------------------------------------------------


def test_env_example_is_generated_from_the_declarations():
    assert ENV_EXAMPLE.read_text() == _env_example.render(), (
        ".env.example differs from the declarations: run `python -m server._env_example > .env.example`"
    )


def _parse_env_example(text: str) -> dict[str, tuple[str, str]]:
    """variable -> (value, the comment lines just above it, joined)."""
    out: dict[str, tuple[str, str]] = {}
    comment: list[str] = []
    for line in text.splitlines():
        if line.startswith("# ---") or not line.strip():
            comment = []
        elif line.startswith("#"):
            comment.append(line[1:].strip())
        else:
            name, _, value = line.partition("=")
            out[name] = (value, " ".join(comment))
            comment = []
    return out


def test_env_example_has_every_variable_with_its_default_and_help_and_no_other():
    entries = _parse_env_example(ENV_EXAMPLE.read_text())
    variables = _variables()
    assert set(entries) == set(variables), "variables in .env.example but not declared, or declared but missing"
    for env, (d, *_) in variables.items():
        value, comment = entries[env]
        assert value == env_value(d), env
        assert " ".join(d.setting.help.split()).removesuffix(".") in comment, env
    assert entries["LLOG_BATCH_MAX_INFLIGHT_FLUSHES"][0] == "8"
    assert entries["LLOG_COMPACTOR_IDLE_SLEEP_MS"][0] == "1000"
    assert entries["LLOG_OXIA_SERVICE_ADDRESS"][0] == "127.0.0.1:6648"  # required: its example
    assert entries["LLOG_VACUUM_DELETE_REDUNDANT_ENTRIES"][0] == "1"


def test_the_env_example_sections_follow_the_processes():
    """Each section's config is read by a process; every process's config is a section."""
    sections = {s.config for s in _env_example.SECTIONS}
    read = set(broker_cli.ENVIRONMENT) | {broker_cli.FLAGS.config} | set(compactor_cli.ENVIRONMENT)
    read |= {f.config for f in compactor_cli.FLAGS} | set(vacuum_cli.ENVIRONMENT) | {vacuum_cli.FLAGS.config}
    assert sections == read


# -- --help ---------------------------------------------------------------------------------------


def _help(parse_args, capsys) -> str:
    with pytest.raises(SystemExit) as info:
        parse_args(["--help"])
    assert info.value.code == 0
    return " ".join(capsys.readouterr().out.split())


PROCESSES = {
    "llog-broker": (broker_cli.parse_args, [broker_cli.FLAGS], broker_cli.ENVIRONMENT),
    "llog-compactor": (compactor_cli.parse_args, list(compactor_cli.FLAGS), compactor_cli.ENVIRONMENT),
    "llog-vacuum": (vacuum_cli.parse_args, [vacuum_cli.FLAGS], vacuum_cli.ENVIRONMENT),
}


@pytest.mark.parametrize("process", sorted(PROCESSES))
def test_help_lists_every_variable_of_the_process_with_its_default(process, capsys):
    parse_args, flag_sets, environment = PROCESSES[process]
    text = _help(parse_args, capsys)
    expected = [(d, flags.flag(d)) for flags in flag_sets for d in flags.declared()]
    expected += [(d, None) for config in environment for d in declared(config) if d.setting.env]
    assert len(expected) > 10
    for d, flag in expected:
        match = re.search(rf"{d.setting.env}, (default (\S+)|required|unset by default)", text)
        assert match, f"{process} --help does not list {d.setting.env} with its default"
        if match.group(2):
            assert match.group(2).rstrip(")") == (d.setting.start_default_text or env_value(d)), d.setting.env
        if flag:
            assert flag in text, f"{process} --help has no {flag}"


def test_broker_help_names_the_batching_variables_it_reads(capsys):
    text = _help(broker_cli.parse_args, capsys)
    assert "LLOG_BATCH_MAX_INFLIGHT_FLUSHES, default 8" in text
    assert "LLOG_BATCH_MAX_BLOCK_MS, default 1000" in text
    assert "--tail-cache-max-bytes" in text and "LLOG_TAIL_CACHE_MAX_BYTES, default 536870912 (512 MiB)" in text


def test_compactor_help_shows_each_default_once_from_its_declaration(capsys):
    text = _help(compactor_cli.parse_args, capsys)
    assert text.count("LLOG_COMPACTOR_IDLE_SLEEP_MS, default 1000") == 1
    assert "--vacuum-grace-ms" in text and "LLOG_VACUUM_GRACE_MS, default 3600000" in text


@pytest.mark.parametrize(("parse_args", "argv"), [
    (broker_cli.parse_args, ["--role", "read", "--broker-id", "b", "--host", "0.0.0.0", "--port", "1",
                             "--tail-cache-dir", "/d", "--tail-cache-max-bytes", "0"]),
    (compactor_cli.parse_args, ["--targets", "a:0", "--workers", "1", "--compactor-id", "c", "--bind-host", "h",
                                "--port", "1", "--discovery-interval-ms", "1", "--idle-sleep-ms", "1",
                                "--error-sleep-ms", "1", "--idle-jitter-ms", "1", "--error-jitter-ms", "1",
                                "--max-offsets-per-run", "1", "--max-bytes-per-run", "1", "--blob-cache-bytes", "1",
                                "--shutdown-timeout-ms", "1", "--vacuum-interval-ms", "1", "--vacuum-grace-ms", "1",
                                "--once"]),
    (vacuum_cli.parse_args, ["--dry-run", "--grace-ms", "0", "--keep-redundant-entries", "--json", "--quiet"]),
])
def test_the_existing_flag_names_still_work(parse_args, argv):
    parse_args(argv)


def test_broker_flags_override_the_environment():
    args = broker_cli.parse_args(["--port", "0", "--max-records-per-request", "7"])
    config = broker_cli.BrokerConfig.from_env({"LLOG_BROKER_PORT": "9", "LLOG_BROKER_ROLE": "read"},
                                              **broker_cli.FLAGS.values(args))
    assert (config.port, config.max_records_per_request, config.role) == (0, 7, "read")


def test_vacuum_flags_and_the_old_keep_flag():
    values = vacuum_cli.FLAGS.values
    assert values(vacuum_cli.parse_args([])) == {}
    assert values(vacuum_cli.parse_args(["--keep-redundant-entries"])) == {"delete_redundant_entries": False}
    assert values(vacuum_cli.parse_args(["--grace-ms", "5", "--delete-redundant-entries"])) == {
        "grace_ms": 5, "delete_redundant_entries": True}
    assert vacuum_cli.main(["--grace-ms", "-1"], env={}) == 2


# -- the machinery --------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Inner:
    level: int = setting("A level.", env="T_LEVEL", default=3, min=1, max=9)

    def __post_init__(self) -> None:
        check_settings(self)

    @classmethod
    def from_env(cls, env=None, **overrides):
        return from_env(cls, env, **overrides)


@dataclasses.dataclass(frozen=True)
class Demo:
    name: str = setting("A name.", env="T_NAME", example="x")
    ratio: float = setting("A ratio.", env="T_RATIO", default=0.5, min=0)
    on: bool = setting("On or off.", env="T_ON", default=True)
    region: str | None = setting("A region.", env="T_REGION", default=None, min=2, max=4, fallback_env=("T_ALT",))
    color: str = setting("A color.", env="T_COLOR", default="red", choices=("red", "blue"))
    again: int = same_as(Inner, "level")
    inner: Inner = nested(Inner)

    def __post_init__(self) -> None:
        check_settings(self)


def test_from_env_parses_by_the_declared_kind_and_blank_means_unset():
    demo = from_env(Demo, {"T_NAME": " n ", "T_RATIO": "1.5", "T_ON": "0", "T_ALT": "eu", "T_COLOR": "BLUE",
                           "T_LEVEL": " ", "T_REGION": ""})
    assert demo == Demo("n", 1.5, False, "eu", "blue", 3, Inner(3))
    assert from_env(Demo, {"T_NAME": "n", "T_LEVEL": "7"}).inner == Inner(7)
    assert from_env(Demo, {"T_NAME": "n", "T_ON": "yes"}).on is True


@pytest.mark.parametrize(("env", "message"), [
    ({}, "T_NAME is not set: A name., e.g. x"),
    ({"T_RATIO": "lots"}, "T_RATIO must be a number, got 'lots'"),
    ({"T_RATIO": "-1"}, "T_RATIO must be a number >= 0, got -1.0"),
    ({"T_ON": "maybe"}, "T_ON must be 1 or 0 (or true/false), got 'maybe'"),
    ({"T_REGION": "europe"}, "T_REGION must be 2-4 characters long, got 'europe'"),
    ({"T_COLOR": "green"}, "T_COLOR must be one of red, blue, got 'green'"),
    ({"T_LEVEL": "10"}, "T_LEVEL must be 1-9, got 10"),
    ({"T_LEVEL": "1.5"}, "T_LEVEL must be an integer, got '1.5'"),
])
def test_errors_name_the_variable_the_bound_and_the_value(env, message):
    with pytest.raises(ConfigError) as info:
        from_env(Demo, {"T_NAME": "n", **env} if "T_NAME" not in message else env)
    assert str(info.value) == message


def test_the_constructor_checks_the_declared_bounds_too():
    with pytest.raises(ConfigError, match="T_LEVEL must be 1-9, got 0"):
        Demo("n", again=0)
    with pytest.raises(ConfigError, match="T_NAME must not be empty"):
        Demo("")
    with pytest.raises(ConfigError, match="T_ON must be true or false, got 1"):
        Demo("n", on=1)  # type: ignore[arg-type]


def test_overrides_win_when_given():
    demo = from_env(Demo, {"T_NAME": "n", "T_LEVEL": "2"}, ratio=None, again=5)
    assert (demo.ratio, demo.again) == (0.5, 5)
    with pytest.raises(TypeError, match="no setting nope"):
        from_env(Demo, {"T_NAME": "n"}, nope=1)


def test_flags_come_from_the_declarations():
    parser = argparse.ArgumentParser()
    flags = Flags(Demo, prefix="demo-", skip=("region",))
    flags.add_to(parser)
    args = parser.parse_args(["--demo-name", "a", "--demo-ratio", "2", "--no-demo-on", "--demo-color", "blue"])
    assert flags.values(args) == {"name": "a", "ratio": 2.0, "on": False, "color": "blue"}
    assert flags.values(parser.parse_args([])) == {}
    help_text = " ".join(parser.format_help().split())
    assert "--demo-region" not in help_text
    assert "A ratio (T_RATIO, default 0.5)" in help_text and "A name (T_NAME, required, e.g. x)" in help_text


def test_compactor_config_shares_the_run_limits():
    assert declared(CompactionLimits)[0].setting is next(
        d.setting for d in declared(CompactorServiceConfig) if d.name == "max_offsets_per_run")
    with pytest.raises(ConfigError, match="LLOG_COMPACTOR_MAX_BYTES_PER_RUN must be >= 1, got 0"):
        CompactorServiceConfig(compactor_id="c", max_bytes_per_run=0)
    assert VacuumConfig.from_env({"LLOG_VACUUM_DELETE_REDUNDANT_ENTRIES": "0"}).delete_redundant_entries is False


def test_secrets_are_masked_by_declaration():
    text = repr(S3Config("bucket", secret_access_key="s3cr3t", session_token="t0k"))
    assert "s3cr3t" not in text and "t0k" not in text and "secret_access_key='***'" in text
    assert OxiaConfig.from_env({"LLOG_OXIA_SERVICE_ADDRESS": "h:1"}).service_address == "h:1"
