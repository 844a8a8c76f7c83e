"""The outcome table (``server/_protocol/outcomes.py``): it names every error the
services answer with, the broker and the compactor service answer as it says,
and nothing outside it spells an ``error_type`` (Python, the Go hammer, the docs)."""

from __future__ import annotations

import ast
import json
import re
import socket
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable, Iterator

import pytest

from server._broker.http import BrokerHTTPServer
from server._catalogue.topic_config import TopicDefaults
from server._compaction.http import serve as serve_compactor
from server._config import BatchConfig
from server._errors import (
    BackPressureRejected,
    InvalidRequest,
    LlogError,
    ObjectStoreError,
    OutcomeUnknown,
    PartitionFenced,
    ProducerClosed,
    VersionConflict,
)
from server._metrics.spec import UnknownMetric
from server._protocol import outcomes
from server._protocol.http_json import (
    ConsumedPartition,
    InvalidField,
    TooLarge,
    append_result_json,
    consumed_partition_json,
)
from server._protocol.outcomes import OUTCOMES, Kind, Outcome
from server._protocol.structs import AppendResult
from server._runtime import REAL_RUNTIME
from server.leaderless_log_metrics import LlogMetrics
from testing.history import FAILED, OK, UNKNOWN
from testing._chaos_workload import classify_produce_reply
from tests._records import stored_size

from .test_broker import Cluster, body, consume_body, doc, in_thread
from .test_error_tree import exception_classes

ROOT = Path(__file__).resolve().parents[2]

NEVER_ANSWERED = {
    "ConfigError": "configuration is checked when a process starts, before it serves anything",
    "VersionConflict": "the writer and the compactor retry it; callers see ConcurrencyConflict",
    "CompactionConflict": "the compactor's own retry signal; its HTTP service only reads",
    "UnknownMetric": "a bug in a metric's use; were one to end a request, 500 under its class name",
    "MalformedAnswer": "raised by a client parsing a binary consume answer",
    "MalformedFrame": "the Kafka listener closes the connection on it, as Kafka does (KAFKA_API.md)",
    "AuthenticationFailed": "the Kafka listener answers SASL_AUTHENTICATION_FAILED and closes (KAFKA_API.md)",
    "HandshakeFailed": "the Kafka listener closes a connection whose TLS handshake failed",
    "UnknownCredential": "answered RESOURCE_NOT_FOUND by the Kafka listener's user APIs",
    "_BodyRefused": "carries the answer it stands for (411, 413, 400)",
    "LeanS3Error": "the S3 adapter translates it into ObjectStoreError inside the storage layer",
    "ProduceError": "the produce client's", "ProduceFailed": "the produce client's",
    "BrokerUnreachable": "the produce client's", "_ConnectFailed": "the produce client's",
    "ProduceJobFailed": "the Spark produce job's",
}
"""LlogError classes no answer names, and why."""


# -- the table covers the error tree ----------------------------------------------------------


def test_every_error_a_service_can_answer_with_has_a_row() -> None:
    classes = {cls.__name__: cls for cls in exception_classes().values() if issubclass(cls, LlogError)}
    missing = {name for name, cls in classes.items()
               if name not in NEVER_ANSWERED and outcomes.outcome_of(outcomes.error_type_of(cls)) is None}
    assert missing == set(), f"add a row to server/_protocol/outcomes.py (or say why not here): {sorted(missing)}"
    gone = set(NEVER_ANSWERED) - set(classes) - {"ProduceJobFailed"}  # spark may not import here
    assert gone == set(), f"no such error classes any more: {sorted(gone)}"
    assert not {name for name in NEVER_ANSWERED if name in OUTCOMES}


def test_class_rows_keep_their_class_name_and_retriable() -> None:
    classes = {cls.__name__: cls for cls in exception_classes().values()}
    for row in OUTCOMES.values():
        cls = classes.get(row.error_type)
        if cls is None or row is outcomes.PRODUCER_CLOSED:
            continue  # ProducerClosed: the broker's 503 means "send it to another broker"
        assert row.retriable == cls.retriable, row.error_type
    assert outcomes.error_type_of(InvalidField("x", "f")) == "InvalidRequest"
    assert outcomes.error_type_of(TooLarge("x", "f")) == "RequestTooLarge"
    assert outcomes.error_type_of(PartitionFenced) == "PartitionFenced"


