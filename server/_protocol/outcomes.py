"""What each error outcome means: one table the services answer by and every client reads.

An answer's ``error_type`` names a row. The row says the HTTP status the
broker or the compactor service answers with, whether the same request sent
again can succeed (``retriable``), and what the client knows about its writes
(``kind``):

- ``definite``: nothing of the request (or of the batch) was written, now or
  later; a retry cannot duplicate it;
- ``unknown``: it may be in the log once, or not at all; a retry is
  at-least-once and may store it twice;
- ``success``: written, at the offsets the answer gives.

The rows come in three groups (``meaning`` says which a row is):

- answers of their own (``status`` set). ``AppendFailed`` and
  ``BackPressureRejected`` carry ``results[]`` with one outcome per batch
  (``per_item``); ``stopping`` rows say the broker is going away (send to
  another one);
- errors inside ``results[]`` (``status`` None): a produce batch of a 409, a
  consume partition of a 200 with its ``error_code``. They are llog errors
  (``server/_errors.py``) named by their class. Should one end a request as a
  whole, the answer is 503 when it is retriable, else 500 (:func:`status_of`);
- the client's own names for a request without a readable answer
  (``ConnectionRefused``, ``ConnectionLost``, ``ProtocolError``).

An answer whose ``error_type`` names no row (a proxy's, another version's)
is read by its status (:data:`UNNAMED`); a failed ``results[]`` item whose
``error_type`` names no row is definite (the produce contract: every batch
error but ``OutcomeUnknown`` is).

``retriable`` is the error class's. An instance may say otherwise (an S3
access denied is a non-retriable ``ObjectStoreError``), and an answer's own
``retriable`` field is the instance's: :func:`is_retriable` prefers it.

Exports (``python -m server._protocol.outcomes --json | --go | --markdown``):
``loadtest/http_hammer.go`` holds the ``--go`` block and ``server/HTTP_API.md``
the ``--markdown`` table; ``tests/unit/test_outcomes.py`` checks both.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, replace
from enum import Enum
from types import MappingProxyType
from typing import Any, Mapping, Sequence

from .._errors import (
    AppendFailed,
    BackPressureRejected,
    ConcurrencyConflict,
    CorruptBatch,
    InconsistentReadState,
    InvalidRequest,
    LlogError,
    MetadataStoreError,
    ObjectNotFound,
    ObjectStoreError,
    OffsetOutOfRange,
    OutcomeUnknown,
    OutOfOrderSequence,
    PartitionFenced,
    ProducerFenced,
    PartitionNotInitialized,
    ProducerClosed,
    StaleGeneration,
    StorageError,
    TopicAlreadyExists,
    UnknownGroup,
    UnknownTopic,
)

__all__ = [
    "Kind",
    "Outcome",
    "OUTCOMES",
    "UNNAMED",
    "SUCCESS",
    "INVALID_REQUEST",
    "ROLE_NOT_SERVED",
    "NOT_FOUND",
    "METHOD_NOT_ALLOWED",
    "APPEND_FAILED",
    "LENGTH_REQUIRED",
    "REQUEST_TOO_LARGE",
    "INTERNAL_ERROR",
    "BACK_PRESSURE_REJECTED",
    "SHUTTING_DOWN",
    "PRODUCER_CLOSED",
    "OUTCOME_UNKNOWN",
    "HTTP_PROTOCOL_ERROR",
    "CONNECTION_REFUSED",
    "CONNECTION_LOST",
    "PROTOCOL_ERROR",
    "UNKNOWN_TOPIC",
    "TOPIC_ALREADY_EXISTS",
    "outcome_of",
    "error_type_of",
    "outcome_of_error",
    "status_of",
    "error_code",
    "answer_outcome",
    "item_outcome",
    "is_retriable",
]


class Kind(str, Enum):
    """What a client knows about the writes of a request (or batch) after an answer."""

    DEFINITE = "definite"
    """Nothing was written, now or later."""
    UNKNOWN = "unknown"
    """It may have been written (once), or not."""
    SUCCESS = "success"
    """Written, at the offsets given."""


@dataclass(frozen=True)
class Outcome:
    """One row: what an ``error_type`` means."""

    error_type: str
    """The stable name in an answer's ``error_type`` (an llog error's class name, or the service's own)."""
    status: int | None
    """The HTTP status it is answered with; None: it has none of its own (see ``meaning``)."""
    retriable: bool
    """The same request sent again can succeed (on this broker later, or on another one)."""
    kind: Kind
    meaning: str
    """When it happens, for people (the docs' table)."""
    error_code: str | None = None
    """A consume partition's ``error_code`` for this error (Kafka's name where one fits)."""
    stopping: bool = False
    """The broker is shutting down: the retry goes to another broker."""
    per_item: bool = False
    """The answer's ``results[]`` hold one outcome per batch."""


