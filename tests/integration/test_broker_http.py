"""Every validation rule and status code of the broker's HTTP surface.

Each JSON answer is checked against server/openapi.yaml by the client."""

from __future__ import annotations

import json
import socket
from concurrent.futures import ThreadPoolExecutor

import pytest

from server.leaderless_log_writer import LeaderlessLogWriter
from tests._records import stored_size
from tests._waiting import wait_until
from tests.integration._raw_http import MALFORMED_REQUESTS, parse_answer, raw_until_closed

pytestmark = pytest.mark.integration


def raw(broker, data: bytes, read_timeout_s: float = 5.0) -> tuple[int, dict[str, str], bytes]:
    """Send raw bytes on a fresh connection; parse one HTTP answer."""
    with socket.create_connection((broker.host, broker.port), timeout=read_timeout_s) as s:
        s.sendall(data)
        buf = b""
        while b"\r\n\r\n" not in buf:
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
        head, _, body = buf.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
        need = int(headers.get("content-length", "0"))
        while len(body) < need:
            chunk = s.recv(65536)
            if not chunk:
                break
            body += chunk
        return status, headers, body


def assert_error(reply, status: int, error_type: str, field: str | None = "absent") -> dict:
    assert reply.status == status, reply.body
    body = reply.json
    assert body["error_type"] == error_type and body["error"], body
    if field != "absent":
        assert body.get("field") == field, body
    return body


# -- malformed requests -------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/produce", "/consume"])
@pytest.mark.parametrize("body", [b"{", b"not json", b"[]", b'"x"', b"null", b'{"topic_partitions": NaN}', b"\xff"])
def test_malformed_json_is_400(client, path: str, body: bytes) -> None:
    assert_error(client.request("POST", path, body), 400, "InvalidRequest", None)


@pytest.mark.parametrize(
    ("item", "field"),
    [
        ({"partition": True}, "topic_partitions[0].partition"),
        ({"partition": 1.5}, "topic_partitions[0].partition"),
        ({"partition": -1}, "topic_partitions[0].partition"),
        ({"partition": "0"}, "topic_partitions[0].partition"),
        ({"records": "x"}, "topic_partitions[0].records"),
        ({"records": []}, "topic_partitions[0].records"),
        ({"records": [5]}, "topic_partitions[0].records[0]"),
        ({"records": ["ok", {"base64": "not base64!"}]}, "topic_partitions[0].records[1].base64"),
        ({"records": [{"base64": "AAE"}]}, "topic_partitions[0].records[0].base64"),
        ({"records": [{"bytes": "AAE="}]}, "topic_partitions[0].records[0]"),
        ({"topic": "a/b"}, "topic_partitions[0].topic"),
        ({"topic": ".."}, "topic_partitions[0].topic"),
        ({"topic": "../../etc"}, "topic_partitions[0].topic"),
        ({"topic": ""}, "topic_partitions[0].topic"),
        ({"topic": "x" * 250}, "topic_partitions[0].topic"),
        ({"topic": 5}, "topic_partitions[0].topic"),
    ],
)
def test_produce_shape_errors_name_the_field(client, unique_topic, item: dict, field: str) -> None:
    doc = {"topic": unique_topic, "partition": 0, "records": ["a"], **item}
    assert_error(client.produce([doc]), 400, "InvalidRequest", field)
    # Nothing of a rejected request is written.
    res = client.consume([{"topic": unique_topic, "partition": 0, "fetch_offset": 1}]).json["results"][0]
    assert res["error_code"] == "UNKNOWN_TOPIC_OR_PARTITION"


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        ({}, "topic_partitions"),
        ({"topic_partitions": "x"}, "topic_partitions"),
        ({"topic_partitions": []}, "topic_partitions"),
        ({"topic_partitions": [1]}, "topic_partitions[0]"),
        ({"topic_partitions": [{"partition": 0, "records": ["a"]}]}, "topic_partitions[0].topic"),
        ({"topic_partitions": [{"topic": "t", "records": ["a"]}]}, "topic_partitions[0].partition"),
        ({"topic_partitions": [{"topic": "t", "partition": 0}]}, "topic_partitions[0].records"),
    ],
)
def test_produce_missing_fields(client, doc: dict, field: str) -> None:
    assert_error(client.request("POST", "/produce", doc), 400, "InvalidRequest", field)


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        ({"topic_partitions": [{"topic": "t", "partition": 0}]}, "topic_partitions[0].fetch_offset"),
        ({"topic_partitions": [{"topic": "t", "partition": 0, "fetch_offset": "1"}]}, "topic_partitions[0].fetch_offset"),
        ({"topic_partitions": [{"topic": "t", "partition": 0, "fetch_offset": 1.5}]}, "topic_partitions[0].fetch_offset"),
        ({"topic_partitions": [{"topic": "t", "partition": True, "fetch_offset": 1}]}, "topic_partitions[0].partition"),
        ({"topic_partitions": [{"topic": "t/..", "partition": 0, "fetch_offset": 1}]}, "topic_partitions[0].topic"),
        ({"topic_partitions": [{"topic": "t", "partition": 0, "fetch_offset": 1, "partition_max_bytes": 0}]},
         "topic_partitions[0].partition_max_bytes"),
        ({"topic_partitions": [{"topic": "t", "partition": 0, "fetch_offset": 1}], "max_wait_ms": -1}, "max_wait_ms"),
        ({"topic_partitions": [{"topic": "t", "partition": 0, "fetch_offset": 1}], "min_bytes": "1"}, "min_bytes"),
        ({"topic_partitions": [{"topic": "t", "partition": 0, "fetch_offset": 1}], "max_bytes": 0}, "max_bytes"),
        ({"topic_partitions": [{"topic": "t", "partition": 0, "fetch_offset": 1}] * 2}, "topic_partitions[1]"),
    ],
)
def test_consume_shape_errors_name_the_field(client, doc: dict, field: str) -> None:
    assert_error(client.request("POST", "/consume", doc), 400, "InvalidRequest", field)


