"""The catalogue: every metric an llog process exports, declared once.

Grouped by the part that records it. How to read and aggregate each one is
in OBSERVABILITY.md (generated tables are checked against this module by a
unit test). Unless ``aggregate="max"`` is given, a metric sums across
processes: counters and per-process gauges do, while gauges describing the
shared bucket or a partition (``s3_billing_objects``, ``compactor_lag_offsets``)
take the max, because every process reports the same thing.
"""

from __future__ import annotations

from .spec import COUNT_BUCKETS, SIZE_BUCKETS_BYTES, Kind, MetricSpec

__all__ = ["CATALOGUE", "BY_NAME", "PRESENT_AT_START"]

_OXIA_OPS = (
    "get", "get_many", "get_ceiling", "put", "put_cas", "put_ephemeral", "delete", "delete_range", "list", "range_scan",
)
_S3_OPS = ("put", "get", "range_get", "list", "delete")
_OUTCOMES = ("ok", "error")
_COMPACTION_OUTCOMES = ("compacted", "resumed", "nothing_to_do", "deferred", "conflict", "abandoned")
_TASK_OUTCOMES = _COMPACTION_OUTCOMES + ("busy", "not_initialized", "error")


def _c(name: str, help: str, *labels: str, **values: tuple[str, ...]) -> MetricSpec:
    return MetricSpec(name, Kind.COUNTER, help, labels, values=values)


def _g(name: str, help: str, *labels: str, aggregate: str = "sum", **values: tuple[str, ...]) -> MetricSpec:
    return MetricSpec(name, Kind.GAUGE, help, labels, values=values, aggregate=aggregate)


def _h(name: str, help: str, *labels: str, buckets: tuple[float, ...] | None = None,
       **values: tuple[str, ...]) -> MetricSpec:
    if buckets is None:
        return MetricSpec(name, Kind.HISTOGRAM, help, labels, values=values)
    return MetricSpec(name, Kind.HISTOGRAM, help, labels, buckets=buckets, values=values)


def _i(name: str, help: str, *labels: str) -> MetricSpec:
    return MetricSpec(name, Kind.INFO, help, labels, aggregate="max")


_IDENTITY = (
    _i("broker_info", "Broker identity, role and batch settings (value 1)",
       "broker_id", "role", "host", "port", "tail_cache_mode", "batch_max_bytes", "batch_max_delay_ms",
       "batch_max_buffer_bytes", "max_request_bytes", "root_prefix"),
    _i("compactor_info", "Compactor service identity and settings (value 1)",
       "compactor_id", "workers", "discovery_interval_ms", "blob_cache_bytes", "vacuum_interval_ms", "root_prefix"),
)

_HTTP = (
    _c("http_requests_total", "HTTP requests answered, by path, method and status", "path", "method", "status"),
    _h("http_request_seconds", "Time to answer an HTTP request (without writing the answer)", "path"),
    _c("http_validation_failures_total", "Requests refused with 400/413 for a field, by path and field",
       "path", "field"),
    _c("http_requests_too_large_total", "Requests refused before reading a body over LLOG_BROKER_MAX_REQUEST_BYTES"),
    _g("http_inflight_requests", "HTTP requests being answered now"),
)

_KAFKA = (
    _c("kafka_requests_total", "Kafka protocol requests answered, by API and error code (0: none)", "api", "error"),
    _h("kafka_request_seconds", "Time to answer a Kafka request (without writing the answer), by API", "api"),
    _c("kafka_protocol_errors_total", "Kafka connections closed for a frame that is not a request, or a request "
       "before SASL authentication (unauthenticated), by reason", "reason"),
    _g("kafka_connections", "Kafka client connections open now"),
    _c("kafka_connections_closed_total", "Kafka connections the broker closed: idle past "
       "LLOG_KAFKA_CONNECTIONS_MAX_IDLE_MS, refused past LLOG_KAFKA_MAX_CONNECTIONS (limit), or whose TLS "
       "handshake failed (tls)", "reason"),
    _c("kafka_authentications_total", "Kafka SASL authentications, by mechanism and outcome (ok, failed, "
       "unsupported_mechanism)", "mechanism", "outcome"),
    _c("kafka_stall_flushes_total", "Flushes started at once because every producing Kafka connection had 5 "
       "produce requests waiting (no more bytes could come)"),
    _c("kafka_fetches_total", "Kafka fetches by session kind (KIP-227): sessionless, opened (a full fetch opening "
       "a session), incremental, closed (a full fetch closing one), not_found or bad_epoch (refused: the client "
       "starts a new session)", "session"),
    _g("kafka_fetch_sessions", "Kafka fetch sessions kept now"),
)

