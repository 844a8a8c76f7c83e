"""A broker process serving Kafka over TLS with SASL (SASL_SSL) on real Oxia + MinIO, its users
in Oxia: ``llog-admin users set`` makes the first, who adds a second with Kafka's own
``kafka-configs --entity-type users``; Kafka's own Java tools (TopicCommand, the console producer and
consumer) authenticate with SCRAM-SHA-512 and trust the broker through a PEM truststore,
librdkafka with PLAIN; what they write reads back through ``/consume``, which stays open
(the HTTP contract has no authentication of its own). A users file serves beside them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import Producer

from devstack import java, kafka_tools_classpath
from devstack.pki import make_pki

from .conftest import REPO, BrokerProcess
from .test_kafka_tools import TOOLS, _tool

@pytest.fixture
def secured(broker_factory, llog_env, tmp_path) -> tuple[BrokerProcess, Path, Path]:
    """(the broker, a Java client config for alice over SCRAM-SHA-512, the CA); alice is set by
    llog-admin, bob through the admin API as alice, carol is in the users file."""
    pki = make_pki(tmp_path / "pki")
    users = tmp_path / "kafka-users"
    users.write_text("# name:password\ncarol:from-the-file\n")
    broker = broker_factory(env={
        "LLOG_KAFKA_PORT": "0", "LLOG_KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS": "0", "LLOG_BROKER_MAX_WAIT_MS": "500",
        **pki.broker_env,
        "LLOG_KAFKA_SASL": "on", "LLOG_KAFKA_SASL_USERS": str(users)})
    made = _admin(llog_env, "set", "alice", stdin="wonder\n")
    assert made.returncode == 0 and "alice: SCRAM-SHA-256, SCRAM-SHA-512 set" in made.stdout, made
    config = tmp_path / "client.properties"
    config.write_text(
        "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
        'sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required '
        'username="alice" password="wonder";\n'
        f"ssl.truststore.type=PEM\nssl.truststore.location={pki.ca}\n")
    # Kafka's kafka-configs, as alice, adds bob
    _config_command(broker, config, "--alter", "--entity-type", "users", "--entity-name", "bob",
                    "--add-config", "SCRAM-SHA-512=[password=builder]")
    described = _config_command(broker, config, "--describe", "--entity-type", "users", "--entity-name", "bob")
    assert "SCRAM-SHA-512=iterations=4096" in described, described
    return broker, config, Path(pki.ca)


def _config_command(broker: BrokerProcess, config: Path, *args: str) -> str:
    """Kafka's ``kafka-configs`` (``kafka.admin.ConfigCommand``, in Kafka's core jar)."""
    done = subprocess.run([java(), "-cp", kafka_tools_classpath(), "kafka.admin.ConfigCommand", "--bootstrap-server",
                           broker.kafka, "--command-config", str(config), *args],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, f"kafka-configs exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def _admin(env: dict, *argv: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "server.leaderless_log_admin", "users", *argv], input=stdin,
                          env={**env, "PYTHONPATH": str(REPO)}, cwd=REPO, capture_output=True, text=True, timeout=60,
                          check=False)


def test_kafkas_tools_and_librdkafka_over_sasl_ssl_read_back_through_consume(secured, llog_env, unique_topic):
    broker, config, ca = secured
    bs = ["--bootstrap-server", broker.kafka]
    assert f"Created topic {unique_topic}" in _tool("TopicCommand", *bs, "--command-config", str(config), "--create",
                                                    "--topic", unique_topic, "--partitions", "1")
    lines = [f"java-{i}" for i in range(20)]
    _tool("ConsoleProducer", *bs, "--producer.config", str(config), "--topic", unique_topic,
          stdin="\n".join(lines) + "\n")
    delivered: list = []
    for user, password in (("bob", "builder"), ("carol", "from-the-file")):  # Oxia's, and the file's
        p = Producer({"bootstrap.servers": broker.kafka, "security.protocol": "SASL_SSL", "ssl.ca.location": str(ca),
                      "sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": password,
                      "enable.idempotence": True})
        for i in range(10):
            p.produce(unique_topic, value=f"rdkafka-{user}-{i}".encode(), on_delivery=lambda e, m: delivered.append(e))
        assert p.flush(60) == 0
    assert delivered == [None] * 20
    out = _tool("consumer.ConsoleConsumer", *bs, "--consumer.config", str(config), "--topic", unique_topic,
                "--from-beginning", "--max-messages", "40", "--group", f"{unique_topic}-g")
    expected = lines + [f"rdkafka-{u}-{i}" for u in ("bob", "carol") for i in range(10)]
    assert out.split() == expected
    assert [v.decode() for _, v in broker.client.consume_all(unique_topic, 0)] == expected
    assert broker.client.counter("kafka_authentications_total", mechanism="SCRAM-SHA-512", outcome="ok") >= 3
    assert broker.client.counter("kafka_authentications_total", mechanism="PLAIN", outcome="ok") >= 2
    assert _admin(llog_env, "list").stdout.splitlines() == ["alice\tSCRAM-SHA-256(iterations=4096) SCRAM-SHA-512(iterations=4096)",
                      "bob\tSCRAM-SHA-512(iterations=4096)"]


def test_the_java_client_with_a_wrong_password_fails_with_an_authentication_error(secured, unique_topic):
    broker, config, _ = secured
    wrong = config.with_name("wrong.properties")
    wrong.write_text(config.read_text().replace('password="wonder"', 'password="nope"'))
    done = subprocess.run([java(), "-cp", kafka_tools_classpath(), TOOLS + "TopicCommand", "--bootstrap-server",
                           broker.kafka, "--command-config", str(wrong), "--list"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode != 0
    assert "invalid username or password" in done.stdout + done.stderr
    assert broker.client.counter("kafka_authentications_total", mechanism="SCRAM-SHA-512", outcome="failed") >= 1