def _answer(error_type: str, status: int, retriable: bool, kind: Kind, meaning: str, **extra: Any) -> Outcome:
    return Outcome(error_type, status, retriable, kind, meaning, **extra)


def _error(cls: type[LlogError], meaning: str, *, kind: Kind = Kind.DEFINITE, **extra: Any) -> Outcome:
    """A row named by an llog error class, retriable as the class is unless ``extra`` says."""
    extra.setdefault("retriable", cls.retriable)
    extra.setdefault("status", None)
    return Outcome(cls.__name__, kind=kind, meaning=meaning, **extra)


_D, _U = Kind.DEFINITE, Kind.UNKNOWN

SUCCESS = Outcome("", 200, False, Kind.SUCCESS, "success (`/consume`: also with per-partition errors inside)",
                  per_item=True)
INVALID_REQUEST = _error(
    InvalidRequest, "malformed JSON, wrong shape or type, invalid base64, invalid topic, repeated consume "
    "partition, invalid `Content-Length`, body shorter than its `Content-Length`", status=400,
    error_code="INVALID_REQUEST",
)
ROLE_NOT_SERVED = _answer("RoleNotServed", 403, False, _D, "the broker's role does not serve the endpoint; "
                          "the body has `role`")
NOT_FOUND = _answer("NotFound", 404, False, _D, "unknown path (paths are exact: `/produce/` is unknown); "
                    "the compactor service's body lists `paths`")
METHOD_NOT_ALLOWED = _answer("MethodNotAllowed", 405, False, _D, "wrong method on a known path (any "
                             "method token: `PUT`, `TRACE`, `BREW` ...); `Allow` names the right one")
APPEND_FAILED = _error(
    AppendFailed, "produce: some or all batches failed, not all by back-pressure; each `results[]` item "
    "has its own outcome (the request as a whole is unknown: other batches may be committed)", status=409,
    kind=_U, per_item=True,
)
REQUEST_TIMEOUT = _answer("RequestTimeout", 408, True, _D, "the request body did not arrive within "
                          "`LLOG_BROKER_HTTP_READ_TIMEOUT_MS`; nothing was read into the log; the connection "
                          "is closed")
LENGTH_REQUIRED = _answer("LengthRequired", 411, False, _D, "a body without `Content-Length`, or with "
                          "`Transfer-Encoding`")
REQUEST_TOO_LARGE = _answer(
    "RequestTooLarge", 413, False, _D, "body over `LLOG_BROKER_MAX_REQUEST_BYTES` (`field: Content-Length`); "
    "more records than `LLOG_BROKER_MAX_RECORDS_PER_REQUEST`, or more payload bytes than the producer's "
    "whole buffer `LLOG_BATCH_MAX_BUFFER_BYTES` (`field: topic_partitions`)",
)
INTERNAL_ERROR = _answer("InternalError", 500, False, _U, "a bug (logged), never bad input; it may have "
                         "struck after a write")
BACK_PRESSURE_REJECTED = _error(
    BackPressureRejected, "produce: every batch refused by back-pressure (each `results[]` item says so "
    "too); nothing was buffered; `Retry-After: 1`", status=503, per_item=True,
)
SHUTTING_DOWN = _answer("ShuttingDown", 503, True, _D, "the broker is stopping (the connection is closed)",
                        stopping=True)