def test_error_codes_are_the_consume_contract() -> None:
    """The per-partition code of every error class: its row's, else its nearest
    ancestor's (as the consume section of HTTP_API.md lists them)."""
    expected = {
        "OffsetOutOfRange": "OFFSET_OUT_OF_RANGE", "PartitionNotInitialized": "UNKNOWN_TOPIC_OR_PARTITION",
        "UnknownTopic": "UNKNOWN_TOPIC_OR_PARTITION",
        "CorruptBatch": "CORRUPT_MESSAGE", "InconsistentReadState": "INCONSISTENT_READ_STATE",
        "StorageError": "STORAGE_ERROR", "MetadataStoreError": "STORAGE_ERROR", "ObjectStoreError": "STORAGE_ERROR",
        "ObjectNotFound": "STORAGE_ERROR", "LeanS3Error": "STORAGE_ERROR", "InvalidRequest": "INVALID_REQUEST",
        "InvalidField": "INVALID_REQUEST", "TooLarge": "INVALID_REQUEST", "MalformedFrame": "INVALID_REQUEST",
    }
    for cls in exception_classes().values():
        if issubclass(cls, LlogError):
            exc = cls.__new__(cls)
            assert outcomes.error_code(exc) == expected.get(cls.__name__, "UNKNOWN_SERVER_ERROR"), cls
    spec = (ROOT / "server" / "openapi.yaml").read_text()
    codes = {row.error_code for row in OUTCOMES.values() if row.error_code}
    assert all(f"- {code}" in spec for code in codes)


def test_status_of_an_error_that_ends_a_request() -> None:
    assert outcomes.status_of(InvalidRequest("x")) == 400
    assert outcomes.status_of(TooLarge("x", "f")) == 413
    assert outcomes.status_of(ProducerClosed("x")) == 503
    assert outcomes.status_of(BackPressureRejected("x")) == 503
    assert outcomes.status_of(OutcomeUnknown("x")) == 504
    # Errors of results[] and classes without a row: 503 retriable, 500 not,
    # as the instance says.
    assert outcomes.status_of(PartitionFenced("x")) == 500
    assert outcomes.status_of(ObjectStoreError("x")) == 503
    denied = outcomes.outcome_of_error(ObjectStoreError("denied", retriable=False))
    assert (denied.status, denied.retriable, denied.error_type) == (500, False, "ObjectStoreError")
    assert outcomes.status_of(VersionConflict("x")) == 503
    assert outcomes.outcome_of_error(UnknownMetric("x")).error_type == "UnknownMetric"
    assert outcomes.status_of(UnknownMetric("x")) == 500


# -- reading answers ---------------------------------------------------------------------------


def test_an_answer_is_read_by_its_error_type_else_by_its_status() -> None:
    assert outcomes.answer_outcome(503, "ShuttingDown") is outcomes.SHUTTING_DOWN
    assert outcomes.answer_outcome(503, "OutcomeUnknown").kind is Kind.UNKNOWN  # whatever the status
    read = {s: outcomes.answer_outcome(s, None) for s in (200, 404, 500, 502, 503, 504, 302)}
    assert {s: (o.kind, o.retriable) for s, o in read.items()} == {
        200: (Kind.SUCCESS, False), 404: (Kind.DEFINITE, False), 500: (Kind.UNKNOWN, False),
        502: (Kind.UNKNOWN, True), 503: (Kind.DEFINITE, True), 504: (Kind.UNKNOWN, True),
        302: (Kind.UNKNOWN, False),
    }
    assert all(o.status == s for s, o in read.items())
    assert outcomes.answer_outcome(418, "NoSuchRow").kind is Kind.DEFINITE