# -- paths, methods, roles ------------------------------------------------------------------------


@pytest.mark.parametrize(("method", "path"), [("GET", "/"), ("GET", "/nope"), ("POST", "/produce/"), ("POST", "/Produce")])
def test_unknown_paths_are_404(client, method: str, path: str) -> None:
    assert_error(client.request(method, path, b"{}" if method == "POST" else None), 404, "NotFound")


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("GET", "/produce", "POST"),
        ("PUT", "/consume", "POST"),
        ("POST", "/health", "GET"),
        ("DELETE", "/metrics", "GET"),
        ("PATCH", "/metrics/prometheus", "GET"),
        ("OPTIONS", "/produce", "POST"),
        ("BREW", "/consume", "POST"),
    ],
)
def test_wrong_methods_are_405_with_allow(client, method: str, path: str, allow: str) -> None:
    reply = client.request(method, path, b"{}" if method in ("PUT", "POST", "PATCH") else None)
    assert_error(reply, 405, "MethodNotAllowed")
    assert reply.headers["Allow"] == allow


def test_head_gets_a_405_without_a_body(client) -> None:
    reply = client.request("HEAD", "/produce")
    assert reply.status == 405 and reply.body == b"" and reply.headers["Allow"] == "POST"
    assert client.request("GET", "/health").status == 200  # the connection is still in sync


def test_roles_refuse_the_other_endpoint_with_403(session_broker, unique_topic) -> None:
    w, r = session_broker("write"), session_broker("read")
    body = assert_error(w.client.consume([{"topic": unique_topic, "partition": 0, "fetch_offset": 1}]), 403, "RoleNotServed")
    assert body["role"] == "write" and "write" in body["error"]
    body = assert_error(r.client.produce([{"topic": unique_topic, "partition": 0, "records": ["a"]}]), 403, "RoleNotServed")
    assert body["role"] == "read"
    for b in (w, r):
        assert b.client.request("GET", "/health").status == 200


