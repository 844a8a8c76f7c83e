"""Flush at once when every Kafka producer connection is stalled on its answers.

A diskless broker answers a produce after the flush that carries it: up to
``LLOG_BATCH_MAX_DELAY_MS`` of gathering, then a PUT and a commit. Kafka's
clients keep at most 5 requests in flight per connection when idempotence is
on (the default of the Java client and of librdkafka; Kafka refuses more),
and librdkafka sends one ProduceRequest per partition. So a connection with 5
produce requests waiting cannot send another byte until they are answered:
gathering longer gains nothing from it, and a lone librdkafka producer with
its default 1 MB batches would get 5 MB per batch delay.

:class:`ProduceStalls` counts each connection's produce requests begun and
not yet answered. When a connection reaches :data:`STALLED_AT` while every
connection with produce requests waiting is at it too, it asks the producer
to flush what it holds now (``BatchingProducer.request_flush``). With several
producers still sending, nothing changes: their bytes keep filling the batch
until its size or delay. Answers to one flush come back together, so the
next requests of a stalled connection arrive together and the blobs stay
about 5 requests large.
"""

from __future__ import annotations

import threading
from typing import Callable, Hashable

__all__ = ["ProduceStalls", "STALLED_AT"]

STALLED_AT = 5
"""Kafka's cap on in-flight requests per connection for an idempotent producer."""


class ProduceStalls:
    """Produce requests waiting per connection; ``flush`` when all are stalled (module docstring)."""

    def __init__(self, flush: Callable[[], None], stalled_at: int = STALLED_AT) -> None:
        self._flush = flush
        self._stalled_at = stalled_at
        self._lock = threading.Lock()
        self._waiting: dict[Hashable, int] = {}
        self.flushes = 0
        """How many times every producing connection was stalled (and a flush asked for)."""

    def begun(self, conn: Hashable) -> None:
        """A produce request of ``conn`` was submitted (its answer comes after a flush)."""
        with self._lock:
            n = self._waiting[conn] = self._waiting.get(conn, 0) + 1
            stalled = n == self._stalled_at and all(v >= self._stalled_at for v in self._waiting.values())
            if stalled:
                self.flushes += 1
        if stalled:
            self._flush()

    def answered(self, conn: Hashable) -> None:
        """One of ``conn``'s produce requests has its answer (or failed)."""
        with self._lock:
            n = self._waiting.get(conn, 0) - 1
            if n > 0:
                self._waiting[conn] = n
            else:
                self._waiting.pop(conn, None)
