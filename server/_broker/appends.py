"""Produces on their way to the log: checked, encoded, submitted, and put in the tail cache.

Both front ends append through one :class:`Appends` (HTTP ``/produce`` and the
Kafka listener's Produce), so a record reaches the log the same way whichever
protocol carried it:

- :meth:`Appends.prepare`: every partition is one of a live topic (creating
  or adopting topics as ``topics.py`` says), the records are encoded as the
  stored batches and checked against the topic's config, and the whole stays
  within the producer's buffer (``LLOG_BATCH_MAX_BUFFER_BYTES``);
- :meth:`Appends.submit`: one ``BatchingProducer.submit`` (one shared flush);
  when it resolves, the committed batches go to the tail cache, which wakes
  the consumes waiting on them.

While a submit of a partition awaits its flush, :meth:`Appends.pending` says
so: a consume that found the tail cache empty waits for that publish rather
than reading Oxia, which is most likely ahead by that flush.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future
from typing import Sequence

from .._log.producer import BatchingProducer
from .._protocol.http_json import TooLarge
from .._protocol.keys import TopicPartition
from .._protocol.structs import SharedAppendGroup
from .produce_encoding import encode_groups
from .tail_cache import TailCache
from .topics import BrokerTopics

__all__ = ["Appends"]

log = logging.getLogger(__name__)


class Appends:
    """See the module docstring. Thread-safe."""

    def __init__(self, producer: BatchingProducer, cache: TailCache, topics: BrokerTopics | None) -> None:
        self.producer = producer
        self._cache = cache
        self._topics = topics
        self._lock = threading.Lock()
        self._pending: dict[TopicPartition, int] = {}

    def prepare(self, groups: Sequence[SharedAppendGroup]) -> list[SharedAppendGroup]:
        """``groups`` as the batches to store (UnknownTopic, InvalidField, TooLarge)."""
        configs = {} if self._topics is None else self._topics.check_produce(g.tp for g in groups)
        out = encode_groups(groups, configs, self.producer.runtime.clock.now_ms())
        nbytes = sum(g.payload_bytes for g in out)
        cap = self.producer.config.max_buffer_bytes
        if nbytes > cap:  # what the producer buffers is the encoded batches: that is what the cap bounds
            raise TooLarge(
                f"the request's records take {nbytes} bytes as stored batches, more than the producer's "
                f"buffer of {cap} (LLOG_BATCH_MAX_BUFFER_BYTES); split it",
                "topic_partitions",
            )
        return out

    def submit(self, groups: Sequence[SharedAppendGroup], *, request_id: str | None = None,
               flush: bool = False) -> Future:
        """Prepared ``groups`` to the producer: the future of their ``AppendResult``s, in order.
        Raises what ``BatchingProducer.submit`` raises (BackPressureRejected, ProducerClosed)."""
        self._begin(groups)
        try:
            future = self.producer.submit(groups, request_id=request_id, flush=flush)
        except BaseException:
            self._end(groups)
            raise
        future.add_done_callback(lambda f: self._fill_cache(groups, f))
        return future

    def pending(self, tp: TopicPartition) -> bool:
        """Whether a submit to ``tp`` awaits its flush."""
        with self._lock:
            return tp in self._pending

    def _fill_cache(self, groups: Sequence[SharedAppendGroup], future: Future) -> None:
        """Runs when the flush resolves (normally on the flusher thread, in
        commit order): committed slices go to the tail cache, which wakes
        consumes waiting on those partitions."""
        try:
            results = future.result()
            for g, res in zip(groups, results):
                if res.ok and res.start_offset is not None and not res.duplicate:
                    self._cache.publish(g.tp, res.start_offset, g.payloads)
        except Exception:  # the cache is an optimization; never fail a produce for it
            log.warning("tail cache fill failed", exc_info=True)
        finally:
            self._end(groups)
            for tp in {g.tp for g in groups}:
                self._cache.signals.notify(tp)  # also after a failure: deferred consumes re-check

    def _begin(self, groups: Sequence[SharedAppendGroup]) -> None:
        with self._lock:
            for g in groups:
                self._pending[g.tp] = self._pending.get(g.tp, 0) + 1

    def _end(self, groups: Sequence[SharedAppendGroup]) -> None:
        with self._lock:
            for g in groups:
                left = self._pending.get(g.tp, 0) - 1
                if left > 0:
                    self._pending[g.tp] = left
                else:
                    self._pending.pop(g.tp, None)
