"""Shared fixtures: one local Oxia + S3 stack per session, one root prefix per test.

The stack starts only when a test asks for it (``stack`` or anything built
on it), so unit tests never pay for it. Tests are isolated by a fresh
``LLOG_ROOT_PREFIX`` (``t-<8 hex>``), not by restarting servers.

Environment:
    LLOG_TEST_REUSE_STACK=<data-dir>  use a stack already started with
        ``python -m devstack up --data-dir <data-dir>`` instead of
        starting one (fast edit-test loops)
    LLOG_TEST_OXIA_SHARDS=<n>         shards of the session stack's Oxia (default 1)
    LLOG_DEVSTACK_S3=versitygw        run the tests against versitygw instead of MinIO
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Iterator

import pytest

from server._config import OxiaConfig, S3Config
from devstack import LocalStack, StackSettings, read_state

REPO_ROOT = Path(__file__).resolve().parent.parent


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "integration: needs the local Oxia + S3 stack (started once per session)")
    config.addinivalue_line("markers", "slow: takes well over ten seconds")
    config.addinivalue_line(
        "markers", "exclusive: loads the machine or prints rates, so it runs alone (run_tests.sh runs it last)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Anything under tests/integration or using the stack is an integration
    # test, so `-m "not integration"` selects exactly the stack-free tests.
    # Integration tests that share the machine (not `exclusive`) are grouped
    # for `pytest-xdist --dist loadgroup`: a module's tests stay on one worker,
    # so its module fixtures start once, and every test of the one SparkSession
    # (the `spark` fixture) on one worker, so one JVM starts.
    integration_dir = REPO_ROOT / "tests" / "integration"
    for item in items:
        in_dir = integration_dir in Path(str(item.fspath)).parents
        fixtures = getattr(item, "fixturenames", ())
        if in_dir or "stack" in fixtures:
            item.add_marker(pytest.mark.integration)
            if item.get_closest_marker("exclusive") is None:
                group = "spark" if "spark" in fixtures else Path(str(item.fspath)).stem
                item.add_marker(pytest.mark.xdist_group(group))


def new_root_prefix() -> str:
    """A root prefix no other test uses: ``t-<8 hex>``."""
    return f"t-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StackSettings]:
    """Settings of the session's running stack (standalone Oxia + MinIO, bucket ``llog``).

    Started on first use and stopped at the end of the session, or taken
    from ``LLOG_TEST_REUSE_STACK`` and left running.
    """
    reuse = os.environ.get("LLOG_TEST_REUSE_STACK", "").strip()
    if reuse:
        state = read_state(Path(reuse))
        if state is None or not state.all_alive:
            pytest.fail(
                f"LLOG_TEST_REUSE_STACK={reuse}: no running stack there; start one with "
                f"`python -m devstack up --data-dir {reuse}` or unset the variable",
                pytrace=False,
            )
        yield state.settings
        return
    shards = int(os.environ.get("LLOG_TEST_OXIA_SHARDS", "1"))
    with LocalStack(tmp_path_factory.mktemp("llog-stack"), oxia_shards=shards) as local:
        yield local.settings


TEST_TOPICS_ENV = {"LLOG_TOPIC_DEFAULT_PARTITIONS": "64"}


@pytest.fixture
def llog_env(stack: StackSettings) -> dict[str, str]:
    """``LLOG_*`` variables for the session stack under a fresh root prefix. Topics a test's
    brokers auto-create get 64 partitions (tests pick partitions freely; the catalogue's
    own tests set their counts)."""
    return {**stack.env(root_prefix=new_root_prefix()), **TEST_TOPICS_ENV}


@pytest.fixture
def oxia_config(llog_env: dict[str, str]) -> OxiaConfig:
    return OxiaConfig.from_env(llog_env)


@pytest.fixture
def s3_config(llog_env: dict[str, str]) -> S3Config:
    return S3Config.from_env(llog_env)
