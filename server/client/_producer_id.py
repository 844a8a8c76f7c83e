"""A Spark task's idempotent producer (SPEC 7.12): ``POST /producers`` with the task's name, resumed.

A write names each of its tasks' producers after what Spark replays
identically: the write (an id made once on the driver), the micro-batch of a
stream, and the task's partition. The first attempt of a task creates the
producer (epoch 0); a retried attempt resumes it unchanged (``resume``), so
the batches it sends again carry the sequences the failed attempt used and
the log answers those it stored as duplicates (:class:`TaskProducer` cuts
the same batches from the same records).
"""

from __future__ import annotations

import json
import logging

from .._log.producer_ids import ProducerIdentity
from .._retry import Backoff
from ._produce_client import ProduceClient, _ConnectFailed
from ._produce_errors import BrokerUnreachable, ProduceFailed

__all__ = ["ProducerIdentity", "task_producer_name", "init_task_producer"]

log = logging.getLogger(__name__)


def task_producer_name(write_id: str, partition_id: int, batch_id: str | None = None) -> str:
    """The producer name of a write's task (and micro-batch, for a stream)."""
    batch = "" if batch_id is None else f"/batch-{batch_id}"
    return f"spark/{write_id}{batch}/part-{partition_id}"


def init_task_producer(client: ProduceClient, name: str) -> ProducerIdentity:
    """The named producer's id and epoch, resumed, from the first broker that
    answers (every broker can; retried with the client's backoff and budget)."""
    body = json.dumps({"name": name, "resume": True}).encode()
    backoff = Backoff(initial_ms=client.config.retry_backoff_initial_ms, max_ms=client.config.retry_backoff_max_ms,
                      max_attempts=2**31, max_elapsed_ms=float("inf"))
    last, reached = "no broker tried", False
    for attempt in range(client.config.max_retries + 1):
        for broker in client.config.brokers:
            try:
                reply = client.post(broker, "/producers", body)
            except _ConnectFailed as exc:
                last = f"cannot reach {broker.url}: {exc}"
                continue
            reached = True
            if reply.status == 200 and reply.body is not None:
                return ProducerIdentity(int(reply.body["producer_id"]), int(reply.body["producer_epoch"]))
            last = f"{broker.url} answered {reply.status}: {reply.text[:300]}"
            if reply.status < 500:
                raise ProduceFailed("could not initialize the task's idempotent producer", broker=broker.url,
                                    topic="-", partition=0, last_error=last, status=reply.status,
                                    attempts=attempt + 1)
        backoff = backoff.next()
        log.info("initializing producer %s: retrying in %.0f ms: %s", name, backoff.delay_s * 1000, last)
        backoff.sleep()
    cls = ProduceFailed if reached else BrokerUnreachable
    raise cls("could not initialize the task's idempotent producer", broker=client.config.brokers[-1].url,
              topic="-", partition=0, last_error=last, attempts=client.config.max_retries + 1, retriable=True)
