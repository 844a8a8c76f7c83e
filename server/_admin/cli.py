"""``llog-admin topics|groups|users ...``: manage topics, look at consumer groups, manage Kafka users.

    llog-admin topics create orders --partitions 12 --config retention.ms=604800000
    llog-admin topics list
    llog-admin topics describe orders --json
    llog-admin topics describe orders --partitions
                                            (each partition's log start, high
                                            watermark, compaction cursor and
                                            stored bytes, in llog's offsets)
    llog-admin topics alter orders --config retention.bytes=1073741824 --partitions 16
    llog-admin topics delete orders
    llog-admin topics delete-records orders --partition 0 --before 1000
                                            (Kafka's DeleteRecords: offsets below
                                            1000 are no longer readable; llog's
                                            offsets, which start at 1)
    llog-admin groups list
    llog-admin groups describe billing     (offsets, high watermarks and lag, like
                                            kafka-consumer-groups --describe)
    llog-admin users set alice              (the password from the terminal, or the
                                            first line of stdin: SCRAM-SHA-256 and
                                            -512 credentials for the Kafka listener)
    llog-admin users list
    llog-admin users delete alice --mechanism SCRAM-SHA-256

It talks to Oxia directly (``LLOG_OXIA_*``, ``LLOG_ROOT_PREFIX``), as a broker
does; new topics take ``LLOG_TOPIC_DEFAULT_*``. Exit status 0 on success, 1
when the request was refused (the message says why), 2 on a usage error.
"""

from __future__ import annotations

import argparse
import getpass
import json
import sys
import textwrap
from typing import Callable, Sequence

from .._catalogue.catalogue import TopicCatalogue
from .._catalogue.record import TopicRecord
from .._catalogue.topic_config import KNOWN_KEYS, TopicDefaults
from .._config import OxiaConfig
from .._errors import ConfigError, InvalidRequest, LlogError, UnknownTopic
from .._groups.offsets import GroupOffsets, describe
from .._log.initialize import initialize_log
from .._log.log_start import delete_records
from .._log.retire import revive_log
from .._log.stored import StoredSizes
from .._protocol.keys import LogLayout, TopicPartition
from .._runtime import REAL_RUNTIME
from .._settings import environment_help
from .._storage.metastore import MetadataStore, OxiaMetadataStore

__all__ = ["main", "parse_args", "ENVIRONMENT"]

ENVIRONMENT = (OxiaConfig, TopicDefaults)
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")


def _config_pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value.strip()


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="llog-admin", description=__doc__.split("\n\n")[0].replace("``", ""),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=textwrap.dedent(__doc__.split("\n\n", 1)[1]) + "\n" + environment_help(ENVIRONMENT),
    )
    area = p.add_subparsers(dest="area", required=True, metavar="AREA")
    topics = area.add_parser("topics", help="the topic catalogue")
    cmd = topics.add_subparsers(dest="command", required=True, metavar="COMMAND")
    config_help = f"a topic config KEY=VALUE (repeat it); keys: {', '.join(KNOWN_KEYS)}"

    c = cmd.add_parser("create", help="create a topic and initialize its partitions")
    c.add_argument("name")
    c.add_argument("--partitions", type=int, help="partition count (default LLOG_TOPIC_DEFAULT_PARTITIONS)")
    c.add_argument("--config", type=_config_pair, action="append", default=[], metavar="KEY=VALUE", help=config_help)
    ls = cmd.add_parser("list", help="every topic, one line each")
    ls.add_argument("--json", action="store_true", help="print JSON")
    d = cmd.add_parser("describe", help="one topic, with its config")
    d.add_argument("name")
    d.add_argument("--json", action="store_true", help="print JSON")
    d.add_argument("--partitions", action="store_true",
                   help="and each partition: its log start, high watermark, compaction cursor (the first offset "
                        "not yet compacted) and stored bytes, in llog's offsets (from 1; Kafka's are one less)")
    a = cmd.add_parser("alter", help="change config keys and/or grow the partition count")
    a.add_argument("name")
    a.add_argument("--config", type=_config_pair, action="append", default=[], metavar="KEY=VALUE", help=config_help)
    a.add_argument("--partitions", type=int, help="the new, larger partition count")
    x = cmd.add_parser("delete", help="delete a topic: unknown to produce and consume at once, removed later")
    x.add_argument("name")
    r = cmd.add_parser("delete-records", help="move a partition's log start: the records below an offset go")
    r.add_argument("name", help="the topic")
    r.add_argument("--partition", type=int, required=True, help="the partition whose start moves")
    r.add_argument("--before", required=True, metavar="OFFSET",
                   help="the new first offset (llog's, from 1), or 'end' for every record there is now")
    groups = area.add_parser("groups", help="consumer groups' committed offsets and lag")
    gcmd = groups.add_subparsers(dest="command", required=True, metavar="COMMAND")
    gl = gcmd.add_parser("list", help="every group with committed offsets, one per line")
    gl.add_argument("--json", action="store_true", help="print JSON")
    gd = gcmd.add_parser("describe", help="a group's offset, the log's high watermark and the lag, per partition")
    gd.add_argument("group")
    gd.add_argument("--json", action="store_true", help="print JSON")
    users = area.add_parser("users", help="the Kafka listener's SCRAM users (kept in Oxia)")
    ucmd = users.add_subparsers(dest="command", required=True, metavar="COMMAND")
    ul = ucmd.add_parser("list", help="every user with its mechanisms and iterations")
    ul.add_argument("--json", action="store_true", help="print JSON")
    us = ucmd.add_parser("set", help="add a user or change its password (read from the terminal, or stdin)")
    us.add_argument("name")
    us.add_argument("--mechanism", action="append", choices=SCRAM_MECHANISMS, default=None,
                    help="repeatable; default: both")
    us.add_argument("--iterations", type=int, default=4096, help="PBKDF2 iterations, 4096-16384 (default 4096)")
    ud = ucmd.add_parser("delete", help="remove a user's credentials (all, or one --mechanism)")
    ud.add_argument("name")
    ud.add_argument("--mechanism", choices=SCRAM_MECHANISMS, default=None)
    return p


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    args = _parser().parse_args(argv)
    if args.area == "topics" and args.command == "delete-records" and args.before != "end" and \
            not (args.before.isdigit() and int(args.before) >= 1):
        _parser().error(f"--before takes an offset >= 1 or 'end', not {args.before!r}")
    if args.area == "topics" and args.command == "alter" and not args.config and args.partitions is None:
        _parser().error("alter needs --config KEY=VALUE and/or --partitions N")
    return args


