"""DescribeUserScramCredentials and AlterUserScramCredentials: the SCRAM users in Oxia (``scram_users.py``).

What ``kafka-configs --entity-type users`` and ``Admin.describeUserScramCredentials``/
``alterUserScramCredentials`` send. Mechanisms travel as Kafka's numbers (1
SCRAM-SHA-256, 2 SCRAM-SHA-512). Each user named gets one result; the first
failure of its operations is its error: UNSUPPORTED_SASL_MECHANISM (33) for
another mechanism, UNACCEPTABLE_CREDENTIAL (93) for iterations outside
4096-16384 or an unusable name or salt, DUPLICATE_RESOURCE (92) for a user and
mechanism named twice in one request, RESOURCE_NOT_FOUND (91) to delete or
describe a credential that does not exist, KAFKA_STORAGE_ERROR (56) when Oxia
fails. Any client may manage users (there are no ACLs): on a SASL listener,
any authenticated one.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from kafka.protocol.admin import DescribeUserScramCredentialsResponse, AlterUserScramCredentialsResponse

from .._errors import InvalidRequest, LlogError
from .errors import Code
from .scram_users import UnknownCredential

if TYPE_CHECKING:
    from .codec import KafkaRequest
    from .service import KafkaService

__all__ = ["HANDLERS", "MECHANISM_NUMBERS"]

MECHANISM_NUMBERS = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
_NUMBER_OF = {name: number for number, name in MECHANISM_NUMBERS.items()}


def describe(svc: KafkaService, req: KafkaRequest) -> Any:
    R = DescribeUserScramCredentialsResponse
    Result = R.DescribeUserScramCredentialsResult
    try:
        users = svc.parts.scram_users.describe()
    except LlogError as exc:
        return R[req.version](throttle_time_ms=0, error_code=Code.KAFKA_STORAGE_ERROR, error_message=str(exc),
                              results=[])
    named = [u.name for u in req.body.users or []]
    counts = Counter(named)
    results = []
    for name in (dict.fromkeys(named) if named else sorted(users)):
        code, message, infos = Code.NONE, None, []
        if counts[name] > 1:
            code, message = Code.DUPLICATE_RESOURCE, "a user named more than once"
        elif not users.get(name):
            code, message = Code.RESOURCE_NOT_FOUND, "Attempt to describe a user credential that does not exist"
        else:
            infos = [Result.CredentialInfo(mechanism=_NUMBER_OF[m], iterations=i) for m, i in sorted(users[name].items())]
        results.append(Result(user=name, error_code=code, error_message=message, credential_infos=infos))
    return R[req.version](throttle_time_ms=0, error_code=Code.NONE, error_message=None, results=results)


def alter(svc: KafkaService, req: KafkaRequest) -> Any:
    R = AlterUserScramCredentialsResponse
    store = svc.parts.scram_users
    body = req.body
    ops = [(d.name, d.mechanism, None) for d in body.deletions] + [(u.name, u.mechanism, u) for u in body.upsertions]
    twice = {k for k, n in Counter((name, mech) for name, mech, _ in ops).items() if n > 1}
    errors: dict[str, tuple[int, str]] = {}
    for name, number, upsert in ops:
        if name in errors:
            continue
        mechanism = MECHANISM_NUMBERS.get(number)
        if (name, number) in twice:
            errors[name] = (Code.DUPLICATE_RESOURCE, "a user's mechanism named more than once in one request")
        elif mechanism is None:
            errors[name] = (Code.UNSUPPORTED_SASL_MECHANISM, f"unknown SCRAM mechanism {number}")
    for name, number, upsert in ops:
        if name in errors:
            continue
        mechanism = MECHANISM_NUMBERS[number]
        try:
            if upsert is None:
                store.delete(name, mechanism)
            else:
                store.upsert_salted(name, mechanism, upsert.iterations, bytes(upsert.salt or b""),
                                    bytes(upsert.salted_password or b""))
        except UnknownCredential as exc:
            errors[name] = (Code.RESOURCE_NOT_FOUND, exc.message)
        except InvalidRequest as exc:
            errors[name] = (Code.UNACCEPTABLE_CREDENTIAL, exc.message)
        except LlogError as exc:
            errors[name] = (Code.KAFKA_STORAGE_ERROR, exc.message)
    results = []
    for name in dict.fromkeys(name for name, _, _ in ops):
        code, message = errors.get(name, (Code.NONE, None))
        results.append(R.AlterUserScramCredentialsResult(user=name, error_code=code, error_message=message))
    return R[req.version](throttle_time_ms=0, results=results)


HANDLERS = {50: describe, 51: alter}
