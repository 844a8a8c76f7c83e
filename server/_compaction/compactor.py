"""Compaction: ``LeaderlessLogCompactor.compact_once`` (SPEC 7.7).

One run rewrites one contiguous run of WAL entries, starting exactly at the
compaction cursor, into one partition-local ``bytes-batch-v1`` object, and
swaps the index over to it:

    K1  make sure ``meta/control``'s pending append is in the index (clear it
        once compacted, on an idle log); never cover offsets above that
        control read's high watermark ("the limit")
    K2  if ``meta/compaction`` exists, resume it by state and stop
    K3  select WAL entries from the cursor: contiguous, <= limit, within
        ``max_offsets`` / ``max_bytes`` (the first entry always, if <= limit)
    K4  fetch the slices (one GET per run of adjacent slices of a blob) and
        PUT the compacted object
    K5  create ``meta/compaction`` (WRITING_COMPACTED_INDEX) if absent, then
        check the cursor did not move
    K6  CAS the end key to a COMPACTED entry covering the whole run
    K7  state DELETING_OLD;  K8  delete_range the lower keys
    K9  state UPDATING_CURSOR;  K10  cursor forward to end + 1 (never back)
    K11 delete ``meta/compaction``

Every step is idempotent and every state change is conditional on the version
last seen, so any compactor can resume another's run and two racing
compactors never both rewrite a range (the loser sees a conflict and stops).
Reads are correct in every intermediate state: a lower WAL key and the
COMPACTED end key that covers it point at the same records.

``step_hook(name)`` is called after each durable step (``blob_written``,
``record_created``, ``end_key_rewritten``, ``lower_keys_deleted``,
``cursor_advanced``, ``record_deleted``); tests raise or exit there to
simulate a crash at that point.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Callable, Mapping

from .._config import OxiaConfig, S3Config
from .._errors import InconsistentReadState, InvalidRequest, ObjectNotFound, PartitionNotInitialized, VersionConflict
from .._log.reader import LeaderlessLogReader, ResolvedBatch, stored
from .._log import recovery
from .._protocol.kafka_batch import ENCODING
from .._protocol.stored_batches import StoredBatches
from .._protocol.constants import REFERENCE_DEADLINE_MS, check_reference_deadline
from .._protocol.keys import LogLayout, PartitionKeys
from .._protocol.records import (
    CompactionCursor,
    CompactionRecord,
    CompactionState,
    ControlRecord,
    EntryType,
    IndexEntry,
)
from .._storage.metastore import EXPECT_ABSENT, MetadataStore, Record
from .._storage.objectstore import ObjectStore
from .._storage.stores import Closeable, Stores, use_stores
from .._metrics import LlogMetrics
from .._runtime import REAL_RUNTIME, Runtime
from .config import DEFAULT_MAX_BYTES, DEFAULT_MAX_OFFSETS, CompactionLimits
from .results import CompactionOutcome, CompactionResult

__all__ = [
    "LeaderlessLogCompactor",
    "CompactionOutcome",
    "CompactionResult",
    "DEFAULT_MAX_OFFSETS",
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_REFERENCE_AGE_MS",
    "StepHook",
]

log = logging.getLogger(__name__)

DEFAULT_MAX_REFERENCE_AGE_MS = REFERENCE_DEADLINE_MS  # SPEC 7.0 ``D`` (_protocol/constants.py)


StepHook = Callable[[str], None]


class LeaderlessLogCompactor(Closeable):
    """Compacts one partition per ``compact_once`` call. Thread-safe."""

    def __init__(
        self,
        oxia_config: OxiaConfig,
        s3_config: S3Config,
        *,
        metrics: LlogMetrics | None = None,
        metadata_store: MetadataStore | None = None,
        object_store: ObjectStore | None = None,
        stores: Stores | None = None,
        max_offsets_per_run: int = DEFAULT_MAX_OFFSETS,
        max_bytes_per_run: int = DEFAULT_MAX_BYTES,
        max_reference_age_ms: int = DEFAULT_MAX_REFERENCE_AGE_MS,
        min_bytes_per_run: int = 0,
        max_delay_ms: int = 0,
        step_hook: StepHook | None = None,
        runtime: Runtime = REAL_RUNTIME,
    ) -> None:
        """``min_bytes_per_run`` / ``max_delay_ms``: a WAL run at the cursor with
        fewer source bytes than the first waits (``DEFERRED``) until its oldest
        entry is ``max_delay_ms`` old; 0 (the default) compacts at once."""
        if max_offsets_per_run < 1 or max_bytes_per_run < 1:
            raise InvalidRequest("max_offsets_per_run and max_bytes_per_run must be >= 1")
        if min_bytes_per_run < 0 or max_delay_ms < 0:
            raise InvalidRequest("min_bytes_per_run and max_delay_ms must be >= 0")
        self.bucket = s3_config.require_bucket()
        self.layout = LogLayout(oxia_config.root_prefix)
        self.metrics = metrics or LlogMetrics()
        self.max_offsets_per_run = max_offsets_per_run
        self.max_bytes_per_run = max_bytes_per_run
        self.min_bytes_per_run = min_bytes_per_run
        self.max_delay_ms = max_delay_ms
        check_reference_deadline(max_reference_age_ms, what="compactor")
        self.max_reference_age_ms = max_reference_age_ms
        self._hook = step_hook
        self.runtime = runtime
        self._stores = use_stores(self, stores, oxia_config, s3_config, self.metrics, metadata_store, object_store)
        self._meta, self._objects = self._stores.meta, self._stores.objects
        self._reader = LeaderlessLogReader(oxia_config, s3_config, metrics=self.metrics, stores=self._stores,
                                           runtime=runtime)
        self._resources.callback(self._reader.close)

    @classmethod
    def from_env(
        cls, env: Mapping[str, str] | None = None, *, metrics: LlogMetrics | None = None, **kwargs
    ) -> LeaderlessLogCompactor:
        """Build from ``LLOG_OXIA_*``, ``LLOG_S3_*`` and the run limits
        (:class:`CompactionLimits`: ``LLOG_COMPACTOR_MAX_*_PER_RUN``)."""
        limits = CompactionLimits.from_env(env)
        kwargs.setdefault("max_offsets_per_run", limits.max_offsets_per_run)
        kwargs.setdefault("max_bytes_per_run", limits.max_bytes_per_run)
        return cls(OxiaConfig.from_env(env), S3Config.from_env(env), metrics=metrics, **kwargs)

    # -- the run -----------------------------------------------------------------
    def compact_once(self, topic: str, partition: int, max_offsets: int | None = None) -> CompactionResult:
        """Run one compaction step on the partition (see the module docstring)."""
        if max_offsets is not None and (isinstance(max_offsets, bool) or max_offsets < 1):
            raise InvalidRequest(f"max_offsets must be >= 1, got {max_offsets!r}")
        keys = self.layout.partition(topic, partition)
        started = self.runtime.clock.perf_counter()
        limit, high_watermark, recovered = self._recover_pending(keys)
        self._stage("recover_pending", started)

        base = CompactionResult(topic, partition, CompactionOutcome.NOTHING_TO_DO,
                                recovered_pending=recovered, high_watermark=high_watermark)
        rec = self._meta.get(keys.compaction, keys.partition_key)
        if rec is not None:
            record = CompactionRecord.decode(rec.value)
            outcome = self._drive(keys, record, rec.version)
            if outcome is CompactionOutcome.COMPACTED:
                self.metrics.inc("compactor_resumed_total")
            result = replace(
                base,
                outcome=CompactionOutcome.RESUMED if outcome is CompactionOutcome.COMPACTED else outcome,
                start_offset=record.start_offset, end_offset=record.end_offset,
                msg_count=record.msg_count, data_key=record.data_key,
            )
        else:
            result = self._compact_new(keys, base, limit, max_offsets or self.max_offsets_per_run)
        result = replace(result, cursor=self._cursor(keys)[0])
        self._count_run(result, self.runtime.clock.perf_counter() - started)
        return result

    def _count_run(self, result: CompactionResult, seconds: float) -> None:
        m = self.metrics
        m.inc("compactor_runs_total", outcome=result.outcome.value)
        m.observe("compactor_run_seconds", seconds)
        if result.outcome in (CompactionOutcome.COMPACTED, CompactionOutcome.RESUMED):
            m.inc("compactor_compacted_offsets_total", result.msg_count)
            m.inc("compactor_compacted_bytes_total", result.bytes_written)
        if result.outcome is CompactionOutcome.COMPACTED:  # the shape of what this run selected
            m.observe("compactor_candidate_entries", result.source_entries)
            m.observe("compactor_candidate_records", result.msg_count)
            m.observe("compactor_candidate_bytes", result.bytes_written)

    def _compact_new(
        self, keys: PartitionKeys, base: CompactionResult, limit: int, max_offsets: int
    ) -> CompactionResult:
        t = self.runtime.clock.perf_counter()
        cursor, _ = self._cursor(keys)
        selected = self._select(keys, cursor, limit, max_offsets)
        self._stage("select", t)
        if not selected:
            return base
        wait_ms = self._wait_ms(selected, max_offsets)
        if wait_ms is not None:
            return replace(base, outcome=CompactionOutcome.DEFERRED, retry_after_ms=wait_ms)
        start, end = selected[0][1].start_offset, selected[-1][1].end_offset
        last_rec = selected[-1][0]

        built = self._build(keys, selected)
        if built is None:
            return replace(base, outcome=CompactionOutcome.CONFLICT)
        data_key, created_at_ms, bytes_written, max_timestamp_ms = built
        bytes_read = sum(b.entry.byte_length or 0 for _, b in selected)

        # K5: record the intent, unless the object is already too old to reference.
        if self.runtime.clock.now_ms() - created_at_ms > self.max_reference_age_ms:
            log.warning("compacted object %s took too long to write; leaving it for vacuum", data_key)
            return replace(base, outcome=CompactionOutcome.ABANDONED, data_key=data_key)
        record = CompactionRecord(
            compaction_id=str(self.runtime.ids.uuid4()),
            state=CompactionState.WRITING_COMPACTED_INDEX,
            start_offset=start,
            end_offset=end,
            msg_count=end - start + 1,
            data_key=data_key,
            encoding=ENCODING,
            created_at_ms=created_at_ms,
            last_entry_start_offset=selected[-1][1].start_offset,
            max_timestamp_ms=max_timestamp_ms,
            size_bytes=bytes_written,
        )
        try:
            version = self._meta.put(
                keys.compaction, record.encode(), keys.partition_key, expected_version=EXPECT_ABSENT
            )
        except VersionConflict:
            return replace(base, outcome=CompactionOutcome.CONFLICT)
        self._step("record_created")
        if self._cursor(keys)[0] != start:
            # Another compactor finished this range while we built ours.
            self._delete_record(keys, version)
            return replace(base, outcome=CompactionOutcome.CONFLICT)

        # K6 on the fast path (the version of the end key is known from K3);
        # a conflict falls back to the resume logic, which re-reads it.
        t = self.runtime.clock.perf_counter()
        try:
            self._meta.put(
                keys.index(end), self._compacted_entry(record).encode(), keys.partition_key,
                expected_version=last_rec.version,
            )
            self._step("end_key_rewritten")
            record, version = self._set_state(keys, record, version, CompactionState.DELETING_OLD)
        except VersionConflict:
            pass
        self._stage("rewrite_end_key", t)
        outcome = self._drive(keys, record, version) if version is not None else CompactionOutcome.CONFLICT
        return replace(
            base, outcome=outcome, start_offset=start, end_offset=end, msg_count=end - start + 1,
            data_key=data_key, source_entries=len(selected), bytes_read=bytes_read, bytes_written=bytes_written,
        )

    def _build(
        self, keys: PartitionKeys, selected: list[tuple[Record, ResolvedBatch]]
    ) -> tuple[str, int, int, int] | None:
        """K4: fetch the selected batches and PUT them, back to back as they
        are stored, as one compacted object (a ``bytes-batch-v1`` slice is
        rewritten as a batch stamped with its entry's ``created_at_ms``).
        Returns ``(data_key, created_at_ms, bytes written, max timestamp)``,
        or None when another compaction took the range over meanwhile."""
        t = self.runtime.clock.perf_counter()
        start, end = selected[0][1].start_offset, selected[-1][1].end_offset
        try:
            slices = self._reader.fetch_many([(keys, batch) for _, batch in selected], stored)
        except ObjectNotFound:
            if self._selection_overtaken(keys, start):
                # Another compactor compacted this range while we stalled, and
                # vacuum took the WAL objects it no longer needed.
                return None
            raise
        joined = StoredBatches.join(slices)
        if len(joined) != end - start + 1:
            raise InconsistentReadState(
                f"selected entries hold {len(joined)} records, expected {end - start + 1}",
                topic=keys.tp.topic, partition=keys.tp.partition, offset=start,
            )
        body = joined.data
        created_at_ms = self.runtime.clock.now_ms()
        object_key = keys.compacted_object(str(self.runtime.ids.uuid4()))
        self._objects.put(self.bucket, object_key, body)
        self._stage("build", t)
        self._step("blob_written")
        return f"s3://{self.bucket}/{object_key}", created_at_ms, len(body), joined.max_timestamp

    # -- K1 -------------------------------------------------------------------------
    def _recover_pending(self, keys: PartitionKeys) -> tuple[int, int, bool]:
        """K1: make sure the pending append (if any) is in the index; return the
        limit (the high watermark: a pending's key can only become a run's end
        key), the high watermark, and whether this call created the pending's
        index entry. A pending whose key is already COMPACTED is cleared: the
        log has been idle since (SPEC 7.7 K1)."""
        rec = self._meta.get(keys.control, keys.partition_key)
        if rec is None:
            raise PartitionNotInitialized(
                "partition is not initialized", topic=keys.tp.topic, partition=keys.tp.partition
            )
        control = ControlRecord.decode(rec.value)
        pending = control.pending
        recovered = False
        if pending is not None:
            entry = self._meta.get(keys.index(pending.end_offset), keys.partition_key)
            if entry is None:
                created = recovery.create_index_entry(self._meta, keys, pending)
                recovered = created is not None and not recovery.drop_if_redundant(self._meta, keys, pending, created)
                if recovered:
                    self.metrics.inc("compactor_pending_recoveries_total")
            elif IndexEntry.decode(entry.value).type == EntryType.COMPACTED:
                try:  # a conflict: a writer appended meanwhile, its reservation replaced the pending
                    self._meta.put(keys.control, control.with_pending(None).encode(), keys.partition_key,
                                   expected_version=rec.version)
                    self.metrics.inc("compactor_idle_pendings_cleared_total")
                except VersionConflict:
                    pass
        return control.high_watermark, control.high_watermark, recovered

    # -- K3 -------------------------------------------------------------------------
    def _select(
        self, keys: PartitionKeys, cursor: int, limit: int, max_offsets: int
    ) -> list[tuple[Record, ResolvedBatch]]:
        selected: list[tuple[Record, ResolvedBatch]] = []
        count = 0
        nbytes = 0
        expected_start = cursor
        for rec in self._meta.range_scan(keys.index(cursor), keys.index_end, keys.partition_key):
            end = keys.index_offset(rec.key)
            if end is None:
                break
            entry = IndexEntry.decode(rec.value)
            batch = ResolvedBatch(entry.start_offset(end), end, entry)
            if entry.type != EntryType.WAL or batch.start_offset != expected_start or end > limit:
                break
            size = entry.byte_length or 0
            if selected and (count + entry.msg_count > max_offsets or nbytes + size > self.max_bytes_per_run):
                break
            selected.append((rec, batch))
            count += entry.msg_count
            nbytes += size
            expected_start = end + 1
            if count >= max_offsets:
                break
        return selected

    def _wait_ms(self, selected: list[tuple[Record, ResolvedBatch]], max_offsets: int) -> int | None:
        """How long the selection should wait for more (None: compact it now).
        A selection cut by a run limit is never small, so it never waits."""
        if self.max_delay_ms == 0 or self.min_bytes_per_run == 0:
            return None
        nbytes = sum(b.entry.byte_length or 0 for _, b in selected)
        count = sum(b.entry.msg_count for _, b in selected)
        if nbytes >= min(self.min_bytes_per_run, self.max_bytes_per_run) or count >= max_offsets:
            return None
        oldest = min(b.entry.created_at_ms for _, b in selected)
        wait = oldest + self.max_delay_ms - self.runtime.clock.now_ms()
        return wait if wait > 0 else None

    def _selection_overtaken(self, keys: PartitionKeys, start: int) -> bool:
        """Whether another compaction has taken over the range selected from
        ``start``: the cursor moved, or a compaction record exists."""
        if self._cursor(keys)[0] != start:
            return True
        return self._meta.get(keys.compaction, keys.partition_key) is not None

    # -- K6..K11 and resume ----------------------------------------------------------
    def _drive(self, keys: PartitionKeys, record: CompactionRecord, version: int) -> CompactionOutcome:
        """Carry a compaction record from its state to the end (SPEC 7.7, resume)."""
        while True:
            if record.state == CompactionState.WRITING_COMPACTED_INDEX:
                if self._cursor(keys)[0] != record.start_offset:
                    self._delete_record(keys, version)
                    return CompactionOutcome.ABANDONED
                end_rec = self._meta.get(keys.index(record.end_offset), keys.partition_key)
                entry = None if end_rec is None else IndexEntry.decode(end_rec.value)
                if entry is not None and entry.type == EntryType.COMPACTED and entry.data_key == record.data_key:
                    pass  # K6 already happened
                elif entry is not None and entry.type == EntryType.WAL and self._is_selected_tail(record, entry):
                    try:
                        self._meta.put(
                            keys.index(record.end_offset), self._compacted_entry(record).encode(),
                            keys.partition_key, expected_version=end_rec.version,
                        )
                        self._step("end_key_rewritten")
                    except VersionConflict:
                        continue  # re-read the end key and decide again
                else:
                    log.info("compaction %s of %s is no longer valid; dropping it", record.compaction_id, keys.tp)
                    self._delete_record(keys, version)
                    return CompactionOutcome.ABANDONED
                record, version = self._set_state(keys, record, version, CompactionState.DELETING_OLD)
            elif record.state == CompactionState.DELETING_OLD:
                end_rec = self._meta.get(keys.index(record.end_offset), keys.partition_key)
                entry = None if end_rec is None else IndexEntry.decode(end_rec.value)
                if entry is None or entry.type != EntryType.COMPACTED or entry.data_key != record.data_key:
                    raise InconsistentReadState(
                        f"compaction {record.compaction_id} is DELETING_OLD but its end key is not its "
                        "COMPACTED entry; refusing to delete the lower keys",
                        topic=keys.tp.topic, partition=keys.tp.partition, offset=record.end_offset,
                    )
                t = self.runtime.clock.perf_counter()
                self._meta.delete_range(keys.index(record.start_offset), keys.index(record.end_offset), keys.partition_key)
                self._stage("delete_lower_keys", t)
                self._step("lower_keys_deleted")
                record, version = self._set_state(keys, record, version, CompactionState.UPDATING_CURSOR)
            elif record.state == CompactionState.UPDATING_CURSOR:
                self._advance_cursor(keys, record.end_offset + 1)
                self._step("cursor_advanced")
                self._delete_record(keys, version)
                self._step("record_deleted")
                return CompactionOutcome.COMPACTED
            else:
                raise InconsistentReadState(
                    f"unknown compaction state {record.state!r}", topic=keys.tp.topic, partition=keys.tp.partition
                )
            if version is None:  # the record vanished under us: another compactor finished it
                return CompactionOutcome.CONFLICT

    @staticmethod
    def _is_selected_tail(record: CompactionRecord, entry: IndexEntry) -> bool:
        start = entry.start_offset(record.end_offset)
        if record.last_entry_start_offset is not None:
            return start == record.last_entry_start_offset
        return start >= record.start_offset

    def _set_state(
        self, keys: PartitionKeys, record: CompactionRecord, version: int, state: str
    ) -> tuple[CompactionRecord, int | None]:
        """Move the record to ``state`` if it is unchanged; on a conflict
        return whatever is there now (or version None if it is gone)."""
        new = replace(record, state=state)
        try:
            return new, self._meta.put(keys.compaction, new.encode(), keys.partition_key, expected_version=version)
        except VersionConflict:
            rec = self._meta.get(keys.compaction, keys.partition_key)
            if rec is None:
                return record, None
            current = CompactionRecord.decode(rec.value)
            if current.compaction_id != record.compaction_id:
                return record, None
            return current, rec.version

    def _delete_record(self, keys: PartitionKeys, version: int | None) -> None:
        if version is None:
            return
        try:
            self._meta.delete(keys.compaction, keys.partition_key, expected_version=version)
        except VersionConflict:
            pass  # someone else resumed and finished or replaced it

    def _cursor(self, keys: PartitionKeys) -> tuple[int, int | None]:
        rec = self._meta.get(keys.compaction_cursor, keys.partition_key)
        if rec is None:
            return 1, None
        return CompactionCursor.decode(rec.value).offset, rec.version

    def _advance_cursor(self, keys: PartitionKeys, target: int) -> None:
        while True:
            current, version = self._cursor(keys)
            if current >= target:
                return
            try:
                self._meta.put(
                    keys.compaction_cursor, CompactionCursor(target).encode(), keys.partition_key,
                    expected_version=EXPECT_ABSENT if version is None else version,
                )
                return
            except VersionConflict:
                continue

    @staticmethod
    def _compacted_entry(record: CompactionRecord) -> IndexEntry:
        return IndexEntry(
            type=EntryType.COMPACTED,
            msg_count=record.msg_count,
            data_key=record.data_key,
            encoding=record.encoding,
            byte_offset=None,
            byte_length=None,
            created_at_ms=record.created_at_ms,
            max_timestamp_ms=record.max_timestamp_ms,
            size_bytes=record.size_bytes,
        )

    def _step(self, name: str) -> None:
        if self._hook is not None:
            self._hook(name)

    def _stage(self, stage: str, started: float) -> None:
        self.metrics.observe("compactor_stage_seconds", self.runtime.clock.perf_counter() - started, stage=stage)
