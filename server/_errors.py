"""The llog error hierarchy.

Every error the library raises derives from :class:`LlogError`. Errors carry
the topic-partition (and offset where one applies) they concern, and say
through ``retriable`` whether trying the same call again can help::

    LlogError
    ├── ConfigError                    bad or missing configuration (not retriable)
    ├── InvalidRequest                 bad caller input: topic, partition, payloads (not retriable)
    │   ├── InvalidField               (_protocol/http_json.py) an HTTP request field is wrong: 400, names the field
    │   │   └── TooLarge               (_protocol/http_json.py) over a size limit of the broker: 413
    │   └── MalformedFrame             (_kafka/codec.py) a Kafka request that cannot be served: the
    │                                  listener closes the connection
    ├── UnknownTopic                   the topic is not in the catalogue, or the partition not below its count
    ├── TopicAlreadyExists             a create named an existing topic (or one still being deleted)
    ├── PartitionNotInitialized        the partition has no meta/control record
    ├── OffsetOutOfRange               offset below the log start or at/after the high watermark
    ├── PartitionFenced                the partition's log_state is FENCED; appends are refused
    ├── UnknownGroup                   a consumer group that has committed nothing
    ├── StaleGeneration                a conditional commit named a generation or member the group no
    │                                  longer has: the consumer must rejoin
    ├── OutOfOrderSequence             an idempotent batch's sequence leaves a gap (retriable: the
    │                                  earlier batch may still be on its way)
    ├── ProducerFenced                 an idempotent batch's epoch is older than the log's: a newer
    │                                  instance of the producer took over
    ├── BackPressureRejected           the producer's buffer cap would be exceeded (retriable)
    ├── ProducerClosed                 submit after BatchingProducer.close()
    ├── AppendFailed                   some groups of an append_shared failed; .results has all outcomes
    ├── ConcurrencyConflict            CAS retries exhausted on a contended key (retriable)
    ├── OutcomeUnknown                 an append may or may not have committed (a retry may duplicate it)
    ├── VersionConflict                a conditional Oxia put/delete saw another version
    ├── InconsistentReadState          the index has a gap or overlaps (a bug or corruption)
    ├── CorruptBatch                   checksum, magic, length or count mismatch in stored bytes
    ├── MalformedAnswer                (_protocol/consume_binary.py) a binary consume answer breaks its
    │                                  layout (a client-side parse); names the field
    ├── CompactionConflict             another compactor changed the partition under us (retriable)
    ├── UnknownMetric                  (_metrics/spec.py) a metric used under a name, kind or labels
    │                                  the catalogue does not declare (a bug)
    ├── AuthenticationFailed           (_kafka/scram.py) a Kafka client's SASL exchange failed: answered
    │                                  SASL_AUTHENTICATION_FAILED, the connection closed
    ├── UnknownCredential              (_kafka/scram_users.py) no SCRAM credential to delete or describe:
    │                                  RESOURCE_NOT_FOUND
    ├── HandshakeFailed                (_kafka/tls.py) a Kafka client's TLS handshake failed: closed
    ├── _BodyRefused                   (_broker/http.py, private) a request body refused before it was
    │                                  read (411/413/short body); carries the answer to send
    ├── StorageError                   a metadata or object store call failed
    │   ├── MetadataStoreError         Oxia: unavailable, timeout, unexpected status (retriable)
    │   └── ObjectStoreError           S3: unavailable, timeout, access denied ...
    │       ├── ObjectNotFound         the object (or bucket) does not exist
    │       └── LeanS3Error             (_storage/s3_lean.py) the lean GET's failure, translated by the
    │                                  S3 adapter before it leaves the storage layer
    └── ProduceError                   (client/_produce_errors.py) the Spark produce client's errors
        ├── ProduceFailed              a batch could not be acknowledged (non-retriable answer or
        │   │                          retry budget spent); names broker, topic-partition, last error
        │   └── BrokerUnreachable      the last attempt could not connect to any broker
        ├── ProduceJobFailed           (spark/produce_job.py) a task of the produce job failed
        └── _ConnectFailed             (client/_produce_client.py, private) no HTTP answer from a broker

No other exception class exists in the package: everything raised on
purpose is one of these (private control-flow signals included).

No Oxia, grpc or botocore exception crosses the storage boundary: the adapters
in ``_storage/metastore.py`` and ``_storage/objectstore.py`` translate them
with ``raise ... from``.

What an error means in an HTTP answer (its ``error_type``, status, whether a
retry can help, whether its write is definitely not done or of unknown
outcome) is one table, ``_protocol/outcomes.py``.
"""

from __future__ import annotations

__all__ = [
    "LlogError",
    "ConfigError",
    "InvalidRequest",
    "PartitionNotInitialized",
    "OffsetOutOfRange",
    "PartitionFenced",
    "OutOfOrderSequence",
    "ProducerFenced",
    "UnknownGroup",
    "StaleGeneration",
    "BackPressureRejected",
    "ProducerClosed",
    "AppendFailed",
    "ConcurrencyConflict",
    "OutcomeUnknown",
    "VersionConflict",
    "InconsistentReadState",
    "CorruptBatch",
    "CompactionConflict",
    "StorageError",
    "MetadataStoreError",
    "ObjectStoreError",
    "ObjectNotFound",
]


