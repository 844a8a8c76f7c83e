"""Shared metadata, path, S3 config and batch codec helpers (the seed's module).

This module keeps the reference system's import path; the pieces live in
small private modules, one concept each, and are re-exported here.
"""

from __future__ import annotations

from ._config import BatchConfig, OxiaConfig, S3Config
from ._errors import *  # noqa: F401,F403  (the error hierarchy)
from ._errors import __all__ as _error_names
from ._groups.offsets import CommittedOffset, GroupLag, GroupOffsets
from ._protocol.codec import (
    BATCH_ENCODING,
    SharedBlobHeader,
    SharedBlobPart,
    decode_batch,
    decode_shared_header,
    encode_batch,
    encode_shared_blob,
)
from ._protocol.keys import (
    LogLayout,
    PartitionKeys,
    TopicPartition,
    format_offset,
    parse_s3_uri,
    validate_partition,
    validate_topic,
)
from ._protocol.records import (
    CompactionCursor,
    CompactionRecord,
    CompactorClaim,
    ControlRecord,
    EntryType,
    IndexEntry,
    LogState,
    PendingAppend,
)
from ._protocol.structs import AppendResult, ReadRecord, SharedAppendGroup

# The seed's names of the states.
ENTRY_COMPACTED, ENTRY_WAL = EntryType.COMPACTED, EntryType.WAL
LOG_STATE_FENCED, LOG_STATE_OPEN = LogState.FENCED, LogState.OPEN

__all__ = [
    "GroupOffsets", "CommittedOffset", "GroupLag",
    "BATCH_ENCODING",
    "SharedBlobHeader",
    "SharedBlobPart",
    "decode_batch",
    "decode_shared_header",
    "encode_batch",
    "encode_shared_blob",
    "BatchConfig",
    "OxiaConfig",
    "S3Config",
    "LogLayout",
    "PartitionKeys",
    "TopicPartition",
    "format_offset",
    "parse_s3_uri",
    "validate_partition",
    "validate_topic",
    "EntryType",
    "LogState",
    "ENTRY_COMPACTED", "ENTRY_WAL", "LOG_STATE_FENCED", "LOG_STATE_OPEN",
    "CompactionCursor", "CompactionRecord", "CompactorClaim",
    "ControlRecord",
    "IndexEntry",
    "PendingAppend",
    "AppendResult",
    "ReadRecord",
    "SharedAppendGroup",
    *_error_names,
]
