"""A short run of the Jepsen-style fault test (``python -m testing.chaos``).

Real processes: a dedicated standalone Oxia + MinIO (the chaos test SIGKILLs
Oxia, so it cannot share the session stack), three role-both brokers and one
compactor service. Eight producers write for 20 s while a nemesis SIGKILLs
brokers and the compactor every couple of seconds and Oxia once; then every
partition is read with the library and through every broker's /consume and
the history is checked (see ``testing/history.py``); a consumer
that followed the log during the faults is checked against the final reads
too. 30-55 s in all.

On failure the message is the run's summary: every violation kind with
examples, and where the processes' logs are.
"""

from __future__ import annotations

import pytest

from testing.chaos import ChaosOptions, run

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_no_acknowledged_write_is_lost_or_duplicated_under_sigkills_and_an_oxia_restart(tmp_path) -> None:
    opts = ChaosOptions(
        seconds=20.0,
        producers=8,
        partitions=16,
        brokers=3,
        fault_interval_s=(1.5, 3.0),
        recover_s=30.0,
        compaction_wait_s=20.0,
        seed=20261124,
        data_dir=tmp_path / "chaos",
    )
    report = run(opts, say=print)
    print(report.summary())
    # The harness did its job: work was acknowledged and every kind of fault happened.
    assert report.batches.get("ok", 0) > 200, report.summary()
    assert report.kills.get("broker", 0) >= 1 and report.kills.get("compactor", 0) >= 1, report.nemesis_events
    assert report.kills.get("oxia") == 1, report.nemesis_events
    assert not report.restart_failures, report.nemesis_events
    assert report.ok, f"{report.summary()}\nprocess logs: {report.data_dir}/logs"