class LlogError(Exception):
    """Base of every llog error.

    ``topic``/``partition``/``offset`` name what the error concerns when known;
    ``retriable`` says whether the same call may succeed if tried again.
    """

    retriable: bool = False

    def __init__(
        self,
        message: str,
        *,
        topic: str | None = None,
        partition: int | None = None,
        offset: int | None = None,
        retriable: bool | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.topic = topic
        self.partition = partition
        self.offset = offset
        if retriable is not None:
            self.retriable = retriable

    def __str__(self) -> str:
        where = []
        if self.topic is not None:
            where.append(f"topic={self.topic!r}")
        if self.partition is not None:
            where.append(f"partition={self.partition}")
        if self.offset is not None:
            where.append(f"offset={self.offset}")
        return f"{self.message} ({', '.join(where)})" if where else self.message


class ConfigError(LlogError):
    """A configuration value is missing or invalid; the message names it."""


class InvalidRequest(LlogError):
    """The caller passed an invalid topic, partition, payload or argument."""


class UnknownTopic(LlogError):
    """The topic is not in the catalogue (never created, deleted, or auto-creation is off),
    or the partition is not below its partition count."""


class TopicAlreadyExists(LlogError):
    """A create named a topic that exists (or whose deletion is still running)."""


class PartitionNotInitialized(LlogError):
    """The topic-partition has no ``meta/control`` record yet."""


class OffsetOutOfRange(LlogError):
    """The offset is below the log start or not yet written; ``log_start_offset`` and
    ``high_watermark`` (when known) say where the log is, so a consumer can reset."""

    def __init__(self, message: str, *, log_start_offset: int | None = None, high_watermark: int | None = None,
                 **kwargs) -> None:
        super().__init__(message, **kwargs)
        self.log_start_offset = log_start_offset
        self.high_watermark = high_watermark


class PartitionFenced(LlogError):
    """The partition is FENCED; appends are refused until it is unfenced."""


class OutOfOrderSequence(LlogError):
    """An idempotent batch's first sequence is not the next one its producer's
    state in the log expects (a gap, a batch straddling the last one, or a new
    epoch not starting at 0). Nothing of it was stored. Retriable: the batch
    that fills the gap may still be on its way (clients keep 5 in flight)."""

    retriable = True


class ProducerFenced(LlogError):
    """An idempotent batch carries an epoch older than its producer's in the
    log: a newer instance initialized the same producer. Nothing was stored."""


class UnknownGroup(LlogError):
    """The consumer group has no committed offset: nothing was ever committed for it."""


class StaleGeneration(LlogError):
    """A conditional commit named a generation or member the group no longer has
    (Kafka's ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID); nothing was committed.
    ``field`` names which: ``generation`` or ``member_id``."""

    def __init__(self, message: str, *, field: str = "generation", **kwargs) -> None:
        super().__init__(message, **kwargs)
        self.field = field


class BackPressureRejected(LlogError):
    """Accepting the submit would exceed the producer's buffer cap."""

    retriable = True


class ProducerClosed(LlogError):
    """The producer was closed; nothing more is accepted."""


class AppendFailed(LlogError):
    """One or more groups of an ``append_shared`` call failed.

    ``results`` holds every group's outcome in input order, successes
    included, so the caller knows exactly what was committed. Retriable when
    every failure is.
    """

    def __init__(self, message: str, results: list, **kwargs) -> None:
        super().__init__(message, **kwargs)
        self.results = results
        failures = [r.error for r in results if r.error is not None]
        self.retriable = bool(failures) and all(e.retriable for e in failures)


class ConcurrencyConflict(LlogError):
    """A compare-and-set kept losing to other writers until retries ran out."""

    retriable = True


class OutcomeUnknown(LlogError):
    """The writer cannot tell whether an append committed: the reply to its
    offset reservation was lost and the store could not be read to decide.

    Every other append error is definite: nothing of the batch is in the log,
    ever. After this one the records may be in the log once, or not at all.
    Sending them again is at-least-once (they may then appear twice);
    ``retriable`` is True in that sense.
    """

    retriable = True


class VersionConflict(LlogError):
    """A conditional put or delete found another version (or an existing key
    where none was expected). The writer and compactor re-read and retry;
    callers see ConcurrencyConflict only when retries run out."""

    retriable = True


class InconsistentReadState(LlogError):
    """The sparse index does not cover a range it should (gap or overlap)."""


class CorruptBatch(LlogError):
    """Stored bytes failed validation (magic, version, length, count or CRC)."""


class CompactionConflict(LlogError):
    """Another compactor changed the partition's compaction state under us."""

    retriable = True


class StorageError(LlogError):
    """A call to the metadata store or the object store failed."""

    retriable = True


class MetadataStoreError(StorageError):
    """An Oxia call failed (unavailable, deadline, unexpected status)."""


class ObjectStoreError(StorageError):
    """An S3 call failed."""


class ObjectNotFound(ObjectStoreError):
    """The object or the bucket does not exist."""

    retriable = False