PRODUCER_CLOSED = _error(ProducerClosed, "produce: the broker is stopping; `Retry-After: 1`", status=503,
                         retriable=True, stopping=True)
OUTCOME_UNKNOWN = _error(
    OutcomeUnknown, "produce: no flush outcome within `LLOG_BROKER_PRODUCE_TIMEOUT_MS`; as a batch's "
    "error: the reply to its offset reservation was lost and Oxia could not be read to decide", status=504,
    kind=_U,
)
HTTP_PROTOCOL_ERROR = Outcome(
    "HttpProtocolError", None, False, _D, "the request line or headers are not HTTP, too long (414: a request "
    "line over 64 KiB; 431: a header line over 64 KiB, more than 100 header lines, or a header block over "
    "64 KiB in all), or an unsupported version (505); the connection is closed",
)
UNKNOWN_TOPIC = _error(
    UnknownTopic, "the topic is not in the catalogue (never created, deleted, or `LLOG_AUTO_CREATE_TOPICS` is "
    "off); as a consume partition's error, also a partition not below its topic's count", status=404,
    error_code="UNKNOWN_TOPIC_OR_PARTITION",
)
TOPIC_ALREADY_EXISTS = _error(TopicAlreadyExists, "`POST /topics`: the topic exists, or its deletion is still "
                              "running", status=409)
UNKNOWN_GROUP = _error(UnknownGroup, "`GET /groups/{group}/offsets`: the group has committed no offset", status=404)
STALE_GENERATION = _error(StaleGeneration, "`POST /groups/{group}/offsets` with `generation`/`member_id`: the group "
                          "is at another generation, or the member left it; nothing was committed; rejoin",
                          status=409)
_ITEMS = (
    _error(PartitionNotInitialized, "nothing was ever written to the partition",
           error_code="UNKNOWN_TOPIC_OR_PARTITION"),

    _error(OffsetOutOfRange, "consume: `fetch_offset` below the log start (1 until retention moves it; the answer's `log_start_offset`)",
           error_code="OFFSET_OUT_OF_RANGE"),
    _error(PartitionFenced, "produce: the partition is FENCED; appends are refused"),
    _error(OutOfOrderSequence, "produce: an idempotent batch's `base_sequence` is not the next its producer's "
           "state in the partition expects (a gap, or a new epoch not at 0); nothing of it was stored; resend "
           "after the earlier batches are acknowledged"),
    _error(ProducerFenced, "produce: an idempotent batch's `producer_epoch` is older than the partition's: a "
           "newer instance initialized the producer; nothing was stored"),
    _error(ConcurrencyConflict, "produce: compare-and-set retries ran out on a contended key"),
    _error(CorruptBatch, "stored bytes failed their checks", error_code="CORRUPT_MESSAGE"),
    _error(InconsistentReadState, "the index has a gap or an overlap (a bug or damage)",
           error_code="INCONSISTENT_READ_STATE"),
    _error(StorageError, "Oxia or S3 failed", error_code="STORAGE_ERROR"),
    _error(MetadataStoreError, "an Oxia call failed", error_code="STORAGE_ERROR"),
    _error(ObjectStoreError, "an S3 call failed (an access denied is not retriable)", error_code="STORAGE_ERROR"),
    _error(ObjectNotFound, "an S3 object or the bucket is missing", error_code="STORAGE_ERROR"),
    _error(LlogError, "consume: a partition failed unexpectedly (a bug, logged)", kind=_U,
           error_code="UNKNOWN_SERVER_ERROR"),
)
CONNECTION_REFUSED = Outcome("ConnectionRefused", None, True, _D, "client: no connection could be made; "
                             "nothing was sent")
CONNECTION_LOST = Outcome("ConnectionLost", None, True, _U, "client: the connection broke or timed out after "
                          "the request went out")
PROTOCOL_ERROR = Outcome("ProtocolError", None, False, _U, "client: an answer it cannot read (`results[]` not "
                         "one per batch, an item neither acknowledged nor failed)")

