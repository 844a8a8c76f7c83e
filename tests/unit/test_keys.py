"""Names, Oxia keys, S3 keys, and the key order the index ranges rely on."""

from __future__ import annotations

import functools
import random

import pytest

from server._errors import ConfigError, InvalidRequest
from server._protocol.keys import (
    OFFSET_DIGITS,
    LogLayout,
    PartitionKeys,
    TopicPartition,
    format_offset,
    oxia_sort_key,
    parse_s3_uri,
    validate_partition,
    validate_root_prefix,
    validate_topic,
)

# --- topics ---------------------------------------------------------------


@pytest.mark.parametrize(
    "topic",
    ["orders", "a", "A.b_c-9", "..a", "a..", "...", "-", "_", "x" * 249, "0"],
)
def test_valid_topics(topic: str) -> None:
    assert validate_topic(topic) == topic


@pytest.mark.parametrize(
    "topic",
    [
        pytest.param("", id="empty"),
        pytest.param(".", id="dot"),
        pytest.param("..", id="dotdot"),
        pytest.param("a/b", id="slash"),
        pytest.param("/", id="only-slash"),
        pytest.param("../etc", id="traversal"),
        pytest.param("x" * 250, id="250-chars"),
        pytest.param("ordérs", id="unicode-letter"),
        pytest.param("٣", id="unicode-digit"),
        pytest.param("a b", id="space"),
        pytest.param("a:b", id="colon"),
        pytest.param("a\n", id="trailing-newline"),
        pytest.param("a\x00", id="nul"),
        pytest.param("~", id="tilde"),
    ],
)
def test_invalid_topics(topic: str) -> None:
    with pytest.raises(InvalidRequest):
        validate_topic(topic)


@pytest.mark.parametrize("topic", [None, 1, b"orders", ["orders"]], ids=repr)
def test_non_string_topic(topic: object) -> None:
    with pytest.raises(InvalidRequest, match="string"):
        validate_topic(topic)


# --- partitions -----------------------------------------------------------


@pytest.mark.parametrize("partition", [0, 1, 2**31 - 1, 2**40])
def test_valid_partitions(partition: int) -> None:
    assert validate_partition(partition) == partition


@pytest.mark.parametrize(
    "partition", [True, False, 1.0, 0.5, -1, "0", None, [0]], ids=repr
)
def test_invalid_partitions(partition: object) -> None:
    with pytest.raises(InvalidRequest) as info:
        validate_partition(partition, topic="orders")
    assert info.value.topic == "orders"


# --- root prefix ----------------------------------------------------------


@pytest.mark.parametrize("root", ["llog", "a/b", "test-3f2a", "x.y_z", "Llog", "0"])
def test_valid_roots(root: str) -> None:
    assert validate_root_prefix(root) == root
    assert LogLayout(root).root == root


@pytest.mark.parametrize(
    "root",
    [
        pytest.param("", id="empty"),
        pytest.param("/llog", id="leading-slash"),
        pytest.param("llog/", id="trailing-slash"),
        pytest.param("a//b", id="empty-segment"),
        pytest.param(".", id="dot"),
        pytest.param("a/..", id="dotdot"),
        pytest.param("__oxia", id="oxia"),
        pytest.param("__oxia/llog", id="under-oxia"),
        pytest.param("__oxiax", id="oxia-prefixed"),
        pytest.param("a b", id="space"),
        pytest.param("lög", id="unicode"),
        pytest.param(None, id="none"),
        pytest.param(7, id="int"),
    ],
)
def test_invalid_roots(root: object) -> None:
    with pytest.raises(ConfigError):
        validate_root_prefix(root)
    with pytest.raises(ConfigError):
        LogLayout(root)  # type: ignore[arg-type]


def test_oxia_inside_a_later_segment_is_fine() -> None:
    assert validate_root_prefix("llog/__oxia") == "llog/__oxia"


# --- partition keys -------------------------------------------------------

KEYS = LogLayout().partition("orders", 0)


def test_partition_key_layout() -> None:
    assert KEYS.base == "llog/orders/partitions/0"
    assert KEYS.partition_key == "orders:0"
    assert KEYS.control == "llog/orders/partitions/0/meta/control"
    assert KEYS.compaction_cursor == "llog/orders/partitions/0/meta/compaction-cursor"
    assert KEYS.compaction == "llog/orders/partitions/0/meta/compaction"
    assert KEYS.compactor_claim == "llog/orders/partitions/0/meta/compactor-claim"
    assert KEYS.index_prefix == "llog/orders/partitions/0/index/"
    assert KEYS.index_end == "llog/orders/partitions/0/index/~"


