"""The Kafka listener with TLS, client certificates and SASL, against librdkafka and
kafka-python over in-memory stores: what a client that is let in writes reads back; a
client that is not is refused with Kafka's error, and the listener serves on."""

from __future__ import annotations

import socket
import ssl
import struct
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka import TopicPartition as CkPartition
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from server._broker.kafka_front import KafkaFront
from server._catalogue.topic_config import TopicDefaults
from devstack.pki import Pki, make_pki
from tests._kafka_frames import FrameConnection, mutate_frame
from tests._waiting import wait_until
from tests.unit.test_broker import Cluster

USERS = "alice:wonder:land\nbob:builder\n"


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def _listener(cluster: Cluster, **security):
    broker = cluster.broker(topics=TopicDefaults(partitions=2), kafka_port=0, max_wait_ms_cap=500,
                            kafka_group_initial_rebalance_delay_ms=0, **security)
    front = KafkaFront(broker, cluster.meta)
    return broker, front, f"127.0.0.1:{front.port}"


@pytest.fixture
def secured(pki, tmp_path):
    """A listener speaking TLS and SASL: (broker, bootstrap, users file)."""
    users = tmp_path / "users"
    users.write_text(USERS)
    with Cluster() as cluster:
        broker, front, bootstrap = _listener(cluster, kafka_tls_cert=pki.server_cert, kafka_tls_key=pki.server_key,
                                             kafka_sasl_users=str(users))
        try:
            yield broker, bootstrap, users
        finally:
            front.close()


def _ck_produce(conf: dict, topic: str, values: list[bytes]) -> tuple[int, list]:
    """(records delivered, the errors librdkafka reported on the way)."""
    errors: list = []
    delivered: list = []
    p = Producer({"enable.idempotence": True, "acks": "all", "linger.ms": 5, "message.timeout.ms": 20_000,
                  "error_cb": errors.append, **conf})
    for v in values:
        p.produce(topic, value=v, on_delivery=lambda e, m: errors.append(e) if e else delivered.append(m))
    p.flush(30)
    return len(delivered), errors


def _delivered(conf: dict, topic: str, values: list[bytes]) -> bool:
    return _ck_produce(conf, topic, values)[0] == len(values)


def _refused(conf: dict, code: int, says: str) -> None:
    """A produce delivered nothing, and librdkafka reported ``code`` saying ``says``."""
    delivered, errors = _ck_produce({**conf, "message.timeout.ms": 1500}, "orders", [b"refused"])
    assert delivered == 0 and any(e.code() == code and says in e.str() for e in errors), errors


def _py_read(topic: str, expected: int, **conf) -> list[bytes]:
    c = KafkaConsumer(auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=2000, **conf)
    c.assign([TopicPartition(topic, p) for p in range(2)])
    got: list[bytes] = []
    wait_until(lambda: got.extend(m.value for m in c) or len(got) >= expected, timeout_s=30,
               what=f"{expected} records read back")
    c.close()
    return sorted(got)


