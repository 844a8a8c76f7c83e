"""SCRAM-SHA-256 and SCRAM-SHA-512, the server's side (RFC 5802, RFC 7677), as Kafka speaks them.

Two round trips, each message a comma-separated list of ``key=value``
attributes in UTF-8::

    client-first   n,[a=AUTHZID],n=USER,r=CNONCE[,EXT=VALUE...]   ("n,,": the GS2 header, no channel binding)
    server-first   r=CNONCE+SNONCE,s=BASE64(SALT),i=ITERATIONS
    client-final   c=BASE64(GS2 HEADER),r=CNONCE+SNONCE,p=BASE64(PROOF)
    server-final   v=BASE64(SERVER SIGNATURE)

With ``H`` the mechanism's hash: ``SaltedPassword = PBKDF2-HMAC-H(password, salt,
i)``, ``ClientKey = HMAC(SaltedPassword, "Client Key")``, ``StoredKey = H(ClientKey)``,
``ServerKey = HMAC(SaltedPassword, "Server Key")``; the server keeps only salt, i,
StoredKey and ServerKey (:class:`ScramCredential`). ``AuthMessage`` is
client-first without its GS2 header, server-first and client-final without its
proof, joined by commas; the client proves ``ClientKey = PROOF xor HMAC(StoredKey,
AuthMessage)`` with ``H(ClientKey) == StoredKey``, and the server answers
``HMAC(ServerKey, AuthMessage)``. RFC 7677's exchange is the golden vector
(``tests/unit/test_kafka_sasl.py``).

Not served: channel binding (``p=``), Kafka's delegation tokens
(``tokenauth=true``). A user that does not exist gets a server-first like any
other and fails at the proof, so the answer does not tell which names exist.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from dataclasses import dataclass
from typing import Callable

from .._errors import LlogError

__all__ = ["MECHANISMS", "ITERATIONS", "INVALID", "ScramCredential", "ScramExchange", "AuthenticationFailed",
           "salted_password"]

MECHANISMS: dict[str, Callable] = {"SCRAM-SHA-256": hashlib.sha256, "SCRAM-SHA-512": hashlib.sha512}
ITERATIONS = 4096
"""Kafka's minimum for both mechanisms, and its tools' default."""


class AuthenticationFailed(LlogError):
    """A SASL exchange failed (SCRAM's, or PLAIN's in ``sasl.py``); the message is what the
    client is told."""


@dataclass(frozen=True)
class ScramCredential:
    """What the server keeps of a password for one mechanism."""

    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    @classmethod
    def derive(cls, mechanism: str, password: str, salt: bytes, iterations: int = ITERATIONS) -> ScramCredential:
        return cls.from_salted(mechanism, salted_password(mechanism, password, salt, iterations), salt, iterations)

    @classmethod
    def from_salted(cls, mechanism: str, salted: bytes, salt: bytes, iterations: int) -> ScramCredential:
        """From ``SaltedPassword`` (what AlterUserScramCredentials carries)."""
        h = MECHANISMS[mechanism]
        client_key = hmac.digest(salted, b"Client Key", h)
        return cls(salt, iterations, h(client_key).digest(), hmac.digest(salted, b"Server Key", h))

    def verifies(self, mechanism: str, password: str) -> bool:
        """Whether ``password`` is the one this credential was made from (PLAIN against a SCRAM user)."""
        other = ScramCredential.derive(mechanism, password, self.salt, self.iterations)
        return hmac.compare_digest(other.stored_key, self.stored_key)


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """RFC 5802's ``Hi(password, salt, i)``: PBKDF2 with the mechanism's HMAC."""
    return hashlib.pbkdf2_hmac(MECHANISMS[mechanism]().name, password.encode(), salt, iterations)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _attributes(text: str) -> list[tuple[str, str]]:
    out = []
    for part in text.split(","):
        key, eq, value = part.partition("=")
        if not eq or not key.isalnum():
            raise AuthenticationFailed(f"malformed SCRAM attribute {part[:40]!r}")
        out.append((key, value))
    return out


def _username(saslname: str) -> str:
    """RFC 5802's escaping: ``=2C`` is ``,`` and ``=3D`` is ``=``; any other ``=`` is invalid."""
    name = saslname.replace("=2C", ",").replace("=3D", "=")
    if "=" in saslname.replace("=2C", "").replace("=3D", ""):
        raise AuthenticationFailed("invalid SCRAM user name (a '=' not escaped as =2C or =3D)")
    return name


