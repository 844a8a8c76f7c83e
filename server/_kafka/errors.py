"""What each llog outcome is in Kafka's protocol: one table of error codes.

The HTTP contract answers by ``server/_protocol/outcomes.py``; a Kafka client
reads error codes. :func:`error_code` maps every llog error to the code whose
client-side meaning matches (retriable or not, refresh metadata or not), so a
Kafka client does what an HTTP client does with the same outcome:

===============================  ====  =============================  ===========================
llog                             code  Kafka                          why
===============================  ====  =============================  ===========================
UnknownTopic                       3   UNKNOWN_TOPIC_OR_PARTITION     retriable: metadata refresh
PartitionNotInitialized            3   UNKNOWN_TOPIC_OR_PARTITION
OffsetOutOfRange                   1   OFFSET_OUT_OF_RANGE            the consumer resets
CorruptBatch                       2   CORRUPT_MESSAGE                the batch's CRC or layout
TooLarge                          10   MESSAGE_TOO_LARGE              past max.message.bytes
InvalidField, InvalidRequest      87   INVALID_RECORD                 a batch llog cannot store
OutOfOrderSequence                19   NOT_ENOUGH_REPLICAS            retriable: the batch before it
                                                                      may still be on its way
                                                                      through another broker
ProducerFenced                    47   INVALID_PRODUCER_EPOCH         a newer instance took over
BackPressureRejected               7   REQUEST_TIMED_OUT              retriable, as 429 is
ProducerClosed                     6   NOT_LEADER_OR_FOLLOWER         this broker is going away:
                                                                      refresh metadata, go elsewhere
OutcomeUnknown                     7   REQUEST_TIMED_OUT              retriable; with idempotence
                                                                      the retry is exactly once
StaleGeneration                   22   ILLEGAL_GENERATION             rejoin
UnknownGroup                      69   GROUP_ID_NOT_FOUND
TopicAlreadyExists                36   TOPIC_ALREADY_EXISTS
PartitionFenced                   56   KAFKA_STORAGE_ERROR            retriable: recovery unfences
StorageError, ConcurrencyConflict 56   KAFKA_STORAGE_ERROR            retriable: Oxia or S3 failed
AppendFailed                      56   KAFKA_STORAGE_ERROR
anything else                     -1   UNKNOWN_SERVER_ERROR           a bug: logged
===============================  ====  =============================  ===========================

KAFKA_STORAGE_ERROR is Kafka's retriable "the log could not be written": a
Kafka client retries it after refreshing metadata, as an HTTP client retries
a 503.

OutOfOrderSequence is llog's retriable gap: with no partition leader, a
client that moves a partition to another broker (a broker died, metadata
changed) may send batch N there while batch N-1 is still in flight through
the first. Kafka's OUT_OF_ORDER_SEQUENCE_NUMBER would make Java clients and
librdkafka fail the batch and bump the producer's epoch (KIP-360);
NOT_ENOUGH_REPLICAS says what is true -- nothing was written, send the same
batch again -- and clients retry it with its sequence until N-1 lands (the
chaos run with ``--kafka`` found this: ``testing/_chaos_kafka.py``). Codes the listener answers by itself (NOT_COORDINATOR,
UNSUPPORTED_VERSION, ...) are named in :class:`Code`.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Callable, TypeVar

from .._errors import (
    AppendFailed, BackPressureRejected, ConcurrencyConflict, CorruptBatch, InvalidRequest, LlogError, OffsetOutOfRange,
    OutcomeUnknown, OutOfOrderSequence, PartitionFenced, PartitionNotInitialized, ProducerClosed, ProducerFenced,
    StaleGeneration, StorageError, TopicAlreadyExists, UnknownGroup, UnknownTopic,
)
from .._protocol.http_json import TooLarge

__all__ = ["Code", "attempt", "error_code"]

T = TypeVar("T")


class Code(IntEnum):
    """The Kafka error codes the listener answers with (Kafka's ``Errors`` enum)."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    MESSAGE_TOO_LARGE = 10
    NOT_ENOUGH_REPLICAS = 19
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    UNSUPPORTED_VERSION = 35
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_REQUEST = 42
    INVALID_CONFIG = 40
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    INVALID_PRODUCER_EPOCH = 47
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    SECURITY_DISABLED = 54
    KAFKA_STORAGE_ERROR = 56
    SASL_AUTHENTICATION_FAILED = 58
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    FETCH_SESSION_ID_NOT_FOUND = 70
    INVALID_FETCH_SESSION_EPOCH = 71
    MEMBER_ID_REQUIRED = 79
    FENCED_INSTANCE_ID = 82
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    ELECTION_NOT_NEEDED = 84
    INVALID_RECORD = 87
    RESOURCE_NOT_FOUND = 91
    DUPLICATE_RESOURCE = 92
    UNACCEPTABLE_CREDENTIAL = 93
    UNKNOWN_TOPIC_ID = 100


_TABLE: tuple[tuple[type[BaseException], Code], ...] = (
    # Most specific first: TooLarge is an InvalidField is an InvalidRequest.
    (TooLarge, Code.MESSAGE_TOO_LARGE),
    (UnknownTopic, Code.UNKNOWN_TOPIC_OR_PARTITION),
    (PartitionNotInitialized, Code.UNKNOWN_TOPIC_OR_PARTITION),
    (OffsetOutOfRange, Code.OFFSET_OUT_OF_RANGE),
    (CorruptBatch, Code.CORRUPT_MESSAGE),
    (OutOfOrderSequence, Code.NOT_ENOUGH_REPLICAS),
    (ProducerFenced, Code.INVALID_PRODUCER_EPOCH),
    (BackPressureRejected, Code.REQUEST_TIMED_OUT),
    (ProducerClosed, Code.NOT_LEADER_OR_FOLLOWER),
    (OutcomeUnknown, Code.REQUEST_TIMED_OUT),
    (StaleGeneration, Code.ILLEGAL_GENERATION),
    (UnknownGroup, Code.GROUP_ID_NOT_FOUND),
    (TopicAlreadyExists, Code.TOPIC_ALREADY_EXISTS),
    (PartitionFenced, Code.KAFKA_STORAGE_ERROR),
    (StorageError, Code.KAFKA_STORAGE_ERROR),
    (ConcurrencyConflict, Code.KAFKA_STORAGE_ERROR),
    (AppendFailed, Code.KAFKA_STORAGE_ERROR),
    (InvalidRequest, Code.INVALID_RECORD),
)


def error_code(exc: BaseException | None) -> Code:
    """The Kafka error code of an llog outcome (the module's table)."""
    if exc is None:
        return Code.NONE
    for cls, code in _TABLE:
        if isinstance(exc, cls):
            return code
    if isinstance(exc, LlogError) and exc.retriable:
        return Code.KAFKA_STORAGE_ERROR
    return Code.UNKNOWN_SERVER_ERROR


def attempt(body: Callable[[], T], to_code: Callable[[LlogError], int] = error_code) -> tuple[int, str | None, T | None]:
    """``(NONE, None, body())``, or ``(code, message, None)`` when ``body`` raised an LlogError:
    one item's answer in a request that answers each item (topic, partition, resource) on its own."""
    try:
        return Code.NONE, None, body()
    except LlogError as exc:
        return to_code(exc), str(exc), None
