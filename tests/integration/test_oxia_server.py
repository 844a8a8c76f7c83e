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
from server._storage.metastore import OxiaMetadataStore
from devstack import ensure_oxia

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


def test_many_clients_start_without_the_discovery_race(llog_env):
    """oxia 0.2.1 can lose the first shard assignments to a race in its
    constructor and then hang 30 s; _storage/oxia_compat.py fixes it."""
    import time

    config = OxiaConfig.from_env(llog_env)
    started = time.monotonic()
    for _ in range(25):
        store = OxiaMetadataStore(config)
        store.put(f"{config.root_prefix}/probe", b"x", partition_key="probe")
        store.close()
    # The bug is a 30 s hang per affected client; 25 healthy clients take a
    # few seconds even on a loaded machine.
    assert time.monotonic() - started < 20


def test_a_long_lived_client_follows_two_leader_changes(tmp_path):
    """The unpatched client stops applying shard assignments after the first
    update, so after a second leader change it keeps writing to a dead leader.

    Server 0 is the address clients discover through, so each round kills a
    server other than 0 that leads the shard of some key, and writes that key.
    """
    import time

    from devstack import LocalStack

    with LocalStack(tmp_path / "cluster", oxia_mode="cluster", oxia_shards=6) as local:
        env = local.settings.env(root_prefix="failover")
        store = OxiaMetadataStore(OxiaConfig.from_env(env))
        discovery = store._client._service_discovery
        candidates = [f"k{i}" for i in range(64)]
        try:
            for pk in candidates:
                store.put(f"failover/{pk}", b"0", partition_key=pk)
            for round_ in range(2):
                leaders = local.oxia_shard_leaders()
                victims = {
                    pk: local.oxia_cluster.server_index(leaders[discovery.get_shard(pk).shard])
                    for pk in candidates
                }
                pk, victim = next((k, v) for k, v in victims.items() if v != 0)
                local.kill_oxia_server(victim)
                # A new leader takes the coordinator a few seconds, more on a
                # busy CI machine; an unpatched client never gets there at all.
                killed = time.monotonic()
                while True:
                    try:
                        store.put(f"failover/{pk}", str(round_ + 1).encode(), partition_key=pk)
                        break
                    except Exception as exc:
                        if time.monotonic() - killed > 60:
                            raise AssertionError(
                                f"round {round_ + 1}: no write to {pk!r} within 60 s of killing oxia server "
                                f"{victim}: {exc!r}"
                            ) from exc
                        time.sleep(0.2)
                assert store.get(f"failover/{pk}", pk).value == str(round_ + 1).encode()
                local.restart_oxia_server(victim)
        finally:
            store.close()