class ScramExchange:
    """One client's SCRAM exchange: :meth:`first`, then :meth:`final` (each raises AuthenticationFailed)."""

    def __init__(self, mechanism: str, lookup: Callable[[str], ScramCredential | None], server_nonce: str,
                 decoy_salt: bytes) -> None:
        """``lookup``: a user's credential for this mechanism, None when there is no such user;
        ``server_nonce``: printable, no comma; ``decoy_salt``: the salt shown for a user that does not exist."""
        self._hash = MECHANISMS[mechanism]
        self.mechanism = mechanism
        self._lookup = lookup
        self._server_nonce = server_nonce
        self._decoy_salt = decoy_salt
        self.user: str | None = None
        self._credential: ScramCredential | None = None
        self._gs2 = ""
        self._nonce = ""
        self._first_bare = ""
        self._server_first = ""

    def first(self, message: bytes) -> bytes:
        text = _text(message)
        cbind, sep1, rest = text.partition(",")
        authzid, sep2, bare = rest.partition(",")
        if not (sep1 and sep2):
            raise AuthenticationFailed("malformed SCRAM client-first message (no GS2 header)")
        if cbind not in ("n", "y"):
            raise AuthenticationFailed("SCRAM channel binding is not supported")
        attrs = _attributes(bare)
        if len(attrs) < 2 or attrs[0][0] != "n" or attrs[1][0] != "r" or not attrs[1][1]:
            raise AuthenticationFailed("malformed SCRAM client-first message (expected n=USER,r=NONCE)")
        user = _username(attrs[0][1])
        if authzid and (not authzid.startswith("a=") or _username(authzid[2:]) != user):
            raise AuthenticationFailed("a SCRAM authorization id other than the user name is not supported")
        for key, value in attrs[2:]:
            if key == "m":
                raise AuthenticationFailed("SCRAM mandatory extensions are not supported")
            if key == "tokenauth" and value.lower() == "true":
                raise AuthenticationFailed("delegation tokens are not supported")
        self.user = user
        self._credential = self._lookup(user)
        salt, iterations = ((self._credential.salt, self._credential.iterations) if self._credential is not None
                            else (self._decoy_salt, ITERATIONS))
        self._gs2 = f"{cbind},{authzid},"
        self._nonce = attrs[1][1] + self._server_nonce
        self._first_bare = bare
        self._server_first = f"r={self._nonce},s={_b64(salt)},i={iterations}"
        return self._server_first.encode()

    def final(self, message: bytes) -> bytes:
        if not self._server_first:
            raise AuthenticationFailed("SCRAM client-final message before the client-first")
        text = _text(message)
        without_proof, sep, proof_b64 = text.rpartition(",p=")
        if not sep:
            raise AuthenticationFailed("malformed SCRAM client-final message (no proof)")
        attrs = dict(_attributes(without_proof))
        if attrs.get("c") != _b64(self._gs2.encode()):
            raise AuthenticationFailed("SCRAM channel binding attribute does not match the client-first message")
        if attrs.get("r") != self._nonce:
            raise AuthenticationFailed("SCRAM nonce does not match")
        try:
            proof = base64.b64decode(proof_b64, validate=True)
        except ValueError as exc:
            raise AuthenticationFailed("SCRAM proof is not base64") from exc
        auth_message = f"{self._first_bare},{self._server_first},{without_proof}".encode()
        cred = self._credential
        if cred is None or len(proof) != self._hash().digest_size:
            raise AuthenticationFailed(INVALID)
        signature = hmac.digest(cred.stored_key, auth_message, self._hash)
        client_key = bytes(a ^ b for a, b in zip(proof, signature))
        if not hmac.compare_digest(self._hash(client_key).digest(), cred.stored_key):
            raise AuthenticationFailed(INVALID)
        return f"v={_b64(hmac.digest(cred.server_key, auth_message, self._hash))}".encode()


INVALID = "invalid credentials"
"""The failure that means a wrong user or password (the others: a malformed exchange)."""


def _text(message: bytes) -> str:
    try:
        return bytes(message).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise AuthenticationFailed("SCRAM message is not UTF-8") from exc
