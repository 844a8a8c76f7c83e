"""The Oxia write batcher against a scripted stub (real protobuf messages, no
server): concurrent puts share a WriteRequest per shard, each put gets its
own status, a failed call fails every put in it, and nothing is lost or
answered twice. The real-Oxia behaviour is covered by every integration test."""

from __future__ import annotations

import threading
from typing import Any, Callable

import oxia
import pytest
from oxia.internal.proto.io.streamnative.oxia import proto as pb

from server._storage.oxia_batch import OxiaWriteBatcher

WAIT_S = 10


class FakeStub:
    """Answers each WriteRequest by ``answer(put) -> status``; the first call
    can be held at ``gate`` so that the next puts pile up behind it."""

    def __init__(self, answer: Callable[[Any], Any] | None = None) -> None:
        self.requests: list[tuple[int, list[str]]] = []
        self.gate: threading.Event | None = None
        self.entered = threading.Event()
        self.answer = answer or (lambda put: pb.Status.OK)
        self.fail_with: BaseException | None = None
        self.version = 0
        self.lock = threading.Lock()

    def write(self, request: Any) -> Any:
        with self.lock:
            self.requests.append((request.shard, [p.key for p in request.puts]))
            first = len(self.requests) == 1
        self.entered.set()
        if first and self.gate is not None:
            assert self.gate.wait(WAIT_S)
        if self.fail_with is not None:
            raise self.fail_with
        out = []
        for put in request.puts:
            with self.lock:
                self.version += 1
                v = self.version
            out.append(pb.PutResponse(status=self.answer(put), version=pb.Version(version_id=v)))
        return pb.WriteResponse(puts=out)


class FakeDiscovery:
    def __init__(self, stub: FakeStub, shards: int = 1) -> None:
        self.stub, self.shards = stub, shards

    def get_leader(self, key: str, partition_key: str | None) -> tuple[int, FakeStub]:
        return hash(partition_key or key) % self.shards, self.stub


class FakeClient:
    def __init__(self, stub: FakeStub, shards: int = 1) -> None:
        self._service_discovery = FakeDiscovery(stub, shards)


@pytest.fixture
def stub() -> FakeStub:
    return FakeStub()


def batcher_for(stub: FakeStub, shards: int = 1, **kw: Any) -> tuple[OxiaWriteBatcher, list[int]]:
    sizes: list[int] = []
    return OxiaWriteBatcher(FakeClient(stub, shards), on_batch=sizes.append, **kw), sizes


def run_puts(
    batcher: OxiaWriteBatcher, keys: list[str], expected: dict[str, int] | None = None, *,
    value: bytes = b"v", own_partition_key: bool = False,
) -> dict[str, Any]:
    out: dict[str, Any] = {}

    def one(key: str) -> None:
        try:
            out[key] = batcher.put(key, value, key if own_partition_key else "pk", (expected or {}).get(key))
        except BaseException as exc:  # noqa: BLE001 - recorded for the assertions
            out[key] = exc

    threads = [threading.Thread(target=one, args=(k,)) for k in keys]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT_S)
    return out


def test_puts_queued_behind_a_call_in_flight_share_the_next_request(stub: FakeStub) -> None:
    batcher, sizes = batcher_for(stub)
    stub.gate = threading.Event()
    first = threading.Thread(target=batcher.put, args=("k0", b"v", "pk", None))
    first.start()
    assert stub.entered.wait(WAIT_S)  # k0's call is in flight and held
    rest = threading.Thread(target=run_puts, args=(batcher, [f"k{i}" for i in range(1, 31)]))
    rest.start()
    # Release once all 30 are queued behind the held call.
    shard = batcher._shards[0]
    for _ in range(WAIT_S * 100):
        with shard.cond:
            if len(shard.queue) == 30:
                break
        threading.Event().wait(0.01)
    stub.gate.set()
    first.join(WAIT_S)
    rest.join(WAIT_S)
    assert [len(keys) for _, keys in stub.requests] == [1, 30] == sizes
    assert sorted(k for _, keys in stub.requests for k in keys) == sorted(f"k{i}" for i in range(31))
    batcher.close()


def test_each_put_gets_its_own_status_and_version(stub: FakeStub) -> None:
    stub.answer = lambda put: pb.Status.UNEXPECTED_VERSION_ID if put.expected_version_id == 7 else pb.Status.OK
    batcher, _ = batcher_for(stub)
    out = run_puts(batcher, [f"k{i}" for i in range(20)], expected={"k3": 7, "k11": 7})
    assert isinstance(out["k3"], oxia.ex.UnexpectedVersionId) and isinstance(out["k11"], oxia.ex.UnexpectedVersionId)
    ok = {k: v for k, v in out.items() if k not in ("k3", "k11")}
    assert all(key == k for k, (key, _) in ok.items())
    versions = [v.version_id() for _, v in ok.values()]
    assert len(set(versions)) == 18  # one answer per put, none shared or lost
    batcher.close()


def test_a_failed_call_fails_every_put_in_it_and_the_batcher_goes_on(stub: FakeStub) -> None:
    batcher, _ = batcher_for(stub)
    stub.fail_with = ConnectionError("lost")
    out = run_puts(batcher, [f"k{i}" for i in range(10)])
    assert all(isinstance(v, ConnectionError) for v in out.values())
    stub.fail_with = None
    assert batcher.put("after", b"v", "pk", None)[0] == "after"
    batcher.close()


@pytest.mark.parametrize("value, limit", [(b"v", 4), (b"vvvv", 2)])
def test_a_request_is_bounded_by_count_and_bytes_and_split_by_shard(value: bytes, limit: int) -> None:
    stub = FakeStub()
    batcher, sizes = batcher_for(stub, shards=3, max_batch=4, max_bytes=10)
    stub.gate = threading.Event()
    held = threading.Thread(target=batcher.put, args=("held", b"v", "held", None))
    held.start()
    assert stub.entered.wait(WAIT_S)
    keys = [f"k{i}" for i in range(24)]
    worker = threading.Thread(target=run_puts, args=(batcher, keys), kwargs={"value": value, "own_partition_key": True})
    worker.start()
    stub.gate.set()
    held.join(WAIT_S)
    worker.join(WAIT_S)
    assert max(sizes) <= limit and len(sizes) >= 24 // limit
    assert sorted(k for _, ks in stub.requests for k in ks) == sorted(keys + ["held"])
    for shard, ks in stub.requests:  # a request holds puts of its own shard only
        assert {hash(k) % 3 for k in ks} == {shard}
    batcher.close()


def test_close_fails_what_is_queued_and_refuses_new_puts(stub: FakeStub) -> None:
    batcher, _ = batcher_for(stub)
    batcher.put("k", b"v", "pk", None)
    batcher.close()
    with pytest.raises(RuntimeError, match="closed"):
        batcher.put("k2", b"v", "pk", None)
