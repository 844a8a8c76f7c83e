"""The produce client against scripted fake brokers (no stack): retries,
fallback, request bounds, per-partition order, concurrent requests, typed
failures; every test runs with the binary body and with JSON."""

from __future__ import annotations

import base64
import json
import socket
import threading
from collections import defaultdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Iterator

import pyarrow as pa
import pytest

from server._protocol.produce_binary import (
    PRODUCE_BINARY_V2_CONTENT_TYPE as PRODUCE_BINARY_CONTENT_TYPE,
    PRODUCE_VERSION_2,
    parse_binary_produce,
)
from server._errors import ConfigError
from server.client import (
    BrokerUnreachable,
    ProduceFailed,
    ProducerConfig,
    ProduceStats,
    TaskProducer,
    parse_broker_list,
    rendezvous_order,
)

BODY = "binary"


@pytest.fixture(autouse=True, params=["binary", "json"])
def body(request: pytest.FixtureRequest) -> Iterator[str]:
    global BODY
    BODY = request.param
    yield request.param
    BODY = "binary"


def _as_json_body(raw: bytes, content_type: str) -> dict:
    """A binary body in the JSON shape (a record as text when it is UTF-8,
    else ``{"base64": ...}``, as the broker's JSON contract has it)."""
    if content_type != PRODUCE_BINARY_CONTENT_TYPE:
        return json.loads(raw)

    def text(b: bytes | None) -> str | dict | None:
        if b is None:
            return None
        try:
            return b.decode("utf-8")
        except UnicodeDecodeError:
            return {"base64": base64.b64encode(b).decode()}

    def record(r) -> str | dict | None:
        if r.key is None and not r.headers and r.value is not None:
            return text(r.value)  # a plain value, as the JSON body sends it
        doc = {"value": text(r.value), "key": text(r.key)}
        if r.headers:
            doc["headers"] = [{"key": k, "value": text(v)} for k, v in r.headers]
        return doc

    req = parse_binary_produce(raw, max_records=10**9, version=PRODUCE_VERSION_2)
    return {"topic_partitions": [{"topic": g.topic, "partition": g.partition,
                                  "records": [record(r) for r in g.payloads.all_records()]} for g in req.groups],
            "flush": req.flush}

Script = Callable[[dict], tuple[int, dict]]


class FakeBroker:
    """An HTTP server whose /produce answers come from ``script(request)``;
    by default every batch is acknowledged with consecutive offsets."""

    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.raw: list[tuple[str, bytes]] = []
        """(Content-Type, body) of every request."""
        self.script: Script | None = None
        self.gate: Callable[[dict], None] | None = None
        """Called with each request before it is answered, outside the lock."""
        self.concurrent = 0
        self.max_concurrent = 0
        self.next_offset: dict[tuple[str, int], int] = defaultdict(lambda: 1)
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                raw = self.rfile.read(int(self.headers["Content-Length"]))
                kind = self.headers["Content-Type"]
                body = _as_json_body(raw, kind)
                with fake.lock:
                    fake.raw.append((kind, raw))
                    fake.concurrent += 1
                    fake.max_concurrent = max(fake.max_concurrent, fake.concurrent)
                try:
                    if fake.gate is not None:
                        fake.gate(body)
                finally:
                    with fake.lock:
                        fake.concurrent -= 1
                with fake.lock:
                    fake.requests.append(body)
                    status, answer = (fake.script or fake.ack_all)(body)
                data = json.dumps(answer).encode()
                head = (f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n"
                        f"Content-Length: {len(data)}\r\n\r\n").encode()
                self.wfile.write(head + data)  # one write: no Nagle/delayed-ACK stall

            def do_GET(self) -> None:  # noqa: N802
                data = b'{"status": "ok"}'
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def ack(self, tp: dict) -> dict:
        key = (tp["topic"], tp["partition"])
        start = self.next_offset[key]
        n = len(tp["records"])
        self.next_offset[key] = start + n
        return {"topic": tp["topic"], "partition": tp["partition"], "ok": True,
                "start_offset": start, "end_offset": start + n - 1, "count": n}

    def ack_all(self, body: dict) -> tuple[int, dict]:
        results = [self.ack(tp) for tp in body["topic_partitions"]]
        return 200, {"results": results, "success_count": len(results), "error_count": 0}

    def records(self) -> dict[int, list[str]]:
        """Records per partition in the order the broker accepted them (acked requests only)."""
        out: dict[int, list[str]] = defaultdict(list)
        for body in self.accepted:
            for tp in body:
                out[tp["partition"]].extend(tp["records"])
        return out

    accepted: list[list[dict]]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def broker() -> Iterator[FakeBroker]:
    b = FakeBroker()
    b.accepted = []
    orig = b.ack

    def ack(tp: dict) -> dict:
        b.accepted.append([tp])
        return orig(tp)

    b.ack = ack  # type: ignore[method-assign]
    yield b
    b.close()


