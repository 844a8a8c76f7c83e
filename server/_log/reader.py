"""The read path: ``LeaderlessLogReader``.

A read takes a snapshot of ``meta/control`` (high watermark and pending),
resolves the batch holding the offset through the sparse index, fetches that
batch's bytes from S3 (a range GET when the entry names a slice of a shared
blob) and decodes them, verifying length, CRC and record count.

- ``read_offset``: one CEILING get on ``index/{offset_20d}`` with the
  partition key. The answer may be any later key of the shard (another
  partition's, this partition's ``meta/...``, or ``__oxia/...``), so it is
  used only if it is one of this partition's index keys and its range covers
  the offset; otherwise the reader falls back to ``pending``.
- ``iter_from`` / ``read_range``: one range scan over ``[index/{start}, index/~)``
  (one Oxia stream, not one call per record), one S3 GET per batch, with a
  small read-ahead so S3 latency overlaps decoding. Entries already covered
  are skipped, which also makes the transient compaction state (a COMPACTED
  end key above WAL keys it covers) read correctly.
- Redundant WAL entries (a late materialization inside a compacted range,
  SPEC 8.2 O3) never fail a read: a WAL entry that starts above the offset
  wanted is passed over, and the COMPACTED entry that holds the offset is
  found further on. Only a COMPACTED entry past the offset (or the end of
  the index) ends the search.
- ``iter_runs``: the same scan a stored slice at a time (a ``RecordRun``),
  decoded by a pluggable ``BatchDecoder`` from the slice's checked
  :class:`StoredBatches` (a ``bytes-batch-v1`` slice of the reference
  system reads as value-only records stamped with its entry's
  ``created_at_ms``).

Offsets are inclusive everywhere; the log starts at its log start offset
(``meta/control.log_start_offset``, 1 until retention moves it, SPEC 7.10)
and the high watermark is ``sequence_counter - 1``. A scan reads up to the
high watermark seen when it started. An offset below the log start is
OffsetOutOfRange carrying the log start; so is a read that finds its data
gone because retention moved the log start past it meanwhile (the control
record is read again to tell that from a damaged index).
"""

from __future__ import annotations

from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Iterator, Mapping, Sequence

from .._config import OxiaConfig, S3Config
from .._errors import (
    CorruptBatch,
    InconsistentReadState,
    LlogError,
    InvalidRequest,
    ObjectNotFound,
    OffsetOutOfRange,
    PartitionNotInitialized,
)
from .._protocol.codec import SHARED_MAGIC, decode_shared_header
from .._protocol.stored_batches import decode_stored
from .._protocol.keys import LogLayout, PartitionKeys, TopicPartition, parse_s3_uri
from .._protocol.records import CompactionCursor, ControlRecord, EntryType, IndexEntry
from .._protocol.structs import ReadRecord
from .._storage.metastore import MetadataStore, Record
from .._storage.objectstore import ObjectStore
from .._storage.stores import Closeable, Stores, use_stores
from .._metrics import LlogMetrics
from .._runtime import REAL_RUNTIME, Runtime
from .control_cache import DecodedControls
from .index import covering_entry
from .runs import BatchDecoder, RecordRun, all_records, read_record, records_of, stored

__all__ = [
    "BatchDecoder",
    "all_records",
    "stored",
    "LeaderlessLogReader",
    "ReadRecord",
    "RecordRun",
    "ResolvedBatch",
    "LOG_START_OFFSET",
    "MERGE_GAP_BYTES",
]

LOG_START_OFFSET = 1
MERGE_GAP_BYTES = 256 * 1024
"""Slices of one blob closer than this are fetched with one range GET."""


@dataclass(frozen=True)
class ResolvedBatch:
    """One index entry (or the pending append) with its offset range."""

    start_offset: int
    end_offset: int
    entry: IndexEntry
    from_pending: bool = False

    def covers(self, offset: int) -> bool:
        return self.start_offset <= offset <= self.end_offset


