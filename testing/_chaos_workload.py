"""The chaos test's clients: producers that record every outcome, the nemesis, the final reads.

- ``Producer`` threads send ``POST /produce`` with 1-3 partitions x 1-20
  unique records to a random live broker, one fresh connection per request
  (so "could not connect" means nothing was sent), and record one
  ``ProducedBatch`` per item with the outcome ``classify_produce_reply``
  decides.
- ``Nemesis`` (``testing/_chaos_nemesis.py``) injects the faults.
- ``TailConsumer`` follows every partition through ``/consume`` while the
  faults run: what it saw must still be in the log afterwards.
- ``read_library`` and ``read_consume`` read every partition from its log
  start (offset 1 until retention moves it; a read that finds the start moved
  past it goes on from the new start, as a Kafka consumer resets)
  (``LeaderlessLogReader.iter_from``; ``/consume`` following
  ``next_fetch_offset``) into a ``ReadPass``, stepping over offsets they
  cannot read and recording why.
"""

from __future__ import annotations

import base64
import http.client
import json
import logging
import random
import threading
import time
from collections import Counter
from typing import Any, Mapping, Sequence

from server._errors import OffsetOutOfRange, OutOfOrderSequence, ProducerFenced
from server._protocol.outcomes import (
    CONNECTION_LOST,
    CONNECTION_REFUSED,
    PROTOCOL_ERROR,
    Kind,
    answer_outcome,
    error_type_of,
    item_outcome,
)
from testing.history import FAILED, OK, UNKNOWN, ProducedBatch, ReadPass
from testing._chaos_cluster import ChaosCluster
from testing._chaos_nemesis import Nemesis

_OUT_OF_RANGE = error_type_of(OffsetOutOfRange)
_REFUSALS = (error_type_of(OutOfOrderSequence), error_type_of(ProducerFenced))
"""What refuses an idempotent batch (SPEC 7.12)."""
"""A read below the log start: reset to the start the answer names (retention moved it)."""

__all__ = [
    "History",
    "Producer",
    "IdempotentProducer",
    "Nemesis",
    "TailConsumer",
    "classify_produce_reply",
    "read_library",
    "read_consume",
    "produce_request",
]

log = logging.getLogger(__name__)

CLIENT_TIMEOUT_S = 30.0
"""Socket timeout of a produce; longer than the brokers' produce timeout (504)."""
MAX_ERRORS_PER_PARTITION = 20_000
"""A read stops stepping over unreadable offsets of a partition after this many."""
RETRIES = 5
"""Attempts of a read that failed with a retriable error before the offset counts as unreadable."""
CONTROL_READ_S = 60.0
"""How long a read retries a partition's control record before the run fails."""


# -- produce ----------------------------------------------------------------------------


def classify_produce_reply(
    status: int | None, doc: Any, groups: Sequence[tuple[str, int, Sequence[bytes]]], detail: str = ""
) -> list[tuple[str, int | None, str]]:
    """(outcome, start_offset, detail) per group of one produce request, as the
    outcome table (``server/_protocol/outcomes.py``) reads the answer: success
    OK, definite FAILED, unknown UNKNOWN.

    ``status`` None: no connection could be made, nothing was sent (``ConnectionRefused``).
    ``status`` 0: the request may have been sent but no answer came (``ConnectionLost``).
    """
    n = len(groups)
    if status is None:
        return [(_CHECKED[CONNECTION_REFUSED.kind], None, f"no connection: {detail}")] * n
    if status == 0:
        return [(_CHECKED[CONNECTION_LOST.kind], None, f"no answer: {detail}")] * n
    results = doc.get("results") if isinstance(doc, dict) else None
    error_type = doc.get("error_type") if isinstance(doc, dict) else None
    answer = answer_outcome(status, error_type)
    if not answer.per_item:
        return [(_CHECKED[answer.kind], None, f"HTTP {status} {error_type}")] * n
    if not isinstance(results, list) or len(results) != n:
        what = f"HTTP {status} {error_type}: {detail or 'not one result per batch'}"
        return [(_CHECKED[PROTOCOL_ERROR.kind], None, what)] * n
    out: list[tuple[str, int | None, str]] = []
    for res in results:
        item = item_outcome(res)
        if item.kind is Kind.SUCCESS and res.get("duplicate") and res.get("start_offset") is None:
            out.append((UNKNOWN, None, f"HTTP {status} duplicate too old to have offsets"))
        elif item.kind is Kind.SUCCESS:
            out.append((OK, res["start_offset"], f"HTTP {status}" + (" duplicate" if res.get("duplicate") else "")))
        else:
            what = f"{res.get('error_type')}: {_oneline(res.get('error'))}" if isinstance(res, dict) else repr(res)
            out.append((_CHECKED[item.kind], None, f"HTTP {status} {what}"))
    return out


