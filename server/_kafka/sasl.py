"""SASL authentication of Kafka connections (Kafka's SASL_PLAINTEXT and SASL_SSL listeners).

With ``LLOG_KAFKA_SASL=on`` (or ``LLOG_KAFKA_SASL_USERS`` set), each
connection must authenticate before anything but ApiVersions, as on Kafka's
SASL listeners (KIP-152):

1. SaslHandshake (v1) names a mechanism: PLAIN, SCRAM-SHA-256 or
   SCRAM-SHA-512 (those of ``LLOG_KAFKA_SASL_MECHANISMS``); another is
   answered UNSUPPORTED_SASL_MECHANISM (33) with the enabled ones, and the
   connection closed;
2. SaslAuthenticate carries the mechanism's messages: PLAIN's one
   (``authzid NUL user NUL password``), SCRAM's two (``scram.py``). A
   failure is answered SASL_AUTHENTICATION_FAILED (58) with the reason,
   :data:`FAILED_DELAY_S` after it, and the connection closed;
3. then the connection serves every API, for as long as it is open
   (``session_lifetime_ms`` 0: no re-authentication).

Any other request before that closes the connection, as Kafka closes it.
Every authenticated user may do everything (there are no ACLs). Past
authentication, and on a listener without SASL, SaslHandshake and
SaslAuthenticate are answered ILLEGAL_SASL_STATE (34), as Kafka answers them.

Users come from Oxia (``scram_users.py``: SCRAM credentials, one get per
authentication; PLAIN's password is checked against them) and, first, from
the optional users file (:class:`Credentials`). The users file holds one
``name:password`` a line (``#`` starts a comment line); it is read again
when it changes (checked at most once a second, at an authentication), so
users are added and removed without a restart; a file that no longer reads
keeps the users last read, and says why in the log.
SCRAM's salted credentials are derived from the password at a user's first
authentication, with a fresh salt per broker process.
"""

from __future__ import annotations

import hmac
import logging
import os
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kafka.protocol.sasl import SaslAuthenticateResponse, SaslHandshakeResponse

from .._errors import ConfigError, LlogError
from .._metrics import LlogMetrics
from .._runtime import Runtime
from .codec import API_VERSIONS, encode_response
from .errors import Code
from .scram import MECHANISMS as SCRAM_MECHANISMS
from .scram import INVALID as _INVALID
from .scram import ScramCredential, ScramExchange, AuthenticationFailed

if TYPE_CHECKING:
    from .codec import KafkaRequest
    from .scram_users import ScramUsers
    from .service import KafkaService

__all__ = ["MECHANISMS", "Credentials", "SaslUsers", "SaslGate", "Screened", "HANDLERS"]

log = logging.getLogger(__name__)

PLAIN = "PLAIN"
MECHANISMS = (PLAIN, *SCRAM_MECHANISMS)
SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36
_RECHECK_S = 1.0
FAILED_DELAY_S = 0.1
"""How long a failed authentication waits before its answer and the close (Kafka's
``connection.failed.authentication.delay.ms``): a client guessing passwords gets ten a second
per connection, and one that retries at once does not spin."""
_FAILED = "Authentication failed: invalid username or password"


