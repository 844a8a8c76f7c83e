"""``llog-admin topics``: each command over the in-memory store, and its usage errors."""

from __future__ import annotations

import json

import pytest

from server._admin.cli import parse_args, run
from server._catalogue.catalogue import TopicCatalogue
from server._errors import InvalidRequest, UnknownTopic
from server._log.initialize import initialize_log
from server._protocol.keys import LogLayout
from server._storage.metastore import InMemoryMetadataStore

LAYOUT = LogLayout("llog")


@pytest.fixture
def catalogue():
    meta = InMemoryMetadataStore()
    return TopicCatalogue(meta, LAYOUT, initialize=lambda tp: initialize_log(meta, LAYOUT.keys(tp)))


def cli(catalogue, *argv):
    return run(parse_args(["topics", *argv]), catalogue)


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


def test_refusals_name_what_is_wrong(catalogue):
    with pytest.raises(InvalidRequest, match="retention.ms must be an integer"):
        cli(catalogue, "create", "orders", "--config", "retention.ms=soon")
    with pytest.raises(UnknownTopic):
        cli(catalogue, "describe", "nope")


@pytest.mark.parametrize("argv", [["topics"], ["topics", "create"], ["topics", "alter", "orders"],
                                  ["topics", "create", "t", "--config", "novalue"]])
def test_usage_errors_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        parse_args(argv)
    assert exit_.value.code == 2
