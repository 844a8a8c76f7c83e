"""Broker processes for the integration tests, and a client that checks every
JSON answer against ``server/openapi.yaml``.

- ``broker_factory(role=..., env=..., args=...)`` starts a real
  ``python -m server.leaderless_log_broker`` subprocess on a free port (read
  from its ``listening`` line), by default on the test's own root prefix;
  every broker it started is stopped (SIGTERM) at the end of the test.
- ``shared_broker``: one role-both broker for the whole session with a short
  batch delay, on a session root prefix; tests using it isolate themselves
  with ``unique_topic``.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

import pytest
import yaml
from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from devstack import StackSettings, die_with_parent_argv
from tests.conftest import TEST_TOPICS_ENV

REPO = Path(__file__).resolve().parents[2]
OPENAPI_PATH = REPO / "server" / "openapi.yaml"
_OPENAPI_URI = "urn:llog:openapi"
START_TIMEOUT_S = 30.0


# -- OpenAPI -------------------------------------------------------------------------


class OpenApi:
    """Validates real answers against the response schemas of the OpenAPI document."""

    def __init__(self, path: Path = OPENAPI_PATH) -> None:
        self.doc = yaml.safe_load(path.read_text())
        resource = Resource.from_contents(self.doc, default_specification=DRAFT202012)
        self._registry = Registry().with_resource(_OPENAPI_URI, resource)
        self._validators: dict[str, Draft202012Validator] = {}

    def _validator(self, pointer: str) -> Draft202012Validator:
        v = self._validators.get(pointer)
        if v is None:
            v = self._validators[pointer] = Draft202012Validator(
                {"$ref": f"{_OPENAPI_URI}#{pointer}"}, registry=self._registry
            )
        return v

    def schema_pointer(self, method: str, path: str, status: int) -> str | None:
        """JSON pointer of the JSON schema for this answer (None: not JSON)."""
        path = self.template_of(path)
        op = self.doc["paths"].get(path, {}).get(method.lower())
        if op is None:  # unknown path or method: a plain Error
            return "/components/schemas/Error"
        esc = path.replace("~", "~0").replace("/", "~1")
        where = f"/paths/{esc}/{method.lower()}/responses/{status}"
        resp = op["responses"].get(str(status))
        assert resp is not None, f"{method} {path} answered {status}, which openapi.yaml does not document"
        if "$ref" in resp:
            where = resp["$ref"][1:]
            resp = self.doc["components"]["responses"][resp["$ref"].rsplit("/", 1)[1]]
        if "application/json" not in resp.get("content", {}):
            return None
        return f"{where}/content/application~1json/schema"

    def template_of(self, path: str) -> str:
        """The document's path for a request path: itself, or the template one ``{param}`` segment fills."""
        if path in self.doc["paths"]:
            return path
        segments = path.split("/")
        for template in self.doc["paths"]:
            parts = template.split("/")
            if len(parts) == len(segments) and all(
                p == s or (p.startswith("{") and p.endswith("}") and s) for p, s in zip(parts, segments)
            ):
                return template
        return path

    def validate(self, method: str, path: str, status: int, body: Any) -> None:
        pointer = self.schema_pointer(method, path, status)
        if pointer is not None:
            self._validator(pointer).validate(body)

    def validate_schema(self, name: str, instance: Any) -> None:
        self._validator(f"/components/schemas/{name}").validate(instance)


@pytest.fixture(scope="session")
def openapi() -> OpenApi:
    return OpenApi()


# -- client ----------------------------------------------------------------------------


@dataclass
class Reply:
    status: int
    headers: http.client.HTTPMessage
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)


