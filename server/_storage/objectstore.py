"""The object store seam: a small Protocol, the S3 (boto3) adapter, an in-memory fake.

The S3 adapter is the only module that touches boto3. botocore errors become
:class:`ObjectNotFound` (NoSuchKey, NoSuchBucket, 404) or
:class:`ObjectStoreError` (everything else; retriable unless access was
denied). Operation names match the billing categories: ``put``, ``get``
(whole object), ``range_get``, ``list``, ``delete``.

GETs and PUTs on an explicit endpoint with static credentials skip boto3
and go through :mod:`server._storage.s3_lean` (a quarter to a fifth of the
CPU per request); its errors map to the same exceptions and messages.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass
from typing import Iterable, Iterator, Protocol

from .._config import S3Config
from .._errors import ObjectNotFound, ObjectStoreError
from .._metrics import LlogMetrics
from .s3_lean import LeanS3Error, LeanS3Client, SigV4Signer

__all__ = ["ObjectInfo", "ObjectStore", "S3ObjectStore", "InMemoryObjectStore"]


@dataclass(frozen=True, order=True)
class ObjectInfo:
    key: str
    size: int
    last_modified_ms: int


class ObjectStore(Protocol):
    def put(self, bucket: str, key: str, data: bytes) -> None: ...

    def get(self, bucket: str, key: str, byte_range: tuple[int, int] | None = None) -> bytes:
        """The object, or ``[start, start+length)`` of it when ``byte_range``
        is ``(start, length)``."""
        ...

    def list(self, bucket: str, prefix: str) -> Iterator[ObjectInfo]: ...

    def delete_many(self, bucket: str, keys: Iterable[str]) -> None: ...

    def close(self) -> None: ...


_NOT_FOUND = {"NoSuchKey", "NoSuchBucket", "404", "NotFound"}
_DENIED = {"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "403"}


class S3ObjectStore:
    """ObjectStore over any S3-compatible endpoint (path-style addressing)."""

    def __init__(self, config: S3Config, metrics: LlogMetrics | None = None) -> None:
        import boto3
        from botocore.config import Config

        self._config = config
        self._metrics = metrics or LlogMetrics()
        session = boto3.session.Session()
        self._client = session.client(
            "s3",
            endpoint_url=config.endpoint_url,
            region_name=config.region_name or "us-east-1",
            aws_access_key_id=config.access_key_id,
            aws_secret_access_key=config.secret_access_key,
            aws_session_token=config.session_token,
            config=Config(
                s3={"addressing_style": "path"},
                retries={"max_attempts": 4, "mode": "standard"},
                max_pool_connections=config.max_pool_connections,
                connect_timeout=5,
                read_timeout=60,
            ),
        )
        self._lean: LeanS3Client | None = None
        if config.endpoint_url and config.access_key_id and config.secret_access_key:
            self._lean = LeanS3Client(config.endpoint_url, SigV4Signer(
                config.access_key_id, config.secret_access_key, config.region_name or "us-east-1",
                config.session_token,
            ))
        self._closed = False
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def _translated(self, op: str, bucket: str, key: str) -> Iterator[None]:
        """Every S3 call runs in here: botocore's and the lean GET's errors
        leave as ObjectNotFound or ObjectStoreError naming the call and object."""
        try:
            yield
        except Exception as exc:
            raise self._fail(op, bucket, key, exc) from exc

    def _fail(self, op: str, bucket: str, key: str, exc: Exception) -> ObjectStoreError:
        from botocore.exceptions import ClientError

        if isinstance(exc, ClientError):
            code = str(exc.response.get("Error", {}).get("Code", ""))
            return self._refused(op, bucket, key, code, str(exc))
        if isinstance(exc, LeanS3Error) and exc.status:
            return self._refused(op, bucket, key, exc.code, exc.reason)
        return self._unreachable(op, bucket, key, exc)

    def _refused(self, op: str, bucket: str, key: str, code: str, detail: str) -> ObjectStoreError:
        where = f"s3://{bucket}/{key}"
        if code in _NOT_FOUND:
            what = "bucket" if code == "NoSuchBucket" else "object"
            hint = " (the bucket must already exist: create it first)" if what == "bucket" else ""
            return ObjectNotFound(f"S3 {op} {where}: no such {what}{hint}")
        if code in _DENIED:
            return ObjectStoreError(
                f"S3 {op} {where}: access denied ({code}); check LLOG_S3_ACCESS_KEY_ID/"
                "LLOG_S3_SECRET_ACCESS_KEY",
                retriable=False,
            )
        return ObjectStoreError(f"S3 {op} {where} failed: {code}: {detail}")

    def _unreachable(self, op: str, bucket: str, key: str, exc: Exception) -> ObjectStoreError:
        endpoint = self._config.endpoint_url or "AWS"
        return ObjectStoreError(f"S3 {op} s3://{bucket}/{key} failed ({endpoint}): {type(exc).__name__}: {exc}")

    def put(self, bucket: str, key: str, data: bytes) -> None:
        with self._translated("put", bucket, key), self._metrics.s3_op("put", len(data)):
            if self._lean is not None:
                self._lean.put(bucket, key, data)
            else:
                self._client.put_object(Bucket=bucket, Key=key, Body=data)

    def get(self, bucket: str, key: str, byte_range: tuple[int, int] | None = None) -> bytes:
        op = "get" if byte_range is None else "range_get"
        if byte_range is not None and byte_range[1] <= 0:
            return b""
        with self._translated(op, bucket, key), self._metrics.s3_op(op):
            if self._lean is not None:
                data = self._lean.get(bucket, key, byte_range)
            else:
                data = self._boto_get(bucket, key, byte_range)
        self._metrics.inc("s3_bytes_total", len(data), op=op)
        return data

    def _boto_get(self, bucket: str, key: str, byte_range: tuple[int, int] | None) -> bytes:
        if byte_range is None:
            resp = self._client.get_object(Bucket=bucket, Key=key)
        else:
            start, length = byte_range
            resp = self._client.get_object(Bucket=bucket, Key=key, Range=f"bytes={start}-{start + length - 1}")
        return resp["Body"].read()

    def list(self, bucket: str, prefix: str) -> Iterator[ObjectInfo]:
        token = None
        while True:
            kwargs = {"Bucket": bucket, "Prefix": prefix, "MaxKeys": 1000}
            if token:
                kwargs["ContinuationToken"] = token
            with self._translated("list", bucket, prefix), self._metrics.s3_op("list"):
                resp = self._client.list_objects_v2(**kwargs)
            for obj in resp.get("Contents", []):
                yield ObjectInfo(
                    obj["Key"], int(obj["Size"]), int(obj["LastModified"].timestamp() * 1000)
                )
            if not resp.get("IsTruncated"):
                return
            token = resp.get("NextContinuationToken")

    def delete_many(self, bucket: str, keys: Iterable[str]) -> None:
        batch: list[str] = []
        for key in keys:
            batch.append(key)
            if len(batch) == 1000:
                self._delete_batch(bucket, batch)
                batch = []
        if batch:
            self._delete_batch(bucket, batch)

    def _delete_batch(self, bucket: str, keys: list[str]) -> None:
        with self._translated("delete", bucket, keys[0]), self._metrics.s3_op("delete"):
            resp = self._client.delete_objects(
                Bucket=bucket, Delete={"Objects": [{"Key": k} for k in keys], "Quiet": True}
            )
        errors = [e for e in resp.get("Errors", []) if e.get("Code") != "NoSuchKey"]
        if errors:
            first = errors[0]
            raise ObjectStoreError(
                f"S3 delete of {len(errors)} objects failed, first s3://{bucket}/{first.get('Key')}: "
                f"{first.get('Code')}: {first.get('Message')}"
            )

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        if self._lean is not None:
            self._lean.close()
        self._client.close()


class InMemoryObjectStore:
    """Dict-backed fake for unit tests; ``objects[(bucket, key)] = bytes``."""

    def __init__(self, buckets: Iterable[str] = ("llog",)) -> None:
        self._lock = threading.Lock()
        self.buckets = set(buckets)
        self.objects: dict[tuple[str, str], tuple[bytes, int]] = {}
        self.calls: dict[str, int] = {}
        self._clock_ms = 0

    def _bucket(self, bucket: str) -> None:
        if bucket not in self.buckets:
            raise ObjectNotFound(f"no such bucket {bucket!r}")

    def put(self, bucket: str, key: str, data: bytes) -> None:
        with self._lock:
            self.calls["put"] = self.calls.get("put", 0) + 1
            self._bucket(bucket)
            self._clock_ms += 1
            self.objects[(bucket, key)] = (bytes(data), self._clock_ms)

    def get(self, bucket: str, key: str, byte_range: tuple[int, int] | None = None) -> bytes:
        with self._lock:
            op = "get" if byte_range is None else "range_get"
            self.calls[op] = self.calls.get(op, 0) + 1
            self._bucket(bucket)
            hit = self.objects.get((bucket, key))
            if hit is None:
                raise ObjectNotFound(f"no such object s3://{bucket}/{key}")
            data = hit[0]
            if byte_range is None:
                return data
            start, length = byte_range
            return data[start:start + length]

    def list(self, bucket: str, prefix: str) -> Iterator[ObjectInfo]:
        with self._lock:
            self._bucket(bucket)
            rows = sorted(
                ObjectInfo(k, len(v), t) for (b, k), (v, t) in self.objects.items()
                if b == bucket and k.startswith(prefix)
            )
        return iter(rows)

    def delete_many(self, bucket: str, keys: Iterable[str]) -> None:
        with self._lock:
            for k in keys:
                self.objects.pop((bucket, k), None)

    def close(self) -> None:
        pass