def test_root_prefix_replaces_llog_everywhere() -> None:
    layout = LogLayout("test-1/run")
    keys = layout.partition("orders", 3)
    assert keys.control == "test-1/run/orders/partitions/3/meta/control"
    assert keys.index(7) == "test-1/run/orders/partitions/3/index/00000000000000000007"
    assert keys.partition_key == "orders:3"  # the routing key does not include the root
    assert layout.shared_wal_object("u") == "test-1/run/wal-shared/u"
    assert layout.shared_wal_prefix == "test-1/run/wal-shared/"
    assert layout.object_prefix == "test-1/run/"
    assert keys.compacted_object("u") == "test-1/run/orders/partitions/3/data/compacted/u"
    assert keys.legacy_wal_object("u") == "test-1/run/orders/partitions/3/data/wal/u"


def test_s3_layout_default_root() -> None:
    layout = LogLayout()
    assert layout.shared_wal_object("abc") == "llog/wal-shared/abc"
    assert KEYS.compacted_object("abc") == "llog/orders/partitions/0/data/compacted/abc"
    assert KEYS.legacy_wal_object("abc") == "llog/orders/partitions/0/data/wal/abc"


def test_layout_validates_names() -> None:
    with pytest.raises(InvalidRequest):
        LogLayout().partition("a/b", 0)
    with pytest.raises(InvalidRequest):
        LogLayout().partition("orders", -1)


def test_layout_validates_names_it_has_seen_in_another_type() -> None:
    layout = LogLayout()
    assert layout.partition("orders", 1).tp.partition == 1  # remembered now
    with pytest.raises(InvalidRequest):
        layout.partition("orders", True)  # equal to 1 and hashed alike, still not a partition
    assert layout.partition("orders", 1) is layout.keys(TopicPartition("orders", 1))
    assert LogLayout("other").partition("orders", 1).control.startswith("other/")


def test_keys_from_topic_partition() -> None:
    tp = TopicPartition("orders", 0)
    assert LogLayout().keys(tp) == KEYS
    assert PartitionKeys("llog", tp).control == KEYS.control


# --- index keys -----------------------------------------------------------


@pytest.mark.parametrize("offset", [0, 1, 9, 10, 12345, 2**63 - 1, 10**20 - 1])
def test_index_key_round_trip(offset: int) -> None:
    key = KEYS.index(offset)
    assert len(key) == len(KEYS.index_prefix) + OFFSET_DIGITS
    assert KEYS.index_offset(key) == offset


def test_format_offset_is_20_digits() -> None:
    assert format_offset(1) == "00000000000000000001"
    assert format_offset(2**63 - 1) == "09223372036854775807"
    assert len(format_offset(10**20 - 1)) == OFFSET_DIGITS


def test_index_keys_sort_numerically() -> None:
    offsets = [1, 2, 9, 10, 11, 99, 100, 1000, 2**40, 2**63 - 1]
    keys = [KEYS.index(o) for o in offsets]
    assert sorted(keys) == keys
    assert sorted(keys, key=oxia_sort_key) == keys


@pytest.mark.parametrize(
    "key",
    [
        pytest.param(LogLayout().partition("orders", 1).index(5), id="other-partition"),
        pytest.param(LogLayout().partition("orders", 10).index(5), id="partition-10"),
        pytest.param(LogLayout().partition("orders2", 0).index(5), id="other-topic"),
        pytest.param(LogLayout("other").partition("orders", 0).index(5), id="other-root"),
        pytest.param(KEYS.control, id="meta-control"),
        pytest.param(KEYS.compaction_cursor, id="meta-cursor"),
        pytest.param(KEYS.compaction, id="meta-compaction"),
        pytest.param(KEYS.compactor_claim, id="meta-claim"),
        pytest.param("__oxia/session/123", id="oxia-internal"),
        pytest.param("__oxia/llog/orders/partitions/0/index/00000000000000000005", id="oxia-lookalike"),
        pytest.param(KEYS.index_prefix, id="bare-prefix"),
        pytest.param(KEYS.index_end, id="range-end"),
        pytest.param(KEYS.index_prefix + "5", id="1-digit"),
        pytest.param(KEYS.index_prefix + "0" * 19, id="19-digits"),
        pytest.param(KEYS.index_prefix + "0" * 21, id="21-digits"),
        pytest.param(KEYS.index_prefix + "0" * 19 + "x", id="non-digit"),
        pytest.param(KEYS.index_prefix + "-" + "0" * 19, id="sign"),
        pytest.param(KEYS.index(5) + "/x", id="deeper"),
        pytest.param("", id="empty"),
    ],
)
def test_index_offset_rejects_foreign_keys(key: str) -> None:
    assert KEYS.index_offset(key) is None


