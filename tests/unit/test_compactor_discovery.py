"""Discovery (discovery.py) through the compactor service, over the fakes."""

from __future__ import annotations

import pytest

from server._protocol.keys import TopicPartition
from server._storage.metastore import InMemoryMetadataStore
from server._storage.objectstore import InMemoryObjectStore

from ._compactor_service_fakes import A, B, FakeCompactor, service, wait_for


@pytest.fixture
def meta():
    return InMemoryMetadataStore()


@pytest.fixture
def objs():
    return InMemoryObjectStore()


# -- discovery -------------------------------------------------------------------------------------


def test_discovery_keeps_only_canonical_control_keys_of_this_root(meta, objs):
    for key in [
        "llog/orders/partitions/0/meta/control",
        "llog/orders/partitions/7/meta/control",
        "llog/pay.ments_2-x/partitions/12/meta/control",
        "llog/orders/partitions/07/meta/control",       # not canonical
        "llog/orders/partitions/-1/meta/control",
        "llog/orders/partitions/1/meta/compaction-cursor",
        "llog/orders/partitions/1/index/00000000000000000001",
        "llog/orders/partition/2/meta/control",
        "llog/sub/orders/partitions/0/meta/control",     # a nested root
        "other/orders/partitions/3/meta/control",        # another root
    ]:
        meta.put(key, b"{}", "x")
    with service(meta, objs, targets=(A,)) as svc:
        assert svc.discover() == 2
        assert svc.discover() == 0
        assert svc.known_partitions() == [A, TopicPartition("orders", 7), TopicPartition("pay.ments_2-x", 12)]
    assert svc.metrics.counter("compactor_discovery_passes_total", outcome="ok") == 2
    assert svc.metrics.counter("compactor_partitions_discovered_total") == 2


def test_discovery_lists_all_shards_within_the_root_only(objs):
    class Spy(InMemoryMetadataStore):
        calls_seen = []

        def list_keys(self, min_key, max_key, partition_key=None):
            self.calls_seen.append((min_key, max_key, partition_key))
            return super().list_keys(min_key, max_key, partition_key)

    meta = Spy()
    with service(meta, objs) as svc:
        svc.discover()
    assert meta.calls_seen == [("llog/", "llog/~/", None)]


def test_failed_discovery_keeps_scheduling_known_logs(meta, objs):
    meta.fail_next("range_scan", times=1000)  # list_keys goes through range_scan in the fake
    fake = FakeCompactor()
    with service(meta, objs, fake, discovery_interval_ms=10) as svc:
        svc.start()
        wait_for(lambda: fake.calls[A] >= 2 and fake.calls[B] >= 2)
    assert svc.metrics.counter("compactor_discovery_passes_total", outcome="error") >= 1