def dead_url() -> str:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    return f"http://127.0.0.1:{port}"


def config(*urls: str, **kw: Any) -> ProducerConfig:
    kw.setdefault("retry_backoff_initial_ms", 1)
    kw.setdefault("retry_backoff_max_ms", 5)
    kw.setdefault("body", BODY)
    return ProducerConfig(brokers=parse_broker_list(list(urls)), **kw)


def produce(cfg: ProducerConfig, records: dict[int, list[str]], topic: str = "t") -> ProduceStats:
    with TaskProducer(topic, cfg) as tp:
        for p, recs in records.items():
            tp.add(recs, [p] * len(recs))
        return tp.flush()


def test_every_record_acknowledged_once_in_order(broker: FakeBroker) -> None:
    recs = {p: [f"r{p}-{i}" for i in range(500)] for p in range(5)}
    stats = produce(config(broker.url, max_request_records=64), recs)
    assert broker.records() == recs
    assert stats.records_acked == 2500 and stats.retries == 0
    assert stats.ranges == {p: [1, 500, 500] for p in range(5)}
    assert stats.bytes_acked == sum(len(r) for rs in recs.values() for r in rs)


def test_requests_respect_byte_and_record_bounds(broker: FakeBroker, body: str) -> None:
    recs = {p: ["x" * 300] * 200 for p in range(3)}
    produce(config(broker.url, max_request_bytes=4096, max_request_records=10), recs)
    want = PRODUCE_BINARY_CONTENT_TYPE if body == "binary" else "application/json"
    assert {kind for kind, _ in broker.raw} == {want}
    for _, raw in broker.raw:
        assert len(raw) <= 4096
    for req in broker.requests:
        assert sum(len(tp["records"]) for tp in req["topic_partitions"]) <= 10
    assert sum(len(v) for v in broker.records().values()) == 600


def test_requests_fill_up_to_the_byte_bound(broker: FakeBroker) -> None:
    """The bound is the body's real size: requests are not cut far below it."""
    produce(config(broker.url, max_request_bytes=4096, max_in_flight=1), {0: ["x" * 100] * 400})
    sizes = sorted(len(raw) for _, raw in broker.raw)
    assert len(sizes) > 2 and sizes[-2] > 4096 - 110, sizes


def test_flush_asks_the_broker_to_flush_what_it_sends(broker: FakeBroker, body: str) -> None:
    """Requests that go because the buffer filled wait out the broker's batch
    delay as usual; those that ``flush()`` sends ask for a flush now."""
    with TaskProducer("t", config(broker.url, max_request_bytes=4096, max_in_flight=1)) as tp:
        tp.add(["x" * 100] * 60, [0] * 60)  # past a quarter of the bound: a request goes from add()
        tp.flush()
    flags = [(raw[6:8] == b"\x00\x01") if kind == PRODUCE_BINARY_CONTENT_TYPE else json.loads(raw).get("flush", False)
             for kind, raw in broker.raw]
    assert len(flags) >= 2 and flags[0] is False and flags[-1] is True, flags