@pytest.mark.parametrize("digits", ["٠" * 20, "0" * 19 + "²"], ids=["arabic-indic", "superscript"])
def test_index_offset_rejects_non_ascii_digits(digits: str) -> None:
    assert KEYS.index_offset(KEYS.index_prefix + digits) is None


# --- control keys (discovery) ---------------------------------------------


def test_parse_control_key() -> None:
    layout = LogLayout()
    assert layout.parse_control_key(KEYS.control) == TopicPartition("orders", 0)
    assert layout.parse_control_key("llog/a.b-c/partitions/12/meta/control") == TopicPartition("a.b-c", 12)
    nested = LogLayout("x/y")
    assert nested.parse_control_key("x/y/t/partitions/3/meta/control") == TopicPartition("t", 3)


@pytest.mark.parametrize(
    "key",
    [
        KEYS.compaction_cursor,
        KEYS.compaction,
        KEYS.index(1),
        "other/orders/partitions/0/meta/control",
        "llogx/orders/partitions/0/meta/control",
        "llog/orders/partition/0/meta/control",
        "llog/orders/partitions/x/meta/control",
        "llog/orders/partitions/-1/meta/control",
        "llog/a/b/partitions/0/meta/control",
        "llog/../partitions/0/meta/control",
        "llog/orders/partitions/0/meta/control/x",
        "llog/orders/partitions/0/x/meta/control",
        "llog/meta/control",
        "__oxia/meta/control",
        "",
    ],
)
def test_parse_control_key_rejects(key: str) -> None:
    assert LogLayout().parse_control_key(key) is None


def test_parse_control_key_rejects_non_ascii_digit() -> None:
    assert LogLayout().parse_control_key("llog/orders/partitions/²/meta/control") is None


# --- S3 URIs --------------------------------------------------------------


def test_parse_s3_uri() -> None:
    assert parse_s3_uri("s3://bucket/llog/wal-shared/x") == ("bucket", "llog/wal-shared/x")
    assert parse_s3_uri("s3://b/k") == ("b", "k")


@pytest.mark.parametrize(
    "uri",
    ["", "s3://", "s3://bucket", "s3://bucket/", "s3:///key", "http://b/k", "S3://b/k", "bucket/key", None, 5],
    ids=repr,
)
def test_parse_s3_uri_rejects(uri: object) -> None:
    with pytest.raises(InvalidRequest):
        parse_s3_uri(uri)  # type: ignore[arg-type]


# --- TopicPartition -------------------------------------------------------


def test_topic_partition() -> None:
    tp = TopicPartition("orders", 0)
    assert str(tp) == "orders:0"
    assert TopicPartition.parse("orders:0") == tp
    assert TopicPartition.parse("  orders:12 ") == TopicPartition("orders", 12)
    assert TopicPartition.parse("a.b-c_d:7") == TopicPartition("a.b-c_d", 7)
    assert sorted([TopicPartition("b", 0), TopicPartition("a", 2), TopicPartition("a", 1)]) == [
        TopicPartition("a", 1),
        TopicPartition("a", 2),
        TopicPartition("b", 0),
    ]
    with pytest.raises(Exception):
        tp.topic = "x"  # type: ignore[misc]


@pytest.mark.parametrize(
    "text", ["orders", "orders:", ":0", "orders:-1", "orders:x", "a/b:0", "orders:1.5", "", "orders:0:1"]
)
def test_topic_partition_parse_rejects(text: str) -> None:
    with pytest.raises(InvalidRequest):
        TopicPartition.parse(text)


def test_topic_partition_validates() -> None:
    with pytest.raises(InvalidRequest):
        TopicPartition("", 0)
    with pytest.raises(InvalidRequest):
        TopicPartition("orders", True)