def _line(t: TopicRecord) -> str:
    config = " ".join(f"{k}={v}" for k, v in t.config.to_kafka().items())
    return f"{t.name}\tpartitions={t.partitions}\tstate={t.state.value}\ttopic_id={t.topic_id}\t{config}"


def run(args: argparse.Namespace, catalogue: TopicCatalogue, meta: MetadataStore | None = None) -> list[str]:
    """The lines to print for one command (raises the catalogue's errors); ``meta``: the store
    ``delete-records`` writes (the catalogue's)."""
    if args.command == "create":
        return [_line(catalogue.create(args.name, args.partitions, dict(args.config) or None))]
    if args.command == "list":
        topics = catalogue.list()
        return [json.dumps([t.to_json() for t in topics], indent=2)] if args.json else [_line(t) for t in topics]
    if args.command == "describe":
        t = catalogue.describe(args.name)
        states = _partition_states(t, catalogue, meta) if args.partitions else None
        if args.json:
            doc = t.to_json()
            if states is not None:
                doc["partition_states"] = states
            return [json.dumps(doc, indent=2)]
        if states is None:
            return [_line(t)]
        head = f"{'PARTITION':>9} {'LOG-START':>12} {'HIGH-WATERMARK':>14} {'COMPACTED-BELOW':>15} {'STORED-BYTES':>14}  STATE"
        return [_line(t), head] + [
            f"{s['partition']:>9} {'-':>12} {'-':>14} {'-':>15} {'-':>14}  not initialized" if s["state"] is None else
            f"{s['partition']:>9} {s['log_start_offset']:>12} {s['high_watermark']:>14} {s['compaction_cursor']:>15} "
            f"{s['stored_bytes']:>14}  {s['state']}" for s in states]
    if args.command == "alter":
        t = catalogue.alter_config(args.name, dict(args.config)) if args.config else catalogue.describe(args.name)
        if args.partitions is not None:
            t = catalogue.add_partitions(args.name, args.partitions)
        return [_line(t)]
    if args.command == "delete-records":
        return [_delete_records(args, catalogue, meta)]
    t = catalogue.delete(args.name)
    return [f"{t.name} is being deleted (topic_id {t.topic_id}); produce and consume now answer it as unknown"]


def _partition_states(t: TopicRecord, catalogue: TopicCatalogue, meta: MetadataStore | None) -> list[dict]:
    """Each partition's control record, cursor and stored bytes (``StoredSizes``: 16 to an Oxia read)."""
    assert meta is not None
    heads = StoredSizes(meta).heads([catalogue.layout.keys(TopicPartition(t.name, p)) for p in range(t.partitions)])
    return [{"partition": p, "state": None} if h is None else {
        "partition": p, "state": h.control.log_state.value, "log_start_offset": h.control.log_start_offset,
        "high_watermark": h.control.high_watermark, "compaction_cursor": h.cursor, "stored_bytes": h.total_bytes,
    } for p, h in enumerate(heads)]


