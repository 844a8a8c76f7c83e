"""Vacuum: delete S3 objects that no log references any more (SPEC 7.9).

Compaction leaves the shared WAL objects it read from, and crashed appends or
compactions leave objects nobody ever referenced. One pass:

1. list every object under ``{root}/`` with its ``LastModified``; anything
   younger than the grace period ``G`` is kept (an append or a compaction may
   still be about to reference it: SPEC 7.0 forbids a first reference to an
   object older than ``D``, and ``G >= 2D``);
2. classify the rest by key:

   - ``{root}/wal-shared/{uuid}``: read the LLS1 header (a ranged GET of the
     first 8 bytes, then of ``[8, 8 + H)``) for the logs it names; it may go
     only if *none* of them references it;
   - ``{root}/{topic}/partitions/{p}/data/compacted/{uuid}`` and the legacy
     ``.../data/wal/{uuid}``: it may go if log ``p`` does not reference it;
   - anything else under the root (another tool's object, a nested root) is
     kept;

3. delete what qualified.

A log references an object ``U`` when an index entry (any type), its
``meta/control.pending`` or its ``meta/compaction`` has ``data_key == U``.
The references of a log are read after the listing, in this order: cursor,
``meta/compaction``, ``meta/control``, then the index. The order matters: a
compaction moves its reference from ``meta/compaction`` into the index
before it deletes the record, and a pending append is materialized into the
index before it is cleared, so a reference can move *forward* in that order
while we read, never backward past us.

Before counting, vacuum deletes **redundant WAL entries** (SPEC 7.9 SHOULD,
8.2 O3): WAL index entries whose end offset is below the compaction cursor,
each conditional on its version. They are covered by COMPACTED entries and
would otherwise keep their shared object alive forever.

It also deletes the index entries **below a log's start** (SPEC 7.10) once
retention moved the start more than the grace period ago (the control
record's ``log_start_at_ms``): a reader that read the old start that long
ago has long finished with them. Their objects then have no reference
left and go like any other.

A dry run reads exactly what a real run reads and reports exactly what it
would delete (objects and redundant entries), but changes nothing.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import asdict, dataclass, field
from typing import Callable, Iterable, Mapping

from .._config import OxiaConfig, S3Config
from .._errors import (
    CorruptBatch,
    InvalidRequest,
    LlogError,
    ObjectNotFound,
    VersionConflict,
)
from .._protocol.codec import decode_shared_header
from .._protocol.constants import check_grace
from .._protocol.keys import LogLayout, PartitionKeys, TopicPartition
from .._protocol.records import (
    CompactionCursor,
    CompactionRecord,
    ControlRecord,
    EntryType,
    IndexEntry,
)
from .._storage.metastore import MetadataStore
from .._storage.objectstore import ObjectInfo, ObjectStore
from .._storage.stores import Closeable, Stores, use_stores
from .._metrics import LlogMetrics
from .._runtime import REAL_RUNTIME, Runtime
from .config import VacuumConfig

__all__ = [
    "Vacuum",
    "VacuumReport",
    "VacuumDeletion",
    "KEEP_YOUNG",
    "KEEP_INDEXED",
    "KEEP_PENDING",
    "KEEP_COMPACTING",
    "KEEP_UNREADABLE",
    "KEEP_CHECK_FAILED",
    "KEEP_FOREIGN",
    "KEEP_VANISHED",
    "KIND_SHARED",
    "KIND_COMPACTED",
    "KIND_LEGACY_WAL",
]

log = logging.getLogger(__name__)

KEEP_YOUNG = "young"
"""Younger than the grace period."""
KEEP_INDEXED = "indexed"
"""An index entry of a log it names points into it."""
KEEP_PENDING = "pending"
"""A log's ``meta/control.pending`` points into it."""
KEEP_COMPACTING = "compacting"
"""A log's ``meta/compaction`` names it (a compaction in flight or awaiting resume)."""
KEEP_UNREADABLE = "unreadable_header"
"""A shared WAL object whose LLS1 header could not be read."""
KEEP_CHECK_FAILED = "check_failed"
"""Reading a log's references failed; kept until a pass can tell."""
KEEP_FOREIGN = "foreign"
"""A key that is not one of this root's object layouts."""
KEEP_VANISHED = "vanished"
"""Deleted by someone else while this pass looked at it."""

