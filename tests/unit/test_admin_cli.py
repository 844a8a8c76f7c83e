"""``llog-admin topics``: each command over the in-memory store, and its usage errors."""

from __future__ import annotations

import json

import pytest

from server._admin.cli import parse_args, run
from server._catalogue.catalogue import TopicCatalogue
from server._config import OxiaConfig, S3Config
from server._errors import InvalidRequest, OffsetOutOfRange, UnknownTopic
from server._log.initialize import initialize_log
from server._protocol.keys import LogLayout
from server._storage.metastore import InMemoryMetadataStore
from server._storage.objectstore import InMemoryObjectStore
from server.leaderless_log_writer import LeaderlessLogWriter, SharedAppendGroup

LAYOUT = LogLayout("llog")


@pytest.fixture
def catalogue():
    meta = InMemoryMetadataStore()
    return TopicCatalogue(meta, LAYOUT, initialize=lambda tp: initialize_log(meta, LAYOUT.keys(tp)))


def cli(catalogue, *argv):
    return run(parse_args(["topics", *argv]), catalogue, catalogue._meta)


def test_every_command(catalogue):
    [line] = cli(catalogue, "create", "orders", "--partitions", "3", "--config", "retention.ms=60000")
    assert line.startswith("orders\tpartitions=3\tstate=ACTIVE") and "retention.ms=60000" in line
    assert catalogue._meta.get("llog/orders/partitions/2/meta/control", "orders:2") is not None  # initialized
    cli(catalogue, "create", "audit")
    assert [line.split("\t")[0] for line in cli(catalogue, "list")] == ["audit", "orders"]
    assert json.loads(cli(catalogue, "describe", "orders", "--json")[0])["partitions"] == 3
    [line] = cli(catalogue, "alter", "orders", "--config", "retention.bytes=5", "--partitions", "4")
    assert "partitions=4" in line and "retention.bytes=5" in line
    assert "being deleted" in cli(catalogue, "delete", "orders")[0]
    assert [t["name"] for t in json.loads(cli(catalogue, "list", "--json")[0])] == ["audit"]


def test_delete_records_moves_the_log_start(catalogue):
    cli(catalogue, "create", "orders", "--partitions", "2")
    with LeaderlessLogWriter(OxiaConfig("fake:1", root_prefix="llog"), S3Config("llog"),
                             metadata_store=catalogue._meta, object_store=InMemoryObjectStore()) as w:
        w.append_shared([SharedAppendGroup("orders", 0, [b"a", b"b", b"c", b"d"])])
    [line] = cli(catalogue, "delete-records", "orders", "--partition", "0", "--before", "3")
    assert line == "orders:0 starts at 3 (was 1; high watermark 4): the records below it are no longer readable"
    assert "starts at 3 already" in cli(catalogue, "delete-records", "orders", "--partition", "0", "--before", "2")[0]
    assert "starts at 5" in cli(catalogue, "delete-records", "orders", "--partition", "0", "--before", "end")[0]
    with pytest.raises(OffsetOutOfRange, match="the log ends at 0"):
        cli(catalogue, "delete-records", "orders", "--partition", "1", "--before", "2")
    with pytest.raises(UnknownTopic, match="partitions 0-1, not 2"):
        cli(catalogue, "delete-records", "orders", "--partition", "2", "--before", "1")


def test_refusals_name_what_is_wrong(catalogue):
    with pytest.raises(InvalidRequest, match="retention.ms must be an integer"):
        cli(catalogue, "create", "orders", "--config", "retention.ms=soon")
    with pytest.raises(UnknownTopic):
        cli(catalogue, "describe", "nope")


@pytest.mark.parametrize("argv", [["topics"], ["topics", "create"], ["topics", "alter", "orders"],
                                  ["topics", "create", "t", "--config", "novalue"],
                                  ["topics", "delete-records", "t", "--partition", "0"],
                                  ["topics", "delete-records", "t", "--partition", "0", "--before", "0"]])
def test_usage_errors_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        parse_args(argv)
    assert exit_.value.code == 2


def test_describe_partitions_shows_each_logs_start_end_cursor_and_size(catalogue):
    from tests._stored_reference import read_stored

    cli(catalogue, "create", "orders", "--partitions", "3")
    with LeaderlessLogWriter(OxiaConfig("fake:1", root_prefix="llog"), S3Config("llog"),
                             metadata_store=catalogue._meta, object_store=InMemoryObjectStore()) as w:
        w.append_shared([SharedAppendGroup("orders", 0, [b"a", b"b", b"c", b"d"])])
        w.append_shared([SharedAppendGroup("orders", 1, [b"e"])])
    cli(catalogue, "delete-records", "orders", "--partition", "0", "--before", "3")
    catalogue._meta.delete("llog/orders/partitions/2/meta/control", "orders:2")  # as if never initialized
    lines = cli(catalogue, "describe", "orders", "--partitions")
    assert lines[0].startswith("orders\tpartitions=3") and lines[1].split() == [
        "PARTITION", "LOG-START", "HIGH-WATERMARK", "COMPACTED-BELOW", "STORED-BYTES", "STATE"]
    size = read_stored(catalogue._meta, LAYOUT.partition("orders", 0)).total_bytes
    assert lines[2].split() == ["0", "3", "4", "1", str(size), "OPEN"] and size > 0
    assert lines[3].split()[:3] == ["1", "1", "1"]
    assert lines[4].split() == ["2", "-", "-", "-", "-", "not", "initialized"]
    doc = json.loads(cli(catalogue, "describe", "orders", "--partitions", "--json")[0])
    assert doc["partition_states"][0] == {"partition": 0, "state": "OPEN", "log_start_offset": 3, "high_watermark": 4,
                                          "compaction_cursor": 1, "stored_bytes": size}
    assert doc["partition_states"][2] == {"partition": 2, "state": None}
    assert "partition_states" not in json.loads(cli(catalogue, "describe", "orders", "--json")[0])
