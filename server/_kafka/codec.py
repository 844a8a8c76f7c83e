"""Kafka's request and response framing, over kafka-python's generated codec.

Every message body is decoded and encoded by ``kafka.protocol`` (kafka-python
3.x), whose classes are generated at import from Kafka's own JSON message
schemas: no request or response struct is written by hand here. What this
module owns is the frame around them and the choice of versions::

    offset  size  field
    0       4     size            int32, bytes that follow (<= the listener's max frame)
    4       2     api_key         int16
    6       2     api_version     int16
    8       4     correlation_id  int32, echoed in the response header
    12      2+N   client_id       nullable string (int16 length; -1 = null)
    ...           tagged fields   request header v2 only (flexible versions)
    ...           body            the API's request at ``api_version``

A response is ``size, correlation_id`` (response header v0), plus tagged
fields for flexible versions (header v1), then the body. ApiVersions always
answers with header v0, whatever its version, so a client that asked with a
version the broker does not know can still read the answer (KIP-511).

:data:`APIS` lists each API served with the versions advertised. Produce is
advertised from version 0 because librdkafka checks that range, but only 3 and
later are served (Kafka 4 does the same: versions 0-2 carry the old message
formats llog never stores).
"""

from __future__ import annotations

import functools
import io
import struct
import sys
from dataclasses import dataclass
from typing import Any

from kafka.protocol.admin import (
    AlterUserScramCredentialsRequest, DescribeUserScramCredentialsRequest,
    AlterClientQuotasRequest, AlterPartitionReassignmentsRequest, DescribeClientQuotasRequest, ElectLeadersRequest,
    ListPartitionReassignmentsRequest, CreateAclsRequest, CreatePartitionsRequest, CreateTopicsRequest, DeleteAclsRequest, DeleteGroupsRequest,
    DeleteRecordsRequest, DeleteTopicsRequest, DescribeAclsRequest, DescribeClusterRequest, DescribeConfigsRequest,
    DescribeGroupsRequest, DescribeLogDirsRequest, DescribeProducersRequest, IncrementalAlterConfigsRequest,
    ListGroupsRequest,
)
from kafka.protocol.api_header import RequestHeader
from kafka.protocol.schemas.fields.codecs.encode_buffer import EncodeBuffer
from kafka.protocol.consumer import (
    FetchRequest, HeartbeatRequest, JoinGroupRequest, LeaveGroupRequest, ListOffsetsRequest, OffsetCommitRequest,
    OffsetDeleteRequest, OffsetFetchRequest, OffsetForLeaderEpochRequest, SyncGroupRequest,
)
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, FindCoordinatorRequest, MetadataRequest
from kafka.protocol.producer import InitProducerIdRequest, ProduceRequest
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest

from .._errors import InvalidRequest

__all__ = ["Api", "APIS", "API_VERSIONS", "PRODUCE", "FETCH", "OFFSET_COMMIT", "MalformedFrame", "KafkaRequest", "decode_request", "peek_header",
           "encode_response", "SIZE"]

SIZE = struct.Struct(">i")
_PEEK = struct.Struct(">hhi")
_MAX_HEADER = 8 + 2 + 0x7FFF + 4096
"""The longest request header: the fixed fields, a client id of 32767 bytes, tagged fields."""


class MalformedFrame(InvalidRequest):
    """A Kafka request that cannot be read: too short, an unknown API, a version not
    served, or a body its schema cannot decode. The listener closes the connection,
    as Kafka does (an ApiVersions of an unknown version is answered instead)."""

    def __init__(self, message: str, *, api_key: int | None = None, api_version: int | None = None,
                 correlation_id: int | None = None, version_not_served: bool = False) -> None:
        super().__init__(message)
        self.api_key, self.api_version, self.correlation_id = api_key, api_version, correlation_id
        self.version_not_served = version_not_served
        """The API is served, this version of it is not (an ApiVersions of it is answered, KIP-511)."""


@dataclass(frozen=True)
class Api:
    """One API the listener serves: its key, the versions it advertises and the lowest it decodes."""

    key: int
    request: Any
    min_version: int
    max_version: int
    served_from: int | None = None
    """The lowest version actually served, when it is above the advertised ``min_version``."""

    @property
    def name(self) -> str:
        return self.request.__name__.removesuffix("Request")

    @property
    def response(self) -> Any:
        # Each generated module defines the pair side by side.
        return getattr(sys.modules[self.request.__module__], self.name + "Response")

    def serves(self, version: int) -> bool:
        return (self.served_from if self.served_from is not None else self.min_version) <= version <= self.max_version