class SaslUsers:
    """The users file (module docstring): passwords by name, and SCRAM credentials derived from them."""

    def __init__(self, path: str, runtime: Runtime) -> None:
        """Reads the file now: ConfigError when it cannot be read or a line is not ``name:password``."""
        self.path = path
        self._runtime = runtime
        self._lock = threading.Lock()
        self._stamp = self._stat()
        self._passwords = _parse(path)
        self._credentials: dict[tuple[str, str], ScramCredential] = {}
        self._checked = runtime.clock.monotonic()

    def __len__(self) -> int:
        return len(self._passwords)

    def __contains__(self, user: str) -> bool:
        return user in self._current()

    def password_ok(self, user: str, password: str) -> bool:
        known = self._current().get(user)
        # compared even when there is no such user, so the time taken does not say which names exist
        ok = hmac.compare_digest((known or "\0").encode(), password.encode())
        return known is not None and ok

    def credential(self, mechanism: str, user: str) -> ScramCredential | None:
        password = self._current().get(user)
        if password is None:
            return None
        with self._lock:
            cred = self._credentials.get((mechanism, user))
            if cred is None:
                cred = ScramCredential.derive(mechanism, password, self._runtime.ids.uuid4().bytes)
                self._credentials[(mechanism, user)] = cred
            return cred

    def _current(self) -> dict[str, str]:
        now = self._runtime.clock.monotonic()
        with self._lock:
            if now - self._checked < _RECHECK_S:
                return self._passwords
            self._checked = now
            try:
                stamp = self._stat()
                if stamp != self._stamp:
                    self._passwords = _parse(self.path)
                    self._credentials.clear()
                    self._stamp = stamp
                    log.info("kafka SASL users: %d read again from %s", len(self._passwords), self.path)
            except ConfigError as exc:
                log.error("kafka SASL users: %s; the %d users read before still authenticate", exc,
                          len(self._passwords))
            return self._passwords

    def _stat(self) -> tuple[int, int, int]:
        try:
            st = os.stat(self.path)
        except OSError as exc:
            raise ConfigError(f"LLOG_KAFKA_SASL_USERS: cannot read {self.path!r}: {exc.strerror}") from exc
        return st.st_ino, st.st_mtime_ns, st.st_size


class Credentials:
    """Where the gate looks a user up: the users file, then the SCRAM users in Oxia
    (``scram_users.py``); a name in the file hides the same name in Oxia. Either may be None."""

    def __init__(self, file: SaslUsers | None, store: ScramUsers | None) -> None:
        self.file = file
        self.store = store

    def password_ok(self, user: str, password: str) -> bool:
        """PLAIN: the file's password, or any of the Oxia user's SCRAM credentials made from it."""
        if self.file is not None and user in self.file:
            return self.file.password_ok(user, password)
        creds = {} if self.store is None else self.store.credentials(user)
        return any([cred.verifies(m, password) for m, cred in creds.items()])  # every one: the same time

    def credential(self, mechanism: str, user: str) -> ScramCredential | None:
        if self.file is not None and user in self.file:
            return self.file.credential(mechanism, user)
        return None if self.store is None else self.store.credential(mechanism, user)