def test_sasl_ssl_scram_and_plain_clients_write_and_read_the_same_records(secured, pki):
    broker, bootstrap, _ = secured
    values = [b"r%04d" % i * 300 for i in range(400)]
    ck = {"bootstrap.servers": bootstrap, "security.protocol": "SASL_SSL", "ssl.ca.location": pki.ca,
          "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice", "sasl.password": "wonder:land"}
    assert _delivered(ck, "orders", values[:200])
    py = dict(bootstrap_servers=bootstrap, security_protocol="SASL_SSL", ssl_cafile=pki.ca)
    kp = KafkaProducer(sasl_mechanism="PLAIN", sasl_plain_username="bob", sasl_plain_password="builder",
                       enable_idempotence=True, acks="all", **py)
    for v in values[200:]:
        kp.send("orders", v)
    kp.flush(30)
    kp.close()
    got = _py_read("orders", 400, sasl_mechanism="SCRAM-SHA-256", sasl_plain_username="bob",
                   sasl_plain_password="builder", **py)
    assert got == sorted(values)
    # a librdkafka group over SASL_SSL: its coordinator's connection authenticates too
    c = Consumer({**ck, "group.id": "g", "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe(["orders"])
    seen: list[bytes] = []

    def read_all() -> bool:
        seen.extend(m.value() for m in c.consume(100, 0.5) if not m.error())
        return len(seen) >= 400

    wait_until(read_all, timeout_s=30, what="the group reads all 400")
    c.commit(asynchronous=False)
    committed = c.committed([CkPartition("orders", 0), CkPartition("orders", 1)], timeout=10)
    c.close()
    assert sorted(seen) == sorted(values) and sum(tp.offset for tp in committed) == 400
    counters = broker.metrics.snapshot()["counters"]["kafka_authentications_total"]
    assert counters["mechanism=SCRAM-SHA-512,outcome=ok"] >= 2 and counters["mechanism=PLAIN,outcome=ok"] >= 1


@pytest.mark.parametrize("mechanism,user,password", [
    ("SCRAM-SHA-256", "alice", "wrong"), ("PLAIN", "carol", "builder"), ("SCRAM-SHA-512", "carol", "x"),
])
def test_a_wrong_password_or_user_is_an_authentication_error_in_the_client(secured, pki, mechanism, user, password):
    broker, bootstrap, _ = secured
    _refused({"bootstrap.servers": bootstrap, "security.protocol": "SASL_SSL", "ssl.ca.location": pki.ca,
              "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password},
             KafkaError._AUTHENTICATION, "invalid username or password")
    assert broker.metrics.counter("kafka_authentications_total", mechanism=mechanism, outcome="failed") >= 1


def test_a_user_added_to_the_file_authenticates_without_a_restart(secured, pki):
    broker, bootstrap, users = secured
    conf = {"bootstrap.servers": bootstrap, "security.protocol": "SASL_SSL", "ssl.ca.location": pki.ca,
            "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "dora", "sasl.password": "explorer"}
    _refused(conf, KafkaError._AUTHENTICATION, "invalid username or password")
    users.write_text(USERS + "dora:explorer\n")
    assert _delivered(conf, "orders", [b"dora's"])


def test_a_client_without_sasl_or_without_tls_is_refused_and_the_listener_serves_on(secured, pki):
    broker, bootstrap, _ = secured
    host, port = bootstrap.split(":")
    with socket.create_connection((host, int(port)), timeout=5) as s:  # plaintext to a TLS port
        s.sendall(_metadata_frame())
        assert s.recv(1) == b""
    ctx = ssl.create_default_context(cafile=pki.ca)
    with ctx.wrap_socket(socket.create_connection((host, int(port)), timeout=5), server_hostname="localhost") as s:
        s.sendall(_metadata_frame())  # TLS, but no SASL: Metadata before authentication
        assert s.recv(1) == b""
    counters = broker.metrics.snapshot()["counters"]
    assert counters["kafka_connections_closed_total"]["reason=tls"] >= 1
    assert counters["kafka_protocol_errors_total"]["reason=unauthenticated"] >= 1
    assert _delivered({"bootstrap.servers": bootstrap, "security.protocol": "SASL_SSL", "ssl.ca.location": pki.ca,
                       "sasl.mechanism": "PLAIN", "sasl.username": "bob", "sasl.password": "builder"},
                      "orders", [b"still served"])


def _metadata_frame(correlation_id: int = 1, client_id: str = "raw") -> bytes:
    r = MetadataRequest[1](topics=None)
    r.with_header(correlation_id=correlation_id, client_id=client_id)
    body = bytes(r.encode(header=True))
    return struct.pack(">i", len(body)) + body


def test_pipelined_requests_over_tls_are_answered_in_order_while_more_are_read(pki):
    """One TLS connection read and written at once: 300 requests sent before any answer is
    read (more than the 16 the listener takes in at a time), answered in order."""
    with Cluster() as cluster:
        _, front, bootstrap = _listener(cluster, kafka_tls_cert=pki.server_cert, kafka_tls_key=pki.server_key)
        try:
            ctx = ssl.create_default_context(cafile=pki.ca)
            host, port = bootstrap.split(":")
            with ctx.wrap_socket(socket.create_connection((host, int(port)), timeout=10),
                                 server_hostname="localhost") as s:
                s.sendall(b"".join(_metadata_frame(i, "c" * 2000) for i in range(300)))
                f = s.makefile("rb")
                for i in range(300):
                    size = struct.unpack(">i", f.read(4))[0]
                    answer = MetadataResponse[1].decode(f.read(size), header=True)
                    assert answer.header.correlation_id == i and len(answer.brokers) == 1
        finally:
            front.close()


def test_client_certificates_are_required_and_checked_against_the_authority(pki):
    with Cluster() as cluster:
        broker, front, bootstrap = _listener(cluster, kafka_tls_cert=pki.server_cert, kafka_tls_key=pki.server_key,
                                             kafka_tls_client_ca=pki.ca)
        try:
            base = {"bootstrap.servers": bootstrap, "security.protocol": "SSL", "ssl.ca.location": pki.ca}
            assert _delivered({**base, "ssl.certificate.location": pki.client_cert,
                               "ssl.key.location": pki.client_key}, "orders", [b"signed"])
            refused = broker.metrics.counter("kafka_connections_closed_total", reason="tls")
            _refused(base, KafkaError._TRANSPORT, "certificate required")
            _refused({**base, "ssl.certificate.location": pki.other_client_cert,
                      "ssl.key.location": pki.other_client_key}, KafkaError._TRANSPORT, "unknown ca")
            assert broker.metrics.counter("kafka_connections_closed_total", reason="tls") >= refused + 2
            got = _py_read("orders", 1, bootstrap_servers=bootstrap, security_protocol="SSL", ssl_cafile=pki.ca,
                           ssl_certfile=pki.client_cert, ssl_keyfile=pki.client_key)
            assert got == [b"signed"]
        finally:
            front.close()


def test_a_client_that_trusts_another_authority_refuses_the_broker(pki):
    with Cluster() as cluster:
        _, front, bootstrap = _listener(cluster, kafka_tls_cert=pki.server_cert, kafka_tls_key=pki.server_key)
        try:
            _refused({"bootstrap.servers": bootstrap, "security.protocol": "SSL", "ssl.ca.location": pki.other_ca},
                     KafkaError._SSL, "certificate verify failed")
        finally:
            front.close()


def test_a_certificate_that_does_not_load_is_a_config_error_naming_the_files(pki, tmp_path):
    from server._errors import ConfigError
    with Cluster() as cluster:
        with pytest.raises(ConfigError, match="LLOG_KAFKA_TLS_CERT.*server-key.pem|other-ca.pem"):
            _listener(cluster, kafka_tls_cert=pki.other_ca, kafka_tls_key=pki.server_key)
        with pytest.raises(ConfigError, match="LLOG_KAFKA_SASL_USERS"):
            _listener(cluster, kafka_sasl_users=str(Path(tmp_path) / "absent"))


# -- fuzzing the gate ----------------------------------------------------------------------------

FUZZ_FRAMES = 1500
FUZZ_SEED = 20261128


def _frame(request, correlation_id: int) -> bytes:
    request.with_header(correlation_id=correlation_id, client_id="fuzz")
    return bytes(request.encode(header=True))


def test_mutated_sasl_exchanges_over_tls_are_answered_or_closed_and_the_broker_serves_on(secured, pki, caplog):
    """Each connection starts afresh: a handshake for a random mechanism, then SaslAuthenticate
    tokens (PLAIN's or SCRAM's, right or wrong passwords) and, once in, Metadata; any frame may be
    mutated. Every frame is answered with its correlation id, or the connection closed; no handler
    fails; a real client authenticates afterwards."""
    import random

    from kafka.net.sasl.scram import ScramClient
    from kafka.protocol.sasl import SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest

    broker, bootstrap, _ = secured
    host, port = bootstrap.split(":")
    rng = random.Random(FUZZ_SEED)
    ctx = ssl.create_default_context(cafile=pki.ca)
    conn = FrameConnection(lambda: ctx.wrap_socket(socket.create_connection((host, int(port)), timeout=10),
                                                   server_hostname="localhost"))
    answered = closed = authenticated = 0
    state, mechanism, scram = "new", "", None
    for i in range(FUZZ_FRAMES):
        cid, version = i + 1, rng.randint(0, 2)
        if state == "new":
            mechanism = rng.choice(["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI"])
            frame = _frame(SaslHandshakeRequest[1](mechanism=mechanism), cid)
            scram = (ScramClient("alice", rng.choice(["wonder:land", "wrong"]), mechanism)
                     if mechanism.startswith("SCRAM") else None)
        elif state == "handshaken":
            token = scram.first_message() if scram is not None else rng.choice(
                [b"\0alice\0wonder:land", b"\0bob\0builder", b"\0alice\0nope", b"\0\0"])
            frame = _frame(SaslAuthenticateRequest[version](auth_bytes=token), cid)
        elif state == "scram-final":
            frame = _frame(SaslAuthenticateRequest[version](auth_bytes=scram.final_message()), cid)
        else:
            frame = _frame(MetadataRequest[rng.randint(1, 12)](topics=None, allow_auto_topic_creation=False), cid)
        mutated = rng.random() < 0.3
        if mutated:
            frame = mutate_frame(rng, frame)
        answer = conn.exchange(frame)
        if answer is None:
            closed += 1
            state = "new"
            continue
        answered += 1
        if mutated:  # answered, so its header still parsed: its correlation id comes back
            conn.close()  # what state the connection is in now is the listener's business
            state = "new"
            continue
        assert struct.unpack_from(">i", answer)[0] == cid, f"seed {FUZZ_SEED}, frame {i}"
        if state == "new":
            state = "new" if mechanism == "GSSAPI" else "handshaken"
        elif state in ("handshaken", "scram-final"):
            reply = SaslAuthenticateResponse[version].decode(answer, header=True)
            if reply.error_code != 0:
                state = "new"
            elif state == "handshaken" and scram is not None:
                scram.process_server_first_message(reply.auth_bytes)
                state = "scram-final"
            else:
                state = "authenticated"
                authenticated += 1
    conn.close()
    print(f"[fuzz-sasl] {FUZZ_FRAMES} frames: {answered} answered, {closed} closed, {authenticated} authenticated")
    assert answered > FUZZ_FRAMES // 4 and closed > FUZZ_FRAMES // 20 and authenticated > 10
    assert "a handler failed" not in caplog.text and "Traceback" not in caplog.text
    assert _delivered({"bootstrap.servers": bootstrap, "security.protocol": "SASL_SSL", "ssl.ca.location": pki.ca,
                       "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "bob", "sasl.password": "builder"},
                      "orders", [b"after the fuzz"])


# -- SCRAM users in Oxia -------------------------------------------------------------------------


@pytest.fixture
def oxia_users(pki):
    """A SASL_SSL listener whose users live in Oxia only, with one user set as llog-admin sets it:
    (the listener's front, bootstrap, the store, alice's librdkafka settings)."""
    from server._kafka.scram import ScramCredential
    from server._kafka.scram_users import ScramUsers
    from server._protocol.keys import LogLayout

    with Cluster() as cluster:
        broker, front, bootstrap = _listener(cluster, kafka_tls_cert=pki.server_cert, kafka_tls_key=pki.server_key,
                                             kafka_sasl="on")
        store = ScramUsers(cluster.meta, LogLayout("llog"))
        store.upsert("alice", "SCRAM-SHA-512", ScramCredential.derive("SCRAM-SHA-512", "wonder", b"salt-1"))
        alice = {"bootstrap.servers": bootstrap, "security.protocol": "SASL_SSL", "ssl.ca.location": pki.ca,
                 "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice", "sasl.password": "wonder"}
        try:
            yield front, bootstrap, store, alice
        finally:
            front.close()


def test_users_added_through_the_admin_api_authenticate_on_every_mechanism_and_deleted_ones_do_not(oxia_users):
    from confluent_kafka.admin import (AdminClient, ScramCredentialInfo, ScramMechanism,
                                       UserScramCredentialDeletion, UserScramCredentialUpsertion)

    _, bootstrap, store, alice = oxia_users
    assert _delivered(alice, "orders", [b"from alice"])
    admin = AdminClient({k: v for k, v in alice.items()})
    done = admin.alter_user_scram_credentials([
        UserScramCredentialUpsertion("bob", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192), b"builder"),
        UserScramCredentialUpsertion("bob", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"builder")])
    for f in done.values():
        f.result(10)
    described = admin.describe_user_scram_credentials(["bob"])["bob"].result(10)
    assert sorted((i.mechanism, i.iterations) for i in described.scram_credential_infos) == [
        (ScramMechanism.SCRAM_SHA_256, 8192), (ScramMechanism.SCRAM_SHA_512, 4096)]
    assert store.describe() == {"alice": {"SCRAM-SHA-512": 4096},
                                "bob": {"SCRAM-SHA-256": 8192, "SCRAM-SHA-512": 4096}}
    bob = {**alice, "sasl.username": "bob", "sasl.password": "builder"}
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"):  # PLAIN checks the password against SCRAM's
        assert _delivered({**bob, "sasl.mechanism": mechanism}, "orders", [mechanism.encode()])
    _refused({**bob, "sasl.password": "nope", "sasl.mechanism": "PLAIN"}, KafkaError._AUTHENTICATION,
             "invalid username or password")
    for f in admin.alter_user_scram_credentials([
            UserScramCredentialDeletion("bob", ScramMechanism.SCRAM_SHA_256)]).values():
        f.result(10)
    _refused({**bob, "sasl.mechanism": "SCRAM-SHA-256"}, KafkaError._AUTHENTICATION, "invalid username or password")
    assert _delivered({**bob, "sasl.mechanism": "SCRAM-SHA-512"}, "orders", [b"bob still on 512"])


def test_user_api_errors_are_kafkas_codes(oxia_users):
    from kafka.protocol.admin import AlterUserScramCredentialsRequest as A, DescribeUserScramCredentialsRequest as D

    from server._kafka.service import HANDLERS
    from server._kafka.codec import decode_request

    front, _, _, _ = oxia_users

    def ask(request):
        request.with_header(correlation_id=1, client_id="t")
        return HANDLERS[request.API_KEY](front.service, decode_request(bytes(request.encode(header=True))))

    up = A.ScramCredentialUpsertion
    got = ask(A[0](deletions=[A.ScramCredentialDeletion(name="nobody", mechanism=1)], upsertions=[
        up(name="carol", mechanism=3, iterations=4096, salt=b"s", salted_password=b"x" * 32),
        up(name="dave", mechanism=1, iterations=100, salt=b"s", salted_password=b"x" * 32),
        up(name="erin", mechanism=1, iterations=4096, salt=b"s", salted_password=b"x" * 32),
        up(name="erin", mechanism=1, iterations=4096, salt=b"s", salted_password=b"x" * 32),
        up(name="frank", mechanism=2, iterations=4096, salt=b"s", salted_password=b"x" * 64)]))
    assert {r.user: r.error_code for r in got.results} == {"nobody": 91, "carol": 33, "dave": 93, "erin": 92,
                                                           "frank": 0}
    described = ask(D[0](users=[D.UserName(name="frank"), D.UserName(name="nobody")]))
    assert [(r.user, r.error_code, [(c.mechanism, c.iterations) for c in r.credential_infos])
            for r in described.results] == [("frank", 0, [(2, 4096)]), ("nobody", 91, [])]
    assert sorted(r.user for r in ask(D[0](users=None)).results) == ["alice", "frank"]


def test_llog_admin_users_set_list_and_delete(oxia_users):
    import argparse

    from server._admin.cli import parse_args, run_users
    from server._protocol.keys import LogLayout

    _, _, store, alice = oxia_users
    meta, layout = store.meta, LogLayout("llog")
    args: argparse.Namespace = parse_args(["users", "set", "gus", "--mechanism", "SCRAM-SHA-256"])
    assert run_users(args, meta, layout, lambda: "gus-pw") == ["gus: SCRAM-SHA-256 set (4096 iterations)"]
    assert run_users(parse_args(["users", "list"]), meta, layout) == [
        "alice\tSCRAM-SHA-512(iterations=4096)", "gus\tSCRAM-SHA-256(iterations=4096)"]
    gus = {**alice, "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "gus", "sasl.password": "gus-pw"}
    assert _delivered(gus, "orders", [b"gus"])
    run_users(parse_args(["users", "delete", "gus"]), meta, layout)
    _refused(gus, KafkaError._AUTHENTICATION, "invalid username or password")
    from server._errors import InvalidRequest
    with pytest.raises(InvalidRequest, match="empty password"):
        run_users(parse_args(["users", "set", "hal"]), meta, layout, lambda: "")