class LeaderlessLogReader(Closeable):
    """Reads records by offset. Thread-safe; a context manager."""

    def __init__(
        self,
        oxia_config: OxiaConfig,
        s3_config: S3Config | None = None,
        *,
        metrics: LlogMetrics | None = None,
        metadata_store: MetadataStore | None = None,
        object_store: ObjectStore | None = None,
        stores: Stores | None = None,
        read_ahead: int = 4,
        runtime: Runtime = REAL_RUNTIME,
    ) -> None:
        self.layout = LogLayout(oxia_config.root_prefix)
        self.metrics = metrics or LlogMetrics()
        self.runtime = runtime
        """The clock, ids and randomness (``server._runtime``); a read draws
        none of them, the reader carries it like every top-level part."""
        self._stores = use_stores(
            self, stores, oxia_config, s3_config or S3Config(bucket=None), self.metrics, metadata_store, object_store
        )
        self._meta, self._objects = self._stores.meta, self._stores.objects
        self._decoded_controls = DecodedControls()
        self._read_ahead = max(1, read_ahead)
        self._pool = ThreadPoolExecutor(self._read_ahead, thread_name_prefix="llog-read")
        self._resources.callback(self._pool.shutdown, wait=True)

    @classmethod
    def from_env(
        cls, env: Mapping[str, str] | None = None, *, metrics: LlogMetrics | None = None, **kwargs
    ) -> LeaderlessLogReader:
        """Build from ``LLOG_OXIA_*``, ``LLOG_ROOT_PREFIX`` and the optional
        ``LLOG_S3_*`` (no bucket needed: index entries carry full URIs)."""
        return cls(OxiaConfig.from_env(env), S3Config.from_env(env), metrics=metrics, **kwargs)

    # -- metadata --------------------------------------------------------------
    def control(self, topic: str, partition: int) -> ControlRecord:
        """The partition's ``meta/control``; raises PartitionNotInitialized."""
        return self._control(self.layout.partition(topic, partition))

    def controls(self, tps: Sequence[TopicPartition]) -> list[ControlRecord | LlogError]:
        """``control`` of each partition, read together (one Oxia read per shard);
        a partition's error (PartitionNotInitialized) is in its place. A failed read
        fails them all, as each of them would."""
        keys = [self.layout.partition(tp.topic, tp.partition) for tp in tps]
        try:
            recs = self._meta.get_many([(k.control, k.partition_key) for k in keys])
        except LlogError as exc:
            return [exc] * len(keys)
        out: list[ControlRecord | LlogError] = []
        for k, rec in zip(keys, recs):
            try:
                out.append(self._decode_control(k, rec))
            except PartitionNotInitialized as exc:
                out.append(exc)
        return out

    def high_watermark(self, topic: str, partition: int) -> int:
        """The last written offset (0 for an empty log)."""
        return self.control(topic, partition).high_watermark

    def log_start_offset(self, topic: str, partition: int) -> int:
        """The first offset a read may return (1 until retention moves it)."""
        return self.control(topic, partition).log_start_offset

    def compaction_cursor(self, topic: str, partition: int) -> int:
        """The first offset not yet compacted (1 when nothing is)."""
        keys = self.layout.partition(topic, partition)
        rec = self._meta.get(keys.compaction_cursor, keys.partition_key)
        return 1 if rec is None else CompactionCursor.decode(rec.value).offset

    def _control(self, keys: PartitionKeys) -> ControlRecord:
        return self._decode_control(keys, self._meta.get(keys.control, keys.partition_key))

    def _decode_control(self, keys: PartitionKeys, rec: Record | None) -> ControlRecord:
        if rec is None:
            raise PartitionNotInitialized(
                "partition is not initialized", topic=keys.tp.topic, partition=keys.tp.partition
            )
        return self._decoded_controls.decode(rec)

    def _check_offset(self, keys: PartitionKeys, control: ControlRecord, offset: int) -> None:
        if isinstance(offset, bool) or not isinstance(offset, int):
            raise InvalidRequest(f"offset must be an integer, got {offset!r}")
        if offset < control.log_start_offset or offset > control.high_watermark:
            raise self._out_of_range(keys, control, offset)

    @staticmethod
    def _out_of_range(keys: PartitionKeys, control: ControlRecord, offset: int) -> OffsetOutOfRange:
        below = " (below the log start: retention deleted it)" if offset < control.log_start_offset else ""
        return OffsetOutOfRange(
            f"offset {offset} is outside the log [{control.log_start_offset}, {control.high_watermark}]{below}",
            topic=keys.tp.topic, partition=keys.tp.partition, offset=offset,
            log_start_offset=control.log_start_offset, high_watermark=control.high_watermark,
        )

    def _retention_moved_past(self, keys: PartitionKeys, offset: int, exc: LlogError) -> LlogError:
        """After a read found an offset's data gone: OffsetOutOfRange if the log
        start has moved past it since the read began, else ``exc`` itself."""
        try:
            control = self._control(keys)
        except LlogError:
            return exc
        return self._out_of_range(keys, control, offset) if offset < control.log_start_offset else exc

    # -- resolution --------------------------------------------------------------
    def resolve(self, topic: str, partition: int, offset: int) -> ResolvedBatch:
        """The batch holding ``offset`` (index entry or pending append)."""
        keys = self.layout.partition(topic, partition)
        control = self._control(keys)
        self._check_offset(keys, control, offset)
        return self._resolve(keys, control, offset)

    def _resolve(self, keys: PartitionKeys, control: ControlRecord, offset: int) -> ResolvedBatch:
        rec = self._meta.ceiling(keys.index(offset), keys.partition_key)
        ceiling_entry: IndexEntry | None = None
        if rec is not None:
            end = keys.index_offset(rec.key)
            if end is not None:
                ceiling_entry = IndexEntry.decode(rec.value)
                batch = ResolvedBatch(ceiling_entry.start_offset(end), end, ceiling_entry)
                if batch.covers(offset):
                    return batch
        pending = self._pending_batch(control)
        if pending is not None and pending.covers(offset):
            return pending
        if ceiling_entry is not None and ceiling_entry.type == EntryType.WAL:
            # The first key at or after the offset is a WAL entry starting
            # above it: a redundant entry left inside a compacted range (SPEC
            # 8.2, O3). The COMPACTED entry holding the offset ends further on.
            batch = self._cover_past_redundant(keys, offset)
            if batch is not None:
                return batch
        raise InconsistentReadState(
            "no index entry or pending append covers this offset",
            topic=keys.tp.topic, partition=keys.tp.partition, offset=offset,
        )

    def _cover_past_redundant(self, keys: PartitionKeys, offset: int) -> ResolvedBatch | None:
        found = covering_entry(self._meta, keys, offset)
        if found is None:
            return None
        end, entry = found
        self.metrics.inc("reader_redundant_entries_skipped_total")
        return ResolvedBatch(entry.start_offset(end), end, entry)

    @staticmethod
    def _pending_batch(control: ControlRecord) -> ResolvedBatch | None:
        p = control.pending
        if p is None:
            return None
        return ResolvedBatch(p.start_offset, p.end_offset, p.index_entry(), from_pending=True)

    # -- bytes -------------------------------------------------------------------
    def fetch_batch(self, keys: PartitionKeys, batch: ResolvedBatch, decode: BatchDecoder = all_records):
        """Download and decode one batch's records (a list of :class:`Record` by default)."""
        entry = batch.entry
        bucket, key = parse_s3_uri(entry.data_key)
        if entry.byte_offset is not None and entry.byte_length is not None:
            data = self._objects.get(bucket, key, (entry.byte_offset, entry.byte_length))
        else:
            data = self._objects.get(bucket, key)
            if data[:4] == SHARED_MAGIC:
                data = self._slice_shared(keys, data)
        return self._decode(keys, batch, data, decode)

    def fetch_many(
        self, items: Sequence[tuple[PartitionKeys, ResolvedBatch]], decode: BatchDecoder = all_records
    ) -> list:
        """Decode many batches with as few S3 GETs as possible (each a list of
        records by default, or what ``decode`` makes of it).

        Slices of one blob that lie within ``MERGE_GAP_BYTES`` of each other
        are fetched with a single range GET spanning them (the slices of one
        flush sit side by side in its shared blob); entries without a byte
        range share one whole-object GET per blob. Results are in input order.
        """
        out: list = [None] * len(items)
        by_blob: dict[str, list[int]] = {}
        for i, (_, batch) in enumerate(items):
            by_blob.setdefault(batch.entry.data_key, []).append(i)
        for data_key, idxs in by_blob.items():
            bucket, key = parse_s3_uri(data_key)
            ranged = [i for i in idxs if items[i][1].entry.byte_offset is not None and items[i][1].entry.byte_length is not None]
            whole = [i for i in idxs if i not in set(ranged)]
            if whole:
                blob = self._objects.get(bucket, key)
                for i in whole:
                    keys, batch = items[i]
                    data = self._slice_shared(keys, blob) if blob[:4] == SHARED_MAGIC else blob
                    out[i] = self._decode(keys, batch, data, decode)
            ranged.sort(key=lambda i: items[i][1].entry.byte_offset)
            run: list[int] = []
            for i in ranged + [-1]:
                if run and (i == -1 or items[i][1].entry.byte_offset - self._run_end(items, run) > MERGE_GAP_BYTES):
                    start = items[run[0]][1].entry.byte_offset
                    # A view: each batch is decoded in place, not copied out of the range.
                    data = memoryview(self._objects.get(bucket, key, (start, self._run_end(items, run) - start)))
                    for j in run:
                        keys, batch = items[j]
                        off = batch.entry.byte_offset - start
                        out[j] = self._decode(keys, batch, data[off:off + batch.entry.byte_length], decode)
                    run = []
                if i != -1:
                    run.append(i)
        return [o if o is not None else [] for o in out]

    @staticmethod
    def _run_end(items: Sequence[tuple[PartitionKeys, ResolvedBatch]], run: list[int]) -> int:
        return max(items[j][1].entry.byte_offset + items[j][1].entry.byte_length for j in run)

    def _decode(
        self, keys: PartitionKeys, batch: ResolvedBatch, data: bytes | memoryview, decode: BatchDecoder = all_records
    ):
        entry = batch.entry
        try:
            return decode(decode_stored(data, entry.encoding, entry.msg_count, entry.created_at_ms))
        except CorruptBatch as exc:
            raise CorruptBatch(
                f"{exc.message} in {batch.entry.data_key}", topic=keys.tp.topic,
                partition=keys.tp.partition, offset=batch.start_offset,
            ) from exc

    @staticmethod
    def _slice_shared(keys: PartitionKeys, blob: bytes) -> bytes:
        """This partition's body of a whole shared blob (entries with no range)."""
        header = decode_shared_header(blob)
        for part in header.partitions:
            if part.topic == keys.tp.topic and part.partition == keys.tp.partition:
                return blob[part.body_offset:part.body_offset + part.body_length]
        raise CorruptBatch(
            "shared blob has no body for this partition",
            topic=keys.tp.topic, partition=keys.tp.partition,
        )

    # -- public reads --------------------------------------------------------------
    def read_offset(self, topic: str, partition: int, offset: int) -> ReadRecord:
        """The record at ``offset``."""
        keys = self.layout.partition(topic, partition)
        control = self._control(keys)
        self._check_offset(keys, control, offset)
        try:
            batch = self._resolve(keys, control, offset)
            try:
                records = self.fetch_batch(keys, batch)
            except ObjectNotFound:
                batch = self._compacted_cover(keys, offset)
                records = self.fetch_batch(keys, batch)
        except (InconsistentReadState, ObjectNotFound) as exc:
            raise self._retention_moved_past(keys, offset, exc) from exc
        self.metrics.inc("reader_records_total")
        return read_record(topic, partition, offset, records[offset - batch.start_offset])

    def read_range(self, topic: str, partition: int, start: int, end: int) -> list[ReadRecord]:
        """Records ``start`` through ``end`` (inclusive)."""
        if end < start:
            raise InvalidRequest(f"end ({end}) must be >= start ({start})")
        keys = self.layout.partition(topic, partition)
        control = self._control(keys)
        self._check_offset(keys, control, start)
        self._check_offset(keys, control, end)
        return list(self._scan(keys, control, start, end))

    def iter_from(
        self, topic: str, partition: int, offset: int, end: int | None = None
    ) -> Iterator[ReadRecord]:
        """Records from ``offset`` up to ``end`` (inclusive; default: the high
        watermark when the scan starts). Starting just past the high
        watermark yields nothing."""
        return records_of(self.iter_runs(topic, partition, offset, end))

    def scan_batches(
        self, topic: str, partition: int, start: int, end: int, *, control: ControlRecord | None = None
    ) -> Iterator[ResolvedBatch]:
        """The batches covering ``[start, end]`` in order (metadata only).
        Pass ``control`` when the caller has just read it, to save a get."""
        keys = self.layout.partition(topic, partition)
        control = control or self._control(keys)
        self._check_offset(keys, control, start)
        return self._batches(keys, control, start, min(end, control.high_watermark))

    def _compacted_cover(self, keys: PartitionKeys, offset: int) -> ResolvedBatch:
        """After a batch's object turned out missing: the COMPACTED entry that
        covers ``offset`` (the WAL object was vacuumed after a compaction, or
        the entry was a redundant one, SPEC 7.4 and 8.2)."""
        for rec in self._meta.range_scan(keys.index(offset), keys.index_end, keys.partition_key):
            end = keys.index_offset(rec.key)
            if end is None:
                break
            entry = IndexEntry.decode(rec.value)
            batch = ResolvedBatch(entry.start_offset(end), end, entry)
            if entry.type == EntryType.COMPACTED and batch.covers(offset):
                self.metrics.inc("reader_missing_object_fallbacks_total")
                return batch
        raise ObjectNotFound(
            "the object holding this offset is gone and no compacted entry covers it",
            topic=keys.tp.topic, partition=keys.tp.partition, offset=offset,
        )

    def _batches(
        self, keys: PartitionKeys, control: ControlRecord, start: int, end: int
    ) -> Iterator[ResolvedBatch]:
        next_offset = start
        rows = self._meta.range_scan(keys.index(start), keys.index_end, keys.partition_key)
        for rec in rows:
            if next_offset > end:
                break
            entry_end = keys.index_offset(rec.key)
            if entry_end is None or entry_end < next_offset:
                continue
            entry = IndexEntry.decode(rec.value)
            batch = ResolvedBatch(entry.start_offset(entry_end), entry_end, entry)
            if batch.start_offset > next_offset:
                if entry.type == EntryType.WAL:
                    # A redundant WAL entry inside the compacted range that
                    # holds ``next_offset`` (SPEC 8.2, O3): that COMPACTED
                    # entry ends further on. (If there is none, the listing
                    # ends and the gap is reported below.)
                    continue
                break  # a COMPACTED entry past a gap: maybe pending fills it, checked below
            yield batch
            next_offset = entry_end + 1
        if next_offset <= end:
            pending = self._pending_batch(control)
            if pending is not None and pending.covers(next_offset):
                yield pending
                next_offset = pending.end_offset + 1
        if next_offset <= end:
            raise InconsistentReadState(
                f"gap in the index: nothing covers offsets {next_offset}..{end}",
                topic=keys.tp.topic, partition=keys.tp.partition, offset=next_offset,
            )

    def iter_runs(
        self, topic: str, partition: int, offset: int, end: int | None = None, *, decode: BatchDecoder = all_records
    ) -> Iterator[RecordRun]:
        """Like :meth:`iter_from`, a batch at a time: one :class:`RecordRun`
        per batch, its records made by ``decode``. For readers that handle
        records in bulk (the Spark source builds Arrow columns from them)."""
        keys = self.layout.partition(topic, partition)
        control = self._control(keys)
        last = control.high_watermark if end is None else min(end, control.high_watermark)
        if offset == control.high_watermark + 1 and offset >= control.log_start_offset:
            return iter(())
        self._check_offset(keys, control, offset)
        return self._runs(keys, control, offset, last, decode)

    def _scan(self, keys: PartitionKeys, control: ControlRecord, start: int, end: int) -> Iterator[ReadRecord]:
        return records_of(self._runs(keys, control, start, end, all_records))

    def _runs(
        self, keys: PartitionKeys, control: ControlRecord, start: int, end: int, decode: BatchDecoder
    ) -> Iterator[RecordRun]:
        topic, partition = keys.tp.topic, keys.tp.partition
        inflight: deque[tuple[ResolvedBatch, Future]] = deque()
        batches = self._batches(keys, control, start, end)
        next_offset = start

        def refill() -> None:
            while len(inflight) < self._read_ahead:
                batch = next(batches, None)
                if batch is None:
                    return
                inflight.append((batch, self._pool.submit(self.fetch_batch, keys, batch, decode)))

        try:
            try:
                refill()
            except (InconsistentReadState, ObjectNotFound) as exc:
                raise self._retention_moved_past(keys, next_offset, exc) from exc
            while inflight:
                batch, fut = inflight.popleft()
                try:
                    try:
                        records = fut.result()
                    except ObjectNotFound:
                        batch = self._compacted_cover(keys, max(next_offset, batch.start_offset))
                        records = self.fetch_batch(keys, batch, decode)
                    refill()
                except (InconsistentReadState, ObjectNotFound) as exc:
                    # Data gone under the scan: retention, or a damaged index.
                    raise self._retention_moved_past(keys, next_offset, exc) from exc
                first = max(next_offset, batch.start_offset)
                last = min(end, batch.end_offset)
                if last >= first:
                    yield RecordRun(topic, partition, batch.start_offset, first, last, records)
                self.metrics.inc("reader_records_total", max(0, last - first + 1))
                next_offset = last + 1
        finally:
            for _, fut in inflight:
                fut.cancel()