_SERVED = (
    # (request class, min, max, served from): the ranges of the table, KAFKA_API.md says why.
    (ProduceRequest, 0, 11, 3),
    (FetchRequest, 4, 12, None),
    (ListOffsetsRequest, 1, 7, None),
    (MetadataRequest, 0, 12, None),
    (OffsetCommitRequest, 2, 9, None),
    (OffsetFetchRequest, 1, 9, None),
    (FindCoordinatorRequest, 0, 4, None),
    (JoinGroupRequest, 0, 9, None),
    (HeartbeatRequest, 0, 4, None),
    (LeaveGroupRequest, 0, 5, None),
    (SyncGroupRequest, 0, 5, None),
    (DescribeGroupsRequest, 0, 5, None),
    (ListGroupsRequest, 0, 4, None),
    (DeleteGroupsRequest, 0, 2, None),
    (OffsetDeleteRequest, 0, 0, None),
    (ApiVersionsRequest, 0, 4, None),
    (CreateTopicsRequest, 2, 7, None),
    (DeleteTopicsRequest, 1, 6, None),
    (DeleteRecordsRequest, 0, 2, None),
    (InitProducerIdRequest, 0, 4, None),
    (OffsetForLeaderEpochRequest, 2, 4, None),
    (DescribeConfigsRequest, 1, 4, None),
    (DescribeClusterRequest, 0, 1, None),
    (CreatePartitionsRequest, 0, 3, None),
    (IncrementalAlterConfigsRequest, 0, 1, None),
    (DescribeLogDirsRequest, 1, 4, None),
    (DescribeProducersRequest, 0, 0, None),
    (DescribeAclsRequest, 1, 3, None),
    (CreateAclsRequest, 1, 3, None),
    (DeleteAclsRequest, 1, 3, None),
    (ElectLeadersRequest, 0, 2, None),
    (ListPartitionReassignmentsRequest, 0, 0, None),
    (AlterPartitionReassignmentsRequest, 0, 0, None),
    (DescribeClientQuotasRequest, 0, 1, None),
    (AlterClientQuotasRequest, 0, 1, None),
    (SaslHandshakeRequest, 1, 1, None),  # v0 is followed by raw tokens, not framed requests: not served
    (SaslAuthenticateRequest, 0, 2, None),
    (DescribeUserScramCredentialsRequest, 0, 0, None),
    (AlterUserScramCredentialsRequest, 0, 0, None),
)
APIS: dict[int, Api] = {cls.API_KEY: Api(cls.API_KEY, cls, lo, hi, served) for cls, lo, hi, served in _SERVED}
API_VERSIONS = ApiVersionsRequest.API_KEY
PRODUCE, FETCH, OFFSET_COMMIT = ProduceRequest.API_KEY, FetchRequest.API_KEY, OffsetCommitRequest.API_KEY


@dataclass(frozen=True)
class KafkaRequest:
    """A decoded request: which API and version, the header's ids, and the body."""

    api: Api
    version: int
    correlation_id: int
    client_id: str | None
    body: Any


def peek_header(frame: bytes | memoryview) -> tuple[int, int, int]:
    """``(api_key, api_version, correlation_id)``: the fields every header version starts with."""
    if len(frame) < _PEEK.size:
        raise MalformedFrame(f"a request of {len(frame)} bytes is shorter than a request header (8 bytes)")
    return _PEEK.unpack_from(frame, 0)


def decode_request(frame: bytes) -> KafkaRequest:
    """The request in ``frame`` (the bytes after the size). MalformedFrame when it cannot be served."""
    key, version, correlation_id = peek_header(frame)
    api = APIS.get(key)
    where = dict(api_key=key, api_version=version, correlation_id=correlation_id)
    if api is None:
        raise MalformedFrame(f"API key {key} is not served", **where)
    if not api.serves(version):
        low = api.served_from if api.served_from is not None else api.min_version
        raise MalformedFrame(f"{api.name} version {version} is not served ({low}-{api.max_version})", **where,
                             version_not_served=True)
    flexible = api.request.flexible_version_q(version)
    try:
        stream = io.BytesIO(frame[:_MAX_HEADER])  # not the whole frame: a produce's is megabytes
        header = RequestHeader.decode(stream, flexible=flexible)
        body = api.request.decode(memoryview(frame)[stream.tell():], version=version)
    except Exception as exc:  # the generated decoder raises struct, index, value and unicode errors
        raise MalformedFrame(f"{api.name} v{version}: the body does not decode: {exc!r}", **where) from exc
    null = _null_field(body, api.request.json["fields"], version)
    if null is not None:
        raise MalformedFrame(f"{api.name} v{version}: {null} is null, which its schema does not allow", **where)
    return KafkaRequest(api, version, correlation_id, header.client_id, body)