def test_flush_sends_a_flush_only_request_for_requests_sent_without_the_hint(broker: FakeBroker, body: str) -> None:
    """The task's only request went from add(), without the hint, and waits
    at the broker (the gate holds it until a flush-only request arrives, as a
    broker holds it for its batch delay); flush() has nothing left to send,
    so it asks that broker for a flush with an empty, flush-only request."""
    flush_only = threading.Event()

    def gate(req: dict) -> None:
        if not req["topic_partitions"]:
            assert req["flush"] is True
            flush_only.set()
        else:
            assert flush_only.wait(10), "no flush-only request came while the records waited"

    broker.gate = gate
    with TaskProducer("t", config(broker.url, max_request_bytes=4096, max_in_flight=1)) as tp:
        tp.add(["x" * 100] * 30, [0] * 30)  # past a quarter of the bound, within it: one request takes all
        stats = tp.flush()
    assert stats.records_acked == 30 and stats.requests == 2 and flush_only.is_set()
    assert [len(r["topic_partitions"]) for r in broker.requests] == [0, 1]


def test_no_flush_only_request_when_the_last_request_carried_the_hint(broker: FakeBroker) -> None:
    with TaskProducer("t", config(broker.url, max_request_bytes=4096, max_in_flight=1)) as tp:
        tp.add(["x" * 100] * 5, [0] * 5)  # below a quarter of the bound: nothing goes until flush()
        assert tp.flush().records_acked == 5
    assert [len(r["topic_partitions"]) for r in broker.requests] == [1]


def test_disjoint_partitions_fly_side_by_side_and_keep_their_order(broker: FakeBroker) -> None:
    """Four lanes of two partitions each: four requests in flight at once
    (the gate holds each until four have arrived), never two for one
    partition, and every partition's records in the order they were added."""
    arrived = threading.Barrier(4, timeout=10)
    seen: list[set[int]] = []

    def gate(req: dict) -> None:
        with broker.lock:
            seen.append({tp["partition"] for tp in req["topic_partitions"]})
        if len(seen) <= 4:
            arrived.wait()

    broker.gate = gate
    recs = {p: [f"{p}-{i}-" + "y" * 50 for i in range(300)] for p in range(8)}
    with TaskProducer("t", config(broker.url, max_request_bytes=8192, max_in_flight=4)) as tp:
        for i in range(300):  # interleaved, as rows of a task arrive
            tp.add([recs[p][i] for p in range(8)], list(range(8)))
        stats = tp.flush()
    assert broker.max_concurrent == 4
    assert all(not (a & b) for i, a in enumerate(seen[:4]) for b in seen[i + 1:4])
    assert broker.records() == recs
    assert stats.records_acked == 2400


def test_arrow_columns_of_every_width_go_exactly(broker: FakeBroker) -> None:
    values = ["é€😀", "", "plain", '"quoted"\n']
    with TaskProducer("t", config(broker.url)) as tp:
        tp.add(pa.array(values, pa.large_string()), [0, 1, 0, 1])
        tp.add(pa.array([v.encode() for v in values], pa.large_binary()).slice(1, 2), [2, 2])
        tp.add(pa.array(values).slice(2), [3, 3])
        stats = tp.flush()
    def as_text(r: str | dict) -> str:
        return base64.b64decode(r["base64"]).decode() if isinstance(r, dict) else r

    got = {p: [as_text(r) for r in rs] for p, rs in broker.records().items()}
    assert got == {0: ["é€😀", "plain"], 1: ["", '"quoted"\n'], 2: ["", "plain"], 3: ["plain", '"quoted"\n']}
    assert stats.bytes_acked == sum(len(v.encode()) for vs in got.values() for v in vs) == 42


def test_a_record_larger_than_the_bound_goes_alone(broker: FakeBroker) -> None:
    produce(config(broker.url, max_request_bytes=1024), {0: ["y" * 5000, "z"]})
    assert [len(b["topic_partitions"][0]["records"]) for b in broker.requests] == [1, 1]


def test_binary_records_go_exactly(broker: FakeBroker, body: str) -> None:
    with TaskProducer("t", config(broker.url)) as tp:
        tp.add([b"\x00\xff", b""], [0, 0])
        stats = tp.flush()
    got = broker.requests[0]["topic_partitions"][0]["records"]
    # JSON carries every binary value as base64; the binary body carries the bytes (here shown
    # as text when they are UTF-8, as the broker's JSON answer would).
    assert got == ([{"base64": "AP8="}, {"base64": ""}] if body == "json" else [{"base64": "AP8="}, ""])
    assert stats.bytes_acked == 2


