"""A decoded control record is reused only while Oxia keeps the same version of it."""

from __future__ import annotations

from server._config import OxiaConfig
from server._log.control_cache import DecodedControls
from server._log.reader import LeaderlessLogReader
from server._protocol.keys import LogLayout, TopicPartition
from server._protocol.records import ControlRecord, LogState
from server._storage.metastore import InMemoryMetadataStore, Record
from server._storage.objectstore import InMemoryObjectStore


def _control(counter: int) -> bytes:
    return ControlRecord(log_state=LogState.OPEN, sequence_counter=counter).encode()


def test_the_same_version_is_decoded_once_and_a_new_one_again() -> None:
    cache = DecodedControls()
    first = cache.decode(Record("k", _control(5), 10))
    assert cache.decode(Record("k", _control(5), 10)) is first
    changed = cache.decode(Record("k", _control(9), 11))
    assert changed.high_watermark == 8 and first.high_watermark == 4
    # A value written back at an older version is still decoded from its bytes, not the cache's.
    assert cache.decode(Record("k", _control(5), 12)).high_watermark == 4


def test_the_least_recently_decoded_key_leaves_first_when_the_bytes_run_over() -> None:
    size = len("a") + len(_control(2))  # every record here is as large
    cache = DecodedControls(capacity_bytes=2 * size)
    a = cache.decode(Record("a", _control(2), 1))
    cache.decode(Record("b", _control(3), 2))
    cache.decode(Record("a", _control(4), 3))  # a again, newer: b is now the oldest
    cache.decode(Record("c", _control(5), 4))
    assert len(cache) == 2 and cache.nbytes == 2 * size
    assert cache.decode(Record("a", _control(4), 3)) is not a
    b_again = cache.decode(Record("b", _control(3), 2))
    assert b_again.high_watermark == 2 and len(cache) == 2 and cache.nbytes == 2 * size


def test_a_record_larger_than_the_cache_is_decoded_and_held_alone() -> None:
    cache = DecodedControls(capacity_bytes=10)
    cache.decode(Record("a", _control(2), 1))
    big = cache.decode(Record("b", _control(3), 2))
    assert len(cache) == 1 and cache.decode(Record("b", _control(3), 2)) is big


def test_the_reader_sees_every_change_of_a_control_record() -> None:
    meta = InMemoryMetadataStore()
    reader = LeaderlessLogReader(OxiaConfig(service_address="unused:1"), metadata_store=meta,
                                 object_store=InMemoryObjectStore())
    keys = LogLayout().partition("orders", 0)
    tps = [TopicPartition("orders", 0)]
    for counter in (1, 7, 3, 3, 12):
        meta.put(keys.control, _control(counter), keys.partition_key)
        (control,) = reader.controls(tps)
        assert isinstance(control, ControlRecord) and control.high_watermark == counter - 1
        assert reader.control("orders", 0).high_watermark == counter - 1
    reader.close()