def _parse(path: str) -> dict[str, str]:
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"LLOG_KAFKA_SASL_USERS: cannot read {path!r}: {exc}") from exc
    users: dict[str, str] = {}
    for number, line in enumerate(lines, 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, sep, password = line.partition(":")
        name = name.strip()
        if not sep or not name or not password:
            raise ConfigError(f"LLOG_KAFKA_SASL_USERS: {path}, line {number}: expected name:password")
        if name in users:
            raise ConfigError(f"LLOG_KAFKA_SASL_USERS: {path}, line {number}: user {name!r} is named twice")
        users[name] = password
    if not users:
        raise ConfigError(f"LLOG_KAFKA_SASL_USERS: {path} names no user (one name:password a line)")
    return users


@dataclass(frozen=True)
class Screened:
    """What the gate made of a request: ``answer`` to send (None: close at once), then close if ``close``."""

    answer: Any | None
    close: bool = False


class SaslGate:
    """One connection's authentication (module docstring). Called on the connection's
    reading thread, in request order."""

    def __init__(self, users: Credentials, mechanisms: tuple[str, ...], *, runtime: Runtime, metrics: LlogMetrics,
                 peer: str) -> None:
        self._users = users
        self._mechanisms = mechanisms
        self._runtime = runtime
        self._metrics = metrics
        self._peer = peer
        self._mechanism: str | None = None
        self._scram: ScramExchange | None = None
        self.authenticated = False
        self.user: str | None = None

    def screen(self, request: KafkaRequest) -> Screened | None:
        """None: serve the request; else what to answer instead (module docstring)."""
        if self.authenticated or request.api.key == API_VERSIONS:
            return None
        key = request.api.key
        if key == SASL_HANDSHAKE and self._mechanism is None:
            return self._handshake(request)
        if key == SASL_AUTHENTICATE and self._mechanism is not None:
            return self._authenticate(request)
        log.info("kafka connection %s: %s before authentication: closing", self._peer, request.api.name)
        self._metrics.inc("kafka_protocol_errors_total", reason="unauthenticated")
        return Screened(None)

    def _handshake(self, req: KafkaRequest) -> Screened:
        asked = req.body.mechanism
        answer = SaslHandshakeResponse[req.version]
        if asked not in self._mechanisms:
            self._outcome(str(asked)[:40], "unsupported_mechanism")
            return Screened(encode_response(req, answer(error_code=Code.UNSUPPORTED_SASL_MECHANISM,
                                                        mechanisms=list(self._mechanisms))), close=True)
        self._mechanism = asked
        return Screened(encode_response(req, answer(error_code=Code.NONE, mechanisms=list(self._mechanisms))))

    def _authenticate(self, req: KafkaRequest) -> Screened:
        assert self._mechanism is not None
        token = bytes(req.body.auth_bytes or b"")
        try:
            if self._mechanism == PLAIN:
                out, done = self._plain(token), True
            elif self._scram is None:
                ids = self._runtime.ids
                self._scram = ScramExchange(self._mechanism, lambda u: self._users.credential(self._mechanism, u),
                                            server_nonce=ids.uuid4().hex, decoy_salt=ids.uuid4().bytes)
                out, done = self._scram.first(token), False
            else:
                out, done = self._scram.final(token), True
                self.user = self._scram.user
        except LlogError as exc:
            if not isinstance(exc, AuthenticationFailed):  # the users could not be read (Oxia)
                log.warning("kafka connection %s: SASL %s: cannot read the users: %s", self._peer, self._mechanism,
                            exc)
                exc = AuthenticationFailed(f"the broker cannot read its users now ({type(exc).__name__}): "
                                           "try again")
            self._outcome(self._mechanism, "failed")
            self._runtime.clock.sleep(FAILED_DELAY_S)  # on this connection's reader: it alone waits
            log.info("kafka connection %s: SASL %s authentication failed: %s", self._peer, self._mechanism, exc)
            message = _FAILED if str(exc) == _INVALID else f"Authentication failed: {exc}"
            return Screened(self._auth_answer(req, Code.SASL_AUTHENTICATION_FAILED, message, b""), close=True)
        if done:
            self.authenticated = True
            self._outcome(self._mechanism, "ok")
            log.debug("kafka connection %s: authenticated as %r (%s)", self._peer, self.user, self._mechanism)
        return Screened(self._auth_answer(req, Code.NONE, None, out))

    def _plain(self, token: bytes) -> bytes:
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise AuthenticationFailed("malformed PLAIN message (expected authzid NUL user NUL password)")
        try:
            authzid, user, password = (p.decode("utf-8") for p in parts)
        except UnicodeDecodeError as exc:
            raise AuthenticationFailed("PLAIN message is not UTF-8") from exc
        if authzid and authzid != user:
            raise AuthenticationFailed("an authorization id other than the user name is not supported")
        if not self._users.password_ok(user, password):
            raise AuthenticationFailed(_INVALID)
        self.user = user
        return b""

    @staticmethod
    def _auth_answer(req: KafkaRequest, code: int, message: str | None, auth_bytes: bytes) -> Any:
        return encode_response(req, SaslAuthenticateResponse[req.version](
            error_code=code, error_message=message, auth_bytes=auth_bytes, session_lifetime_ms=0))

    def _outcome(self, mechanism: str, outcome: str) -> None:
        self._metrics.inc("kafka_authentications_total", mechanism=mechanism, outcome=outcome)


def sasl_handshake(svc: KafkaService, req: KafkaRequest) -> Any:
    """Past authentication, or on a listener without SASL (Kafka's answer)."""
    return SaslHandshakeResponse[req.version](error_code=Code.ILLEGAL_SASL_STATE, mechanisms=[])


def sasl_authenticate(svc: KafkaService, req: KafkaRequest) -> Any:
    return SaslAuthenticateResponse[req.version](
        error_code=Code.ILLEGAL_SASL_STATE, auth_bytes=b"", session_lifetime_ms=0,
        error_message="SaslAuthenticate is not expected: the connection is authenticated, or the listener "
                      "has no SASL")


HANDLERS = {SASL_HANDSHAKE: sasl_handshake, SASL_AUTHENTICATE: sasl_authenticate}