def test_topic_partition_parse_rejects_non_ascii_digit() -> None:
    with pytest.raises(InvalidRequest):
        TopicPartition.parse("orders:٣")


# --- Oxia key order (SPEC 3.3) --------------------------------------------


# Keys in Oxia's order, checked by hand against the rule: shallower keys first
# at each level, then segment by segment in byte order.
GOLDEN_ORDER = [
    "",
    "a",
    "a~",
    "b",
    "~",
    "\u00e9",  # U+00E9 is C3 A9 in UTF-8: after every ASCII byte
    "\uff61",
    "\U0001f600",  # after U+FF61 in UTF-8 (and by code point), before it in UTF-16
    "/",
    "/a",
    "a/",
    "a/b",
    "a/z",
    "a/~",
    "a//",
    "a/b/",
    "a/b/c",
    "a/b/c/d",
    "a/z/a",
    "b/",
    "llog/orders/partitions/0/index/00000000000000000001",
    "llog/orders/partitions/0/index/00000000000000000010",
    "llog/orders/partitions/0/index/~",
    "llog/orders/partitions/0/index/00000000000000000001/deeper",
    "llog/orders/partitions/0/meta/compaction",
    "llog/orders/partitions/0/meta/compaction-cursor",
    "llog/orders/partitions/0/meta/compactor-claim",
    "llog/orders/partitions/0/meta/control",
    "llog/orders/partitions/1/index/00000000000000000001",
    "llog/orders/partitions/10/index/00000000000000000001",
    "llog/orders/partitions/2/index/00000000000000000001",
    "llog/orders-x/partitions/0/index/00000000000000000001",
]


def oxia_compare(a: str, b: str) -> int:
    """Oxia's ``CompareWithSlash`` (its Pebble comparator), ported line by line
    from Go on UTF-8 bytes: the oracle :func:`oxia_sort_key` must agree with."""
    x, y = a.encode(), b.encode()
    while x and y:
        i, j = x.find(b"/"), y.find(b"/")
        if i < 0 and j < 0:
            return (x > y) - (x < y)
        if i < 0:
            return -1
        if j < 0:
            return 1
        sx, sy = x[:i], y[:j]
        if sx != sy:
            return (sx > sy) - (sx < sy)
        x, y = x[i + 1:], y[j + 1:]
    return (len(x) > len(y)) - (len(x) < len(y))


def test_sort_key_golden_order() -> None:
    shuffled = GOLDEN_ORDER[:]
    random.Random(1).shuffle(shuffled)
    assert sorted(shuffled, key=oxia_sort_key) == GOLDEN_ORDER
    assert sorted(shuffled, key=functools.cmp_to_key(oxia_compare)) == GOLDEN_ORDER
    assert sorted(GOLDEN_ORDER) != GOLDEN_ORDER  # not byte order


def test_sort_key_agrees_with_oxias_comparator() -> None:
    rng = random.Random(5)
    alphabet = ["", "a", "b", "ab", "~", "0", "9", "index", "meta", "A", "_", "-", ".", "\u00e9", "\U0001f600"]
    keys = ["/".join(rng.choice(alphabet) for _ in range(rng.randint(1, 5))) for _ in range(300)]
    for a in keys:
        for b in keys[:60]:
            got = (oxia_sort_key(a) > oxia_sort_key(b)) - (oxia_sort_key(a) < oxia_sort_key(b))
            assert got == oxia_compare(a, b), (a, b)


def in_range(key: str, lo: str, hi: str) -> bool:
    return oxia_sort_key(lo) <= oxia_sort_key(key) < oxia_sort_key(hi)


def ceiling(keys: list[str], query: str) -> str | None:
    found = [k for k in keys if oxia_sort_key(k) >= oxia_sort_key(query)]
    return min(found, key=oxia_sort_key) if found else None


def _keyspace(root: str = "llog") -> list[str]:
    keys = ["__oxia/session/0001", "__oxia/term", "flat-key", "zzz"]
    for topic in ["orders", "orders-x", "ord", "index", "zz"]:
        for partition in [0, 1, 10]:
            k = LogLayout(root).partition(topic, partition)
            keys += [k.control, k.compaction_cursor, k.compaction, k.compactor_claim]
            keys += [k.index(o) for o in (1, 2, 5, 10, 99, 100, 10**19)]
    keys += [f"{root}/wal-like", f"{root}/orders/partitions/0/index/00000000000000000002/deeper"]
    keys += [f"{root}/orders/partitions/0/index", f"{root}/orders/partitions/0/indexx/1"]
    return keys


