"""Starting a /consume long poll on a real broker so that what the test does
next can reach it only by a wake-up (no sleep, no timer)."""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor

from tests._waiting import wait_until


def empty_looks(broker) -> float:
    """How often the broker looked a partition up in Oxia and found nothing
    past its fetch offset: a confirmed tail claim (cache on) or a storage read
    (cache off). Both come after the request registered its waiter and before
    it waits."""
    c = broker.client
    return c.counter("tail_cache_validations_total", result="confirmed") + c.counter("consume_storage_reads_total")


def start_long_poll(pool: ThreadPoolExecutor, broker, parts: list[dict], **kw) -> Future:
    """Send ``/consume`` for ``parts`` (at their tails) from a pool thread and
    return once the broker has looked every partition up and found nothing.

    The request registers its waiter before that first look, so a record
    produced after this returns either wakes it or, if nothing wakes it,
    is missing from its answer.
    """
    before = empty_looks(broker)
    poll = pool.submit(broker.client.consume, parts, **kw)
    wait_until(
        lambda: poll.done() or empty_looks(broker) >= before + len(parts), 10, "the long poll's first look"
    )
    assert not poll.done(), f"the long poll answered at once: {poll.result().json}"
    return poll