_PRODUCE = (
    _c("produce_records_total", "Records acknowledged to /produce"),
    _c("produce_payload_bytes_total", "Record payload bytes acknowledged to /produce"),
    _c("produce_failed_batches_total", "Partition batches of /produce answered with an error, by error type", "error"),
    _c("produce_timeouts_total", "Produce requests that waited past their flush deadline"),
    _h("produce_request_seconds", "Produce request time: parse, queue, flush, answer"),
    _c("batcher_submits_total", "Produce requests handed to the shared batcher"),
    _c("batcher_records_total", "Records handed to the shared batcher"),
    _c("batcher_payload_bytes_total", "Payload bytes handed to the shared batcher"),
    _c("batcher_backpressure_rejections_total", "Submissions refused because the batcher buffer was full"),
    _c("batcher_backpressure_waits_total", "Submissions that waited for room in a full batcher buffer"),
    _g("batcher_inflight_bytes", "Bytes queued or being flushed by the batcher (the buffer in use)"),
    _g("batcher_queued_submissions", "Submissions waiting for the next flush (batcher depth)"),
    _c("batcher_flushes_total", "Flushes: one shared WAL blob plus its Oxia commits"),
    _c("batcher_flush_requests_total", "Submissions that asked for an immediate flush (a client's flush)"),
    _c("batcher_flush_partitions_total", "Partition batches written by flushes"),
    _c("batcher_failed_partition_batches_total", "Partition batches whose flush failed"),
    _h("batcher_flush_seconds", "Flush time: blob PUT and every partition's commit"),
    _h("batcher_queue_wait_seconds", "Time a submission waited in the batcher before its flush began"),
)

_WRITER = (
    _c("writer_records_total", "Records committed by the writer"),
    _c("writer_payload_bytes_total", "Record payload bytes committed by the writer"),
    _c("writer_blobs_total", "Shared WAL blobs written"),
    _c("writer_blob_bytes_total", "Bytes of shared WAL blobs written"),
    _h("writer_blob_size_bytes", "Size of each shared WAL blob", buckets=SIZE_BUCKETS_BYTES),
    _h("writer_blob_partitions", "Partition batches per shared WAL blob", buckets=COUNT_BUCKETS),
    _c("writer_cas_conflicts_total", "Reservations that lost a compare-and-set on meta/control and retried"),
    _c("writer_commit_failures_total", "Partition commits that failed, by error type", "error"),
    _c("writer_finish_failures_total", "Index creates that failed after a landed reservation"),
    _c("writer_outcome_unknown_total", "Partition batches whose outcome could not be decided (OutcomeUnknown)"),
    _c("writer_duplicate_batches_total", "Idempotent batches the log held already, answered without storing them"),
    _c("writer_refused_batches_total", "Idempotent batches refused by their producer's state, by error type", "error"),
    _c("writer_partitions_initialized_total", "Partitions this process initialized"),
    _c("writer_pending_recovered_total", "Other writers' pending appends this writer materialized"),
    _c("writer_redundant_entries_dropped_total", "Own index entries deleted because a compaction covered them"),
    _c("writer_pendings_cleared_on_close_total", "Own materialized pending appends cleared from meta/control on close"),
)

