"""The HTTP fuzzer's own parts (``loadtest/_fuzz``), without servers: its
decoder against the broker's parser, its checks, its ledger, its replay."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import pytest

from loadtest._fuzz.checks import answer_problems
from loadtest._fuzz.ledger import Ledger
from loadtest._fuzz.mutate_admin import ADMIN_CASES
from loadtest._fuzz.mutations import next_case
from loadtest._fuzz.oracle import Refused, decode_produce
from loadtest._fuzz.requests import Case, Ctx, ProduceSent, Req, check_binary_encoding, marker_re
from loadtest._fuzz.wire import Answer
from server._errors import InvalidRequest
from server._protocol.produce_binary import parse_produce_body
from tests.integration.conftest import REPO

MAX_RECORDS = 1000


def ctx() -> Ctx:
    return Ctx("abc123", "fuzz-1-abc123", 4, 64 * 1024, MAX_RECORDS)


def produce_requests(seed: int, n: int) -> list[Req]:
    rng, c = random.Random(seed), ctx()
    reqs = []
    while len(reqs) < n:
        reqs += [r for r in next_case(rng, c).requests if r.produce and r.produce.complete]
    return reqs


def test_the_binary_field_builder_agrees_with_the_encoder() -> None:
    check_binary_encoding(random.Random(7), ctx())


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_decoder_accepts_exactly_what_the_broker_parser_accepts(seed: int) -> None:
    """Over mutated produce bodies, the fuzzer's decoder and the broker's
    parser agree on valid or not, and on the records of the valid ones."""
    agreed = accepted = 0
    for req in produce_requests(seed, 400):
        sent = req.produce
        try:
            ours = decode_produce(sent.body, sent.content_type)[0]
        except Refused:
            ours = None
        try:
            parsed = parse_produce_body(sent.body, sent.content_type, max_records=10**9)
            theirs = [(g.topic, g.partition, [bytes(p) for p in g.payloads]) for g in parsed.groups]
        except (InvalidRequest, RecursionError):
            theirs = None
        assert ours == theirs, (sent.body[:200], sent.content_type)
        agreed += 1
        accepted += ours is not None
    assert agreed >= 400 and 0 < accepted < agreed


def test_a_seed_replays_the_same_cases() -> None:
    def cases(seed: int) -> list[bytes]:
        rng, c = random.Random(seed), ctx()
        return [b"".join(r.data for r in next_case(rng, c).requests) + next_case(rng, c).prefix for _ in range(200)]

    assert cases(5) == cases(5) != cases(6)


def test_admin_cases_never_alter_or_delete_the_topic_the_ledger_reads_back() -> None:
    rng, c = random.Random(11), ctx()
    destructive = 0
    for _ in range(3000):
        _, build = rng.choice(list(ADMIN_CASES.values()))
        (req,) = build(rng, c).requests
        segments = req.path.split("?")[0].split("/")
        if req.method in ("PATCH", "DELETE") or segments[-1] == "delete-records":
            destructive += 1
            assert c.topic not in segments, req.data[:200]
    assert destructive > 300


def _case(target: str = "broker") -> Case:
    return Case("k", target, "send", ())


def _answer(status: int, body: object, ctype: str = "application/json", **headers: str) -> Answer:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return Answer(status, (("content-type", ctype), *headers.items()), raw)


@pytest.mark.parametrize(("target", "path", "answer", "ok"), [
    ("broker", "/produce", _answer(400, {"error": "x", "error_type": "InvalidRequest", "field": "a"}), True),
    ("broker", "/produce", _answer(503, {"error": "x", "error_type": "BackPressureRejected"}), True),
    ("broker", "/produce", _answer(504, {"error": "x", "error_type": "OutcomeUnknown"}), True),
    ("broker", "/consume", _answer(504, {"error": "x", "error_type": "OutcomeUnknown"}), False),
    ("broker", "/produce", _answer(500, {"error": "x", "error_type": "InternalError"}), False),
    ("compactor", "/health", _answer(501, {"error": "x", "error_type": "HttpProtocolError"}), False),
    ("compactor", "/health", _answer(503, {"error": "x", "error_type": "Stopping"}), True),
    ("broker", "/x", _answer(404, b"<html>Not Found</html>", "text/html"), False),
    ("broker", "/x", _answer(404, {"error": "x"}), False),
    ("broker", "/x", _answer(404, {"error": "x", "error_type": "NotFound", "field": 3}), False),
    ("broker", "/health", _answer(405, {"error": "x", "error_type": "MethodNotAllowed"}), False),
    ("broker", "/health", _answer(405, {"error": "x", "error_type": "MethodNotAllowed"}, allow="GET"), True),
    ("broker", "/health", _answer(200, b'{"x": "/smuggled-1"}'), False),
    ("compactor", "/health", _answer(408, {"error": "x", "error_type": "RequestTimeout"}), False),
])
def test_answer_checks(target: str, path: str, answer: Answer, ok: bool) -> None:
    problems = answer_problems(_case(target), Req(b"", "GET", path), answer)
    assert (problems == []) == ok, problems


def test_an_expected_status_is_enforced() -> None:
    req = Req(b"", "GET", "/health", expect=frozenset({405}))
    assert answer_problems(_case(), req, _answer(200, {"status": "ok"}))
    assert not answer_problems(_case(), req, _answer(405, {"error": "x", "error_type": "M"}, allow="GET"))


def _sent(req_id: int, *values: bytes) -> ProduceSent:
    body = json.dumps({"topic_partitions": [{"topic": "t", "partition": 0, "records": [v.decode() for v in values]}]})
    return ProduceSent(req_id, body.encode(), "application/json", values, (("t", 0),))


def _ok(start: int, count: int) -> Answer:
    res = {"topic": "t", "partition": 0, "ok": True, "start_offset": start, "end_offset": start + count - 1,
           "count": count}
    return _answer(200, {"results": [res], "success_count": 1, "error_count": 0})


def test_the_ledger_finds_a_refused_record_stored_and_an_acknowledged_one_missing() -> None:
    ledger = Ledger(marker_re("x"), max_records=MAX_RECORDS, max_request_bytes=1 << 20, topics={"t": 2})
    a, b, c, d = b"FZx.1.0.a", b"FZx.2.0.b", b"FZx.3.0.c", b"FZx.4.0.d"
    assert ledger.sent(_sent(1, a), _ok(1, 1), processed=True) == []
    ledger.sent(_sent(2, b), _answer(400, {"error": "x", "error_type": "InvalidRequest"}), processed=True)
    ledger.sent(_sent(3, c), None, processed=True)  # reset before the answer: unknown
    assert ledger.sent(_sent(4, d), _ok(3, 1), processed=True) == []
    assert ledger.verify(lambda t, p: [(1, a), (2, c), (3, d)]) == []
    problems = ledger.verify(lambda t, p: [(1, a), (2, b)])
    assert any("request 2, outcome refused" in p for p in problems), problems
    assert any("(t, 0, 3)" in p.replace("'", "") and "missing" in p for p in problems), problems
    assert any("holds" in p for p in ledger.verify(lambda t, p: [(1, b"other"), (2, c), (3, d)]))


def test_the_ledger_flags_a_200_for_a_body_the_contract_refuses_and_a_400_for_one_it_accepts() -> None:
    ledger = Ledger(marker_re("x"), max_records=MAX_RECORDS, max_request_bytes=1 << 20, topics={"t": 2})
    bad = ProduceSent(1, b'{"topic_partitions": [{"topic": "t", "partition": -1, "records": ["FZx.1.0."]}]}',
                      "application/json", (b"FZx.1.0.",), (("t", 0),))
    assert ledger.sent(bad, _ok(1, 1), processed=True)
    refused = ledger.sent(_sent(2, b"FZx.2.0."), _answer(400, {"error": "x", "error_type": "I"}), processed=True)
    assert refused and "accepts" in refused[0]
    # A name a mutation made is auto-created with the broker's default count (at least 1):
    # its partition 0 must be taken, a higher one may be refused.
    for partition, flagged in ((0, True), (1, False)):
        other = ProduceSent(3 + partition, json.dumps({"topic_partitions": [
            {"topic": "u", "partition": partition, "records": [f"FZx.{3 + partition}.0."]}]}).encode(),
            "application/json", (f"FZx.{3 + partition}.0.".encode(),), (("u", partition),))
        problems = ledger.sent(other, _answer(400, {"error": "x", "error_type": "I"}), processed=True)
        assert bool(problems) == flagged, (partition, problems)


def test_help() -> None:
    proc = subprocess.run([sys.executable, "-m", "loadtest.fuzz_http", "--help"], cwd=REPO,
                          env={"PYTHONPATH": str(REPO), "PATH": ""}, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "--seed" in proc.stdout and "--broker" in proc.stdout