_ROWS: tuple[Outcome, ...] = (
    INVALID_REQUEST, ROLE_NOT_SERVED, NOT_FOUND, METHOD_NOT_ALLOWED, APPEND_FAILED, REQUEST_TIMEOUT, LENGTH_REQUIRED,
    REQUEST_TOO_LARGE, INTERNAL_ERROR, BACK_PRESSURE_REJECTED, SHUTTING_DOWN, PRODUCER_CLOSED, OUTCOME_UNKNOWN,
    HTTP_PROTOCOL_ERROR, UNKNOWN_TOPIC, TOPIC_ALREADY_EXISTS, UNKNOWN_GROUP, STALE_GENERATION, *_ITEMS, CONNECTION_REFUSED, CONNECTION_LOST, PROTOCOL_ERROR,
)
OUTCOMES: Mapping[str, Outcome] = MappingProxyType({row.error_type: row for row in _ROWS})
"""Every row, by ``error_type``."""

UNNAMED: tuple[tuple[int, int, Outcome], ...] = (
    (200, 299, SUCCESS),
    (400, 499, Outcome("", None, False, _D, "an answer without a known error_type (a proxy's): refused")),
    (502, 502, Outcome("", None, True, _U, "a gateway lost the upstream's answer")),
    (503, 503, Outcome("", None, True, _D, "a gateway, or a service starting, is unavailable")),
    (504, 504, Outcome("", None, True, _U, "a gateway timed out waiting for the answer")),
)
"""An answer whose ``error_type`` names no row, by its status (first, last, outcome)."""
_UNNAMED_OTHER = Outcome("", None, False, _U, "any other status without a known error_type")
_UNNAMED_ITEM = Outcome("", None, False, _D, "a failed produce batch (`results[]` item) whose error_type names no row")

_ANSWERED_AS: Mapping[str, Outcome] = MappingProxyType({
    "InvalidField": INVALID_REQUEST,  # _protocol/http_json.py: a request field is wrong
    "TooLarge": REQUEST_TOO_LARGE,  # _protocol/http_json.py: over a size limit
})
"""Error classes answered under another class's row, by class name (they live in
``http_json``, which imports this module)."""


# -- lookups ------------------------------------------------------------------------------------


def outcome_of(error_type: object) -> Outcome | None:
    """The row ``error_type`` names; None when it names none."""
    return OUTCOMES.get(error_type) if isinstance(error_type, str) else None


def error_type_of(error: BaseException | type[BaseException]) -> str:
    """The ``error_type`` an error (or error class) is answered with: its class name,
    or the row it is answered under (``InvalidField`` is ``InvalidRequest``)."""
    cls = error if isinstance(error, type) else type(error)
    row = _ANSWERED_AS.get(cls.__name__)
    return row.error_type if row is not None else cls.__name__


def outcome_of_error(exc: LlogError) -> Outcome:
    """What the services answer when ``exc`` ends a request as a whole: its row
    when the row has a status; else (an error of ``results[]``, or a class the
    table does not name) status 503 when the error is retriable and 500 when it
    is not, retriable as the instance says."""
    error_type = error_type_of(exc)
    row = outcome_of(error_type)
    if row is not None and row.status is not None:
        return row
    status = 503 if exc.retriable else 500
    if row is None:
        row = replace(answer_outcome(status), error_type=error_type)
    return replace(row, status=status, retriable=exc.retriable)


def status_of(exc: LlogError) -> int:
    """The status of an answer to a request ``exc`` ended as a whole (:func:`outcome_of_error`)."""
    status = outcome_of_error(exc).status
    assert status is not None
    return status


def error_code(exc: LlogError) -> str:
    """A consume partition's ``error_code``: that of the nearest class in the
    error's ancestry whose row has one (``UNKNOWN_SERVER_ERROR`` at the root)."""
    for cls in type(exc).__mro__:
        row = outcome_of(error_type_of(cls))
        if row is not None and row.error_code is not None:
            return row.error_code
    raise AssertionError(f"{type(exc).__name__} is not an LlogError")  # the LlogError row has a code