_READ = (
    _c("reader_records_total", "Records read by the library reader"),
    _c("reader_missing_object_fallbacks_total", "Reads that found a vacuumed blob and re-resolved the index"),
    _c("reader_redundant_entries_skipped_total", "Redundant WAL index entries passed over by reads"),
    _c("consume_records_total", "Records answered by /consume"),
    _c("consume_payload_bytes_total", "Record payload bytes answered by /consume"),
    _c("consume_partition_errors_total", "Partitions of /consume answered with an error, by error type", "error"),
    _c("consume_storage_reads_total", "Consume partitions read from Oxia and S3 (not the tail cache)"),
    _c("consume_index_cache_lookups_total",
       "Index lookups of consume storage reads by result: hit (resolved entries held), miss (Oxia scan)", "result",
       result=("hit", "miss")),
    _g("consume_index_cache_batches", "Resolved index entries the consume index cache holds"),
    _c("consume_wakeups_total", "Long-polling consumes woken by a publish"),
    _h("consume_request_seconds", "Consume request time, long-poll wait included"),
    _h("consume_long_poll_wait_seconds", "Time a consume waited for records (long-poll)"),
    _g("consume_waiting_requests", "Consume requests long-polling now"),
    _c("tail_cache_lookups_total", "Tail cache lookups by result: hit, tail (caught up), miss", "result",
       result=("hit", "tail", "miss")),
    _c("tail_cache_validations_total", "Checks of a cached tail against Oxia, by result", "result",
       result=("confirmed", "deferred", "behind")),
    _c("tail_cache_published_records_total", "Records put in the tail cache"),
    _c("tail_cache_evictions_total", "Tail cache entries evicted to stay under its byte limit"),
    _c("tail_cache_errors_total", "Tail cache file errors, by operation", "op"),
    _g("tail_cache_bytes", "Bytes held by the tail cache"),
)

_STORAGE = (
    _c("oxia_operations_total", "Oxia calls by operation and outcome (ok, conflict: a conditional write met "
       "another version, error)", "op", "outcome", op=_OXIA_OPS, outcome=("ok", "conflict", "error")),
    _h("oxia_operation_seconds", "Oxia call latency by operation", "op", op=_OXIA_OPS),
    _h("oxia_write_batch_puts", "Puts per Oxia write request (concurrent puts share one)", buckets=COUNT_BUCKETS),
    _c("oxia_bytes_total", "Value bytes written to Oxia, by operation", "op"),
    _c("s3_operations_total", "S3 calls by operation and outcome (billing counts these)", "op", "outcome",
       op=_S3_OPS, outcome=_OUTCOMES),
    _h("s3_operation_seconds", "S3 call latency by operation", "op", op=_S3_OPS),
    _c("s3_bytes_total", "Bytes moved by S3 calls, by operation", "op"),
    _g("s3_billing_request_cost_usd", "Estimated S3 request cost of this process since start (sum across processes)"),
    _g("s3_billing_objects", "Objects under the root prefix at the last scan (max across processes)",
       aggregate="max"),
    _g("s3_billing_stored_bytes", "Bytes under the root prefix at the last scan (max across processes)",
       aggregate="max"),
    _g("s3_billing_storage_cost_usd_per_month", "Estimated monthly storage cost of the root prefix "
       "(max across processes)", aggregate="max"),
)