_CHECKED = {Kind.SUCCESS: OK, Kind.DEFINITE: FAILED, Kind.UNKNOWN: UNKNOWN}
"""The checker's outcome of each kind of the outcome table."""


def _oneline(text: object, limit: int = 160) -> str:
    """An error message on one line, shortened for reports."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def produce_request(port: int, body: bytes, timeout_s: float = CLIENT_TIMEOUT_S,
                    path: str = "/produce") -> tuple[int | None, Any, str]:
    """POST ``path`` on a fresh connection: (status, JSON body, detail); see ``classify_produce_reply``."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)
    try:
        try:
            conn.connect()
        except OSError as exc:
            return None, None, f"{type(exc).__name__}: {exc}"
        try:
            conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            raw = resp.read()
        except (OSError, http.client.HTTPException) as exc:
            return 0, None, f"{type(exc).__name__}: {exc}"
        try:
            return resp.status, json.loads(raw), ""
        except ValueError:
            return resp.status, None, "answer is not JSON"
    finally:
        conn.close()


class History:
    """Every produce batch with its outcome (thread-safe), plus counters for progress."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.t0 = time.monotonic()
        self.batches: list[ProducedBatch] = []
        self.requests = 0
        self.statuses: Counter[str] = Counter()
        self.outcomes: Counter[str] = Counter()
        self.details: Counter[str] = Counter()

    def add(self, status: int | None, batches: Sequence[ProducedBatch]) -> None:
        with self._lock:
            self.requests += 1
            self.statuses["refused" if status is None else "no-answer" if status == 0 else str(status)] += 1
            self.batches.extend(batches)
            for b in batches:
                self.outcomes[b.outcome] += 1
                if b.outcome != OK:
                    self.details[f"{b.outcome}: {_detail_kind(b.detail)}"] += 1

    def now_s(self) -> float:
        """Seconds since the history started (the run's clock)."""
        return round(time.monotonic() - self.t0, 3)

    def snapshot(self) -> tuple[int, dict[str, int]]:
        with self._lock:
            return self.requests, dict(self.outcomes)


def _detail_kind(detail: str) -> str:
    """The part of an outcome detail worth counting: status and error type."""
    return detail.split(":", 1)[0]


class Producer(threading.Thread):
    """Sends produce requests until ``stop`` is set; every payload is unique."""

    def __init__(self, index: int, cluster: ChaosCluster, history: History, stop: threading.Event,
                 seed: int) -> None:
        super().__init__(name=f"chaos-producer-{index}", daemon=True)
        self.index = index
        self._cluster = cluster
        self._history = history
        self._halt = stop
        self._rng = random.Random(seed)
        self._seq = 0

    def run(self) -> None:
        while not self._halt.is_set():
            live = self._cluster.live_brokers()
            if not live:
                self._halt.wait(0.05)  # pacing while every broker is down, not synchronization
                continue
            self.send_one(self._rng.choice(live).port)

    def send_one(self, port: int, tag: str | None = None) -> list[ProducedBatch]:
        rng = self._rng
        self._seq += 1
        tag = tag or f"p{self.index}"
        parts = rng.sample(range(self._cluster.partitions), k=min(rng.randint(1, 3), self._cluster.partitions))
        groups = [
            (self._cluster.topic, p, [f"{tag}-{self._seq}-{j}-{i}".encode() for i in range(rng.randint(1, 20))])
            for j, p in enumerate(parts)
        ]
        body = json.dumps({"topic_partitions": [
            {"topic": t, "partition": p, "records": [r.decode() for r in recs]} for t, p, recs in groups
        ]}).encode()
        sent_s = self._history.now_s()
        status, doc, detail = produce_request(port, body)
        answered_s = self._history.now_s()
        outcomes = classify_produce_reply(status, doc, groups, detail)
        batches = [
            ProducedBatch(f"{tag}-{self._seq}-{j}", t, p, tuple(recs), outcome, start, why, sent_s, answered_s)
            for j, ((t, p, recs), (outcome, start, why)) in enumerate(zip(groups, outcomes))
        ]
        self._history.add(status, batches)
        if status is None:
            self._halt.wait(0.05)  # the broker just died: pace the retries
        return batches


class IdempotentProducer(Producer):
    """One idempotent producer (SPEC 7.12) per thread: ``POST /producers`` for
    an id, then batches carrying it with per-partition sequences. A batch
    whose outcome is not acknowledged is sent again -- same records, same
    sequence, to any live broker -- in every request until it is, before
    that partition gets a new batch; each attempt is recorded with
    ``retry_of`` its first, and the checker allows one copy per batch."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._producer: tuple[int, int] | None = None
        self._next_seq: dict[int, int] = {}
        self._undecided: dict[int, tuple[str, int, tuple[bytes, ...]]] = {}
        """partition -> (first attempt's id, sequence, records) of the batch being retried."""
        self.duplicates = 0
        self.refused = 0

    def run(self) -> None:
        while not self._halt.is_set():
            live = self._cluster.live_brokers()
            if not live:
                self._halt.wait(0.05)  # pacing while every broker is down, not synchronization
                continue
            port = self._rng.choice(live).port
            if self._producer is None:
                self._init(port)
            else:
                self.send_idempotent(port)

    def _init(self, port: int) -> None:
        status, doc, _ = produce_request(port, b"{}", path="/producers")
        if status == 200 and isinstance(doc, dict):
            self._producer = (doc["producer_id"], doc["producer_epoch"])
            self._next_seq, self._undecided = {}, {}
        else:
            self._halt.wait(0.05)  # the broker is down or restarting: pace the retries

    def send_idempotent(self, port: int) -> list[ProducedBatch]:
        rng, topic = self._rng, self._cluster.topic
        self._seq += 1
        tag = f"i{self.index}"
        retries = sorted(self._undecided)[:3]
        fresh = [p for p in rng.sample(range(self._cluster.partitions), k=min(3, self._cluster.partitions))
                 if p not in self._undecided][: max(0, rng.randint(1, 3) - len(retries))]
        items: list[tuple[int, str | None, int, tuple[bytes, ...]]] = []
        for p in retries:
            first_id, seq, recs = self._undecided[p]
            items.append((p, first_id, seq, recs))
        for j, p in enumerate(fresh):
            recs = tuple(f"{tag}-{self._seq}-{j}-{i}".encode() for i in range(rng.randint(1, 20)))
            items.append((p, None, self._next_seq.get(p, 0), recs))
        pid, epoch = self._producer  # type: ignore[misc]
        body = json.dumps({"topic_partitions": [
            {"topic": topic, "partition": p, "records": [r.decode() for r in recs], "producer_id": pid,
             "producer_epoch": epoch, "base_sequence": seq} for p, _, seq, recs in items
        ]}).encode()
        sent_s = self._history.now_s()
        status, doc, detail = produce_request(port, body)
        answered_s = self._history.now_s()
        outcomes = classify_produce_reply(status, doc, [(topic, p, recs) for p, _, _, recs in items], detail)
        batches = []
        for k, ((p, first_id, seq, recs), (outcome, start, why)) in enumerate(zip(items, outcomes)):
            batch_id = f"{tag}-{self._seq}-{k}"
            batches.append(ProducedBatch(batch_id, topic, p, recs, outcome, start, why, sent_s, answered_s,
                                         retry_of=first_id, idempotent=True))
            if outcome == OK:
                self._undecided.pop(p, None)
                self._next_seq[p] = seq + len(recs)
                self.duplicates += why.endswith("duplicate")
                continue
            self._undecided[p] = (first_id or batch_id, seq, recs)
            if any(name in why for name in _REFUSALS):
                self.refused += 1  # the checker judges what is in the log; this is counted for the report
        self._history.add(status, batches)
        if status is None:
            self._halt.wait(0.05)  # the broker just died: pace the retries
        return batches


class TailConsumer(threading.Thread):
    """Follows every partition through ``/consume`` on random live brokers
    while the faults run; what it sees becomes an incomplete ``ReadPass``.
    Errors are expected here (Oxia is down for a while) and only counted."""

    def __init__(self, cluster: ChaosCluster, stop: threading.Event, seed: int) -> None:
        super().__init__(name="chaos-tail-consumer", daemon=True)
        self._cluster = cluster
        self._halt = stop
        self._rng = random.Random(seed)
        self.records: dict[tuple[str, int], dict[int, bytes]] = {
            (cluster.topic, p): {} for p in range(cluster.partitions)
        }
        self.requests = 0
        self.errors: Counter[str] = Counter()

    def run(self) -> None:
        topic = self._cluster.topic
        next_offset = {p: 1 for p in range(self._cluster.partitions)}
        while not self._halt.is_set():
            live = self._cluster.live_brokers()
            if not live:
                self._halt.wait(0.05)  # pacing while every broker is down
                continue
            doc = {"topic_partitions": [{"topic": topic, "partition": p, "fetch_offset": o}
                                        for p, o in next_offset.items()],
                   "max_wait_ms": 100}
            self.requests += 1
            try:
                status, answer = _consume([None], self._rng.choice(live).port, doc, retries=1)
            except (OSError, http.client.HTTPException, ValueError) as exc:
                self.errors[type(exc).__name__] += 1
                self._halt.wait(0.05)  # the broker just died: pace the retries
                continue
            if status != 200:
                self.errors[f"HTTP {status}"] += 1
                continue
            for res in answer["results"]:
                if res.get("error_type") == _OUT_OF_RANGE and res.get("log_start_offset", 1) > 1:
                    # Retention moved the start past this consumer: reset to it, as Kafka clients do.
                    next_offset[res["partition"]] = max(next_offset[res["partition"]], res["log_start_offset"])
                    self.errors["reset_to_log_start"] += 1
                    continue
                if not res.get("ok"):
                    self.errors[str(res.get("error_type"))] += 1
                    continue
                seen = self.records[(topic, res["partition"])]
                for r in res["records"]:
                    seen[r["offset"]] = _value_bytes(r["value"])
                next_offset[res["partition"]] = max(next_offset[res["partition"]], res["next_fetch_offset"])

    def read_pass(self) -> ReadPass:
        return ReadPass("consume-while-faulting", self.records, complete=False)


# -- reads ----------------------------------------------------------------------------------


def _library_partition(reader: Any, topic: str, partition: int) -> tuple[dict[int, bytes], dict[int, str], int, int]:
    from server._errors import LlogError

    def retrying(fn: Any) -> Any:
        """``fn()``, retried for up to CONTROL_READ_S: an Oxia cluster that lost a
        server may still be electing leaders when the faults have stopped."""
        deadline, attempt = time.monotonic() + CONTROL_READ_S, 0
        while True:
            try:
                return fn()
            except LlogError as exc:
                if not exc.retriable or time.monotonic() > deadline:
                    raise
                attempt += 1
                time.sleep(min(0.2 * 2**attempt, 2.0))  # backoff between retries of a transient storage error

    control = retrying(lambda: reader.control(topic, partition))
    hw = control.high_watermark
    records: dict[int, bytes] = {}
    errors: dict[int, str] = {}
    offset = control.log_start_offset
    start = offset
    bad: tuple[int, str] | None = None  # an error reported ahead of where the scan got to
    tries = 0
    while offset <= hw:
        if bad is not None and offset >= bad[0]:
            errors[bad[0]] = bad[1]
            offset, bad = bad[0] + 1, None
            continue
        upto = hw if bad is None else bad[0] - 1
        try:
            for rec in reader.iter_from(topic, partition, offset, end=upto):
                records[rec.offset] = rec.payload
                offset = rec.offset + 1
            if offset <= upto:
                errors[offset] = f"the scan ended early, at {offset - 1} of {upto}"
                offset += 1
        except OffsetOutOfRange as exc:
            if exc.log_start_offset is not None and offset < exc.log_start_offset:
                offset = start = exc.log_start_offset  # retention moved the start past it: go on from there
                records = {o: v for o, v in records.items() if o >= start}
                continue
            errors[offset] = f"OffsetOutOfRange: {_oneline(exc.message)}"
            offset += 1
        except LlogError as exc:
            if exc.retriable and tries < RETRIES:
                tries += 1
                time.sleep(0.2 * 2**tries)
                continue
            tries = 0
            why = f"{type(exc).__name__}: {_oneline(exc.message)}"
            # The scan reads ahead, so it can fail on a later batch before it
            # yields the earlier ones: read up to the failing offset first.
            if exc.offset is not None and offset < exc.offset <= upto and bad is None:
                bad = (exc.offset, why)
            else:
                errors[offset] = why
                offset += 1
        if len(errors) >= MAX_ERRORS_PER_PARTITION:
            for o in range(offset, hw + 1):
                errors.setdefault(o, "not read: too many unreadable offsets")
            break
    return records, errors, hw, start


def read_library(env: Mapping[str, str], topic: str, partitions: int, source: str = "library") -> tuple[ReadPass, dict[int, int]]:
    """Every partition through ``LeaderlessLogReader.iter_from``; also returns the high watermarks."""
    from server.leaderless_log_reader import LeaderlessLogReader

    records: dict[tuple[str, int], dict[int, bytes]] = {}
    errors: dict[tuple[str, int], dict[int, str]] = {}
    hws: dict[int, int] = {}
    starts: dict[tuple[str, int], int] = {}
    with LeaderlessLogReader.from_env(env) as reader:
        for p in range(partitions):
            got, bad, hw, start = _library_partition(reader, topic, p)
            records[(topic, p)] = got
            if bad:
                errors[(topic, p)] = bad
            hws[p] = hw
            starts[(topic, p)] = start
    return ReadPass(source, records, errors, log_start=starts), hws


def log_starts(env: Mapping[str, str], topic: str, partitions: int) -> dict[int, int]:
    """Each partition's log start now (it only moves up: at least what any read saw)."""
    from server.leaderless_log_reader import LeaderlessLogReader

    with LeaderlessLogReader.from_env(env) as reader:
        return {p: reader.log_start_offset(topic, p) for p in range(partitions)}


def _value_bytes(value: Any) -> bytes:
    return value.encode("utf-8") if isinstance(value, str) else base64.b64decode(value["base64"])


def _consume(conn_box: list[http.client.HTTPConnection | None], port: int, doc: dict,
             retries: int = RETRIES) -> tuple[int, Any]:
    """POST /consume on the connection in ``conn_box`` (reconnecting, ``retries`` attempts)."""
    body = json.dumps(doc).encode()
    for attempt in range(retries):
        conn = conn_box[0]
        if conn is None:
            conn = conn_box[0] = http.client.HTTPConnection("127.0.0.1", port, timeout=CLIENT_TIMEOUT_S)
        try:
            conn.request("POST", "/consume", body=body, headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            return resp.status, json.loads(resp.read())
        except (OSError, http.client.HTTPException, ValueError):
            conn.close()
            conn_box[0] = None
            if attempt == retries - 1:
                raise
            time.sleep(0.2 * 2**attempt)  # backoff before reconnecting
    raise AssertionError("unreachable")


def read_consume(port: int, topic: str, partitions: int, until: Mapping[int, int], source: str) -> ReadPass:
    """Every partition through one broker's ``/consume`` from offset 1, following
    ``next_fetch_offset`` until an answer has no records; an offset that
    answers an error is recorded and stepped over (up to ``until[p]``, the
    library's high watermark)."""
    records: dict[tuple[str, int], dict[int, bytes]] = {}
    errors: dict[tuple[str, int], dict[int, str]] = {}
    starts: dict[tuple[str, int], int] = {}
    conn_box: list[http.client.HTTPConnection | None] = [None]
    try:
        for p in range(partitions):
            got: dict[int, bytes] = {}
            bad: dict[int, str] = {}
            offset, tries = 1, 0
            starts[(topic, p)] = 1
            while True:
                try:
                    status, doc = _consume(conn_box, port, {
                        "topic_partitions": [{"topic": topic, "partition": p, "fetch_offset": offset}],
                        "max_wait_ms": 0,
                    })
                except (OSError, http.client.HTTPException, ValueError) as exc:
                    for o in range(offset, until.get(p, 0) + 1):
                        bad[o] = f"no answer from /consume: {exc}"
                    break
                res = doc["results"][0] if status == 200 else None
                if res is not None and res.get("error_type") == _OUT_OF_RANGE and \
                        res.get("log_start_offset", 1) > offset:
                    offset = res["log_start_offset"]  # retention moved the start: reset to it, as Kafka clients do
                    starts[(topic, p)] = offset
                    got = {o: v for o, v in got.items() if o >= offset}
                    continue
                if res is None or not res.get("ok"):
                    retriable = res.get("retriable") if res else status >= 500
                    if retriable and tries < RETRIES:
                        tries += 1
                        time.sleep(0.2 * 2**tries)  # backoff before retrying a transient error
                        continue
                    tries = 0
                    what = (f"{res.get('error_code')} {res.get('error_type')}: {_oneline(res.get('error'))}"
                            if res else f"HTTP {status}: {doc}")
                    bad[offset] = what
                    offset += 1
                    if offset > until.get(p, 0) or len(bad) >= MAX_ERRORS_PER_PARTITION:
                        break
                    continue
                tries = 0
                if not res["records"]:
                    break
                for r in res["records"]:
                    got[r["offset"]] = _value_bytes(r["value"])
                offset = res["next_fetch_offset"]
            records[(topic, p)] = got
            if bad:
                errors[(topic, p)] = bad
    finally:
        if conn_box[0] is not None:
            conn_box[0].close()
    return ReadPass(source, records, errors, log_start=starts)