def test_a_results_item_is_read_by_its_own_fields() -> None:
    ok = {"ok": True, "start_offset": 1, "end_offset": 2}
    assert outcomes.item_outcome(ok) is outcomes.SUCCESS
    assert outcomes.item_outcome({"ok": False, "error_type": "OutcomeUnknown"}).kind is Kind.UNKNOWN
    assert outcomes.item_outcome({"ok": False, "error_type": "PartitionFenced"}).kind is Kind.DEFINITE
    unnamed = outcomes.item_outcome({"ok": False, "error_type": "SomethingNew"})
    assert (unnamed.kind, unnamed.error_type) == (Kind.DEFINITE, "SomethingNew")
    for garbled in ({"ok": True}, {"ok": False}, {"ok": "yes"}, ["x"], {"ok": True, "start_offset": True,
                                                                       "end_offset": 1}):
        assert outcomes.item_outcome(garbled) is outcomes.PROTOCOL_ERROR, garbled
    assert outcomes.is_retriable(outcomes.OUTCOME_UNKNOWN) is True
    assert outcomes.is_retriable(outcomes.OUTCOME_UNKNOWN, False) is False  # the answer's own field wins
    assert outcomes.is_retriable("ConcurrencyConflict") and not outcomes.is_retriable("SomethingNew")


def test_the_chaos_workload_classifies_by_the_table() -> None:
    groups = [("t", 0, [b"a"])]
    assert classify_produce_reply(500, {"error_type": "PartitionFenced"}, groups)[0][0] == FAILED
    assert classify_produce_reply(503, {"error_type": "OutcomeUnknown"}, groups)[0][0] == UNKNOWN
    assert classify_produce_reply(502, None, groups)[0][0] == UNKNOWN
    item = {"ok": False, "error_type": "SomethingNew", "error": "x"}
    assert classify_produce_reply(409, {"error_type": "AppendFailed", "results": [item]}, groups)[0][0] == FAILED
    ok = {"ok": True, "start_offset": 4, "end_offset": 4}
    assert classify_produce_reply(200, {"results": [ok]}, groups)[0][:2] == (OK, 4)


# -- the services answer as the table says ------------------------------------------------------


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    with Cluster() as c:
        yield c


