"""Building blocks of the end-to-end run (``quick_run.py``): the service
processes, the sample data set, and the checks that compare what comes back
with what went in.

Checksums are order-independent and canonical: each record's JSON value is
re-serialized with sorted keys, hashed (SHA-256, first 8 bytes), and the
hashes are summed mod 2**64, so a record lost, duplicated or altered changes
the sum while the order of partitions and the JSON spelling do not.
"""

from __future__ import annotations

import hashlib
import json
import random
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from devstack import ManagedProcess, free_ports
from server._protocol.outcomes import is_retriable

MASK64 = (1 << 64) - 1


class StepFailed(Exception):
    """A step of the run did not give the expected result; the message says which."""


# -- checksums ----------------------------------------------------------------


def canonical_hash(value: bytes | str) -> int:
    text = value.decode("utf-8") if isinstance(value, bytes) else value
    try:
        canon = json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))
    except ValueError:
        canon = text
    return int.from_bytes(hashlib.sha256(canon.encode("utf-8")).digest()[:8], "big")


@dataclass
class Tally:
    count: int = 0
    checksum: int = 0
    nbytes: int = 0
    keys_checked: int = 0
    keys_wrong: int = 0
    """Records whose key is not the JSON field of their value it should be (:meth:`check_key`)."""

    def add(self, value: bytes | str) -> None:
        self.count += 1
        self.checksum = (self.checksum + canonical_hash(value)) & MASK64
        self.nbytes += len(value)

    def check_key(self, value: bytes | str, key: bytes | str | None, field: str) -> None:
        """Count a record whose ``key`` is not its JSON value's ``field`` (the produce job's key column)."""
        self.keys_checked += 1
        text = key.decode("utf-8") if isinstance(key, bytes) else key
        try:
            want = str(json.loads(value)[field])
        except (ValueError, KeyError, TypeError):
            want = None
        if text is None or text != want:
            self.keys_wrong += 1

    def same_as(self, other: Tally) -> bool:
        return self.count == other.count and self.checksum == other.checksum


# -- the sample data set ------------------------------------------------------------


def generate_orders(path: Path, rows: int, seed: int = 7) -> Tally:
    """Write ``rows`` deterministic order rows as JSON lines; return their tally."""
    rng = random.Random(seed)
    currencies = ("EUR", "USD", "GBP", "JPY", "CHF")
    tally = Tally()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as out:
        for i in range(rows):
            row = {
                "order_id": i + 1,
                "customer_id": f"c{rng.randrange(5000):05d}",
                "sku": f"sku-{rng.randrange(800):04d}",
                "quantity": rng.randrange(1, 10),
                "amount_cents": rng.randrange(100, 500_000),
                "currency": currencies[rng.randrange(len(currencies))],
                "created_at_ms": 1_767_225_600_000 + i * 37,
            }
            line = json.dumps(row, separators=(",", ":"))
            out.write(line + "\n")
            tally.add(line)
    return tally


def tally_input(path: Path) -> Tally:
    """Tally a user's JSON-lines file the way the produce job sends it."""
    tally = Tally()
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                tally.add(line.rstrip("\n"))
    return tally


# -- HTTP helpers ---------------------------------------------------------------------


def http_json(url: str, body: Mapping | None = None, timeout_s: float = 60.0) -> dict:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method="GET" if body is None else "POST",
                                 headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        raise StepFailed(f"{url} answered {exc.code}: {exc.read()[:500]!r}") from exc


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1.0) as resp:
            return resp.status == 200
    except (OSError, urllib.error.URLError):
        return False


# -- service processes -------------------------------------------------------------------


@dataclass
class Service:
    name: str
    url: str
    process: ManagedProcess


def start_service(
    name: str, module: str, args: list[str], env: Mapping[str, str], log_dir: Path, *, die_with_parent: bool = True
) -> Service:
    (port,) = free_ports(1)
    url = f"http://127.0.0.1:{port}"
    proc = ManagedProcess(
        name,
        [sys.executable, "-m", module, "--port", str(port), *args],
        log_path=log_dir / f"{name}.log",
        env=dict(env),
        die_with_parent=die_with_parent,
    )
    proc.start()
    proc.wait_healthy(lambda: healthy(f"{url}/health"), timeout_s=60, what=f"{name} answering {url}/health")
    return Service(name, url, proc)


# -- consuming everything back ----------------------------------------------------------


def consume_all(
    broker_url: str, topic: str, targets: Mapping[int, int], *, max_wait_ms: int = 500, deadline_s: float = 600,
    key_field: str | None = None,
) -> tuple[Tally, dict[int, int]]:
    """Read every partition from offset 1 through ``targets[p]`` (its high
    watermark, taken from Oxia: a broker's own figure may lag) with POST
    /consume long-polls; return the tally (with ``key_field``, each record's
    key checked against that field of its value) and the records per partition. A
    partition answered with a retriable error (the outcome table's, or the
    answer's own ``retriable``) is asked again on the next round; any other
    error fails the step."""
    import base64

    tally = Tally()
    per_partition = {p: 0 for p in targets}
    cursors = {p: 1 for p in targets}
    deadline = time.monotonic() + deadline_s
    while any(cursors[p] <= targets[p] for p in targets):
        if time.monotonic() > deadline:
            raise StepFailed(f"consume did not reach the high watermarks within {deadline_s:.0f}s: {cursors}")
        req = {
            "topic_partitions": [
                {"topic": topic, "partition": p, "fetch_offset": cursors[p], "partition_max_bytes": 4 << 20}
                for p in targets if cursors[p] <= targets[p]
            ],
            "max_wait_ms": max_wait_ms,
            "min_bytes": 1,
            "max_bytes": 16 << 20,
        }
        resp = http_json(f"{broker_url}/consume", req)
        transient = False
        for res in resp["results"]:
            p = res["partition"]
            if not res.get("ok", True):
                if is_retriable(res.get("error_type"), res.get("retriable")):
                    transient = True
                    continue
                raise StepFailed(f"consume {topic}:{p} failed: {res.get('error_type')}: {res.get('error')}")
            for rec in res.get("records", []):
                if rec["offset"] != cursors[p]:
                    raise StepFailed(f"consume {topic}:{p}: expected offset {cursors[p]}, got {rec['offset']}")
                value = rec["value"]
                raw = value.encode("utf-8") if isinstance(value, str) else base64.b64decode(value["base64"])
                tally.add(raw)
                if key_field is not None:
                    tally.check_key(raw, rec["key"], key_field)
                per_partition[p] += 1
                cursors[p] += 1
            if res["next_fetch_offset"] != cursors[p]:
                raise StepFailed(f"consume {topic}:{p}: next_fetch_offset {res['next_fetch_offset']} != {cursors[p]}")
        if transient:
            time.sleep(0.5)  # Oxia or S3 failed for a moment: pace the next round
    return tally, per_partition


def wait_until(predicate, *, timeout_s: float, what: str, every_s: float = 1.0, progress=None) -> None:
    deadline = time.monotonic() + timeout_s
    last_report = 0.0
    while not predicate():
        if time.monotonic() > deadline:
            raise StepFailed(f"timed out after {timeout_s:.0f}s waiting for {what}")
        if progress is not None and time.monotonic() - last_report >= 5:
            last_report = time.monotonic()
            progress()
        time.sleep(every_s)