class BrokerClient:
    """A keep-alive HTTP/1.1 client (one connection per thread) that checks
    every JSON answer against the OpenAPI document."""

    def __init__(self, host: str, port: int, openapi: OpenApi | None) -> None:
        self.host, self.port = host, port
        self._openapi = openapi
        self._local = threading.local()

    def _conn(self) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
        return conn

    def request(
        self, method: str, path: str, body: Any = None, headers: Mapping[str, str] | None = None
    ) -> Reply:
        data = body if body is None or isinstance(body, bytes) else json.dumps(body).encode()
        hdrs = {"Content-Type": "application/json", **(headers or {})}
        for attempt in range(2):
            conn = self._conn()
            try:
                conn.request(method, path, body=data, headers=hdrs)
                resp = conn.getresponse()
                reply = Reply(resp.status, resp.headers, resp.read())
                break
            except (ConnectionError, http.client.RemoteDisconnected, http.client.BadStatusLine):
                conn.close()
                self._local.conn = None
                if attempt or method != "GET":  # never resend a POST: it could append twice
                    raise
        if resp.will_close:
            conn.close()
            self._local.conn = None
        is_json = reply.headers.get("Content-Type", "").startswith("application/json")
        if self._openapi is not None and is_json and method != "HEAD":
            self._openapi.validate(method, path.split("?")[0], reply.status, reply.json)
        if reply.status >= 400:
            assert reply.headers.get("Content-Type", "").startswith("application/json"), reply
        return reply

    def produce(self, topic_partitions: list[dict], **kw: Any) -> Reply:
        return self.request("POST", "/produce", {"topic_partitions": topic_partitions, **kw})

    def consume(self, topic_partitions: list[dict], **kw: Any) -> Reply:
        return self.request("POST", "/consume", {"topic_partitions": topic_partitions, **kw})

    def metrics(self) -> dict:
        return self.request("GET", "/metrics").json

    def counter(self, name: str, **labels: object) -> float:
        """Sum of a counter of /metrics over the label sets that include ``labels``."""
        want = {f"{k}={v}" for k, v in labels.items()}
        series = self.metrics()["counters"].get(name, {})
        return sum(v for lbl, v in series.items() if want <= set(filter(None, lbl.split(","))))

    def gauge(self, name: str, **labels: object) -> float:
        """A gauge of /metrics (summed over the label sets that include ``labels``);
        /metrics refreshes ``consume_waiting_requests`` and ``http_inflight_requests``."""
        want = {f"{k}={v}" for k, v in labels.items()}
        series = self.metrics()["gauges"].get(name, {})
        return sum(v for lbl, v in series.items() if want <= set(filter(None, lbl.split(","))))

    def storage_ops(self) -> tuple[float, float]:
        """(Oxia operations, S3 operations) so far."""
        return self.counter("oxia_operations_total"), self.counter("s3_operations_total")

    def consume_all(self, topic: str, partition: int, start: int = 1, **kw: Any) -> list[tuple[int, bytes]]:
        """Every record from ``start`` to the high watermark, request after request."""
        out: list[tuple[int, bytes]] = []
        offset = start
        while True:
            reply = self.consume([{"topic": topic, "partition": partition, "fetch_offset": offset}], max_wait_ms=0, **kw)
            assert reply.status == 200, reply.body
            (res,) = reply.json["results"]
            assert res["ok"], res
            out += [(r["offset"], value_bytes(r["value"])) for r in res["records"]]
            offset = res["next_fetch_offset"]
            if offset > res["high_watermark"]:
                return out

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None


def value_bytes(value: Any) -> bytes:
    """A consumed record value as bytes."""
    return value.encode("utf-8") if isinstance(value, str) else base64.b64decode(value["base64"])


# -- broker processes ----------------------------------------------------------------------


