"""Fetch sessions (KIP-227, ``server/_kafka/fetch_sessions.py``): opening, incremental fetches and what
their answers name, forgetting, closing, the session errors, eviction; and kafka-python's consumer, which
keeps a session, reading everything through incremental fetches of an in-process broker."""

from __future__ import annotations

import itertools

import pytest

from server._kafka.errors import Code
from server._kafka.fetch_sessions import FetchSessions, SessionPartition


def _wanted(*tps_offsets):
    return [((t, p), SessionPartition(offset, 1 << 20)) for t, p, offset in tps_offsets]


@pytest.fixture
def sessions() -> FetchSessions:
    ids = itertools.count(101)
    return FetchSessions(2, new_id=lambda: next(ids))


def test_a_sessionless_fetch_keeps_nothing_and_names_every_partition(sessions):
    ctx = sessions.begin(0, -1, _wanted(("t", 0, 5), ("t", 1, 7)), [])
    assert (ctx.kind, ctx.error, ctx.session_id) == ("sessionless", Code.NONE, 0)
    assert [tp for tp, _ in ctx.partitions] == [("t", 0), ("t", 1)]
    assert ctx.answered([(("t", 0), 0, 9, 0, False), (("t", 1), 0, 9, 0, False)]) == {("t", 0), ("t", 1)}
    assert len(sessions) == 0


def test_an_incremental_fetch_fetches_the_whole_session_and_names_only_what_changed(sessions):
    opened = sessions.begin(0, 0, _wanted(("t", 0, 5), ("t", 1, 7), ("u", 0, 0)), [])
    assert (opened.kind, opened.session_id) == ("opened", 101)
    full = [(("t", 0), 0, 9, 0, True), (("t", 1), 0, 7, 0, False), (("u", 0), 0, 0, 0, False)]
    assert opened.answered(full) == {("t", 0), ("t", 1), ("u", 0)}  # the first answer names all
    # The client read t:0 up to 9: only t:0 is in the request; the session holds the others.
    inc = sessions.begin(101, 1, _wanted(("t", 0, 9)), [])
    assert (inc.kind, inc.error, inc.session_id) == ("incremental", Code.NONE, 101)
    # t:0 had records, so it went to the end of the session (a smaller budget rotates).
    assert [(tp, p.fetch_offset) for tp, p in inc.partitions] == [(("t", 1), 7), (("u", 0), 0), (("t", 0), 9)]
    named = inc.answered([(("t", 1), 0, 7, 0, False), (("u", 0), 0, 3, 0, False), (("t", 0), 0, 9, 0, False)])
    assert named == {("u", 0)}  # its high watermark moved; nothing else did
    idle = sessions.begin(101, 2, [], [])
    assert idle.answered([(("t", 1), 0, 7, 0, False), (("u", 0), 0, 3, 0, False),
                          (("t", 0), 0, 9, 0, False)]) == set()
    news = sessions.begin(101, 3, [], [])
    assert news.answered([(("t", 1), Code.UNKNOWN_TOPIC_OR_PARTITION, -1, -1, False), (("u", 0), 0, 3, 2, False),
                          (("t", 0), 0, 9, 0, True)]) == {("t", 1), ("u", 0), ("t", 0)}  # error, log start, records


def test_forgotten_partitions_leave_the_session_and_new_ones_join_it(sessions):
    sessions.begin(0, 0, _wanted(("t", 0, 1), ("t", 1, 1)), []).answered([])
    inc = sessions.begin(101, 1, _wanted(("t", 2, 4)), [("t", 0)])
    assert [tp for tp, _ in inc.partitions] == [("t", 1), ("t", 2)]
    assert inc.answered([(("t", 1), 0, 0, 0, False), (("t", 2), 0, 4, 0, False)]) == {("t", 1), ("t", 2)}