KIND_SHARED = "wal-shared"
KIND_COMPACTED = "compacted"
KIND_LEGACY_WAL = "legacy-wal"

_DELETE_CHUNK = 1000
_HEADER_CACHE_MAX = 200_000


@dataclass(frozen=True)
class VacuumDeletion:
    """One object the pass deleted (or, on a dry run, would delete)."""

    key: str
    """Object key in the bucket."""
    size: int
    """Bytes reclaimed by deleting it."""
    kind: str
    """``wal-shared``, ``compacted`` or ``legacy-wal``."""
    age_ms: int
    """Age of the object (from its LastModified) when the pass listed it."""


@dataclass(frozen=True)
class VacuumReport:
    """What one vacuum pass saw and did."""

    dry_run: bool
    grace_ms: int
    bucket: str
    root: str
    scanned: int
    """Objects listed under ``{root}/``."""
    scanned_bytes: int
    kept: Mapping[str, int]
    """Objects kept, by reason (the ``KEEP_*`` constants)."""
    deleted: tuple[VacuumDeletion, ...]
    """Objects deleted; on a dry run, the ones a real run would delete."""
    bytes_reclaimed: int
    """Sum of the sizes of ``deleted``."""
    redundant_entries: tuple[str, ...]
    """Redundant WAL index keys deleted (or, on a dry run, that would be)."""
    logs_checked: int
    """Logs whose references were read."""
    errors: tuple[str, ...] = ()
    duration_s: float = 0.0
    expired_entries: tuple[str, ...] = ()
    """Index entries deleted because they lie below their log's start (SPEC 7.10)."""

    @property
    def kept_total(self) -> int:
        return sum(self.kept.values())

    @property
    def deleted_keys(self) -> tuple[str, ...]:
        return tuple(d.key for d in self.deleted)

    def to_json(self) -> dict[str, object]:
        doc = asdict(self)
        doc["kept"] = dict(self.kept)
        doc["deleted"] = [asdict(d) for d in self.deleted]
        return doc


@dataclass
class _LogRefs:
    """The ``data_key`` URIs one log references, read once per pass."""

    indexed: set[str] = field(default_factory=set)
    pending: str | None = None
    compacting: str | None = None
    error: str | None = None

    def reason(self, uri: str) -> str | None:
        """Why ``uri`` must be kept for this log, or None if it need not be."""
        if self.error is not None:
            return KEEP_CHECK_FAILED
        if uri in self.indexed:
            return KEEP_INDEXED
        if uri == self.pending:
            return KEEP_PENDING
        if uri == self.compacting:
            return KEEP_COMPACTING
        return None


class _Pass:
    """State of one ``run_once``: per-log references, results so far."""

    def __init__(self, dry_run: bool) -> None:
        self.dry_run = dry_run
        self.refs: dict[TopicPartition, _LogRefs] = {}
        self.kept: dict[str, int] = {}
        self.candidates: list[VacuumDeletion] = []
        self.redundant: list[str] = []
        self.expired: list[str] = []
        self.errors: list[str] = []

    def keep(self, reason: str) -> None:
        self.kept[reason] = self.kept.get(reason, 0) + 1