def answer_outcome(status: int, error_type: object = None) -> Outcome:
    """A whole answer as a client reads it: the row its ``error_type`` names,
    else the outcome of its status (:data:`UNNAMED`)."""
    row = outcome_of(error_type)
    if row is not None:
        return row
    for first, last, outcome in UNNAMED:
        if first <= status <= last:
            return replace(outcome, status=status)
    return replace(_UNNAMED_OTHER, status=status)


def item_outcome(item: object) -> Outcome:
    """One ``results[]`` item of a produce answer: success when acknowledged with
    its offsets; else its ``error_type``'s row (definite when it names none);
    :data:`PROTOCOL_ERROR` when it is neither."""
    if not isinstance(item, Mapping):
        return PROTOCOL_ERROR
    if item.get("ok") is True and (all(_is_int(item.get(k)) for k in ("start_offset", "end_offset"))
                                   or item.get("duplicate") is True):  # a duplicate too old to have offsets
        return SUCCESS
    error_type = item.get("error_type")
    if item.get("ok") is not False or not isinstance(error_type, str) or not error_type:
        return PROTOCOL_ERROR
    return outcome_of(error_type) or replace(_UNNAMED_ITEM, error_type=error_type)


def is_retriable(outcome: Outcome | object, answered: object = None) -> bool:
    """Whether to send again: the answer's own ``retriable`` field when it has a
    boolean one (the error instance's), else the row's (``outcome``: a row, or
    an ``error_type``; one that names no row is not retriable)."""
    if isinstance(answered, bool):
        return answered
    row = outcome if isinstance(outcome, Outcome) else outcome_of(outcome)
    return row is not None and row.retriable


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# -- exports ------------------------------------------------------------------------------------


def _row_json(row: Outcome) -> dict[str, Any]:
    return {
        "error_type": row.error_type, "status": row.status, "retriable": row.retriable, "kind": row.kind.value,
        "error_code": row.error_code, "stopping": row.stopping, "per_item": row.per_item, "meaning": row.meaning,
    }


def to_json() -> dict[str, Any]:
    """The table as JSON: ``outcomes`` (the rows), ``unnamed`` (by status),
    ``unnamed_other`` and ``unnamed_item`` (the fallbacks)."""
    return {
        "outcomes": [_row_json(row) for row in _ROWS],
        "unnamed": [{"first": f, "last": la, **_row_json(o)} for f, la, o in UNNAMED],
        "unnamed_other": _row_json(_UNNAMED_OTHER),
        "unnamed_item": _row_json(_UNNAMED_ITEM),
    }


_GO_HEAD = """\
// BEGIN outcomes: generated by `python -m server._protocol.outcomes --go` from
// server/_protocol/outcomes.py; tests/unit/test_outcomes.py checks that it matches.

// outcome is what an answer's error_type means.
type outcome struct {
	status    int    // the HTTP status it is answered with; 0: none of its own
	retriable bool   // the same request sent again can succeed
	kind      string // kindDefinite, kindUnknown or kindSuccess
	errorCode string // a consume partition's error_code
	stopping  bool   // the broker is shutting down: send to another broker
	perItem   bool   // results[] hold one outcome per batch
}

const (
	kindDefinite = "definite" // nothing was written, now or later
	kindUnknown  = "unknown"  // it may have been written
	kindSuccess  = "success"
)
"""


def _go_name(prefix: str, name: str) -> str:
    words = name.split("_") if name.isupper() else [name]
    return prefix + "".join(w[:1].upper() + (w[1:].lower() if name.isupper() else w[1:]) for w in words)


def _go_outcome(row: Outcome) -> str:
    fields = [f"status: {row.status}"] if row.status is not None else []
    fields += ["retriable: true"] if row.retriable else []
    fields.append(f"kind: {_go_name('kind', row.kind.value)}")
    fields += [f"errorCode: {_go_name('errorCode', row.error_code)}"] if row.error_code else []
    fields += ["stopping: true"] if row.stopping else []
    fields += ["perItem: true"] if row.per_item else []
    return "{" + ", ".join(fields) + "}"


