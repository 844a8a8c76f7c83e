"""llog's produce client: ``POST /produce`` with retries and broker fallback.

Any Python program can use it (``from server.client import ProduceClient``);
the Spark writer and the produce job are built on it. Two layers:

- :class:`ProduceClient` sends one set of batches (one batch = records for
  one topic-partition) and returns their acknowledgements, retrying until
  every batch is acknowledged or the retry budget is spent.
- :class:`TaskProducer` is what one Spark task uses: it buffers records per
  partition and sends bounded multi-partition requests (``max_request_bytes``
  of body, ``max_request_records`` records) on up to ``max_in_flight``
  concurrent keep-alive connections. A record is a value and, optionally,
  a key, headers and a timestamp. The body is binary
  (``application/vnd.llog.produce.v2``: each partition's records as Kafka
  RecordBatch v2 batches of at most ``max_batch_bytes``, built with numpy
  and Arrow kernels, which the broker stores as they are) unless
  ``body="json"`` asks for the JSON of the reference system's brokers.

Broker selection. Each topic-partition has a stable preferred broker chosen
by rendezvous (highest-random-weight) hashing over the broker URLs, so every
task of every job sends a partition to the same broker (its batches meet in
that broker's flushes) and removing a broker only moves that broker's
partitions. A broker whose connection fails is marked down for
``broker_cooldown_ms``; meanwhile its partitions go to their next broker in
rendezvous order. When every broker is down the preferred one is tried again.

Retries (the budget is ``max_retries`` re-sends per batch, with capped,
full-jitter exponential backoff from :class:`server._retry.Backoff`). What an
answer means (``retriable``, definite or unknown, the broker stopping) is
the outcome table, ``server/_protocol/outcomes.py`` (its rows are listed in
``server/HTTP_API.md``); the client acts on it:

===========================  ===============================================
answer                       what happens
===========================  ===============================================
200                          every batch acknowledged
409 ``AppendFailed``         acknowledged batches are kept; failed batches
                             whose ``retriable`` is true are re-sent, any
                             other failure fails the task at once
503 ``BackPressureRejected`` nothing was written: the whole request again
retriable (503, 504,         the whole request again; an answer whose row is
connection failure)          ``stopping`` (503 ``ShuttingDown``,
                             ``ProducerClosed``) or a connection failure
                             also marks the broker down
not retriable (400, 403,     the task fails at once
404, 413, 500 ...)
===========================  ===============================================

Delivery: a definite failure (503 back-pressure, or a 409 batch with any
``error_type`` but ``OutcomeUnknown``) wrote nothing, so its retry cannot
duplicate. An unknown outcome (a batch answered ``OutcomeUnknown``, a 504, a
connection lost after the request went out: the table's ``unknown`` kind)
may have committed: the rule is to send it again, so no record is lost.
With a ``producer`` (``TaskProducer(..., producer=...)``; the Spark writer's
default, ``exactlyOnce``) every batch is an idempotent one (SPEC 7.12) cut
where only the records decide, so a batch sent again, by this task or by a
retried attempt of it, is answered as a duplicate and stored once
(``duplicate_batches``, ``duplicate_records``). Without one, delivery is at
least once: such a batch may appear twice (``unknown_batches``,
``unknown_records``: the bound on duplicates when no Spark task failed).

Per-partition order: a task never has two requests for the same partition in
flight, and retries happen inside the request that owns the partition, so
one task's records of a partition are appended in the order it read them.

Errors: ``ProduceError`` and its subclasses (``ProduceFailed``,
``BrokerUnreachable``), in the one tree of ``server/_errors.py``.
"""

from __future__ import annotations

# The client lives in private modules by role; this module is its public face.
# ruff: noqa: F401
from ._broker_selection import BrokerUrl, check_brokers, parse_broker_list, rendezvous_order
from ._produce_batches import (
    CONTENT_TYPES,
    MIB,
    Batch,
    BatchAck,
    ProducerConfig,
    ProduceStats,
    batch_overhead,
    encode_request,
)
from ._produce_client import ProduceClient, _ConnectFailed, _Failure, _Reply
from ._produce_errors import BrokerUnreachable, ProduceError, ProduceFailed
from ._partitioner import murmur2, partition_for_key, to_positive
from ._task_producer import TaskProducer, _Buffer
from ._topics import ensure_topic

__all__ = [
    "ProduceError",
    "ProduceFailed",
    "BrokerUnreachable",
    "ProducerConfig",
    "BrokerUrl",
    "Batch",
    "BatchAck",
    "ProduceClient",
    "ProduceStats",
    "TaskProducer",
    "ensure_topic",
    "rendezvous_order",
    "parse_broker_list",
    "murmur2",
    "partition_for_key",
    "to_positive",
]
