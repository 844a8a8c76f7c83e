"""Fixes for two races in the ``oxia==0.2.1`` client's shard discovery.

``oxia.internal.service_discovery.ServiceDiscovery`` (0.2.1, the newest
release) has two bugs that bite llog:

1. ``__init__`` starts the discovery thread *before* it creates the
   ``threading.Barrier`` that thread waits on. Against a fast local server the
   first shard assignments can arrive first: the thread dies with
   ``AttributeError: ... no attribute '_init_barrier'`` and the constructor
   times out after 30 s ("Timed out ... waiting for initial shard
   assignments"). Seen in our test suite.
2. ``get_assignments`` waits on that two-party barrier after *every*
   assignments update, but only the constructor ever joins it, so the second
   update (a shard leader change) blocks the thread forever: the client keeps
   sending to the old leader.

:func:`apply` replaces those two methods with versions that signal a
``threading.Event`` once the first assignments are in (set up before the
thread starts) and keep applying updates afterwards. Everything else of the
class is untouched. It is applied by the Oxia adapter before it creates a
client and is idempotent; remove it once a fixed client is released.

The same replacement also takes a comma-separated list of service
addresses (``LLOG_OXIA_SERVICE_ADDRESS=a:6648,b:6648,c:6648``): shard
assignments stream from the first one that answers, and from the next when
its stream fails (the channel's keepalive ends a stream from a silent
server, ``oxia_channel.py``), so a client of an Oxia cluster without a load
balancer in front still learns of leader changes while one server is down.
"""

from __future__ import annotations

import threading

from .._config import oxia_addresses

__all__ = ["apply"]

_applied = False
_lock = threading.Lock()


def apply() -> None:
    global _applied
    with _lock:
        if _applied:
            return
        from oxia.internal import service_discovery as sd

        def __init__(self, service_address, connection_pool, namespace, init_timeout=30):  # noqa: N807
            self._assignments = {}
            self._service_address = service_address
            self._connection_pool = connection_pool
            self._namespace = namespace
            self._closed = False
            self._lock = threading.Lock()
            self._ready = threading.Event()
            self._thread = threading.Thread(
                target=self.get_assignments, daemon=True, name="oxia-shard-discovery"
            )
            self._thread.start()
            if not self._ready.wait(init_timeout):
                self._closed = True
                raise RuntimeError(
                    f"Timed out after {init_timeout}s waiting for initial shard "
                    f"assignments from {service_address}"
                )

        def get_assignments(self):
            addresses = oxia_addresses(self._service_address)

            def pool_closed() -> bool:  # the client closed: its channels must not open again
                return getattr(self._connection_pool, "closed", False)

            backoff = sd.Backoff()
            backoff.max_delay = 5.0  # the client's 60 s would leave a recovered cluster unseen for a minute
            turn = 0
            while not self._closed and not pool_closed():
                address = addresses[turn % len(addresses)]
                turn += 1
                try:
                    stub = self._connection_pool.get(address)
                    request = sd.pb.ShardAssignmentsRequest(namespace=self._namespace)
                    for sa in stub.get_shard_assignments(request):
                        self._parse_assignments(sa.namespaces[self._namespace])
                        self._ready.set()
                        backoff.reset()
                except ValueError:  # the client closed its channels under the stream
                    if pool_closed():
                        return
                    raise
                except sd.grpc.RpcError as e:
                    if not self._closed and not pool_closed():
                        if e.code() != sd.grpc.StatusCode.CANCELLED:
                            sd.log.warning("Failed to get assignments from %s: %s: %s", address, e.code(), e.details())
                        if turn % len(addresses) == 0:  # every address tried: wait before the next round
                            backoff.wait_next()

        sd.ServiceDiscovery.__init__ = __init__
        sd.ServiceDiscovery.get_assignments = get_assignments
        _applied = True
