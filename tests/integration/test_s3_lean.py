"""The lean S3 GET and PUT (server/_storage/s3_lean.py) against the real S3 server:
same bytes as boto3 both ways, the PUT's CRC-32C checked by the server, same
errors through S3ObjectStore, retried on a fresh connection."""

from __future__ import annotations

import base64
import uuid

import google_crc32c
import pytest

from server._config import S3Config
from server._errors import ObjectNotFound, ObjectStoreError
from server._storage.objectstore import S3ObjectStore
from server._storage.s3_lean import LeanS3Error, LeanS3Client, SigV4Signer

pytestmark = pytest.mark.integration


@pytest.fixture
def s3(llog_env):
    store = S3ObjectStore(S3Config.from_env(llog_env))
    assert store._lean is not None, "an explicit endpoint with static keys takes the lean path"
    yield store
    store.close()


def _boto_get(store: S3ObjectStore, bucket: str, key: str, rng: str | None = None) -> bytes:
    kwargs = {"Range": rng} if rng else {}
    return store._client.get_object(Bucket=bucket, Key=key, **kwargs)["Body"].read()


@pytest.mark.parametrize("name", ["plain.bin", "dir/with space+plus=eq&amp", "ünïcødé/ключ~x", "a" * 200])
def test_same_bytes_as_boto3_whole_and_ranges(s3, s3_config, name):
    bucket = s3_config.require_bucket()
    key = f"test-s3-get/{uuid.uuid4().hex}/{name}"
    data = bytes(range(256)) * 4096 + b"tail"  # 1 MiB + 4
    s3.put(bucket, key, data)
    assert s3.get(bucket, key) == data == _boto_get(s3, bucket, key)
    for start, length in ((0, 1), (5, 100), (len(data) - 4, 4), (1000, 500_000)):
        got = s3.get(bucket, key, (start, length))
        assert got == data[start:start + length] == _boto_get(s3, bucket, key, f"bytes={start}-{start + length - 1}")
    assert s3.get(bucket, key, (10, 0)) == b""


@pytest.mark.parametrize("size", [0, 1, 8 * 1024 * 1024 + 3])
@pytest.mark.parametrize("body", [bytes, lambda b: memoryview(bytearray(b))], ids=["bytes", "view"])
def test_lean_put_stores_what_boto3_reads_back(s3, s3_config, size, body):
    bucket = s3_config.require_bucket()
    key = f"test-s3-put/{uuid.uuid4().hex}/ключ with space"
    data = bytes((i * 31) & 0xFF for i in range(min(size, 4096))) * (size // 4096 + 1)
    data = data[:size]
    s3.put(bucket, key, body(data))
    assert _boto_get(s3, bucket, key) == data
    head = s3._client.head_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
    assert head["ContentLength"] == size
    assert head.get("ChecksumCRC32C") == base64.b64encode(google_crc32c.value(data).to_bytes(4, "big")).decode()


def test_a_put_whose_checksum_does_not_match_is_refused_and_stores_nothing(s3, s3_config):
    """The server checks the CRC-32C header against the bytes it received."""
    bucket = s3_config.require_bucket()
    key = f"test-s3-put/{uuid.uuid4().hex}"
    wrong = base64.b64encode(google_crc32c.value(b"other").to_bytes(4, "big")).decode()
    with pytest.raises(LeanS3Error) as info:
        s3._lean._send("PUT", s3._lean._path(bucket, key),
                       {"content-length": "5", "x-amz-checksum-crc32c": wrong}, b"bytes", (200,))
    assert info.value.status == 400
    with pytest.raises(ObjectNotFound):
        s3.get(bucket, key)


def test_missing_object_and_bucket_are_object_not_found(s3, s3_config):
    with pytest.raises(ObjectNotFound, match="no such object"):
        s3.get(s3_config.require_bucket(), f"test-s3-get/{uuid.uuid4().hex}")
    with pytest.raises(ObjectNotFound, match="no such bucket"):
        s3.get(f"no-such-bucket-{uuid.uuid4().hex[:8]}", "x", (0, 10))


def test_wrong_secret_is_access_denied_and_not_retriable(llog_env, s3_config):
    cfg = S3Config.from_env({**llog_env, "LLOG_S3_SECRET_ACCESS_KEY": "not-the-secret"})
    store = S3ObjectStore(cfg)
    try:
        with pytest.raises(ObjectStoreError, match="access denied") as info:
            store.get(s3_config.require_bucket(), "anything")
    finally:
        store.close()
    assert info.value.retriable is False


def test_unreachable_endpoint_is_a_retriable_error_naming_it():
    store = S3ObjectStore(S3Config("llog", endpoint_url="http://127.0.0.1:9", access_key_id="a",
                                   secret_access_key="b"))
    with pytest.raises(ObjectStoreError, match=r"127\.0\.0\.1:9.*Connection") as info:
        store.get("llog", "k")
    assert info.value.retriable and not isinstance(info.value, ObjectNotFound)
    store.close()


def test_a_dropped_keep_alive_connection_is_replaced(s3_config, llog_env):
    bucket = s3_config.require_bucket()
    key = f"test-s3-get/{uuid.uuid4().hex}"
    store = S3ObjectStore(s3_config)
    store.put(bucket, key, b"hello")
    store.close()
    getter = LeanS3Client(s3_config.endpoint_url, SigV4Signer(
        s3_config.access_key_id, s3_config.secret_access_key, s3_config.region_name or "us-east-1"))
    try:
        assert getter.get(bucket, key) == b"hello"
        assert getter.idle_connections == 1
        getter._idle[0].sock.close()  # the server (or a NAT) dropped the idle connection
        assert getter.get(bucket, key, (1, 3)) == b"ell"
        with pytest.raises(LeanS3Error) as info:
            getter.get(bucket, key + "-missing")
        assert (info.value.status, info.value.code) == (404, "NoSuchKey")
    finally:
        getter.close()