def test_shallow_keys_first() -> None:
    assert oxia_sort_key("a/z") < oxia_sort_key("a/b/c")
    assert oxia_sort_key("a/b") < oxia_sort_key("a/b/")
    assert oxia_sort_key("a/b") == oxia_sort_key("a/b")


def test_index_range_covers_exactly_one_partitions_index() -> None:
    keyspace = _keyspace()
    inside = {k for k in keyspace if in_range(k, KEYS.index_prefix, KEYS.index_end)}
    expected = {k for k in keyspace if KEYS.index_offset(k) is not None}
    assert inside == expected
    assert len(expected) == 7


def test_index_suffix_range() -> None:
    keyspace = _keyspace()
    lo = KEYS.index(10)
    inside = sorted((k for k in keyspace if in_range(k, lo, KEYS.index_end)), key=oxia_sort_key)
    assert [KEYS.index_offset(k) for k in inside] == [10, 99, 100, 10**19]


def test_delete_range_of_compaction_spares_the_end_key() -> None:
    keyspace = _keyspace()
    inside = {k for k in keyspace if in_range(k, KEYS.index(1), KEYS.index(10))}
    assert {KEYS.index_offset(k) for k in inside} == {1, 2, 5}


def test_ceiling_can_leave_the_partition() -> None:
    keyspace = _keyspace()
    # Past the last index key, CEILING lands on whatever sorts next in the
    # shard: here a (stray) deeper key, otherwise the partition's meta keys.
    past = ceiling(keyspace, KEYS.index(10**19 + 1))
    assert past == KEYS.index(2) + "/deeper"
    assert KEYS.index_offset(past) is None
    realistic = [k for k in keyspace if not k.endswith("/deeper") and "/indexx/" not in k]
    past = ceiling(realistic, KEYS.index(10**19 + 1))
    assert past == KEYS.compaction
    assert KEYS.index_offset(past) is None
    # ... or on another log's index key (partition 2 has no keys here).
    nothing_here = LogLayout().partition("orders", 2)
    found = ceiling(realistic, nothing_here.index(1))
    assert found == LogLayout().partition("orders-x", 0).index(1)
    assert nothing_here.index_offset(found) is None
    # Inside the index it finds the batch end at or after the offset.
    assert ceiling(keyspace, KEYS.index(3)) == KEYS.index(5)


def test_ceiling_can_return_oxia_internal_keys_for_some_roots() -> None:
    # '_' sorts after digits and capitals: under root "Llog", __oxia/ keys
    # follow every llog key, so a CEILING past the end returns one.
    keyspace = _keyspace("Llog")
    keys = LogLayout("Llog").partition("zzz", 0)  # sorts after every Llog key
    last = ceiling(keyspace, keys.index(1))
    assert last == "__oxia/term"  # shallower __oxia keys sort first
    assert keys.index_offset(last) is None
    # Under "llog" ('l' sorts after '_') the same query runs off the end.
    assert ceiling(_keyspace("llog"), LogLayout().partition("zzz", 0).index(1)) is None


@pytest.mark.parametrize("root", ["llog", "Llog", "0root", "a/b"])
def test_ranges_never_cover_oxia_internal_keys(root: str) -> None:
    keyspace = _keyspace(root)
    keys = LogLayout(root).partition("orders", 0)
    ranges = [
        (keys.index_prefix, keys.index_end),
        (keys.index(1), keys.index(10)),
        (f"{root}/", f"{root}/~/"),
    ]
    for lo, hi in ranges:
        assert not [k for k in keyspace if k.startswith("__oxia/") and in_range(k, lo, hi)]


def test_discovery_range_finds_every_control_key() -> None:
    keyspace = _keyspace()
    layout = LogLayout()
    found = {layout.parse_control_key(k) for k in keyspace if in_range(k, "llog/", "llog/~/")}
    found.discard(None)
    assert len(found) == 15
    # The naive bound "llog/~" misses every deeper key under Oxia's order.
    naive = [k for k in keyspace if in_range(k, "llog/", "llog/~") and k.endswith("/meta/control")]
    assert naive == []