class Vacuum(Closeable):
    """Deletes unreferenced objects of one root (SPEC 7.9). A context manager.

    ``run_once`` is safe to run from several processes at once (every delete
    is idempotent or conditional), but one instance runs one pass at a time.
    """

    def __init__(
        self,
        oxia_config: OxiaConfig,
        s3_config: S3Config,
        *,
        grace_ms: int = VacuumConfig.grace_ms,
        allow_unsafe_grace: bool = False,
        delete_redundant_entries: bool = True,
        metrics: LlogMetrics | None = None,
        metadata_store: MetadataStore | None = None,
        object_store: ObjectStore | None = None,
        stores: Stores | None = None,
        now_ms: Callable[[], int] | None = None,
        runtime: Runtime = REAL_RUNTIME,
    ) -> None:
        """``now_ms``: the wall clock object ages are taken against
        (``runtime.clock.now_ms`` when None); ``runtime`` also times the pass."""
        check_grace(grace_ms, allow_unsafe=allow_unsafe_grace, name="vacuum grace_ms")
        self.bucket = s3_config.require_bucket()
        self.layout = LogLayout(oxia_config.root_prefix)
        self.grace_ms = grace_ms
        self.delete_redundant_entries = delete_redundant_entries
        self.metrics = metrics or LlogMetrics()
        self.runtime = runtime
        self._now_ms = now_ms or runtime.clock.now_ms
        self._stores = use_stores(self, stores, oxia_config, s3_config, self.metrics, metadata_store, object_store)
        self._meta, self._objects = self._stores.meta, self._stores.objects
        # Objects are immutable, so a shared object's header never changes:
        # remember which logs each one names instead of re-reading it every pass.
        self._headers: dict[str, tuple[TopicPartition, ...]] = {}
        self._run_lock = threading.Lock()

    @classmethod
    def from_env(
        cls, env: Mapping[str, str] | None = None, *, metrics: LlogMetrics | None = None, **kwargs
    ) -> Vacuum:
        """Build from ``LLOG_OXIA_*``, ``LLOG_S3_*`` and ``LLOG_VACUUM_*``."""
        config = VacuumConfig.from_env(env)
        kwargs.setdefault("grace_ms", config.grace_ms)
        kwargs.setdefault("allow_unsafe_grace", config.allow_unsafe_grace)
        kwargs.setdefault("delete_redundant_entries", config.delete_redundant_entries)
        return cls(OxiaConfig.from_env(env), S3Config.from_env(env), metrics=metrics, **kwargs)

    # -- the pass --------------------------------------------------------------
    def run_once(self, dry_run: bool = False) -> VacuumReport:
        """One pass over every object under the root; see the module docstring.

        Raises only if the listing itself fails; per-object and per-log
        failures keep the objects concerned and are listed in ``errors``.
        """
        with self._run_lock:
            started = self.runtime.clock.monotonic()
            try:
                report = self._run(dry_run, started)
            except Exception:
                self.metrics.inc("vacuum_runs_total", outcome="error", dry_run=dry_run)
                raise
            self._record(report)
            return report

    def _run(self, dry_run: bool, started: float) -> VacuumReport:
        state = _Pass(dry_run)
        listed = list(self._objects.list(self.bucket, self.layout.object_prefix))
        now = self._now_ms()
        for info in listed:
            age_ms = now - info.last_modified_ms
            if age_ms < self.grace_ms:
                state.keep(KEEP_YOUNG)
                continue
            self._judge(state, info, age_ms)
        self._forget_headers(info.key for info in listed)
        deleted = state.candidates if dry_run else self._delete(state)
        return VacuumReport(
            dry_run=dry_run,
            grace_ms=self.grace_ms,
            bucket=self.bucket,
            root=self.layout.root,
            scanned=len(listed),
            scanned_bytes=sum(i.size for i in listed),
            kept=dict(sorted(state.kept.items())),
            deleted=tuple(deleted),
            bytes_reclaimed=sum(d.size for d in deleted),
            redundant_entries=tuple(state.redundant),
            expired_entries=tuple(state.expired),
            logs_checked=len(state.refs),
            errors=tuple(state.errors),
            duration_s=round(self.runtime.clock.monotonic() - started, 3),
        )

    def _judge(self, state: _Pass, info: ObjectInfo, age_ms: int) -> None:
        """Keep ``info`` (counting why) or add it to the pass's candidates."""
        kind, owner = self._classify(info.key)
        if kind is None:
            state.keep(KEEP_FOREIGN)
            return
        if kind == KIND_SHARED:
            try:
                logs = self._shared_logs(info.key)
            except ObjectNotFound:
                state.keep(KEEP_VANISHED)
                return
            except LlogError as exc:
                state.keep(KEEP_UNREADABLE)
                state.errors.append(f"s3://{self.bucket}/{info.key}: unreadable LLS1 header: {exc}")
                return
        else:
            logs = (owner,)
        uri = f"s3://{self.bucket}/{info.key}"
        for tp in logs:
            reason = self._refs(state, tp).reason(uri)
            if reason is not None:
                state.keep(reason)
                return
        state.candidates.append(VacuumDeletion(info.key, info.size, kind, age_ms))

    def _classify(self, key: str) -> tuple[str | None, TopicPartition | None]:
        """The object's kind and, for per-log objects, its log; (None, None)
        for keys that are not this root's layouts (segment counts differ, so a
        nested root's objects never match)."""
        head = self.layout.object_prefix
        if not key.startswith(head):
            return None, None
        parts = key[len(head):].split("/")
        if len(parts) == 2 and parts[0] == "wal-shared" and parts[1]:
            return KIND_SHARED, None
        if (
            len(parts) == 6
            and parts[1] == "partitions"
            and parts[3] == "data"
            and parts[4] in ("compacted", "wal")
            and parts[5]
            and parts[2].isascii()
            and parts[2].isdigit()
            and str(int(parts[2])) == parts[2]
        ):
            try:
                tp = TopicPartition(parts[0], int(parts[2]))
            except InvalidRequest:
                return None, None
            return (KIND_COMPACTED if parts[4] == "compacted" else KIND_LEGACY_WAL), tp
        return None, None

    def _shared_logs(self, key: str) -> tuple[TopicPartition, ...]:
        """The logs an LLS1 object's header names (two ranged GETs, then cached)."""
        cached = self._headers.get(key)
        if cached is not None:
            return cached
        prefix = self._objects.get(self.bucket, key, byte_range=(0, 8))
        if len(prefix) < 8:
            raise CorruptBatch(f"object is {len(prefix)} bytes, shorter than the 8-byte LLS1 prefix")
        header_len = int.from_bytes(prefix[4:8], "big")
        body = self._objects.get(self.bucket, key, byte_range=(8, header_len)) if header_len else b""
        header = decode_shared_header(prefix + body)
        try:
            logs = tuple(dict.fromkeys(TopicPartition(p.topic, p.partition) for p in header.partitions))
        except InvalidRequest as exc:
            raise CorruptBatch(f"LLS1 header names an invalid log: {exc.message}") from None
        if len(self._headers) < _HEADER_CACHE_MAX:
            self._headers[key] = logs
        return logs

    def _forget_headers(self, listed: Iterable[str]) -> None:
        """Drop cached headers of objects that are gone."""
        present = set(listed)
        for key in [k for k in self._headers if k not in present]:
            del self._headers[key]

    # -- references ----------------------------------------------------------------
    def _refs(self, state: _Pass, tp: TopicPartition) -> _LogRefs:
        refs = state.refs.get(tp)
        if refs is None:
            keys = self.layout.keys(tp)
            try:
                refs = self._read_refs(state, keys)
            except LlogError as exc:
                refs = _LogRefs(error=str(exc))
                state.errors.append(f"{tp}: cannot read references: {exc}")
            state.refs[tp] = refs
        return refs

    def _read_refs(self, state: _Pass, keys: PartitionKeys) -> _LogRefs:
        """Read one log's references: cursor, compaction record, control, index
        (this order; see the module docstring), deleting redundant WAL entries
        below the cursor on the way."""
        pk = keys.partition_key
        refs = _LogRefs()
        rec = self._meta.get(keys.compaction_cursor, pk)
        cursor = 1 if rec is None else CompactionCursor.decode(rec.value).offset
        rec = self._meta.get(keys.compaction, pk)
        if rec is not None:
            refs.compacting = CompactionRecord.decode(rec.value).data_key
        rec = self._meta.get(keys.control, pk)
        expired_below = 1
        pending_end = None
        if rec is not None:
            control = ControlRecord.decode(rec.value)
            refs.pending = None if control.pending is None else control.pending.data_key
            pending_end = None if control.pending is None else control.pending.end_offset
            moved_at = control.log_start_at_ms
            if control.log_start_offset > 1 and moved_at is not None and self._now_ms() - moved_at >= self.grace_ms:
                # Not past the cursor: a deleted topic's log (7.11) keeps what compaction has not passed yet.
                expired_below = min(control.log_start_offset, cursor)
        for rec in self._meta.range_scan(keys.index_prefix, keys.index_end, pk):
            end = keys.index_offset(rec.key)
            if end is None:
                continue
            if end == pending_end:
                # The pending's own key, materialized: never deleted while it is pending (SPEC 8.1,
                # invariant 8). A pending that replaces it after the control read ends at or past
                # the cursor, so it is never among what this pass deletes.
                refs.indexed.add(IndexEntry.decode(rec.value).data_key)
                continue
            if end < expired_below:
                if self._drop_entry(state, keys, rec.key, rec.version, state.expired, "below the log start"):
                    continue
            entry = IndexEntry.decode(rec.value)
            if self.delete_redundant_entries and entry.type == EntryType.WAL and end < cursor:
                if self._drop_entry(state, keys, rec.key, rec.version, state.redundant, "redundant"):
                    continue
            refs.indexed.add(entry.data_key)
        return refs

    def _drop_entry(self, state: _Pass, keys: PartitionKeys, key: str, version: int, done: list[str],
                    what: str) -> bool:
        """Delete an index entry nobody may read any more (``what``: redundant, or below
        the log start). True if it is gone (or would be, on a dry run); False keeps counting it."""
        if state.dry_run:
            done.append(key)
            return True
        try:
            self._meta.delete(key, keys.partition_key, expected_version=version)
        except VersionConflict:
            return False  # rewritten since we listed it: count it as it was
        except LlogError as exc:
            state.errors.append(f"{keys.tp}: cannot delete {what} entry {key}: {exc}")
            return False
        done.append(key)
        return True

    # -- deleting ------------------------------------------------------------------
    def _delete(self, state: _Pass) -> list[VacuumDeletion]:
        done: list[VacuumDeletion] = []
        todo = state.candidates
        for i in range(0, len(todo), _DELETE_CHUNK):
            chunk = todo[i:i + _DELETE_CHUNK]
            try:
                self._objects.delete_many(self.bucket, [d.key for d in chunk])
            except LlogError as exc:
                state.errors.append(f"deleting {len(chunk)} objects failed: {exc}")
                continue
            done.extend(chunk)
            for d in chunk:
                log.info("vacuum deleted s3://%s/%s (%d bytes, %s)", self.bucket, d.key, d.size, d.kind)
        return done

    def _record(self, report: VacuumReport) -> None:
        m = self.metrics
        m.inc("vacuum_runs_total", outcome="error" if report.errors else "ok", dry_run=report.dry_run)
        m.observe("vacuum_run_seconds", report.duration_s)
        m.set_gauge("vacuum_last_run_timestamp_seconds", self.runtime.clock.now_ms() / 1000)
        m.inc("vacuum_objects_scanned_total", report.scanned)
        for reason in (KEEP_YOUNG, KEEP_INDEXED, KEEP_PENDING, KEEP_COMPACTING, KEEP_UNREADABLE,
                       KEEP_CHECK_FAILED, KEEP_FOREIGN, KEEP_VANISHED):
            m.set_gauge("vacuum_objects_kept", report.kept.get(reason, 0), reason=reason)
        if report.errors:
            m.inc("vacuum_errors_total", len(report.errors))
        if report.dry_run:
            return
        for d in report.deleted:
            m.inc("vacuum_objects_deleted_total", kind=d.kind)
        m.inc("vacuum_bytes_reclaimed_total", report.bytes_reclaimed)
        m.inc("vacuum_redundant_entries_deleted_total", len(report.redundant_entries))
        m.inc("vacuum_expired_entries_deleted_total", len(report.expired_entries))
