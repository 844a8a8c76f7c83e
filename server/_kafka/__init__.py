"""The Kafka protocol listener: Kafka's clients, tools and Spark's Kafka connector over llog.

A broker started with ``LLOG_KAFKA_PORT`` serves Kafka's wire protocol
beside its HTTP contract, over the same parts (``KAFKA_API.md`` lists the
APIs, versions and deviations):

- ``codec.py``: framing and the API/version table, over kafka-python's
  classes generated from Kafka's message schemas;
- ``listener.py``: sockets, per-connection ordering, the handler pool;
- ``gather.py``: Fetch answers as buffers, sent without copying the records;
- ``fetch_sessions.py``: fetch sessions (KIP-227), a consumer's partitions between fetches;
- ``stalls.py``: flush at once when every producing connection waits on its answers;
- ``service.py``: dispatch to the handlers of ``cluster.py``, ``produce.py``,
  ``fetch.py`` and ``groups.py``;
- ``nodes.py``: the live listeners in Oxia, leaders and coordinators;
- ``coordinator.py``: the classic group protocol's state machine;
  ``subscriptions.py``: the topics its members subscribe to (OffsetDelete);
- ``errors.py``: llog outcomes as Kafka error codes;
- ``tls.py``: TLS over a connection; ``sasl.py``, ``scram.py``: SASL authentication;
  ``scram_users.py``: the SCRAM users in Oxia, ``users.py`` the APIs that manage them.

This package sits beside ``_http_server``, below ``_broker``: the broker
hands it its parts (``service.KafkaParts``).
"""

from .codec import APIS
from .listener import KafkaListener
from .nodes import Node, Nodes
from .service import KafkaParts, KafkaService, Limits
from .stalls import ProduceStalls

__all__ = ["APIS", "KafkaListener", "KafkaParts", "KafkaService", "Limits", "Node", "Nodes", "ProduceStalls"]