# -- sizes and lengths -----------------------------------------------------------------------------


def test_oversize_bodies_are_413_before_the_body_is_read(session_broker, unique_topic) -> None:
    b = session_broker(LLOG_BROKER_MAX_REQUEST_BYTES="4096")
    big = json.dumps({"topic_partitions": [{"topic": unique_topic, "partition": 0, "records": ["x" * 5000]}]}).encode()
    reply = b.new_client(b.client._openapi).request("POST", "/produce", big)
    body = assert_error(reply, 413, "RequestTooLarge", "Content-Length")
    assert "4096" in body["error"] and reply.headers["Connection"] == "close"
    # A terabyte announced, nothing sent: answered, so the server did not wait
    # to read it (that wait would outlast raw()'s 5 s read timeout: the
    # server's own is 300 s).
    status, headers, _ = raw(b, b"POST /produce HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000000\r\n\r\n")
    assert status == 413 and headers["connection"] == "close"
    ok = b.client.produce([{"topic": unique_topic, "partition": 0, "records": ["x" * 1000]}])
    assert ok.status == 200


def test_length_required_and_invalid_lengths(client) -> None:
    status, headers, body = raw(client, b"POST /produce HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status == 411 and json.loads(body)["error_type"] == "LengthRequired"
    status, _, body = raw(client, b"POST /consume HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
    assert status == 411
    for bad in (b"abc", b"-1", b"1.5", b"10, 20"):
        status, headers, body = raw(client, b"POST /produce HTTP/1.1\r\nHost: x\r\nContent-Length: " + bad + b"\r\n\r\n")
        assert status == 400 and json.loads(body)["field"] == "Content-Length", bad


def test_body_shorter_than_its_length_is_400(client) -> None:
    # The client half-closes its side, so the server sees the body end early.
    with socket.create_connection((client.host, client.port), timeout=5) as s:
        s.sendall(b"POST /produce HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{}")
        s.shutdown(socket.SHUT_WR)
        answer = s.recv(65536)
    assert answer.startswith(b"HTTP/1.1 400")


@pytest.mark.parametrize(("request_bytes", "status"), MALFORMED_REQUESTS)
def test_malformed_requests_get_the_json_error_body(shared_broker, request_bytes: bytes, status: int) -> None:
    got, headers, body = parse_answer(raw_until_closed(shared_broker.host, shared_broker.port, request_bytes))
    assert got == status, body
    assert headers["content-type"] == "application/json"
    assert headers["connection"] == "close" and int(headers["content-length"]) == len(body)
    doc = json.loads(body)
    assert doc["error_type"] == "HttpProtocolError" and doc["error"], doc
    assert shared_broker.client.request("GET", "/health").status == 200  # still serving


def test_records_per_request_limit_is_413(session_broker, unique_topic) -> None:
    b = session_broker(LLOG_BROKER_MAX_RECORDS_PER_REQUEST="5")
    reply = b.client.produce([{"topic": unique_topic, "partition": p, "records": ["a"] * 3} for p in range(2)])
    assert "5" in assert_error(reply, 413, "RequestTooLarge", "topic_partitions")["error"]
    assert b.client.produce([{"topic": unique_topic, "partition": 0, "records": ["a"] * 5}]).status == 200


def test_a_request_larger_than_the_producer_buffer_is_413(session_broker, unique_topic) -> None:
    b = session_broker(LLOG_BATCH_MAX_BYTES="2048", LLOG_BATCH_MAX_BUFFER_BYTES="4096")
    reply = b.client.produce([{"topic": unique_topic, "partition": 0, "records": ["x" * 5000]}])
    assert "LLOG_BATCH_MAX_BUFFER_BYTES" in assert_error(reply, 413, "RequestTooLarge", "topic_partitions")["error"]


def test_keep_alive_survives_errors(client, unique_topic) -> None:
    c = client.__class__(client.host, client.port, None)
    try:
        for _ in range(3):
            assert c.request("POST", "/nope", b'{"x": 1}').status == 404
            assert c.request("POST", "/produce", b"{").status == 400
            assert c.request("GET", "/produce").status == 405
            assert c.produce([{"topic": unique_topic, "partition": 0, "records": ["k"]}]).status == 200
        conn = c._conn()
        assert conn.sock is not None  # the same connection all along
    finally:
        c.close()


# -- produce outcomes ----------------------------------------------------------------------------


def test_503_under_back_pressure_writes_nothing_of_the_rejected_request(broker_factory) -> None:
    # No flush is due by time (the delay never comes), only by bytes: the
    # first request stays buffered until the test fills the buffer, so the
    # second waits LLOG_BATCH_MAX_BLOCK_MS (1 s by default) for room in vain.
    # The buffer holds the stored batches: exactly the first request's and the last one's.
    cap = str(stored_size([b"a" * 1000] * 600) + stored_size([b"d" * 1000] * 400))
    b = broker_factory(env={
        "LLOG_BATCH_MAX_BYTES": cap, "LLOG_BATCH_MAX_BUFFER_BYTES": cap, "LLOG_BATCH_MAX_DELAY_MS": "600000",
    })
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(
            b.new_client().produce, [{"topic": "t", "partition": 0, "records": ["a" * 1000] * 600}]
        )
        wait_until(lambda: b.client.gauge("batcher_inflight_bytes") >= stored_size([b"a" * 1000] * 600), 10,
                   "the first request to reach the producer")
        reply = b.client.produce([
            {"topic": "t", "partition": 0, "records": ["b" * 1000] * 300},
            {"topic": "t", "partition": 1, "records": ["c" * 1000] * 300},
        ])
        body = assert_error(reply, 503, "BackPressureRejected")
        assert reply.headers["Retry-After"] == "1"
        assert (body["success_count"], body["error_count"]) == (0, 2)
        assert all(
            not r["ok"] and r["error_type"] == "BackPressureRejected" and r["retriable"] for r in body["results"]
        )
        # Exactly what fits: buffered, and the full batch is flushed with the first.
        last = pool.submit(
            b.new_client().produce, [{"topic": "t", "partition": 2, "records": ["d" * 1000] * 400}]
        )
        assert first.result(timeout=30).status == 200 and last.result(timeout=30).status == 200
    res = b.client.consume([{"topic": "t", "partition": p, "fetch_offset": 1} for p in range(3)], max_bytes=10_000_000).json
    assert res["results"][0]["high_watermark"] == 600
    assert {r["value"][0] for r in res["results"][0]["records"]} == {"a"}
    assert (res["results"][1]["records"], res["results"][1]["high_watermark"]) == ([], 0)  # nothing of it
    assert res["results"][2]["high_watermark"] == 400


def test_409_when_some_batches_fail(broker_factory, llog_env) -> None:
    b = broker_factory()
    assert b.client.produce([{"topic": "t", "partition": 0, "records": ["a"]}]).status == 200
    with LeaderlessLogWriter.from_env(llog_env) as w:
        w.fence_partition("t", 0)
    reply = b.client.produce([
        {"topic": "t", "partition": 0, "records": ["b"]},
        {"topic": "t", "partition": 1, "records": ["c"]},
    ])
    body = assert_error(reply, 409, "AppendFailed")
    fenced, ok = body["results"]
    assert (fenced["ok"], fenced["error_type"], fenced["retriable"]) == (False, "PartitionFenced", False)
    assert ok["ok"] and ok["start_offset"] == 1
    assert (body["success_count"], body["error_count"]) == (1, 1)
    # Every batch failing (not back-pressure) is 409 as well.
    reply = b.client.produce([{"topic": "t", "partition": 0, "records": ["d"]}])
    assert_error(reply, 409, "AppendFailed")