def _delete_records(args: argparse.Namespace, catalogue: TopicCatalogue, meta: MetadataStore | None) -> str:
    assert meta is not None
    topic = catalogue.describe(args.name)
    if not 0 <= args.partition < topic.partitions:
        raise UnknownTopic(f"topic {args.name!r} has partitions 0-{topic.partitions - 1}, not {args.partition}")
    before = None if args.before == "end" else int(args.before)
    r = delete_records(meta, catalogue.layout.keys(TopicPartition(args.name, args.partition)), before)
    where = f"{args.name}:{args.partition}"
    if not r.moved:
        return f"{where} starts at {r.log_start_offset} already; nothing changed"
    return (f"{where} starts at {r.log_start_offset} (was {r.previous_log_start}; high watermark {r.high_watermark}): "
            "the records below it are no longer readable")


def run_groups(args: argparse.Namespace, offsets: GroupOffsets) -> list[str]:
    """The lines to print for ``groups list`` and ``groups describe``."""
    if args.command == "list":
        names = offsets.groups()
        return [json.dumps(names)] if args.json else names
    rows = describe(offsets, args.group)
    if args.json:
        return [json.dumps([{"topic": r.tp.topic, "partition": r.tp.partition, "offset": r.committed.offset,
                             "log_start_offset": r.log_start_offset, "high_watermark": r.high_watermark,
                             "lag": r.lag, "metadata": r.committed.metadata} for r in rows], indent=2)]
    head = f"{'GROUP':<20} {'TOPIC':<24} {'PARTITION':>9} {'OFFSET':>12} {'HIGH-WATERMARK':>14} {'LAG':>10}  METADATA"
    return [head] + [f"{args.group:<20} {r.tp.topic:<24} {r.tp.partition:>9} {r.committed.offset:>12} "
                     f"{r.high_watermark:>14} {r.lag:>10}  {r.committed.metadata}" for r in rows]


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        oxia = OxiaConfig.from_env()
        defaults = TopicDefaults.from_env()
    except ConfigError as exc:
        print(f"llog-admin: {exc}", file=sys.stderr)
        return 2
    layout = LogLayout(oxia.root_prefix)
    try:
        meta = OxiaMetadataStore(oxia)
        try:
            if args.area == "groups":
                lines = run_groups(args, GroupOffsets(meta, layout))
            elif args.area == "users":
                lines = run_users(args, meta, layout, _password if args.command == "set" else None)
            else:
                lines = run(args, TopicCatalogue(meta, layout, defaults=defaults,
                                                 initialize=lambda tp: initialize_log(meta, layout.keys(tp)),
                                                 revive=lambda tp: revive_log(meta, layout.keys(tp))), meta)
            for line in lines:
                print(line)
        finally:
            meta.close()
    except LlogError as exc:
        print(f"llog-admin: {exc}", file=sys.stderr)
        return 1
    return 0


def run_users(args: argparse.Namespace, meta: MetadataStore, layout: LogLayout,
              password: Callable[[], str] | None = None) -> list[str]:
    """The lines to print for one ``users`` command; ``password`` asks for it (``set``)."""
    from .._kafka.scram import ScramCredential  # Kafka's codec loads only for this area
    from .._kafka.scram_users import ScramUsers

    store = ScramUsers(meta, layout)
    if args.command == "list":
        users = store.describe()
        if args.json:
            return [json.dumps(users, indent=2, sort_keys=True)]
        return [f"{name}\t" + " ".join(f"{m}(iterations={i})" for m, i in sorted(mechs.items()))
                for name, mechs in sorted(users.items())]
    if args.command == "delete":
        store.delete(args.name, args.mechanism)
        return [f"{args.name}: {args.mechanism or 'every'} credential deleted"]
    assert password is not None
    secret = password()
    if not secret:
        raise InvalidRequest("an empty password is not a password")
    mechanisms = args.mechanism or list(SCRAM_MECHANISMS)
    for m in mechanisms:
        store.upsert(args.name, m, ScramCredential.derive(m, secret, REAL_RUNTIME.ids.uuid4().bytes, args.iterations))
    return [f"{args.name}: {', '.join(mechanisms)} set ({args.iterations} iterations)"]


def _password() -> str:
    if not sys.stdin.isatty():
        return sys.stdin.readline().rstrip("\n")
    first = getpass.getpass("password: ")
    if getpass.getpass("again: ") != first:
        raise InvalidRequest("the two passwords differ")
    return first


if __name__ == "__main__":
    sys.exit(main())
