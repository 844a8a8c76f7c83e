"""The HTTP fuzzer (``loadtest/fuzz_http.py``), short, against a real broker
and a real compactor service on the session's Oxia + MinIO.

A fixed seed, about 1,800 requests after a 300-request warm-up: the same
checks as the full run (documented statuses only, the JSON error body, no
hung connection, GET /health between bursts, RSS and fds back to the
baseline, nothing of a refused request stored and every acknowledged record
at its offset).
"""

from __future__ import annotations

import pytest

from loadtest._fuzz.runner import Target
from loadtest._fuzz.services import FUZZ_ENV
from loadtest._fuzz.session import Options, run_fuzz
from tests.integration._compactor_process import Service

pytestmark = pytest.mark.integration

SEED = 20261127
READ_TIMEOUT_S = 1.0


def test_a_fixed_seed_fuzz_run_passes_every_check(broker_factory, llog_env, tmp_path) -> None:
    timeout_ms = str(int(READ_TIMEOUT_S * 1000))
    env = {**FUZZ_ENV, "LLOG_BROKER_HTTP_READ_TIMEOUT_MS": timeout_ms, "LLOG_COMPACTOR_HTTP_READ_TIMEOUT_MS": timeout_ms}
    broker = broker_factory(env=env)
    compactor = Service(llog_env, tmp_path, "fuzz-compactor", extra_env=env)
    try:
        compactor.wait_healthy()
        targets = {
            "broker": Target("broker", broker.host, broker.port, broker.proc.pid),
            "compactor": Target("compactor", "127.0.0.1", compactor.port, compactor.proc.pid),
        }
        report = run_fuzz(targets, Options(requests=1800, seed=SEED, read_timeout_s=READ_TIMEOUT_S,
                                           warmup_requests=300, settle_timeout_s=20.0))
    finally:
        compactor.close()
    assert report.ok, report.render()
    assert report.requests >= 1800
    # The run reached what it claims to check: every family of cases, both
    # services, stored and refused produces.
    kinds = set(report.by_kind)
    assert {"binary-off-by-one", "json-invalid-utf8", "slow", "pipeline", "get-with-body", "headers",
            "method", "abort", "post-body", "admin-valid", "admin-wrong-type", "admin-paths"} <= kinds, kinds
    assert {"200", "400", "405", "408", "411", "413"} <= set(report.by_status), report.by_status
    assert report.storage["acknowledged_records"] > 0 and report.storage["refused"] > 0
    assert set(report.resources) == {"broker", "compactor"}