def _raw(port: int, data: bytes, *, hold_open: bool = False) -> tuple[int, dict[str, Any]]:
    """Raw bytes on a fresh connection; the status and JSON body of the answer.
    ``hold_open``: keep sending side open (a client that stalls) instead of ending it."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(data)
        if not hold_open:
            s.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    head, _, payload = answer.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(payload)


def _over_http(
    cluster: Cluster, data: bytes, prepare: Callable[[Any], None] = lambda broker: None, *,
    hold_open: bool = False, **config: Any,
):
    broker = cluster.broker(**config)
    server = BrokerHTTPServer(broker)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        prepare(broker)
        return _raw(server.server_address[1], data, hold_open=hold_open)
    finally:
        server.shutdown()
        server.server_close()


def _from_compactor(data: bytes, service: Any) -> tuple[int, dict[str, Any]]:
    server, _ = serve_compactor(service, "127.0.0.1", 0)
    try:
        return _raw(server.server_address[1], data)
    finally:
        server.shutdown()
        server.server_close()


def _answer(resp: Any) -> tuple[int, dict[str, Any]]:
    return resp.status, doc(resp)


def _back_pressure(cluster: Cluster) -> tuple[int, dict[str, Any]]:
    cap = stored_size([b"12345"]) + stored_size([b"1234"]) - 1  # buffer bytes are stored batch bytes
    broker = cluster.broker(batch=BatchConfig(max_bytes=cap, max_delay_ms=1, max_buffer_bytes=cap, max_block_ms=0))
    cluster.writer.block.set()
    first, _ = in_thread(lambda: broker.produce(body(("t", 0, ["12345"]))))
    assert cluster.writer.entered.wait(10)
    answer = _answer(broker.produce(body(("t", 0, ["1234"]))))  # both batches: one byte over the cap, refused
    cluster.writer.release.set()
    first.join(10)
    return answer


def _producer_closed(cluster: Cluster) -> tuple[int, dict[str, Any]]:
    broker = cluster.broker()
    assert broker.producer is not None
    broker.producer.close()
    return _answer(broker.produce(body(("t", 0, ["late"]))))


def _flush_timeout(cluster: Cluster) -> tuple[int, dict[str, Any]]:
    broker = cluster.broker(produce_timeout_ms=20)
    cluster.writer.block.set()
    answer = _answer(broker.produce(body(("t", 0, ["late"]))))
    cluster.writer.release.set()
    return answer


def _fenced(cluster: Cluster) -> tuple[int, dict[str, Any]]:
    cluster.writer.initialize_partition("t", 1)
    cluster.writer.fence_partition("t", 1)
    return _answer(cluster.broker().produce(body(("t", 1, ["b"]))))


def _created_twice(cluster: Cluster) -> tuple[int, dict[str, Any]]:
    broker = cluster.broker(topics=TopicDefaults())
    create = json.dumps({"name": "orders", "partitions": 2}).encode()
    assert broker.topics_route(create, "POST", None).status == 201
    return _answer(broker.topics_route(create, "POST", None))


def _stale_generation(cluster: Cluster) -> tuple[int, dict[str, Any]]:
    cluster.writer.initialize_partition("t", 0)
    commit = json.dumps({"offsets": [{"topic": "t", "partition": 0, "offset": 1}], "generation": 2}).encode()
    return _answer(cluster.broker().groups_route(commit, "POST", "billing", ""))


def _failing_health(broker: Any) -> None:
    def health(body: bytes) -> Any:
        raise RuntimeError("a bug")

    broker.health = health


_GET_HEALTH = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
_BAD_COMPACTOR = SimpleNamespace(metrics=LlogMetrics(), health=lambda: 1 / 0, runtime=REAL_RUNTIME)

SCENARIOS: dict[str, list[Callable[[Cluster], tuple[int, dict[str, Any]]]]] = {
    "InvalidRequest": [
        lambda c: _answer(c.broker().produce(b"{not json")),
        lambda c: _answer(c.broker().produce(body(("t", -1, ["a"])))),
        lambda c: _over_http(c, b"POST /produce HTTP/1.1\r\nContent-Length: x\r\n\r\n"),
    ],
    "RoleNotServed": [lambda c: _answer(c.broker("read").produce(body(("t", 0, ["a"]))))],
    "NotFound": [
        lambda c: _over_http(c, b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n"),
        lambda c: _from_compactor(b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n", _BAD_COMPACTOR),
    ],
    "MethodNotAllowed": [lambda c: _over_http(c, b"DELETE /produce HTTP/1.1\r\nHost: x\r\n\r\n")],
    "AppendFailed": [_fenced],
    "UnknownTopic": [
        lambda c: _answer(c.broker(topics=TopicDefaults(auto_create=False)).produce(body(("nope", 0, ["a"])))),
        lambda c: _over_http(c, b"GET /topics/nope HTTP/1.1\r\nHost: x\r\n\r\n", topics=TopicDefaults()),
    ],
    "TopicAlreadyExists": [_created_twice],
    "UnknownGroup": [lambda c: _over_http(c, b"GET /groups/nobody/offsets HTTP/1.1\r\nHost: x\r\n\r\n")],
    "StaleGeneration": [_stale_generation],
    "LengthRequired": [lambda c: _over_http(c, b"POST /produce HTTP/1.1\r\nHost: x\r\n\r\n")],
    "RequestTimeout": [  # a body that stops short of its Content-Length
        lambda c: _over_http(c, b"POST /produce HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n{}",
                             hold_open=True, http_read_timeout_ms=200),
    ],
    "RequestTooLarge": [
        lambda c: _answer(c.broker(max_records_per_request=1).produce(body(("t", 0, ["a", "b"])))),
        lambda c: _over_http(c, b"POST /produce HTTP/1.1\r\nContent-Length: 999999999\r\n\r\n"),
    ],
    "InternalError": [
        lambda c: _over_http(c, _GET_HEALTH, _failing_health),
        lambda c: _from_compactor(_GET_HEALTH, _BAD_COMPACTOR),
    ],
    "BackPressureRejected": [_back_pressure],
    "ShuttingDown": [lambda c: _over_http(c, _GET_HEALTH, lambda broker: broker.close())],
    "ProducerClosed": [_producer_closed],
    "OutcomeUnknown": [_flush_timeout],
    "HttpProtocolError": [
        lambda c: _over_http(c, b"GARBAGE\r\n\r\n"),
        lambda c: _from_compactor(b"GET /x HTTP/9.9\r\n\r\n", _BAD_COMPACTOR),
    ],
}
"""Requests that get each answer of its own, from the broker (routes or HTTP) and the compactor service."""


def test_every_answer_of_its_own_has_a_scenario() -> None:
    answers = {row.error_type for row in OUTCOMES.values() if row.status is not None} | {"HttpProtocolError"}
    assert set(SCENARIOS) == answers


@pytest.mark.parametrize("error_type, index", [(k, i) for k, v in SCENARIOS.items() for i in range(len(v))])
def test_the_services_answer_as_the_table_says(cluster: Cluster, error_type: str, index: int) -> None:
    row = OUTCOMES[error_type]
    status, answer = SCENARIOS[error_type][index](cluster)
    assert answer["error_type"] == row.error_type, answer
    if row.status is not None:
        assert status == row.status, answer
    else:
        assert status in (400, 414, 431, 501, 505)
    assert outcomes.answer_outcome(status, answer["error_type"]) is row
    if "retriable" in answer:
        assert answer["retriable"] == row.retriable
    if row.per_item:
        assert [item["error_type"] for item in answer["results"] if not item["ok"]], answer


def test_results_items_carry_their_rows(cluster: Cluster) -> None:
    status, answer = _fenced(cluster)
    (item,) = answer["results"]
    row = OUTCOMES[item["error_type"]]
    assert row.error_type == "PartitionFenced" and row.kind is Kind.DEFINITE and item["retriable"] is row.retriable
    broker = cluster.broker()
    parts = doc(broker.consume(consume_body("nothing", 0, 1)))["results"]
    parts += doc(broker.consume(consume_body("t", 1, 0)))["results"]
    assert [(p["error_code"], p["error_type"]) for p in parts] == [
        (OUTCOMES[p["error_type"]].error_code, p["error_type"]) for p in parts
    ]
    assert {p["error_type"] for p in parts} == {"PartitionNotInitialized", "OffsetOutOfRange"}


@pytest.mark.parametrize("row", [r for r in OUTCOMES.values() if r.status is None and r.error_code is not None],
                         ids=lambda r: r.error_type)
def test_an_error_of_results_is_encoded_by_its_row(row: Outcome) -> None:
    cls = {c.__name__: c for c in exception_classes().values()}[row.error_type]
    exc = cls("broken", topic="t", partition=0)
    batch = append_result_json(AppendResult("t", 0, 1, error=exc))
    assert (batch["error_type"], batch["retriable"]) == (row.error_type, exc.retriable)
    part = consumed_partition_json(ConsumedPartition("t", 0, 1, 1, None, error=exc))
    assert (part["error_code"], part["error_type"]) == (row.error_code, row.error_type)


# -- one declaration: no error_type outside the table ----------------------------------------


def _python_sources() -> Iterator[Path]:
    for top in ("server", "testing", "loadtest", "dashboard", "devstack", "scripts"):
        yield from sorted((ROOT / top).rglob("*.py"))


_S3_CODES = {("server/_storage/objectstore.py", "NotFound"), ("devstack/_s3.py", "NotFound")}
"""S3 error codes spelled like a row."""


def _skipped(tree: ast.AST) -> set[int]:
    """ids of the nodes not to search: docstrings and ``__all__``."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                skip.add(id(first.value))
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            skip.update(id(n) for n in ast.walk(node.value))
    return skip


