"""Oxia puts from many threads coalesced into one ``WriteRequest`` per shard.

Why: a flush commits every partition it holds with two Oxia puts each
(SPEC 7.3: the reservation CAS, then the index entry), issued by the
writer's commit threads side by side. ``oxia==0.2.1``'s ``Client.put``
sends one gRPC call per put, so a 64-partition flush is 128 calls; the
broker's profile put 40-50% of its Python CPU in the Oxia client (protobuf,
grpc's blocking call and its GIL hand-offs). The Oxia protocol's
``WriteRequest`` carries any number of puts, each answered with its own
status and version; Oxia's Go and Java clients batch writes the same way.

How: natural batching, no added delay. Each shard has one sender thread.
A put joins its shard's queue and waits; the sender takes everything queued
(up to ``max_batch`` puts and ``max_bytes`` of values) into one
``WriteRequest``, and while that call is in flight new puts queue for the
next. A lone put on an idle shard goes at once.

Semantics are those of one call per put:

- each put gets its own status: ``UnexpectedVersionId`` and the rest are
  raised to its caller as ``Client.put`` would raise them;
- a call that fails (no answer, a transport error) fails every put in it
  with that error: each caller sees what it would have seen had its own
  call been lost, an outcome the writer already resolves (SPEC 7.3 C3);
- a thread's puts keep their order, since its next put is queued only after
  the previous one returned; puts of different threads were concurrent
  anyway, and Oxia applies those of one request in order.

Ephemeral puts (they need the client's session) are not batched.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any, Callable

__all__ = ["OxiaWriteBatcher"]


class _Put:
    __slots__ = ("request", "size", "done", "result", "error")

    def __init__(self, request: Any, size: int) -> None:
        self.request = request
        self.size = size
        self.done = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None


class _Shard:
    def __init__(self) -> None:
        self.queue: deque[_Put] = deque()
        self.cond = threading.Condition()
        self.thread: threading.Thread | None = None


class OxiaWriteBatcher:
    """Coalesces concurrent ``put`` calls of one ``oxia.Client`` per shard.

    ``on_batch(puts)`` is told the size of every ``WriteRequest`` sent (metrics)."""

    def __init__(
        self,
        client: Any,
        *,
        max_batch: int = 1000,
        max_bytes: int = 4 << 20,
        on_batch: Callable[[int], None] | None = None,
    ) -> None:
        from oxia import client as oxia_client
        from oxia.internal.proto.io.streamnative.oxia import proto as pb

        self._client = client
        self._pb = pb
        self._check_status = oxia_client._check_status
        self._get_version = oxia_client._get_version
        self._max_batch = max_batch
        self._max_bytes = max_bytes
        self._on_batch = on_batch
        self._shards: dict[int, _Shard] = {}
        self._lock = threading.Lock()
        self._closed = False

    def put(self, key: str, value: bytes, partition_key: str | None, expected_version: int | None) -> tuple[str, Any]:
        """``Client.put(key, value, partition_key=..., expected_version_id=...)``,
        sent in a shared ``WriteRequest``; returns ``(key, version)``."""
        shard_id, _ = self._client._service_discovery.get_leader(key, partition_key)
        item = _Put(self._pb.PutRequest(key=key, value=value, partition_key=partition_key,
                                        expected_version_id=expected_version), len(value))
        shard = self._shard(shard_id)
        with shard.cond:
            if self._closed:
                raise RuntimeError("the Oxia write batcher is closed")
            shard.queue.append(item)
            shard.cond.notify()
        item.done.wait()
        if item.error is not None:
            raise item.error
        return item.result

    def close(self) -> None:
        """Stop the senders; puts still queued fail."""
        with self._lock:
            self._closed = True
            shards = list(self._shards.values())
        for shard in shards:
            with shard.cond:
                shard.cond.notify_all()
        for shard in shards:
            if shard.thread is not None:
                shard.thread.join()

    def _shard(self, shard_id: int) -> _Shard:
        with self._lock:
            shard = self._shards.get(shard_id)
            if shard is None:
                shard = self._shards[shard_id] = _Shard()
                shard.thread = threading.Thread(
                    target=self._send_loop, args=(shard_id, shard), name=f"oxia-write-{shard_id}", daemon=True
                )
                shard.thread.start()
            return shard

    def _take(self, shard: _Shard) -> list[_Put] | None:
        with shard.cond:
            while not shard.queue:
                if self._closed:
                    return None
                shard.cond.wait()
            batch = [shard.queue.popleft()]
            size = batch[0].size
            while shard.queue and len(batch) < self._max_batch and size + shard.queue[0].size <= self._max_bytes:
                item = shard.queue.popleft()
                batch.append(item)
                size += item.size
            return batch

    def _send_loop(self, shard_id: int, shard: _Shard) -> None:
        while True:
            batch = self._take(shard)
            if batch is None:
                break
            if self._closed:
                self._fail(batch, RuntimeError("the Oxia write batcher is closed"))
                continue
            try:
                self._send(shard_id, batch)
            except BaseException as exc:  # the call's failure is each put's
                self._fail(batch, exc)
        with shard.cond:  # closed: whatever raced in fails
            left, shard.queue = list(shard.queue), deque()
        self._fail(left, RuntimeError("the Oxia write batcher is closed"))

    def _send(self, shard_id: int, batch: list[_Put]) -> None:
        first = batch[0].request
        _, stub = self._client._service_discovery.get_leader(first.key, first.partition_key)
        if self._on_batch is not None:
            self._on_batch(len(batch))
        response = stub.write(self._pb.WriteRequest(shard=shard_id, puts=[p.request for p in batch]))
        if len(response.puts) != len(batch):
            raise RuntimeError(f"Oxia answered {len(response.puts)} puts to a request of {len(batch)}")
        for item, answer in zip(batch, response.puts):
            try:
                self._check_status(answer.status)
                item.result = (answer.key or item.request.key, self._get_version(answer.version))
            except BaseException as exc:
                item.error = exc
            item.done.set()

    @staticmethod
    def _fail(batch: list[_Put], exc: BaseException) -> None:
        for item in batch:
            if not item.done.is_set():
                item.error = exc
                item.done.set()