class BrokerProcess:
    """One ``python -m server.leaderless_log_broker`` subprocess."""

    def __init__(self, env: Mapping[str, str], args: list[str], log_path: Path, openapi: OpenApi | None) -> None:
        self.log_path = log_path
        self._log = open(log_path, "wb")
        self.proc = subprocess.Popen(  # SIGTERM if pytest dies, so no broker outlives a killed run
            die_with_parent_argv([sys.executable, "-m", "server.leaderless_log_broker", "--port", "0", *args]),
            env={**os.environ, **env, "PYTHONPATH": str(REPO)},
            stdout=subprocess.PIPE,
            stderr=self._log,
            cwd=REPO,
        )
        self.info = self._wait_listening()
        self.host, self.port = self.info["host"], self.info["port"]
        kafka_port = self.info.get("kafka_port")
        self.kafka = None if kafka_port is None else f"{self.host}:{kafka_port}"
        """The Kafka listener's ``host:port`` (a bootstrap server), when the broker runs one."""
        self.client = BrokerClient(self.host, self.port, openapi)

    def _wait_listening(self) -> dict:
        box: dict[str, Any] = {}
        reader = threading.Thread(target=lambda: box.setdefault("line", self.proc.stdout.readline()), daemon=True)
        reader.start()
        reader.join(START_TIMEOUT_S)
        line = box.get("line", b"")
        if not line:
            self.kill()
            raise RuntimeError(f"broker did not start; its log:\n{self.log_tail()}")
        return json.loads(line)

    def log_tail(self, n: int = 40) -> str:
        self._log.flush()
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def new_client(self, openapi: OpenApi | None = None) -> BrokerClient:
        return BrokerClient(self.host, self.port, openapi)

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 30.0) -> int:
        self.client.close()
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
        self._log.close()
        return self.proc.returncode

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


BrokerFactory = Callable[..., BrokerProcess]


@pytest.fixture
def broker_factory(
    llog_env: dict[str, str], tmp_path: Path, openapi: OpenApi
) -> Iterator[BrokerFactory]:
    """Start brokers: ``broker_factory(role="both", env={...}, args=[...])``.

    ``env`` is added to the test's ``llog_env`` (a fresh root prefix), so
    brokers of one test share one log; ``base_env`` replaces ``llog_env``.
    """
    started: list[BrokerProcess] = []

    def start(
        role: str = "both",
        env: Mapping[str, str] | None = None,
        args: list[str] | None = None,
        base_env: Mapping[str, str] | None = None,
    ) -> BrokerProcess:
        full = {"LLOG_BATCH_MAX_DELAY_MS": "20", **(base_env or llog_env), **(env or {})}
        name = f"broker-{len(started) + 1}-{role}"
        b = BrokerProcess(
            full, ["--role", role, "--broker-id", name, *(args or [])], tmp_path / f"{name}.log", openapi
        )
        started.append(b)
        return b

    yield start
    for b in started:
        b.stop()


@pytest.fixture(scope="session")
def session_broker(
    stack: StackSettings, tmp_path_factory: pytest.TempPathFactory, openapi: OpenApi
) -> Iterator[Callable[..., BrokerProcess]]:
    """``session_broker(role="both", **env)``: one broker per distinct
    configuration for the whole session (20 ms batch delay), all on one
    session root prefix; tests using these isolate themselves with
    ``unique_topic``."""
    root = f"t-{uuid.uuid4().hex[:8]}"
    logs = tmp_path_factory.mktemp("brokers")
    brokers: dict[tuple, BrokerProcess] = {}

    def get(role: str = "both", **env: str) -> BrokerProcess:
        key = (role, tuple(sorted(env.items())))
        if key not in brokers:
            full = {**stack.env(root_prefix=root), **TEST_TOPICS_ENV, "LLOG_BATCH_MAX_DELAY_MS": "20", **env}
            name = f"session-{len(brokers) + 1}-{role}"
            brokers[key] = BrokerProcess(full, ["--role", role, "--broker-id", name], logs / f"{name}.log", openapi)
        return brokers[key]

    yield get
    for b in brokers.values():
        b.stop()


@pytest.fixture
def shared_broker(session_broker: Callable[..., BrokerProcess]) -> BrokerProcess:
    """The session's default role-both broker."""
    return session_broker()


@pytest.fixture
def client(shared_broker: BrokerProcess) -> BrokerClient:
    return shared_broker.client


@pytest.fixture
def unique_topic() -> str:
    return f"topic-{uuid.uuid4().hex[:10]}"




@pytest.fixture
def writer(llog_env):
    """A LeaderlessLogWriter on this test's root prefix."""
    from server.leaderless_log_writer import LeaderlessLogWriter

    with LeaderlessLogWriter.from_env(llog_env) as w:
        yield w


@pytest.fixture
def reader(llog_env):
    """A LeaderlessLogReader on this test's root prefix."""
    from server.leaderless_log_reader import LeaderlessLogReader

    with LeaderlessLogReader.from_env(llog_env) as r:
        yield r