def test_text_records_keep_unicode_exactly(broker: FakeBroker) -> None:
    produce(config(broker.url), {0: ["é€😀", '"quoted"\n']})
    assert broker.requests[0]["topic_partitions"][0]["records"] == ["é€😀", '"quoted"\n']


def test_a_null_value_is_a_tombstone_and_a_bad_partition_an_error(broker: FakeBroker, body: str) -> None:
    with TaskProducer("t", config(broker.url, body=body)) as tp:
        with pytest.raises(ValueError, match="partition -1 is below 0"):
            tp.add(["a"], [-1])
        tp.add(["a", None], [0, 0], keys=["k", None])
        assert tp.flush().records_acked == 2
    (request,) = broker.requests
    assert request["topic_partitions"][0]["records"] == [{"value": "a", "key": "k"}, {"value": None, "key": None}]


def test_503_back_pressure_is_retried_until_accepted(broker: FakeBroker) -> None:
    refusals = [3]

    def script(body: dict) -> tuple[int, dict]:
        if refusals[0] > 0:
            refusals[0] -= 1
            n = len(body["topic_partitions"])
            res = [{"topic": tp["topic"], "partition": tp["partition"], "ok": False, "count": len(tp["records"]),
                    "error_type": "BackPressureRejected", "error": "full", "retriable": True}
                   for tp in body["topic_partitions"]]
            return 503, {"results": res, "success_count": 0, "error_count": n,
                         "error_type": "BackPressureRejected", "error": "full"}
        return broker.ack_all(body)

    broker.script = script
    stats = produce(config(broker.url, max_in_flight=1), {0: ["a", "b"], 1: ["c"]})
    assert stats.retries == 3 and stats.retried_batches == 6 and stats.requests == 4
    assert broker.records() == {0: ["a", "b"], 1: ["c"]}


def test_409_retries_only_the_failed_retriable_partition(broker: FakeBroker) -> None:
    failed_once = [False]

    def script(body: dict) -> tuple[int, dict]:
        res = []
        for tp in body["topic_partitions"]:
            if tp["partition"] == 1 and not failed_once[0]:
                failed_once[0] = True
                res.append({"topic": tp["topic"], "partition": 1, "ok": False, "count": len(tp["records"]),
                            "error_type": "ConcurrencyConflict", "error": "cas lost", "retriable": True})
            else:
                res.append(broker.ack(tp))
        status = 200 if all(r["ok"] for r in res) else 409
        return status, {"results": res, "error_type": "AppendFailed", "error": "x"}

    broker.script = script
    stats = produce(config(broker.url, max_in_flight=1), {0: ["a"], 1: ["b"], 2: ["c"]})
    assert [[tp["partition"] for tp in b["topic_partitions"]] for b in broker.requests] == [[0, 1, 2], [1]]
    assert stats.retried_batches == 1 and stats.records_acked == 3


def test_unknown_outcomes_are_resent_and_counted_apart_from_definite_failures(broker: FakeBroker) -> None:
    """At-least-once: a batch answered OutcomeUnknown (or a 504) is sent
    again and counted as a possible duplicate; a definite retriable failure
    is re-sent too but cannot duplicate, so it is not counted as unknown."""
    answers = iter(["unknown", "definite", "504", "ack"])

    def script(body: dict) -> tuple[int, dict]:
        kind = next(answers)
        if kind == "504":
            return 504, {"error": "no flush outcome", "error_type": "OutcomeUnknown", "retriable": True}
        if kind == "ack":
            return broker.ack_all(body)
        error_type = "OutcomeUnknown" if kind == "unknown" else "ConcurrencyConflict"
        res = [{"topic": tp["topic"], "partition": tp["partition"], "ok": False, "count": len(tp["records"]),
                "error_type": error_type, "error": kind, "retriable": True} for tp in body["topic_partitions"]]
        return 409, {"results": res, "error_type": "AppendFailed", "error": kind}

    broker.script = script
    stats = produce(config(broker.url, max_in_flight=1), {0: ["a", "b"]})
    assert stats.retried_batches == 3 and stats.retried_records == 6
    assert (stats.unknown_batches, stats.unknown_records) == (2, 4)
    assert stats.records_acked == 2
    assert ProduceStats.from_json(stats.to_json()).unknown_records == 4