_COMPACTOR = (
    _c("compactor_runs_total", "Compaction runs by outcome", "outcome", outcome=_COMPACTION_OUTCOMES),
    _h("compactor_run_seconds", "Compaction run time"),
    _h("compactor_stage_seconds", "Compaction stage time, by stage", "stage"),
    _c("compactor_compacted_offsets_total", "Offsets rewritten into compacted blobs"),
    _c("compactor_compacted_bytes_total", "Bytes of compacted blobs written"),
    _h("compactor_candidate_entries", "WAL index entries merged by one compaction", buckets=COUNT_BUCKETS),
    _h("compactor_candidate_records", "Records merged by one compaction", buckets=COUNT_BUCKETS),
    _h("compactor_candidate_bytes", "Bytes of the compacted blob one compaction wrote", buckets=SIZE_BUCKETS_BYTES),
    _c("compactor_resumed_total", "Interrupted compactions finished by this process"),
    _c("compactor_pending_recoveries_total", "Pending appends materialized by the compactor before selecting"),
    _c("compactor_idle_pendings_cleared_total", "Compacted pending appends of idle logs cleared from meta/control"),
    _g("compactor_lag_offsets", "Offsets left uncompacted by the last run on the partition (max across processes)",
       "topic", "partition", aggregate="max"),
    _g("compactor_backlog_offsets", "Offsets waiting for compaction when the last run on the partition began: "
       "how far behind the compactor was when it came to it (max across processes)",
       "topic", "partition", aggregate="max"),
    _g("compactor_partitions_pending", "Partitions with offsets to compact and no task running here"),
    _c("compactor_tasks_total", "Scheduled tasks by outcome", "outcome", outcome=_TASK_OUTCOMES),
    _h("compactor_task_seconds", "Scheduled task time: claim, compaction runs, release"),
    _c("compactor_task_errors_total", "Tasks that failed, by error type", "error"),
    _g("compactor_in_flight_tasks", "Compaction tasks running now"),
    _g("compactor_workers", "Compaction worker threads"),
    _c("compactor_claims_total", "Partition claims: won, or lost to a busy holder", "result", result=("won", "lost")),
    _c("compactor_claim_releases_total", "Claim releases by outcome", "outcome"),
    _c("compactor_claim_release_retries_total", "Retries of failed claim releases, by outcome", "outcome"),
    _c("compactor_leftover_claims_total", "Claims of an earlier session of ours found and removed", "outcome"),
    _g("compactor_unreleased_claims", "Claims whose release failed and waits for a retry"),
    _c("compactor_discovery_passes_total", "Discovery passes over meta/control keys, by outcome", "outcome",
       outcome=_OUTCOMES),
    _c("compactor_partitions_discovered_total", "Partitions first found by discovery"),
    _g("compactor_discovery_last_found", "Partitions the last discovery pass found"),
    _g("compactor_discovery_last_pass_timestamp_seconds", "Unix time of the last discovery pass", aggregate="max"),
    _g("compactor_partitions_known", "Partitions this compactor schedules (targets and discovered)"),
    _g("compactor_discovered_partitions", "Partitions known from discovery"),
    _c("compactor_blob_cache_requests_total", "Shared blob cache requests: hit, ranged (read past the cache), "
       "fill (whole blob fetched)", "result", result=("hit", "ranged", "fill")),
    _c("compactor_blob_cache_fill_bytes_total", "Bytes read from S3 to fill the shared blob cache"),
    _c("compactor_blob_cache_evictions_total", "Blobs evicted from the shared blob cache"),
    _g("compactor_blob_cache_bytes", "Bytes held by the shared blob cache"),
)

_VACUUM = (
    _c("vacuum_runs_total", "Vacuum passes by outcome and dry-run", "outcome", "dry_run",
       outcome=_OUTCOMES, dry_run=("False", "True")),
    _h("vacuum_run_seconds", "Vacuum pass time"),
    _c("vacuum_objects_scanned_total", "Objects listed by vacuum passes"),
    _c("vacuum_objects_deleted_total", "Objects deleted by vacuum, by kind", "kind",
       kind=("wal-shared", "compacted", "legacy-wal")),
    _c("vacuum_bytes_reclaimed_total", "Bytes of objects deleted by vacuum"),
    _c("vacuum_redundant_entries_deleted_total", "Redundant WAL index entries deleted by vacuum"),
    _c("vacuum_expired_entries_deleted_total", "Index entries below their log's start deleted by vacuum"),
    _c("vacuum_errors_total", "Errors met by vacuum passes"),
    _g("vacuum_objects_kept", "Objects the last pass kept, by reason", "reason"),
    _g("vacuum_last_run_timestamp_seconds", "Unix time of the last vacuum pass", aggregate="max"),
)

_RETENTION = (
    _c("retention_passes_total", "Retention passes over every known log"),
    _h("retention_pass_seconds", "Retention pass time: every known log, then deleted topics and groups' lag"),
    _c("retention_advances_total", "Log starts moved by retention"),
    _c("retention_dropped_bytes_total", "Stored bytes let go by retention (deleted by vacuum a grace period later)"),
    _c("retention_errors_total", "Logs a retention pass could not handle"),
    _c("topics_removed_total", "Deleted topics whose logs were retired and emptied and whose record is gone"),
    _g("log_start_offset", "A log's first readable offset (SPEC 7.10)", "topic", "partition", aggregate="max"),
    _g("log_retained_bytes", "Stored bytes a log holds from its start on", "topic", "partition", aggregate="max"),
    _g("consumer_group_lag", "Records of a log a consumer group has not consumed yet (high watermark + 1 - its "
       "committed offset)", "group", "topic", "partition", aggregate="max"),
)

