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

    Each round kills the leader of one key's shard, whichever server that is
    (the first of the addresses clients discover through included: leaders
    may all sit on one server), waits until the coordinator has elected
    another leader and writes the key while the old one is still down: the
    write only lands if the client applied the new assignment, which it gets
    from another server of LLOG_OXIA_SERVICE_ADDRESS when the first is the
    one lost. Then it starts the old one again, as a follower.
    """
    import time

    from devstack import LocalStack

    def wait_for(what: str, check, timeout_s: float = 60.0):
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                found = check()
            except Exception as exc:  # a server still down or electing: ask again
                found, last = None, exc
            else:
                last = None
            if found is not None:
                return found
            if time.monotonic() > deadline:
                raise AssertionError(f"{what} within {timeout_s:.0f} s (last error: {last!r})")
            time.sleep(0.2)

    with LocalStack(tmp_path / "cluster", oxia_mode="cluster", oxia_shards=6) as local:
        env = local.settings.env(root_prefix="failover")
        assert env["LLOG_OXIA_SERVICE_ADDRESS"] == ",".join(local.settings.oxia_addresses)
        store = OxiaMetadataStore(OxiaConfig.from_env(env))
        discovery = store._client._service_discovery
        cluster = local.oxia_cluster
        try:
            for round_ in range(2):
                pk = f"k{round_}"
                store.put(f"failover/{pk}", b"0", partition_key=pk)
                shard = discovery.get_shard(pk).shard
                # The server restarted by the round before may still be starting: ask until it answers.
                old_leader = wait_for(f"round {round_ + 1}: the leader of shard {shard}",
                                      lambda: local.oxia_shard_leaders().get(shard))
                victim = cluster.server_index(old_leader)
                local.kill_oxia_server(victim)
                # Electing a leader takes the coordinator a few seconds, more on a busy machine.
                wait_for(
                    f"round {round_ + 1}: a new leader for shard {shard} after killing server {victim}",
                    lambda: local.oxia_shard_leaders().get(shard) not in (None, old_leader) or None,
                )
                value = str(round_ + 1).encode()

                def write() -> bool:
                    store.put(f"failover/{pk}", value, partition_key=pk)
                    return True

                wait_for(f"round {round_ + 1}: a write to {pk!r} after shard {shard} changed leader", write)
                assert store.get(f"failover/{pk}", pk).value == value
                local.restart_oxia_server(victim)
        finally:
            store.close()


def test_get_many_answers_each_get_in_order_across_shards_and_split_answers(tmp_path):
    """``get_many`` sends one read per shard; Oxia streams a read's answers in
    messages of at most 2 MiB of values, so 2.5 MiB per shard comes back split."""
    import random

    from devstack import LocalStack

    with LocalStack(tmp_path / "stack", oxia_shards=4) as local:
        store = OxiaMetadataStore(OxiaConfig.from_env(local.settings.env(root_prefix="many")))
        try:
            rng = random.Random(3)
            present = [(f"many/k/{i}", f"pk{i % 20}") for i in range(200)]
            for i, (key, pk) in enumerate(present):
                store.put(key, rng.randbytes(100_000 if i % 2 else 10), partition_key=pk)
            wanted = present + [(f"many/absent/{i}", f"pk{i}") for i in range(30)]
            rng.shuffle(wanted)
            discovery = store._client._service_discovery
            assert len({discovery.get_shard(pk).shard for _, pk in wanted}) == 4
            got = store.get_many(wanted)
            assert got == [store.get(key, pk) for key, pk in wanted]
            assert sum(r is None for r in got) == 30
            assert store.get_many([]) == [] and store.get_many(wanted[:1]) == [store.get(*wanted[0])]
        finally:
            store.close()


def test_requests_to_a_paused_oxia_fail_at_their_deadline_and_work_after_it_resumes(tmp_path):
    """oxia 0.2.1 sends requests with no deadline: a client of a SIGSTOPped
    server waited for good. Each call now fails with MetadataStoreError after
    LLOG_OXIA_REQUEST_TIMEOUT_MS (range scans through keepalive pings, they
    have no deadline), and the same store works once the server is back."""
    import os
    import signal
    import time

    from devstack import LocalStack
    from server._errors import MetadataStoreError

    with LocalStack(tmp_path / "stack") as local:
        env = {**local.settings.env(root_prefix="paused"), "LLOG_OXIA_REQUEST_TIMEOUT_MS": "1000"}
        store = OxiaMetadataStore(OxiaConfig.from_env(env))
        (oxia,) = [p for p in local.processes if "oxia" in p.name]
        calls = {
            "put": lambda: store.put("paused/k/9", b"v", partition_key="p"),
            "get": lambda: store.get("paused/k/0", "p"),
            "get_many": lambda: store.get_many([("paused/k/0", "p"), ("paused/k/2", "q")]),
            "list_keys": lambda: store.list_keys("paused/k/", "paused/k/~", "p"),
            "range_scan": lambda: list(store.range_scan("paused/k/", "paused/k/~", "p")),
        }
        outcomes: dict[str, BaseException | None] = {}

        def run(name: str) -> None:
            try:
                calls[name]()
            except BaseException as exc:  # the outcome under test
                outcomes[name] = exc
            else:
                outcomes[name] = None

        try:
            store.put("paused/k/0", b"before", partition_key="p")
            os.kill(oxia.pid, signal.SIGSTOP)
            try:
                threads = [threading.Thread(target=run, args=(name,), daemon=True) for name in calls]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join(timeout=90)  # a bound on a hang, not a speed claim: keepalive takes ~6 s
                assert not [t for t in threads if t.is_alive()], f"calls still waiting: {sorted(set(calls) - set(outcomes))}"
            finally:
                os.kill(oxia.pid, signal.SIGCONT)
            for name, exc in outcomes.items():
                assert isinstance(exc, MetadataStoreError), f"{name}: {exc!r}"
                assert "is an Oxia server down or paused?" in str(exc), f"{name}: {exc}"

            deadline = time.monotonic() + 60
            while True:  # the channel reconnects within its 5 s backoff cap
                try:
                    store.put("paused/k/1", b"after", partition_key="p")
                    break
                except MetadataStoreError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
            got = {r.key: r.value for r in store.range_scan("paused/k/", "paused/k/~", "p")}
            # The put that timed out has an unknown outcome: it may still land once the server
            # resumes (after the put above, on the old connection), so it has a key of its own.
            assert got.pop("paused/k/9", b"v") == b"v"
            assert got == {"paused/k/0": b"before", "paused/k/1": b"after"}
        finally:
            store.close()