def _in(versions: str | None, version: int) -> bool:
    if not versions or versions == "none":
        return False
    low, _, high = versions.partition("-")
    if versions.endswith("+"):
        return version >= int(versions[:-1])
    return int(low) <= version <= int(high or low)


def _null_field(obj: Any, fields: list[dict], version: int, path: str = "") -> str | None:
    """The first field that is null although the schema does not allow it at ``version``
    (kafka-python decodes a -1 length as None whatever the schema says; Kafka refuses it)."""
    for f in fields:
        if not _in(f.get("versions"), version) or "tag" in f:
            continue
        name = _snake(f["name"])
        value = getattr(obj, name, None)
        where = f"{path}{name}"
        if value is None:
            if f["type"] in ("string", "bytes", "records") or f["type"].startswith("[]") or "fields" in f:
                if not _in(f.get("nullableVersions"), version):
                    return where
            continue
        if "fields" in f:
            for i, item in enumerate(value if f["type"].startswith("[]") else [value]):
                found = _null_field(item, f["fields"], version, f"{where}[{i}].")
                if found is not None:
                    return found
    return None


@functools.lru_cache(maxsize=None)
def _snake(name: str) -> str:
    out = []
    for i, ch in enumerate(name):
        if ch.isupper() and i and (not name[i - 1].isupper() or (i + 1 < len(name) and name[i + 1].islower())):
            out.append("_")
        out.append(ch.lower())
    return "".join(out)


def encode_response(request: KafkaRequest, response: Any, size_hint: int = 0) -> memoryview:
    """The framed response to ``request`` (the header carries its correlation id)."""
    return encode_framed(response, request.version, request.correlation_id, size_hint)


def encode_framed(response: Any, version: int, correlation_id: int, size_hint: int = 0) -> memoryview:
    """``response`` framed, encoded by its generated encoder into a buffer of its own.

    What ``ApiMessage.encode(header=True, framed=True)`` does, with two changes for
    fetch answers of many megabytes: the buffer is sized up front from ``size_hint``
    (the records' bytes) instead of doubling from 64 KiB, and the answer is a view of
    it instead of a copy; kafka-python's per-thread buffer (which would keep the size of
    the largest answer its thread ever encoded, per handler thread) is not used.
    ``response`` must be built at ``version`` (``Response[version](...)``)."""
    if response.API_VERSION != version:
        raise ValueError(f"{type(response).__name__} built at v{response.API_VERSION}, answered at v{version}")
    response.with_header(correlation_id=correlation_id)
    flexible = response.flexible_version_q(version)
    out = EncodeBuffer(size_hint + _HEADROOM)
    out.pos = 4
    response.encode_header_into(out, flexible=flexible)  # ApiVersions' own: always header v0
    response._struct.compiled_encode_into(version, compact=flexible, tagged=flexible)(response, out)
    SIZE.pack_into(out.buf, 0, out.pos - 4)
    return memoryview(out.buf)[:out.pos]


_HEADROOM = 1 << 16
"""What an answer holds beyond its records: headers, fields, partition entries."""


def unsupported_api_versions(correlation_id: int) -> bytes:
    """ApiVersions v0 with UNSUPPORTED_VERSION and every API's range: the answer to an
    ApiVersions request of a version the broker does not know (KIP-511)."""
    return encode_framed(api_versions_response(0, error_code=35), 0, correlation_id)


def api_versions_response(version: int, *, error_code: int = 0) -> Any:
    keys = [ApiVersionsResponse.ApiVersion(api_key=a.key, min_version=a.min_version, max_version=a.max_version)
            for a in sorted(APIS.values(), key=lambda a: a.key)]
    return ApiVersionsResponse[version](error_code=error_code, api_keys=keys, throttle_time_ms=0)
