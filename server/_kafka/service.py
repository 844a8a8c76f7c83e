"""The Kafka listener's request handling: one handler per API over the broker's parts.

:class:`KafkaService` holds what the handlers use (:class:`KafkaParts`, the
live nodes, the group coordinator) and :meth:`KafkaService.handle` answers a
decoded request with its framed response: the API's handler builds the
response object, the codec frames it. A handler that raises an llog error
for the request as a whole is answered with the API's error response where
the API has a top-level error code, or the error in every partition
(``answers.py``); anything else is a bug: logged, and the connection closed.

The handlers live by family: ``cluster.py`` (ApiVersions, Metadata,
DescribeCluster, FindCoordinator), ``admin.py`` (CreateTopics, DeleteTopics,
CreatePartitions, DescribeConfigs, IncrementalAlterConfigs, DeleteRecords),
``logs.py`` (DescribeLogDirs, DescribeProducers), ``acls.py`` (the ACL APIs,
answered as without an authorizer), ``operations.py`` (ElectLeaders, the
reassignments and client quotas, which llog has nothing to do for), ``produce.py`` (Produce, InitProducerId),
``fetch.py`` (Fetch, ListOffsets, OffsetForLeaderEpoch) and ``groups.py``
(the group APIs, over ``coordinator.py``).
"""

from __future__ import annotations

import base64
import hashlib
import logging
import time
from dataclasses import dataclass
from typing import Any, Callable, Protocol

from .._groups.offsets import GroupOffsets
from .._log.producer_ids import ProducerIds
from .._log.reader import LeaderlessLogReader
from .._metrics import LlogMetrics
from .._runtime import Runtime
from . import acls, admin, cluster, fetch, groups, logs, operations, produce, sasl, users
from .codec import FETCH, OFFSET_COMMIT, PRODUCE, KafkaRequest, encode_response
from .gather import Answer, RecordParts, encode_gathered
from .coordinator import GroupCoordinator
from .fetch_sessions import DEFAULT_SLOTS, FetchSessions
from .nodes import Nodes

__all__ = ["KafkaParts", "KafkaService", "cluster_id"]

log = logging.getLogger(__name__)


class KafkaParts(Protocol):
    """What the broker gives the listener (``server/_broker``'s parts, by duck type: the
    listener sits below the broker). ``appends``/``producer_ids`` are None on a read-only
    broker, ``consume``/``reader`` on a write-only one."""

    appends: Any
    """``Appends``: ``prepare(groups)``, ``submit(groups) -> Future[list[AppendResult]]``."""
    consume: Any
    """``BrokerConsumeService.consume(ConsumeRequest) -> ConsumeResult``."""
    topics: Any
    """``BrokerTopics``: ``describe``, ``create``, ``delete``, ``live_partition``, ``catalogue``."""
    reader: LeaderlessLogReader | None
    producer_ids: ProducerIds | None
    group_offsets: GroupOffsets | None
    records: Any
    """``RecordDeletion``: ``delete(topic, partition, before) -> DeleteRecordsResult``."""
    logs: Any
    """``LogDescriptions``: ``stored_bytes([(topic, partition)])``, ``producers(topic, partition)``, ``location``."""
    scram_users: Any
    """``ScramUsers``: the SCRAM users in Oxia (``scram_users.py``)."""


@dataclass(frozen=True)
class Limits:
    """The broker settings the handlers honour."""

    max_wait_ms_cap: int
    produce_timeout_ms: int
    max_records_per_request: int
    fetch_sessions: int = DEFAULT_SLOTS
    """Fetch sessions kept at most (0: none)."""


Handler = Callable[["KafkaService", KafkaRequest], Any]

HANDLERS: dict[int, Handler] = {
    **cluster.HANDLERS, **admin.HANDLERS, **produce.HANDLERS, **fetch.HANDLERS, **groups.HANDLERS, **logs.HANDLERS,
    **acls.HANDLERS, **operations.HANDLERS, **sasl.HANDLERS, **users.HANDLERS,
}


def cluster_id(root: str) -> str:
    """A stable cluster id per root prefix: 22 characters of base64, as Kafka's."""
    return base64.urlsafe_b64encode(hashlib.sha256(root.encode()).digest()[:16]).decode()[:22]


class KafkaService:
    """Answers decoded Kafka requests (module docstring)."""

    def __init__(self, parts: KafkaParts, nodes: Nodes, *, limits: Limits, metrics: LlogMetrics,
                 runtime: Runtime, root: str, initial_delay_ms: int = 3_000) -> None:
        self.parts = parts
        self.nodes = nodes
        self.limits = limits
        self.metrics = metrics
        self.runtime = runtime
        self.cluster_id = cluster_id(root)
        self.coordinator = GroupCoordinator(parts.group_offsets, nodes, runtime=runtime, metrics=metrics,
                                            initial_delay_ms=initial_delay_ms)
        self.fetch_sessions = FetchSessions(limits.fetch_sessions,
                                            new_id=lambda: runtime.ids.uuid4().int & 0x7FFFFFFF)

    def close(self) -> None:
        self.coordinator.close()

    def begin(self, request: KafkaRequest) -> Callable[[], Answer | None]:
        """What the connection's reader calls, in request order: a Produce submits its
        batches now (``produce.start_produce``) and an OffsetCommit commits now, so a
        connection's writes land in the order sent (Kafka handles a connection's
        requests one at a time; a later commit must not be overtaken by an earlier
        one); the rest of every request is the returned call, which the handler pool
        runs."""
        started = time.monotonic()
        if request.api.key == PRODUCE:
            finish = produce.start_produce(self, request)
            return lambda: self._answer(request, finish(), started)
        if request.api.key == OFFSET_COMMIT:
            answer = self.handle(request, started)
            return lambda: answer
        return lambda: self.handle(request, started)

    def handle(self, request: KafkaRequest, started: float | None = None) -> Answer | None:
        """A whole request on this thread (``begin`` then its call)."""
        started = time.monotonic() if started is None else started
        if request.api.key == PRODUCE:
            return self.begin(request)()
        return self._answer(request, HANDLERS[request.api.key](self, request), started)

    def _answer(self, request: KafkaRequest, response: Any, started: float) -> Answer | None:
        api = request.api.name
        self.metrics.observe("kafka_request_seconds", time.monotonic() - started, api=api)
        self.metrics.inc("kafka_requests_total", api=api, error=str(_top_error(response)))
        if response is None:
            return None
        if request.api.key == FETCH:
            return encode_gathered(response, request.version, request.correlation_id, _record_parts(response),
                                   response.flexible_version_q(request.version), self.runtime.ids.uuid4().bytes)
        return encode_response(request, response)


def _record_parts(response: Any) -> list[RecordParts]:
    """A Fetch answer's records fields given as buffers, in the order they are encoded."""
    return [p.records for t in response.responses for p in t.partitions if isinstance(p.records, RecordParts)]


def _top_error(response: Any) -> int:
    code = getattr(response, "error_code", None) if response is not None else None
    return code if isinstance(code, int) else 0