def go_block() -> str:
    """The block of ``loadtest/http_hammer.go`` that holds the table (gofmt's
    alignment aside, which the test ignores)."""
    codes = sorted({row.error_code for row in _ROWS if row.error_code})
    lines = [_GO_HEAD, "const ("]
    lines += [f'\t{_go_name("errorType", row.error_type)} = "{row.error_type}"' for row in _ROWS]
    lines += [")", "", "const ("]
    lines += [f'\t{_go_name("errorCode", code)} = "{code}"' for code in codes]
    lines += [")", "", "var outcomeTable = map[string]outcome{"]
    lines += [f"\t{_go_name('errorType', row.error_type)}: {_go_outcome(row)}," for row in _ROWS]
    lines += ["}", "", "// unnamedOutcomes: an answer whose error_type names no row, by its status (first..last).",
              "var unnamedOutcomes = []struct {", "\tfirst, last int", "\toutcome     outcome", "}{"]
    lines += [f"\t{{{first}, {last}, outcome{_go_outcome(o)}}}," for first, last, o in UNNAMED]
    lines += ["}", "", "// unnamedOther: an unnamed answer of any other status.",
              f"var unnamedOther = outcome{_go_outcome(_UNNAMED_OTHER)}", "",
              "// unnamedItem: a failed results[] item whose error_type names no row.",
              f"var unnamedItem = outcome{_go_outcome(_UNNAMED_ITEM)}", "", "// END outcomes", ""]
    return "\n".join(lines)


_DOC_STATUS = {HTTP_PROTOCOL_ERROR.error_type: "400, 414, 431, 505"}


def _md_row(status: str, error_type: str, row: Outcome) -> str:
    code = f"`{row.error_code}`" if row.error_code else "—"
    retriable = "—" if row.kind is Kind.SUCCESS else "yes" if row.retriable else "no"
    meaning = row.meaning.removeprefix("client: ")
    return f"| {status} | {error_type} | {retriable} | {row.kind.value} | {code} | {meaning} |"


def markdown_table() -> str:
    """The outcome table of ``server/HTTP_API.md``."""
    lines = [
        "<!-- generated by `python -m server._protocol.outcomes --markdown`; tests/unit/test_outcomes.py checks it -->",
        "| status | error_type | retriable | outcome | error_code | when |",
        "| --- | --- | --- | --- | --- | --- |",
        _md_row("200", "—", SUCCESS),
    ]
    for row in _ROWS:
        client = row.status is None and row.meaning.startswith("client:")
        status = str(row.status) if row.status is not None else "client" if client else _DOC_STATUS.get(
            row.error_type, "—")
        lines.append(_md_row(status, f"`{row.error_type}`", row))
    for first, last, outcome in UNNAMED[1:]:
        status = f"{first // 100}xx" if (first, last) == (first // 100 * 100, first // 100 * 100 + 99) else str(first)
        lines.append(_md_row(status, "any other", outcome))
    lines.append(_md_row("other", "any other", _UNNAMED_OTHER))
    lines.append(_md_row("—", "any other", _UNNAMED_ITEM))
    lines.append("<!-- end of the generated table -->")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m server._protocol.outcomes", description=__doc__.split("\n")[0])
    form = parser.add_mutually_exclusive_group()
    form.add_argument("--json", action="store_const", const="json", dest="form", help="the table as JSON (default)")
    form.add_argument("--go", action="store_const", const="go", dest="form", help="the block of http_hammer.go")
    form.add_argument("--markdown", action="store_const", const="markdown", dest="form",
                      help="the table of server/HTTP_API.md")
    args = parser.parse_args(argv)
    if args.form == "go":
        sys.stdout.write(go_block())
    elif args.form == "markdown":
        sys.stdout.write(markdown_table())
    else:
        json.dump(to_json(), sys.stdout, indent=1)
        sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
