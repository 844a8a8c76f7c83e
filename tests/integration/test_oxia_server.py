"""The Oxia server we build, under the write pattern llog produces.

The writer commits many partitions concurrently, so one Oxia shard receives
many concurrent writes. Oxia v0.14.0 as published breaks under that (its WAL
offsets can be queued out of order, after which every write to the shard
fails: oxia-db/oxia#772); devstack builds it with the upstream fix. This test
fails within seconds against an unpatched server.
"""

from __future__ import annotations

import threading

import pytest

from server._config import OxiaConfig
from server._metastore import OxiaMetadataStore
from server.devstack import ensure_oxia

pytestmark = pytest.mark.integration


def test_concurrent_writes_to_one_shard_all_succeed(llog_env):
    config = OxiaConfig.from_env(llog_env)
    root = config.root_prefix
    errors: list[BaseException] = []
    stores = [OxiaMetadataStore(config) for _ in range(4)]

    def hammer(t: int) -> None:
        store = stores[t % len(stores)]
        try:
            for i in range(60):
                store.put(f"{root}/hammer/{t}/{i}", b"x" * 64, partition_key="hammer")
        except BaseException as exc:  # collected and reported below
            errors.append(exc)

    threads = [threading.Thread(target=hammer, args=(t,), name=f"hammer-{t}") for t in range(24)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert not errors, f"{len(errors)} writes failed, first: {errors[0]}"
        keys = stores[0].list_keys(f"{root}/hammer/", f"{root}/hammer/~/", partition_key="hammer")
        assert len(keys) == 24 * 60
        # The shard still takes writes afterwards.
        stores[0].put(f"{root}/hammer/after", b"ok", partition_key="hammer")
    finally:
        for s in stores:
            s.close()


def test_the_built_oxia_is_the_pinned_patched_version():
    path = ensure_oxia()
    assert path.name in ("oxia-v0.14.4", "oxia-v0.14.0+llog.1")
