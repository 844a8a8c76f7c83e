"""The Kafka listener's SCRAM users, kept in Oxia: one record per user, every broker reads them.

``{root}/__llog/users/{quoted name}`` holds a JSON object of the user's
credentials by mechanism, what the server side of SCRAM needs and no
password::

    {"SCRAM-SHA-256": {"salt": BASE64, "iterations": 4096, "stored_key": BASE64, "server_key": BASE64},
     "SCRAM-SHA-512": {...}}

Written by AlterUserScramCredentials (``kafka-configs --alter --entity-type
users --add-config 'SCRAM-SHA-512=[password=...]'``, ``Admin.alterUserScramCredentials``:
the client sends the salt and the salted password, the server derives the
keys) and by ``llog-admin users set``; each change is a write conditional on
the record's version, retried on a conflict, so two brokers changing one
user's mechanisms at once both land. A record with no mechanism left is
deleted. Read at each authentication (one Oxia get), so a change holds on
every broker for the next connection.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Callable

from .._errors import CorruptBatch, InvalidRequest, LlogError, VersionConflict
from .._protocol.keys import USERS_PARTITION_KEY, LogLayout
from .._storage.metastore import EXPECT_ABSENT, MetadataStore
from .scram import ITERATIONS, MECHANISMS, ScramCredential

__all__ = ["ScramUsers", "MIN_ITERATIONS", "MAX_ITERATIONS", "UnknownCredential"]

MIN_ITERATIONS = ITERATIONS
MAX_ITERATIONS = 16_384
"""Kafka's bounds on a SCRAM credential's iterations."""
_RETRIES = 8


class UnknownCredential(LlogError):
    """A user, or a user's mechanism, that has no credential to delete or describe."""


@dataclass(frozen=True)
class ScramUsers:
    """Reads and writes the users' records (module docstring)."""

    meta: MetadataStore
    layout: LogLayout

    def credential(self, mechanism: str, user: str) -> ScramCredential | None:
        """``user``'s credential for ``mechanism``; None without one (or for a name no key can hold)."""
        return self.credentials(user).get(mechanism)

    def credentials(self, user: str) -> dict[str, ScramCredential]:
        """``user``'s credentials by mechanism (empty without a record)."""
        try:
            key = self.layout.user_key(user)
        except InvalidRequest:
            return {}
        rec = self.meta.get(key, USERS_PARTITION_KEY)
        return {} if rec is None else _decode(rec.value, key)

    def describe(self) -> dict[str, dict[str, int]]:
        """Every user: mechanism -> iterations."""
        prefix = self.layout.users_prefix
        out: dict[str, dict[str, int]] = {}
        for rec in self.meta.range_scan(prefix, prefix + "~", USERS_PARTITION_KEY):
            name = self.layout.parse_user_key(rec.key)
            if name is not None:
                out[name] = {m: c.iterations for m, c in _decode(rec.value, rec.key).items()}
        return out

    def upsert(self, user: str, mechanism: str, credential: ScramCredential) -> None:
        _check(mechanism, credential.iterations)
        self._change(user, lambda creds: {**creds, mechanism: credential})

    def upsert_salted(self, user: str, mechanism: str, iterations: int, salt: bytes, salted_password: bytes) -> None:
        """What AlterUserScramCredentials carries: the client's salt and salted password."""
        _check(mechanism, iterations)
        if not salt or len(salted_password) != MECHANISMS[mechanism]().digest_size:
            raise InvalidRequest(f"a {mechanism} credential needs a salt and a salted password of "
                                 f"{MECHANISMS[mechanism]().digest_size} bytes")
        self.upsert(user, mechanism, ScramCredential.from_salted(mechanism, salted_password, salt, iterations))

    def delete(self, user: str, mechanism: str | None = None) -> None:
        """One mechanism's credential (None: all of them); UnknownCredential when there is none."""
        def without(creds: dict[str, ScramCredential]) -> dict[str, ScramCredential]:
            if not creds or (mechanism is not None and mechanism not in creds):
                raise UnknownCredential(f"user {user!r} has no {mechanism or 'SCRAM'} credential")
            return {} if mechanism is None else {m: c for m, c in creds.items() if m != mechanism}
        self._change(user, without)

    def _change(self, user: str, change: Callable[[dict[str, ScramCredential]], dict[str, ScramCredential]]) -> None:
        key = self.layout.user_key(user)
        for _ in range(_RETRIES):
            rec = self.meta.get(key, USERS_PARTITION_KEY)
            creds = {} if rec is None else _decode(rec.value, key)
            new = change(creds)
            try:
                if not new:
                    if rec is not None:
                        self.meta.delete(key, USERS_PARTITION_KEY, expected_version=rec.version)
                else:
                    self.meta.put(key, _encode(new), USERS_PARTITION_KEY,
                                  expected_version=EXPECT_ABSENT if rec is None else rec.version)
                return
            except VersionConflict:
                continue
        raise VersionConflict(f"user {user!r}: changed by others {_RETRIES} times while this change was made")


def _check(mechanism: str, iterations: int) -> None:
    if mechanism not in MECHANISMS:
        raise InvalidRequest(f"SCRAM mechanism {mechanism!r} is not one of {', '.join(MECHANISMS)}")
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise InvalidRequest(f"iterations must be {MIN_ITERATIONS}-{MAX_ITERATIONS}, got {iterations}")


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _encode(creds: dict[str, ScramCredential]) -> bytes:
    return json.dumps({m: {"salt": _b64(c.salt), "iterations": c.iterations, "stored_key": _b64(c.stored_key),
                           "server_key": _b64(c.server_key)} for m, c in sorted(creds.items())}).encode()


def _decode(raw: bytes, key: str) -> dict[str, ScramCredential]:
    try:
        doc = json.loads(raw)
        return {m: ScramCredential(base64.b64decode(c["salt"]), int(c["iterations"]),
                                   base64.b64decode(c["stored_key"]), base64.b64decode(c["server_key"]))
                for m, c in doc.items() if m in MECHANISMS}
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise CorruptBatch(f"{key}: unreadable SCRAM user record: {exc!r}") from exc