CATALOGUE: tuple[MetricSpec, ...] = (
    _IDENTITY + _HTTP + _KAFKA + _PRODUCE + _WRITER + _READ + _STORAGE + _COMPACTOR + _VACUUM + _RETENTION
)
BY_NAME: dict[str, MetricSpec] = {spec.name: spec for spec in CATALOGUE}
_EXPORTED = [spec.name.removesuffix("_total") for spec in CATALOGUE]
if len(set(_EXPORTED)) != len(CATALOGUE):  # pragma: no cover - a declaration error
    # prometheus_client names a counter's family without _total: x_total and x would clash.
    raise ValueError("a metric is declared twice (or a counter x_total beside a metric x)")

PRESENT_AT_START: dict[str, tuple[str, ...]] = {
    # What each kind of process exports (at 0) from the start, so dashboards
    # and rate() see the series before the first event.
    "broker": (
        "http_requests_too_large_total", "http_inflight_requests", "http_validation_failures_total",
        "oxia_operations_total", "oxia_operation_seconds",
        "s3_operations_total", "s3_operation_seconds",
    ),
    "broker_write": (
        "produce_records_total", "produce_payload_bytes_total", "produce_timeouts_total", "produce_request_seconds",
        "batcher_flushes_total", "batcher_flush_requests_total", "batcher_submits_total", "batcher_records_total", "batcher_payload_bytes_total",
        "batcher_backpressure_rejections_total", "batcher_backpressure_waits_total", "batcher_inflight_bytes",
        "batcher_queued_submissions",
        "batcher_flush_partitions_total", "batcher_flush_seconds", "batcher_queue_wait_seconds",
        "writer_records_total", "writer_payload_bytes_total", "writer_blobs_total", "writer_blob_bytes_total",
        "writer_cas_conflicts_total", "writer_outcome_unknown_total",
    ),
    "broker_read": (
        "consume_records_total", "consume_payload_bytes_total", "consume_wakeups_total", "consume_storage_reads_total",
        "consume_index_cache_lookups_total", "consume_index_cache_batches",
        "consume_request_seconds", "consume_long_poll_wait_seconds", "consume_waiting_requests",
        "tail_cache_evictions_total", "tail_cache_published_records_total", "tail_cache_validations_total",
        "tail_cache_lookups_total",
        "tail_cache_bytes",
    ),
    "compactor": (
        "compactor_runs_total", "compactor_run_seconds", "compactor_compacted_offsets_total",
        "compactor_compacted_bytes_total", "compactor_tasks_total", "compactor_claims_total",
        "compactor_discovery_passes_total", "compactor_partitions_pending", "compactor_in_flight_tasks",
        "compactor_resumed_total", "compactor_pending_recoveries_total", "compactor_idle_pendings_cleared_total",
        "compactor_candidate_entries",
        "compactor_candidate_records", "compactor_candidate_bytes", "compactor_stage_seconds",
        "vacuum_bytes_reclaimed_total", "vacuum_objects_scanned_total", "vacuum_redundant_entries_deleted_total",
        "vacuum_runs_total", "vacuum_objects_deleted_total", "compactor_blob_cache_requests_total",
        "vacuum_expired_entries_deleted_total", "retention_passes_total", "retention_advances_total",
        "retention_dropped_bytes_total",
        "oxia_operations_total", "oxia_operation_seconds", "s3_operations_total", "s3_operation_seconds",
        "http_requests_total",
    ),
}
for _names in PRESENT_AT_START.values():
    for _name in _names:
        if _name not in BY_NAME:  # pragma: no cover - a declaration error
            raise ValueError(f"PRESENT_AT_START names {_name!r}, which is not declared")
