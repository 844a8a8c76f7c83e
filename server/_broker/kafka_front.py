"""The broker's Kafka front: its parts behind the Kafka listener (``server/_kafka``).

Started by ``cli.serve`` when ``LLOG_KAFKA_PORT`` is set: the listener binds,
registers this broker as a live node in Oxia, and serves until closed.
Closing stops accepting first, so the broker's own drain (``Broker.close``)
answers what the listener accepted.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from .._errors import ConfigError
from .._kafka import KafkaListener, KafkaService, Limits, Nodes, ProduceStalls
from .._kafka.sasl import Credentials, SaslGate, SaslUsers
from .._kafka.scram_users import ScramUsers
from .._kafka.tls import server_context
from .._storage.metastore import MetadataStore
from .broker import Broker
from .log_description import LogDescriptions
from .record_deletion import RecordDeletion

__all__ = ["KafkaFront"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Parts:
    appends: Any
    consume: Any
    topics: Any
    reader: Any
    producer_ids: Any
    group_offsets: Any
    records: Any
    logs: Any
    scram_users: Any


class KafkaFront:
    """The listener, its service and its registration, over one broker."""

    def __init__(self, broker: Broker, meta: MetadataStore | None = None, *, location: str | None = None) -> None:
        """``meta``: where the live listeners register (default: the broker's own stores);
        ``location``: where the logs are stored, as DescribeLogDirs names it (``s3://bucket/root``;
        default ``/root``)."""
        config = broker.config
        if config.kafka_port is None:
            raise ConfigError("the Kafka listener needs a port (LLOG_KAFKA_PORT)")
        if meta is None:
            if broker.stores is None:
                raise ConfigError("the Kafka listener needs the broker's stores (Broker.from_env) or a metadata store")
            meta = broker.stores.meta
        layout = broker.layout
        runtime = broker.runtime
        records = broker.records or RecordDeletion(meta, layout, broker.topics, runtime, broker.consume_service)
        logs = LogDescriptions(meta, layout, broker.topics, location or f"/{layout.root}")
        scram_users = ScramUsers(meta, layout)
        parts = _Parts(broker.appends, broker.consume_service, broker.topics, broker.reader, broker.producer_ids,
                       broker.group_offsets, records, logs, scram_users)
        self.service: KafkaService | None = None
        self.listener: KafkaListener | None = None
        self.nodes: Nodes | None = None
        tls = None if config.kafka_tls_cert is None else server_context(
            config.kafka_tls_cert, config.kafka_tls_key, config.kafka_tls_client_ca)
        gate = None
        if config.kafka_sasl_on:
            users = Credentials(None if config.kafka_sasl_users is None else SaslUsers(config.kafka_sasl_users, runtime),
                                scram_users)
            mechanisms = config.kafka_mechanisms
            if tls is None and "PLAIN" in mechanisms:
                log.warning("Kafka listener: SASL PLAIN without TLS sends passwords in clear text "
                            "(set LLOG_KAFKA_TLS_CERT, or LLOG_KAFKA_SASL_MECHANISMS without PLAIN)")

            def gate(peer: str) -> SaslGate:
                return SaslGate(users, mechanisms, runtime=runtime, metrics=broker.metrics, peer=peer)
        self.security = ("SASL_SSL" if tls else "SASL_PLAINTEXT") if gate else ("SSL" if tls else "PLAINTEXT")
        """The listener's security protocol, as a Kafka client names it (``security.protocol``)."""
        try:
            self.listener = KafkaListener(
                self._begin, host=config.host, port=config.kafka_port, max_frame_bytes=config.max_request_bytes,
                threads=config.kafka_threads, max_inflight=config.kafka_max_inflight, metrics=broker.metrics,
                max_connections=config.kafka_max_connections, max_idle_ms=config.kafka_connections_max_idle_ms,
                stalls=None if broker.appends is None else ProduceStalls(lambda: self._stall_flush(broker)),
                tls=tls, gate=gate)
            self.nodes = Nodes(meta, layout, broker_id=config.broker_id, host=config.kafka_host,
                               port=self.listener.port, runtime=runtime)
            self.service = KafkaService(
                parts, self.nodes, metrics=broker.metrics, runtime=runtime, root=layout.root,
                limits=Limits(config.max_wait_ms_cap, config.produce_timeout_ms, config.max_records_per_request,
                              config.kafka_fetch_sessions),
                initial_delay_ms=config.kafka_group_initial_rebalance_delay_ms)
            self.nodes.start()
            self.listener.start()
        except BaseException:
            self.close()
            raise

    @property
    def port(self) -> int:
        assert self.listener is not None
        return self.listener.port

    @staticmethod
    def _stall_flush(broker: Broker) -> None:
        broker.metrics.inc("kafka_stall_flushes_total")
        broker.appends.producer.request_flush()

    def _begin(self, request):  # type: ignore[no-untyped-def]
        assert self.service is not None
        return self.service.begin(request)

    def close(self) -> None:
        """The coordinator first: a JoinGroup waiting for its rebalance returns at once, so the
        listener's close (which waits for the requests it is handling) does not wait out a
        rebalance timeout."""
        if self.service is not None:
            self.service.close()
        if self.listener is not None:
            self.listener.close()
        if self.nodes is not None:
            self.nodes.close()
