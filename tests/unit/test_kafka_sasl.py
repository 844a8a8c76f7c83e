"""SASL for the Kafka listener: SCRAM's server side against RFC 7677's exchange and
kafka-python's client, the users file, and one connection's gate request by request."""

from __future__ import annotations

import base64
import os
import random

import pytest
from kafka.net.sasl.scram import ScramClient
from kafka.protocol.consumer import FetchRequest
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest, \
    SaslHandshakeResponse

from server._broker.config import SASL_MECHANISMS, BrokerConfig
from server._errors import ConfigError
from server._kafka.codec import decode_request
from server._kafka.errors import Code
from server._kafka.sasl import FAILED_DELAY_S, MECHANISMS, SaslGate, SaslUsers
from server._kafka.scram import INVALID, ScramCredential, ScramExchange, AuthenticationFailed
from server._metrics import LlogMetrics
from tests.unit.test_runtime_seam import FakeClock, fake_runtime

# -- SCRAM ---------------------------------------------------------------------------------------


def test_rfc7677s_exchange_is_answered_byte_for_byte():
    """RFC 7677 section 3: user "user", password "pencil"."""
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    cred = ScramCredential.derive("SCRAM-SHA-256", "pencil", salt, 4096)
    x = ScramExchange("SCRAM-SHA-256", {"user": cred}.get, server_nonce="%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
                      decoy_salt=b"unused")
    assert x.first(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO") == (
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    assert x.final(b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                   b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=") == (
        b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
    assert x.user == "user"


def _exchange(mechanism: str, users: dict[str, str], user: str, password: str) -> ScramClient:
    """kafka-python's client against the server side; the client checks the server's signature."""
    creds = {u: ScramCredential.derive(mechanism, p, os.urandom(16)) for u, p in users.items()}
    server = ScramExchange(mechanism, creds.get, server_nonce="snonce", decoy_salt=os.urandom(16))
    client = ScramClient(user, password, mechanism)
    client.process_server_first_message(server.first(client.first_message()))
    client.process_server_final_message(server.final(client.final_message()))
    return client


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_kafka_pythons_scram_client_authenticates_and_checks_the_servers_signature(mechanism):
    _exchange(mechanism, {"alice": "wonder:land", "bob": "builder"}, "alice", "wonder:land")


def test_a_user_name_is_unescaped_as_rfc5802_says():
    looked_up = []
    x = ScramExchange("SCRAM-SHA-256", lambda u: looked_up.append(u), server_nonce="s", decoy_salt=b"d")
    x.first(b"n,a=a=2Cb=3Dc,n=a=2Cb=3Dc,r=xyz")
    assert looked_up == ["a,b=c"]
    with pytest.raises(AuthenticationFailed, match="escaped"):
        ScramExchange("SCRAM-SHA-256", {}.get, server_nonce="s", decoy_salt=b"d").first(b"n,,n=a=b,r=xyz")


@pytest.mark.parametrize("user,password", [("alice", "wrong"), ("nobody", "wonder:land")])
def test_a_wrong_password_and_an_unknown_user_fail_alike_at_the_proof(user, password):
    with pytest.raises(AuthenticationFailed) as err:
        _exchange("SCRAM-SHA-256", {"alice": "wonder:land"}, user, password)
    assert str(err.value) == INVALID


def test_malformed_scram_messages_fail_cleanly_never_otherwise():
    """Random and mutated client messages: AuthenticationFailed or an answer, never another exception."""
    rng = random.Random(5)
    cred = ScramCredential.derive("SCRAM-SHA-256", "pw", b"salt")
    good_first = b"n,,n=alice,r=abc"
    for _ in range(3000):
        x = ScramExchange("SCRAM-SHA-256", {"alice": cred}.get, server_nonce="s", decoy_salt=b"d")
        first = _mutate(rng, good_first)
        try:
            server_first = x.first(first)
        except AuthenticationFailed:
            continue
        nonce = server_first.split(b",")[0][2:]
        final = _mutate(rng, b"c=biws,r=" + nonce + b",p=" + base64.b64encode(os.urandom(32)))
        with pytest.raises(AuthenticationFailed):
            x.final(final)


def _mutate(rng: random.Random, data: bytes) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randrange(0, 4)):
        op = rng.randrange(3)
        i = rng.randrange(len(b) + 1)
        if op == 0 and b:
            del b[min(i, len(b) - 1)]
        elif op == 1:
            b.insert(i, rng.choice(b",=\0\xffnrpca"))
        elif b:
            b[min(i, len(b) - 1)] = rng.randrange(256)
    return bytes(b)


# -- the users file ------------------------------------------------------------------------------


@pytest.mark.parametrize("text,why", [
    ("alice\n", "line 1: expected name:password"),
    ("# users\n\nalice:a\nalice:b\n", "line 4: user 'alice' is named twice"),
    (":secret\n", "line 1: expected name:password"),
    ("# nobody\n", "names no user"),
])
def test_a_users_file_that_does_not_read_is_refused_naming_the_line_not_the_password(tmp_path, text, why):
    path = tmp_path / "users"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        SaslUsers(str(path), fake_runtime())
    assert why in str(err.value) and "secret" not in str(err.value)
    with pytest.raises(ConfigError, match="cannot read"):
        SaslUsers(str(tmp_path / "missing"), fake_runtime())


def test_the_users_file_is_read_again_when_it_changes_and_a_broken_one_keeps_the_users(tmp_path):
    path = tmp_path / "users"
    path.write_text("alice:one\n")
    clock = FakeClock()
    users = SaslUsers(str(path), fake_runtime(clock))
    first = users.credential("SCRAM-SHA-256", "alice")
    assert users.password_ok("alice", "one") and not users.password_ok("bob", "two")
    path.write_text("alice:uno\nbob:two\n")
    assert users.password_ok("alice", "one")  # checked at most once a second
    clock.ms += 1_000
    assert users.password_ok("bob", "two") and users.password_ok("alice", "uno")
    assert users.credential("SCRAM-SHA-256", "alice") != first
    path.write_text("broken line\n")
    clock.ms += 1_000
    assert users.password_ok("bob", "two") and len(users) == 2


def test_the_configs_mechanisms_are_the_gates_and_a_wrong_one_is_refused():
    assert SASL_MECHANISMS == MECHANISMS
    assert BrokerConfig(kafka_sasl_mechanisms=" scram-sha-512 ,PLAIN").kafka_mechanisms == ("SCRAM-SHA-512", "PLAIN")
    with pytest.raises(ConfigError, match="GSSAPI"):
        BrokerConfig(kafka_sasl_mechanisms="GSSAPI")
    with pytest.raises(ConfigError, match="LLOG_KAFKA_TLS_CERT"):
        BrokerConfig(kafka_tls_client_ca="ca.pem")


# -- one connection's gate -----------------------------------------------------------------------


def _req(request, correlation_id: int):
    request.with_header(correlation_id=correlation_id, client_id="t")
    return decode_request(bytes(request.encode(header=True)))


def _answer(screened, response_class, version: int):
    data = bytes(screened.answer)[4:]
    return response_class[version].decode(data, header=True)


@pytest.fixture
def gate(tmp_path):
    path = tmp_path / "users"
    path.write_text("alice:wonder\n")
    metrics = LlogMetrics()
    users = SaslUsers(str(path), fake_runtime())
    clock = FakeClock()
    return lambda mechanisms=MECHANISMS: SaslGate(users, mechanisms, runtime=fake_runtime(clock), metrics=metrics,
                                                  peer="p"), metrics, clock


def test_plain_authenticates_and_then_every_request_is_served(gate):
    make, metrics, clock = gate
    g = make()
    assert g.screen(_req(ApiVersionsRequest[3](client_software_name="t", client_software_version="1"), 1)) is None
    hs = g.screen(_req(SaslHandshakeRequest[1](mechanism="PLAIN"), 2))
    assert not hs.close and _answer(hs, SaslHandshakeResponse, 1).mechanisms == list(MECHANISMS)
    ok = g.screen(_req(SaslAuthenticateRequest[2](auth_bytes=b"\0alice\0wonder"), 3))
    assert not ok.close and _answer(ok, SaslAuthenticateResponse, 2).error_code == 0
    assert g.authenticated and g.user == "alice"
    assert g.screen(_req(MetadataRequest[12](topics=None, allow_auto_topic_creation=False), 4)) is None
    assert metrics.counter("kafka_authentications_total", mechanism="PLAIN", outcome="ok") == 1
    assert clock.slept == []  # only a failure waits


@pytest.mark.parametrize("token,message", [
    (b"\0alice\0wrong", "invalid username or password"),
    (b"\0bob\0wonder", "invalid username or password"),
    (b"alice\0wonder", "malformed PLAIN"),
    (b"carol\0alice\0wonder", "authorization id"),
])
def test_a_failed_plain_is_answered_58_with_the_reason_after_a_delay_and_closes(gate, token, message):
    make, metrics, clock = gate
    g = make()
    g.screen(_req(SaslHandshakeRequest[1](mechanism="PLAIN"), 1))
    failed = g.screen(_req(SaslAuthenticateRequest[1](auth_bytes=token), 2))
    answer = _answer(failed, SaslAuthenticateResponse, 1)
    assert failed.close and answer.error_code == Code.SASL_AUTHENTICATION_FAILED == 58
    assert message in answer.error_message and "wonder" not in answer.error_message
    assert not g.authenticated and clock.slept == [FAILED_DELAY_S]


def test_an_unoffered_mechanism_is_answered_33_with_the_offered_ones_and_closes(gate):
    make, _, _ = gate
    g = make(("SCRAM-SHA-512",))
    refused = g.screen(_req(SaslHandshakeRequest[1](mechanism="PLAIN"), 1))
    answer = _answer(refused, SaslHandshakeResponse, 1)
    assert refused.close and answer.error_code == Code.UNSUPPORTED_SASL_MECHANISM == 33
    assert answer.mechanisms == ["SCRAM-SHA-512"]


def test_scram_takes_two_rounds_through_the_gate(gate):
    make, _, _ = gate
    g = make()
    g.screen(_req(SaslHandshakeRequest[1](mechanism="SCRAM-SHA-512"), 1))
    client = ScramClient("alice", "wonder", "SCRAM-SHA-512")
    first = g.screen(_req(SaslAuthenticateRequest[0](auth_bytes=client.first_message()), 2))
    client.process_server_first_message(_answer(first, SaslAuthenticateResponse, 0).auth_bytes)
    assert not g.authenticated
    final = g.screen(_req(SaslAuthenticateRequest[0](auth_bytes=client.final_message()), 3))
    client.process_server_final_message(_answer(final, SaslAuthenticateResponse, 0).auth_bytes)
    assert g.authenticated and g.user == "alice"


@pytest.mark.parametrize("first", [
    lambda: MetadataRequest[12](topics=None, allow_auto_topic_creation=False),
    lambda: SaslAuthenticateRequest[2](auth_bytes=b"\0alice\0wonder"),
])
def test_a_request_out_of_turn_before_authentication_closes_at_once(gate, first):
    make, metrics, _ = gate
    g = make()
    assert g.screen(_req(first(), 1)).answer is None
    assert metrics.counter("kafka_protocol_errors_total", reason="unauthenticated") == 1


def test_a_fetch_after_the_handshake_but_before_authenticate_closes_at_once(gate):
    make, _, _ = gate
    g = make()
    g.screen(_req(SaslHandshakeRequest[1](mechanism="PLAIN"), 1))
    fetch = FetchRequest[12](replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1, isolation_level=0,
                             session_id=0, session_epoch=-1, topics=[], forgotten_topics_data=[], rack_id="")
    assert g.screen(_req(fetch, 2)).answer is None and not g.authenticated


# -- SCRAM users in Oxia -------------------------------------------------------------------------


def _store():
    from server._kafka.scram_users import ScramUsers
    from server._protocol.keys import LogLayout
    from server._storage.metastore import InMemoryMetadataStore

    return ScramUsers(InMemoryMetadataStore(), LogLayout("llog"))


def test_the_store_keeps_credentials_by_mechanism_and_drops_a_user_with_none_left():
    from server._errors import InvalidRequest
    from server._kafka.scram_users import UnknownCredential

    store = _store()
    for name in ("alice", "~tilde", "a/b c", "ünï"):  # quoted into one key segment, listed back as given
        store.upsert(name, "SCRAM-SHA-256", ScramCredential.derive("SCRAM-SHA-256", "pw", b"s"))
    store.upsert_salted("alice", "SCRAM-SHA-512", 8192, b"salt", b"x" * 64)
    assert store.describe() == {"a/b c": {"SCRAM-SHA-256": 4096}, "alice": {"SCRAM-SHA-256": 4096,
                                "SCRAM-SHA-512": 8192}, "~tilde": {"SCRAM-SHA-256": 4096}, "ünï": {"SCRAM-SHA-256": 4096}}
    assert store.credential("SCRAM-SHA-256", "alice").verifies("SCRAM-SHA-256", "pw")
    store.delete("alice", "SCRAM-SHA-256")
    assert store.describe()["alice"] == {"SCRAM-SHA-512": 8192}
    store.delete("alice")
    assert "alice" not in store.describe() and store.credentials("alice") == {}
    with pytest.raises(UnknownCredential):
        store.delete("alice")
    with pytest.raises(InvalidRequest, match="iterations"):
        store.upsert_salted("bob", "SCRAM-SHA-256", 100, b"salt", b"x" * 32)
    with pytest.raises(InvalidRequest, match="32 bytes"):
        store.upsert_salted("bob", "SCRAM-SHA-256", 4096, b"salt", b"x" * 64)
    with pytest.raises(InvalidRequest, match="user name"):
        store.upsert("", "SCRAM-SHA-256", ScramCredential.derive("SCRAM-SHA-256", "pw", b"s"))
    assert store.credential("SCRAM-SHA-256", "") is None and store.credential("SCRAM-SHA-256", "x" * 300) is None


def test_a_name_in_the_file_hides_the_same_name_in_oxia(tmp_path):
    from server._kafka.sasl import Credentials

    path = tmp_path / "users"
    path.write_text("alice:from-file\n")
    store = _store()
    store.upsert("alice", "SCRAM-SHA-256", ScramCredential.derive("SCRAM-SHA-256", "from-oxia", b"s"))
    store.upsert("bob", "SCRAM-SHA-256", ScramCredential.derive("SCRAM-SHA-256", "bobs", b"s"))
    creds = Credentials(SaslUsers(str(path), fake_runtime()), store)
    assert creds.password_ok("alice", "from-file") and not creds.password_ok("alice", "from-oxia")
    assert creds.password_ok("bob", "bobs") and not creds.password_ok("bob", "nope")
    assert not creds.password_ok("carol", "x") and creds.credential("SCRAM-SHA-256", "carol") is None
    assert creds.credential("SCRAM-SHA-256", "bob") == store.credential("SCRAM-SHA-256", "bob")


def test_users_that_cannot_be_read_fail_the_authentication_with_a_hint_to_retry(gate):
    from server._errors import MetadataStoreError
    from server._kafka.sasl import Credentials

    class Down:
        def credentials(self, user):
            raise MetadataStoreError("Oxia unavailable")

    _, metrics, _ = gate
    g = SaslGate(Credentials(None, Down()), MECHANISMS, runtime=fake_runtime(), metrics=metrics, peer="p")
    g.screen(_req(SaslHandshakeRequest[1](mechanism="PLAIN"), 1))
    failed = g.screen(_req(SaslAuthenticateRequest[2](auth_bytes=b"\0alice\0pw"), 2))
    answer = _answer(failed, SaslAuthenticateResponse, 2)
    assert failed.close and answer.error_code == 58 and "cannot read its users" in answer.error_message
