"""The write path: ``LeaderlessLogWriter``.

``append_shared(groups)`` writes every group into ONE shared WAL blob (one S3
PUT, LLS1 layout; ``staging.py``), then commits each partition concurrently:

1. take ``meta/control`` (the writer's cached copy and version, or a fresh get);
2. if it holds a ``pending`` append, make sure that append is in the index
   and treat it as cleared: nothing to do if it is the writer's own last
   append whose index create it saw succeed; otherwise GET its index key and
   create it (create-if-absent) only if it is missing;
3. refuse if the log is FENCED;
4. CAS ``meta/control`` to ``sequence_counter = end + 1`` with our ``pending``
   (on a version conflict: re-read, back off with jitter, retry);
5. create the index entry at ``index/{end_offset}``.

Our ``pending`` stays in ``meta/control``, materialized, and the next
append's step 4 replaces it: two Oxia writes per partition per flush and no
read in steady state (the cached control version saves the get; ``own.py``
holds what makes step 2 free). :meth:`close` clears what is left (SPEC 7.3 C5).

The append is committed at step 4 (any later writer, fence or compactor
materializes it): acknowledged once step 4 is known to have landed, even if
step 5 fails. Every error is definite except ``OutcomeUnknown`` (step 4's
reply was lost and the store could not be read to decide).

Index entries are only ever *created* by this module (never overwritten): a
compaction may already have replaced the key with a COMPACTED entry, and
writing over it would open a gap below it.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from dataclasses import replace
from concurrent.futures import ThreadPoolExecutor
from typing import Mapping, Sequence

from .._config import OxiaConfig, ProducerStateConfig, S3Config
from .._errors import (
    AppendFailed,
    ConcurrencyConflict,
    InvalidRequest,
    LlogError,
    MetadataStoreError,
    OutcomeUnknown,
    PartitionFenced,
    PartitionNotInitialized,
    VersionConflict,
)
from .._protocol.keys import LogLayout, PartitionKeys, TopicPartition
from .._protocol.records import (
    ControlRecord,
    LogState,
    PendingAppend,
)
from .._protocol.structs import AppendResult, SharedAppendGroup, validate_groups
from .._protocol.constants import REFERENCE_DEADLINE_MS, check_reference_deadline
from .._retry import Backoff
from .._runtime import REAL_RUNTIME, Runtime
from .._storage.metastore import MetadataStore
from .._storage.objectstore import ObjectStore
from .._storage.stores import Closeable, Stores, use_stores
from .._metrics import LlogMetrics
from . import idempotence, recovery
from .recovery import Landed
from .initialize import initialize_log
from .own import OwnPendings
from .staging import StagedBatch, StagedBlob, build_staged

__all__ = ["LeaderlessLogWriter", "StagedBlob"]

log = logging.getLogger(__name__)


class LeaderlessLogWriter(Closeable):
    """Appends batches to topic-partitions: bytes to S3, order and index to Oxia.

    Thread-safe. Use as a context manager or call :meth:`close`.
    """

    def __init__(
        self,
        oxia_config: OxiaConfig,
        s3_config: S3Config,
        *,
        metrics: LlogMetrics | None = None,
        metadata_store: MetadataStore | None = None,
        object_store: ObjectStore | None = None,
        stores: Stores | None = None,
        commit_parallelism: int = 64,
        max_reference_age_ms: int = REFERENCE_DEADLINE_MS,
        producer_state: ProducerStateConfig | None = None,
        runtime: Runtime = REAL_RUNTIME,
    ) -> None:
        if commit_parallelism < 1:
            raise InvalidRequest("commit_parallelism must be >= 1")
        self.bucket = s3_config.require_bucket()
        self.layout = LogLayout(oxia_config.root_prefix)
        self.metrics = metrics or LlogMetrics()
        check_reference_deadline(max_reference_age_ms, what="writer")
        self.max_reference_age_ms = max_reference_age_ms
        """SPEC 7.0 ``D``: a blob older than this is never referenced (vacuum may take it)."""
        self.runtime = runtime
        """The clock, ids and jitter (``server._runtime``)."""
        self.producer_state = producer_state or ProducerStateConfig()
        """How long and how many idempotent producers a log remembers (SPEC 7.12)."""
        self._stores = use_stores(self, stores, oxia_config, s3_config, self.metrics, metadata_store, object_store)
        self._meta, self._objects = self._stores.meta, self._stores.objects
        self._pool = ThreadPoolExecutor(commit_parallelism, thread_name_prefix="llog-commit")
        self._resources.callback(self._pool.shutdown, wait=True)
        self._cache_lock = threading.Lock()
        self._control_cache: dict[TopicPartition, tuple[ControlRecord, int]] = {}
        self._own = OwnPendings(self.metrics)
        self._tp_locks: dict[TopicPartition, threading.Lock] = defaultdict(threading.Lock)
        # Registered last, so it runs first on close: the pool is still up.
        self._resources.callback(self._clear_own_pendings)

    @classmethod
    def from_env(
        cls, env: Mapping[str, str] | None = None, *, metrics: LlogMetrics | None = None, **kwargs
    ) -> LeaderlessLogWriter:
        """Build from ``LLOG_OXIA_*``, ``LLOG_ROOT_PREFIX``, ``LLOG_S3_*`` and ``LLOG_PRODUCER_*``."""
        kwargs.setdefault("producer_state", ProducerStateConfig.from_env(env))
        return cls(OxiaConfig.from_env(env), S3Config.from_env(env), metrics=metrics, **kwargs)

    # -- partition management ------------------------------------------------
    def initialize_partition(self, topic: str, partition: int) -> bool:
        """Create ``meta/control`` (OPEN, counter 1) and the compaction cursor
        (offset 1) if absent. Idempotent; returns True if this call created
        the control record. The cursor goes first so that whoever sees the
        control record (the discovery anchor) also finds the cursor."""
        keys = self.layout.partition(topic, partition)
        version = initialize_log(self._meta, keys)
        if version is None:
            return False
        with self._cache_lock:
            self._control_cache[keys.tp] = (ControlRecord(LogState.OPEN, 1, None), version)
        self.metrics.inc("writer_partitions_initialized_total")
        return True

    def fence_partition(self, topic: str, partition: int) -> ControlRecord:
        """Set the log FENCED: later appends fail with PartitionFenced."""
        return self._set_state(self.layout.partition(topic, partition), LogState.FENCED)

    def unfence_partition(self, topic: str, partition: int) -> ControlRecord:
        """Set the log OPEN again."""
        return self._set_state(self.layout.partition(topic, partition), LogState.OPEN)

    def recover_pending(self, topic: str, partition: int) -> bool:
        """Materialize and clear a leftover ``pending`` append, if any.

        Returns True if there was one. Used by fencing and the compactor.
        """
        keys = self.layout.partition(topic, partition)
        backoff = Backoff(runtime=self.runtime)
        while True:
            control, version = self._read_control(keys)
            if control.pending is None:
                return False
            recovery.materialize_pending(self._meta, keys, control.pending)
            try:
                new_version = self._meta.put(
                    keys.control, control.with_pending(None).encode(), keys.partition_key,
                    expected_version=version,
                )
                self._remember(keys.tp, control.with_pending(None), new_version)
                self.metrics.inc("writer_pending_recovered_total")
                return True
            except VersionConflict:
                backoff = self._backoff_or_raise(backoff, keys, "recover pending")

    def _set_state(self, keys: PartitionKeys, state: str) -> ControlRecord:
        backoff = Backoff(runtime=self.runtime)
        while True:
            control, version = self._read_control(keys)
            if control.pending is not None:
                recovery.materialize_pending(self._meta, keys, control.pending)
            new = replace(control, log_state=state, pending=None)
            try:
                new_version = self._meta.put(
                    keys.control, new.encode(), keys.partition_key, expected_version=version
                )
            except VersionConflict:
                backoff = self._backoff_or_raise(backoff, keys, f"set log_state {state}")
                continue
            self._remember(keys.tp, new, new_version)
            return new

    # -- appends ---------------------------------------------------------------
    def append_shared(self, groups: Sequence[SharedAppendGroup]) -> list[AppendResult]:
        """Append every group through one shared WAL blob.

        Returns one AppendResult per group, in order. If any group failed,
        raises AppendFailed whose ``results`` show what was committed.
        """
        results = self.append_shared_results(groups)
        failed = [r for r in results if r.error is not None]
        if failed:
            first = failed[0]
            raise AppendFailed(
                f"{len(failed)} of {len(results)} groups failed; first "
                f"{first.topic}:{first.partition}: {first.error}",
                results,
            ) from first.error
        return results

    def append_shared_results(self, groups: Sequence[SharedAppendGroup]) -> list[AppendResult]:
        """Like :meth:`append_shared` but never raises for per-group failures:
        each failed group's AppendResult carries its typed error."""
        return self.commit_staged(self.stage_shared(groups))

    def stage_shared(self, groups: Sequence[SharedAppendGroup]) -> StagedBlob:
        """The first half of :meth:`append_shared_results`: encode the shared blob
        and PUT it (``staging.py``; a failed PUT is carried in ``failed``)."""
        if self._closed:
            raise InvalidRequest("writer is closed")
        groups = validate_groups(groups, "append_shared")

        created_at_ms = self.runtime.clock.now_ms()
        object_key = self.layout.shared_wal_object(str(self.runtime.ids.uuid4()))
        blob, templates, batches = build_staged(groups, f"s3://{self.bucket}/{object_key}", created_at_ms,
                                                runtime=self.runtime)
        try:
            self._objects.put(self.bucket, object_key, blob)
        except LlogError as exc:
            # Nothing was committed: every group fails with the same cause.
            return StagedBlob(tuple(groups), (), [AppendResult(g.topic, g.partition, len(g.payloads), error=exc)
                                                  for g in groups])
        self.metrics.inc("writer_blobs_total")
        self.metrics.inc("writer_blob_bytes_total", len(blob))
        self.metrics.observe("writer_blob_size_bytes", len(blob))
        self.metrics.observe("writer_blob_partitions", len(groups))
        return StagedBlob(tuple(groups), templates, None, batches)

    def commit_staged(self, staged: StagedBlob) -> list[AppendResult]:
        """The second half of :meth:`append_shared_results`: reserve offsets
        for each group of a staged blob and commit it (C1-C5). Calls for one
        partition must be made in the order their offsets should follow."""
        if staged.failed is not None:
            return list(staged.failed)
        groups, templates = staged.groups, staged.templates
        batches = staged.batches or (None,) * len(groups)
        # Groups of one partition commit in order on one worker; partitions in parallel.
        by_tp: dict[TopicPartition, list[int]] = defaultdict(list)
        for i, g in enumerate(groups):
            by_tp[g.tp].append(i)
        results: list[AppendResult | None] = [None] * len(groups)

        def commit_tp(tp: TopicPartition, idxs: list[int]) -> None:
            with self._tp_locks[tp]:
                for i in idxs:
                    results[i] = self._commit_group(groups[i], templates[i], batches[i])

        if len(by_tp) == 1:
            (tp, idxs), = by_tp.items()
            commit_tp(tp, idxs)
        else:
            for f in [self._pool.submit(commit_tp, tp, idxs) for tp, idxs in by_tp.items()]:
                f.result()
        return [r for r in results if r is not None]

    def _commit_group(self, group: SharedAppendGroup, template: PendingAppend,
                      batches: tuple[StagedBatch, ...] | None) -> AppendResult:
        """One group's commit with its outcome as an AppendResult (never raises)."""
        tp = group.tp
        if batches is not None:
            return idempotence.commit_checked(self._commit, self.layout.keys(tp), group, template, batches,
                                              self.metrics)
        try:
            keys = self.layout.keys(tp)
            start, planned = self._commit(keys, template)
            pending = planned.pending
            assert pending is not None
            end = start + pending.msg_count - 1
            result = AppendResult(tp.topic, tp.partition, pending.msg_count, start, end, keys.index(end),
                                  pending.data_key, pending.byte_offset, pending.byte_length)
        except LlogError as exc:
            self.metrics.inc("writer_commit_failures_total", error=type(exc).__name__)
            return AppendResult(group.topic, group.partition, len(group.payloads), error=exc)
        except Exception as exc:  # a bug must fail the group, not hang the caller
            # It may have struck after the reservation: say so honestly.
            log.exception("unexpected error committing %s", tp)
            error = OutcomeUnknown(f"internal error while committing: {exc!r}", topic=tp.topic, partition=tp.partition)
            return AppendResult(group.topic, group.partition, len(group.payloads), error=error)
        self.metrics.inc("writer_records_total", len(group.payloads))
        self.metrics.inc("writer_payload_bytes_total", group.payload_bytes)
        return result

    def _commit(self, keys: PartitionKeys, template: PendingAppend, batches: tuple[StagedBatch, ...] | None = None,
                first: int = 0) -> tuple[int, idempotence.Plan]:
        """Reserve offsets for one group (C1-C3), then create its index entry (C4).

        With ``batches`` (a group holding idempotent ones), the reservation
        covers the run of batches ``idempotence.plan`` picks from ``first`` on,
        and records them in their producers' state in the same write; when it
        refuses a batch, that is decided on a control record read during this
        call. Returns the first offset reserved and the plan (whose
        ``pending`` is None when every batch was answered without appending).

        Every error raised here is definite (nothing of the group is in the
        log) except :class:`OutcomeUnknown`. Once the reservation is known to
        have landed the group is reported committed, whatever happens to C4:
        its records are durable and readable through ``pending``.
        """
        tp = keys.tp
        backoff = Backoff(runtime=self.runtime)
        state = self._cached(tp)
        fresh = False
        while True:
            if state is None:
                state = self._read_control(keys)
                fresh = True
            control, version = state
            if control.pending is not None:
                if not self._own.is_materialized(tp, control.pending):
                    recovery.materialize_pending(self._meta, keys, control.pending)
                control = control.with_pending(None)
            if self.runtime.clock.now_ms() - template.created_at_ms > self.max_reference_age_ms:
                raise ConcurrencyConflict(
                    f"append did not commit within {self.max_reference_age_ms} ms of writing its blob; "
                    "gave up so vacuum may reclaim the blob (retry the append)",
                    topic=tp.topic, partition=tp.partition,
                )
            if control.fenced:
                raise PartitionFenced(
                    "partition is FENCED: appends are refused until it is unfenced",
                    topic=tp.topic, partition=tp.partition,
                )
            plan = idempotence.plan(control, template, batches, first, self.runtime.clock.now_ms(),
                                    self.producer_state, self._new_append_id)
            if plan.refuses and not fresh:
                state = None  # refuse only on what Oxia holds now, not on a cached copy
                continue
            if plan.pending is None:
                return control.sequence_counter, plan  # nothing to append: every batch answered
            start = control.sequence_counter
            end = start + plan.pending.msg_count - 1
            pending = replace(plan.pending, start_offset=start, end_offset=end)
            reserved = replace(control, log_state=LogState.OPEN, sequence_counter=end + 1, pending=pending,
                               producers=plan.producers)
            try:
                reserved_version: int | None = self._meta.put(
                    keys.control, reserved.encode(), keys.partition_key, expected_version=version
                )
                break
            except VersionConflict:
                self.metrics.inc("writer_cas_conflicts_total")
                state = None
                backoff = self._backoff_or_raise(backoff, keys, "reserve offsets")
            except MetadataStoreError as exc:
                # The CAS may have landed even though we got no answer.
                landed, held = self._resolve_ambiguous(keys, pending)
                if landed is Landed.UNKNOWN:
                    self.metrics.inc("writer_outcome_unknown_total")
                    raise OutcomeUnknown(
                        f"the reply to the offset reservation {start}..{end} was lost and meta/control "
                        f"could not be read to tell whether it landed ({exc.message}); the records may "
                        "or may not be in the log",
                        topic=tp.topic, partition=tp.partition,
                    ) from exc
                if landed is Landed.NO:
                    state = None
                    backoff = self._backoff_or_raise(backoff, keys, "reserve offsets")
                    continue
                # What Oxia holds now, with our pending: others may have changed the rest since
                # (retention's log start), so caching our own copy would write it back.
                reserved, reserved_version = held if held is not None else (reserved, None)
                break

        # Our reservation replaced whatever pending the control held, our own
        # previous one included; the version it was conditional on still held
        # that one, so its C4 was no late materialization (SPEC 7.3 C3).
        self._own.drop(tp)
        self._finish(keys, reserved, reserved_version)
        return start, plan

    def _finish(self, keys: PartitionKeys, reserved: ControlRecord, reserved_version: int | None) -> None:
        """C4 for a committed reservation. A failure here never fails the
        append: whoever next touches the log materializes it (7.2). No C5:
        our next reservation replaces the pending (or :meth:`close` clears it)."""
        pending = reserved.pending
        assert pending is not None
        if reserved_version is None:
            return  # another writer already took over and materialized it
        try:
            created = recovery.create_index_entry(self._meta, keys, pending)
        except LlogError as exc:
            self._forget(keys.tp)
            self.metrics.inc("writer_finish_failures_total")
            log.warning(
                "append %s..%s of %s is committed but its index entry failed (%s); "
                "it is readable through meta/control.pending until the next append materializes it",
                pending.start_offset, pending.end_offset, keys.tp, exc,
            )
            return
        self._own.remember(keys.tp, pending, created)
        self._remember(keys.tp, reserved, reserved_version)

    def _resolve_ambiguous(self, keys: PartitionKeys,
                           pending: PendingAppend) -> tuple[Landed, tuple[ControlRecord, int] | None]:
        """After a lost reply to our reserve CAS, decide whether it landed
        (``recovery.reservation_landed``); when it did, also the control record
        and version still holding our pending (None: a later writer took over)."""
        self._forget(keys.tp)
        try:
            # Not settled against our previous pending: our own reservation
            # may be what replaced it. The retry's fresh read settles it.
            control, version = self._read_control(keys, settle=False)
            landed = recovery.reservation_landed(self._meta, keys, pending, control)
        except LlogError:
            return Landed.UNKNOWN, None
        own = control.pending is not None and control.pending.append_id == pending.append_id
        return landed, (control, version) if own else None

    # -- helpers ---------------------------------------------------------------
    def _new_append_id(self) -> str:
        return str(self.runtime.ids.uuid4())

    def _read_control(self, keys: PartitionKeys, *, settle: bool = True) -> tuple[ControlRecord, int]:
        rec = self._meta.get(keys.control, keys.partition_key)
        if rec is None:
            raise PartitionNotInitialized(
                "partition is not initialized: call initialize_partition first",
                topic=keys.tp.topic, partition=keys.tp.partition,
            )
        control = ControlRecord.decode(rec.value)
        if settle:
            self._own.settle(self._meta, keys, control)
        self._remember(keys.tp, control, rec.version)
        return control, rec.version

    def _clear_own_pendings(self) -> None:
        """On close, C5 for each log whose cached control holds our pending, so
        a log we stop using ends with ``pending: null``. Best effort (SPEC 7.3)."""
        for tp, own in self._own.items():
            with self._cache_lock:
                hit = self._control_cache.get(tp)
            keys = self.layout.keys(tp)
            with self._tp_locks[tp]:
                try:
                    if hit is None or hit[0].pending is None or hit[0].pending.append_id != own.pending.append_id:
                        self._read_control(keys)  # settles the clean-up check; clears nothing
                        continue
                    control, version = hit
                    cleared = control.with_pending(None)
                    try:
                        new_version = self._meta.put(
                            keys.control, cleared.encode(), keys.partition_key, expected_version=version
                        )
                    except VersionConflict:
                        self._read_control(keys)  # someone replaced it: settle (7.3 C5 conflict)
                        continue
                    self._own.drop(tp)
                    self._remember(tp, cleared, new_version)
                    self.metrics.inc("writer_pendings_cleared_on_close_total")
                except LlogError as exc:
                    log.warning("could not clear the pending append of %s on close: %s", tp, exc)

    def _cached(self, tp: TopicPartition) -> tuple[ControlRecord, int] | None:
        """The cached control, unless it holds a pending append other than our
        own materialized one: a pending seen in a stale copy may be long
        materialized and compacted, so acting on it (materializing) is only
        done from a fresh read. Our own one needs no action, only replacing,
        and the CAS fails if the copy is stale."""
        with self._cache_lock:
            hit = self._control_cache.get(tp)
        if hit is None or hit[0].pending is None:
            return hit
        return hit if self._own.is_materialized(tp, hit[0].pending) else None

    def _remember(self, tp: TopicPartition, control: ControlRecord, version: int) -> None:
        with self._cache_lock:
            self._control_cache[tp] = (control, version)

    def _forget(self, tp: TopicPartition) -> None:
        with self._cache_lock:
            self._control_cache.pop(tp, None)

    def _backoff_or_raise(self, backoff: Backoff, keys: PartitionKeys, what: str) -> Backoff:
        backoff = backoff.next()
        if backoff.exhausted:
            raise ConcurrencyConflict(
                f"gave up to {what} after {backoff.attempt} version conflicts on meta/control",
                topic=keys.tp.topic, partition=keys.tp.partition,
            )
        backoff.sleep()
        return backoff