def test_409_non_retriable_fails_at_once_naming_broker_and_partition(broker: FakeBroker) -> None:
    def script(body: dict) -> tuple[int, dict]:
        res = [{"topic": "t", "partition": tp["partition"], "ok": False, "count": 1,
                "error_type": "PartitionFenced", "error": "partition is FENCED", "retriable": False}
               for tp in body["topic_partitions"]]
        return 409, {"results": res, "error_type": "AppendFailed", "error": "fenced"}

    broker.script = script
    with pytest.raises(ProduceFailed) as info:
        produce(config(broker.url, max_retries=5), {3: ["a"]})
    err = info.value
    assert (err.broker, err.topic, err.partition) == (broker.url, "t", 3)
    assert (err.error_type, err.attempts) == ("PartitionFenced", 1)
    assert "non-retriable" in str(err) and "partition is FENCED" in str(err) and broker.url in str(err)
    assert len(broker.requests) == 1


def test_retry_budget_exhausted_raises_with_last_error(broker: FakeBroker) -> None:
    broker.script = lambda body: (504, {"error": "no flush outcome", "error_type": "OutcomeUnknown"})
    with pytest.raises(ProduceFailed) as info:
        produce(config(broker.url, max_retries=2), {0: ["a"]})
    assert info.value.attempts == 3 and info.value.status == 504
    assert "retry budget exhausted" in str(info.value) and "no flush outcome" in str(info.value)
    assert len(broker.requests) == 3


def test_413_is_not_retried(broker: FakeBroker) -> None:
    broker.script = lambda body: (413, {"error": "too big", "error_type": "RequestTooLarge"})
    with pytest.raises(ProduceFailed, match="max_request_bytes"):
        produce(config(broker.url), {0: ["a"]})
    assert len(broker.requests) == 1


def test_dead_broker_falls_back_to_the_next(broker: FakeBroker) -> None:
    dead = dead_url()
    cfg = config(dead, broker.url)
    # Pick partitions so that the dead broker is preferred for some of them.
    brokers = cfg.brokers
    parts = [p for p in range(32) if rendezvous_order(brokers, "t", p)[0].url == dead][:3]
    assert parts
    stats = produce(cfg, {p: [f"v{p}"] for p in parts})
    assert broker.records() == {p: [f"v{p}"] for p in parts}
    assert stats.records_acked == len(parts)


def test_all_brokers_dead_is_broker_unreachable() -> None:
    cfg = config(dead_url(), dead_url(), max_retries=2)
    with pytest.raises(BrokerUnreachable) as info:
        produce(cfg, {0: ["a"]})
    assert info.value.status is None and "cannot reach" in str(info.value)


def test_rendezvous_is_stable_and_moves_only_the_removed_brokers_partitions() -> None:
    three = parse_broker_list("http://a:1,http://b:2,http://c:3")
    two = parse_broker_list("http://a:1,http://b:2")
    first = {p: rendezvous_order(three, "orders", p)[0].url for p in range(200)}
    assert first == {p: rendezvous_order(three, "orders", p)[0].url for p in range(200)}
    assert set(first.values()) == {"http://a:1", "http://b:2", "http://c:3"}
    for p, url in first.items():
        if url != "http://c:3":
            assert rendezvous_order(two, "orders", p)[0].url == url


def test_config_validation() -> None:
    with pytest.raises(ConfigError, match="http://host:port"):
        parse_broker_list("localhost:8080")
    with pytest.raises(ConfigError, match="at least one broker"):
        parse_broker_list(" , ")
    with pytest.raises(ConfigError, match="max_request_bytes"):
        config("http://a:1", max_request_bytes=10)
    with pytest.raises(ConfigError, match="body must be one of binary, json"):
        config("http://a:1", body="xml")
    with pytest.raises(ConfigError, match="distinct"):
        parse_broker_list("http://a:1,http://a:1/")