def _names_error_type(node: ast.AST) -> bool:
    """``x["error_type"]``, ``x.get("error_type")``, ``error_type`` or ``x.error_type``."""
    if isinstance(node, ast.Subscript):
        node = node.slice
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" and node.args:
        node = node.args[0]
    elif isinstance(node, ast.Name):
        return node.id == "error_type"
    elif isinstance(node, ast.Attribute):
        return node.attr == "error_type"
    return isinstance(node, ast.Constant) and node.value == "error_type"


def _error_type_literals(tree: ast.AST) -> Iterator[ast.Constant]:
    """String constants given as, or compared with, an ``error_type``."""
    for node in ast.walk(tree):
        values: list[ast.AST] = []
        if isinstance(node, ast.Compare) and any(_names_error_type(n) for n in [node.left, *node.comparators]):
            values = [node.left, *node.comparators]
        elif isinstance(node, ast.Dict):
            values = [v for k, v in zip(node.keys, node.values) if k is not None and _names_error_type(k)]
        elif isinstance(node, ast.Assign) and any(_names_error_type(t) for t in node.targets):
            values = [node.value]
        elif isinstance(node, ast.keyword) and node.arg == "error_type":
            values = [node.value]
        for value in values:
            yield from (n for n in ast.walk(value) if isinstance(n, ast.Constant) and isinstance(n.value, str)
                        and n.value not in ("", "error_type"))