def test_an_unknown_session_or_a_wrong_epoch_is_refused_and_the_client_opens_again(sessions):
    assert sessions.begin(999, 1, [], []).error == Code.FETCH_SESSION_ID_NOT_FOUND
    sessions.begin(0, 0, _wanted(("t", 0, 1)), [])
    bad = sessions.begin(101, 2, [], [])
    assert (bad.kind, bad.error, bad.session_id, bad.partitions) == ("bad_epoch", Code.INVALID_FETCH_SESSION_EPOCH,
                                                                     0, [])
    assert sessions.begin(101, 1, [], []).error == Code.NONE  # the session is still there, at epoch 1
    again = sessions.begin(101, 0, _wanted(("t", 0, 3)), [])  # close 101 and open another
    assert again.session_id == 102 and sessions.begin(101, 2, [], []).error == Code.FETCH_SESSION_ID_NOT_FOUND
    closed = sessions.begin(102, -1, _wanted(("t", 0, 3)), [])  # close, and fetch without a session
    assert (closed.kind, closed.session_id) == ("closed", 0) and len(sessions) == 0


def test_the_least_recently_used_session_is_evicted_for_a_new_one(sessions):
    sessions.begin(0, 0, _wanted(("t", 0, 1)), [])  # 101
    sessions.begin(0, 0, _wanted(("t", 0, 1)), [])  # 102
    assert sessions.begin(101, 1, [], []).error == Code.NONE  # 101 used last
    assert sessions.begin(0, 0, _wanted(("t", 0, 1)), []).session_id == 103  # evicts 102
    assert sessions.begin(102, 1, [], []).error == Code.FETCH_SESSION_ID_NOT_FOUND
    assert sessions.begin(101, 2, [], []).error == Code.NONE and sessions.evictions == 1
    none = FetchSessions(0, new_id=lambda: 1).begin(0, 0, _wanted(("t", 0, 1)), [])
    assert (none.kind, none.session_id) == ("sessionless", 0)  # no slots: no sessions


def test_epochs_wrap_to_one_after_int32_s_maximum(sessions):
    sessions.begin(0, 0, _wanted(("t", 0, 1)), [])
    sessions._sessions[101].epoch = 0x7FFFFFFF
    assert sessions.begin(101, 0x7FFFFFFF, [], []).error == Code.NONE
    assert sessions.begin(101, 1, [], []).error == Code.NONE


def test_kafka_python_reads_every_record_through_incremental_fetches():
    from confluent_kafka import Producer
    from kafka import KafkaConsumer, TopicPartition

    from server._broker.kafka_front import KafkaFront
    from server._catalogue.topic_config import TopicDefaults
    from server._config import BatchConfig
    from tests.unit.test_broker import Cluster

    with Cluster() as cluster:
        broker = cluster.broker(topics=TopicDefaults(partitions=4), kafka_port=0, batch=BatchConfig(max_delay_ms=5))
        front = KafkaFront(broker, cluster.meta)
        bootstrap = f"127.0.0.1:{front.port}"
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
        consumer = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=50,
                                 enable_auto_commit=False)
        try:
            consumer.assign([TopicPartition("sessions", p) for p in range(4)])
            got: list[tuple[int, int, bytes]] = []
            for round_ in range(5):  # each round is read by fetches of the one session
                for i in range(8):
                    producer.produce("sessions", value=b"r%d-%d" % (round_, i), partition=i % 4)
                assert producer.flush(30) == 0
                want = 8 * (round_ + 1)
                for _ in range(200):
                    if len(got) >= want:
                        break
                    for records in consumer.poll(timeout_ms=100).values():
                        got += [(r.partition, r.offset, r.value) for r in records]
                assert len(got) == want
            assert sorted(v for _, _, v in got) == sorted(b"r%d-%d" % (r, i) for r in range(5) for i in range(8))
            assert sorted((p, o) for p, o, _ in got) == sorted((p, o) for p in range(4) for o in range(10))
            metrics = broker.metrics
            assert metrics.counter("kafka_fetches_total", session="opened") >= 1
            # Rounds 2-5 were each read by a later fetch than the one that opened the session.
            assert metrics.counter("kafka_fetches_total", session="incremental") >= 4
            assert metrics.counter("kafka_fetches_total", session="sessionless") == 0
        finally:
            consumer.close()
            front.close()
