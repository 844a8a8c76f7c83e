"""Short runs of the Jepsen-style fault test (``python -m testing.chaos``).

Real processes: a dedicated Oxia + MinIO (the chaos test kills them, so it
cannot share the session stack), three role-both brokers and compactor
services; producers write while a nemesis injects faults, then every
partition is read with the library and through every broker's /consume and
the history is checked (see ``testing/history.py``); a consumer that
followed the log during the faults is checked against the final reads too.

- SIGKILLs of brokers and the compactor every couple of seconds and of the
  standalone Oxia once (25 s of faults, 35-60 s in all), with idempotent
  HTTP producers (SPEC 7.12) that send every batch not acknowledged again
  until it is, beside librdkafka idempotent producers through the Kafka
  listeners (over TLS with SASL), and a consumer group reading through them:
  each batch and message must be in the log once, and the group may skip no
  record;
- every wider fault together (45 s of faults, 60-100 s in all): SIGSTOP
  pauses past the Oxia session of brokers, compactors, Oxia servers and
  MinIO; a MinIO restart; two compactors competing for claims; a 3-server
  Oxia cluster losing a server under load.

Progress is asserted as "acknowledgements in both halves of the run" and
"every fault happened", never as a throughput that a slow machine misses.
On failure the message is the run's summary: every violation kind with
examples, and where the processes' logs are.
"""

from __future__ import annotations

import pytest

from testing.chaos import ChaosOptions, ChaosReport, run

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.exclusive]


def _assert_progress_in_both_halves(report: ChaosReport) -> None:
    quarters = report.acknowledged_by_window
    assert len(quarters) == 4, report.summary()
    assert quarters[0] + quarters[1] > 0 and quarters[2] + quarters[3] > 0, report.summary()


def test_idempotent_http_and_kafka_writes_are_stored_once_under_sigkills_and_an_oxia_restart(tmp_path) -> None:
    """Idempotent HTTP producers and librdkafka idempotent producers (acks=all, through the
    brokers' Kafka listeners) on the same partitions, read by a librdkafka consumer group whose
    coordinator the faults move and by kafka-python through fetch sessions (neither may skip
    anything), while DeleteRecords moves log starts through the listeners. The listeners serve
    TLS with SASL (SCRAM for librdkafka, PLAIN for kafka-python): every reconnection after a
    kill authenticates again."""
    opts = ChaosOptions(
        idempotent=True,
        kafka=True,
        kafka_security="SASL_SSL",
        groups=2,
        sessions=True,
        delete_records=True,  # through the Kafka listeners: every reader checked from the final starts
        seconds=25.0,  # the broker turn, the Oxia restart and the compactor turn, on a loaded 2-core machine
        producers=8,
        partitions=16,
        brokers=3,
        fault_interval_s=(1.0, 2.0),
        recover_s=30.0,
        compaction_wait_s=20.0,
        seed=20261124,
        data_dir=tmp_path / "chaos",
    )
    report = run(opts, say=print)
    print(report.summary())
    # The harness did its job: work was acknowledged while faulting and every kind of fault happened.
    _assert_progress_in_both_halves(report)
    assert report.kills.get("broker", 0) >= 1 and report.kills.get("compactor", 0) >= 1, report.nemesis_events
    assert report.kills.get("oxia") == 1, report.nemesis_events
    assert not report.restart_failures, report.nemesis_events
    # Faults left outcomes unknown, and their batches were sent again (the checker allows one copy each).
    assert report.idempotence["retried"] > 0, report.summary()
    assert report.idempotence["kafka_delivered"] > 500, report.summary()
    assert report.group["records"] > 500 and report.group["restarts"] >= 1, report.summary()
    assert report.sessions["records"] > 500, report.summary()  # kafka-python's reads through fetch sessions
    assert report.purger["moved"] >= 2, report.summary()  # DeleteRecords moved log starts while faulting
    assert report.ok, f"{report.summary()}\nprocess logs: {report.data_dir}/logs"


def test_no_acknowledged_write_is_lost_or_duplicated_under_pauses_minio_and_oxia_node_loss_two_compactors(
    tmp_path,
) -> None:
    opts = ChaosOptions(
        seconds=36.0,
        producers=8,
        partitions=8,
        brokers=3,
        fault_interval_s=(1.0, 2.0),
        recover_s=40.0,
        compaction_wait_s=30.0,
        seed=20261127,
        data_dir=tmp_path / "chaos",
        pause=True,
        minio_restart=True,
        compactors=2,
        oxia_node_loss=True,
    )
    report = run(opts, say=print)
    print(report.summary())
    _assert_progress_in_both_halves(report)
    kills = report.kills
    # SIGKILLs of each kind are the first test's; here the turns share the run with three long faults.
    assert kills.get("broker", 0) + kills.get("compactor", 0) >= 1, report.nemesis_events
    assert kills.get("pause", 0) >= 1, report.nemesis_events
    assert kills.get("s3") == 1 and kills.get("oxia-node") == 1 and "oxia" not in kills, report.nemesis_events
    assert not report.restart_failures, report.nemesis_events
    assert report.ok, f"{report.summary()}\nprocess logs: {report.data_dir}/logs"