def test_no_error_type_is_spelled_outside_the_table() -> None:
    names = set(OUTCOMES) | {row.error_code for row in OUTCOMES.values() if row.error_code}
    found = []
    for path in _python_sources():
        rel = path.relative_to(ROOT).as_posix()
        if rel == "server/_protocol/outcomes.py":
            continue
        tree = ast.parse(path.read_text(), rel)
        skip = _skipped(tree)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and node.value in names and id(node) not in skip
                    and (rel, node.value) not in _S3_CODES):
                found.append(f"{rel}:{node.lineno} {node.value!r}")
        found += [f"{rel}:{n.lineno} {n.value!r} (as an error_type)" for n in _error_type_literals(tree)
                  if n.value not in names]
    assert found == [], "use the rows of server/_protocol/outcomes.py instead:\n" + "\n".join(found)


def _go_lines(text: str) -> list[str]:
    """Go source with gofmt's alignment undone (runs of blanks as one space) and blank lines dropped."""
    return [" ".join(line.split()) for line in text.splitlines() if line.strip()]


def test_the_go_hammer_holds_the_generated_table_and_no_other_error_type() -> None:
    source = (ROOT / "loadtest" / "http_hammer.go").read_text()
    match = re.search(r"^// BEGIN outcomes.*?^// END outcomes$", source, re.S | re.M)
    assert match, "http_hammer.go has no outcomes block"
    assert _go_lines(match.group(0)) == _go_lines(outcomes.go_block()), (
        "regenerate the block of http_hammer.go: python -m server._protocol.outcomes --go"
    )
    rest = source[: match.start()] + source[match.end():]
    names = set(OUTCOMES) | {row.error_code for row in OUTCOMES.values() if row.error_code}
    assert [s for s in re.findall(r'"([^"\\]*)"', rest) if s in names] == []


def test_http_api_holds_the_generated_table() -> None:
    assert outcomes.markdown_table() in (ROOT / "server" / "HTTP_API.md").read_text(), (
        "regenerate the table of server/HTTP_API.md: python -m server._protocol.outcomes --markdown"
    )


def test_the_json_export(capsys: pytest.CaptureFixture[str]) -> None:
    assert outcomes.main(["--json"]) == 0
    exported = json.loads(capsys.readouterr().out)
    assert exported == outcomes.to_json()
    assert [row["error_type"] for row in exported["outcomes"]] == list(OUTCOMES)
    assert {row["kind"] for row in exported["outcomes"]} == {"definite", "unknown"}
