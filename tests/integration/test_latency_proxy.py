"""``s3_latency_proxy`` in front of the test stack's MinIO: requests pass
unchanged (SigV4 signatures made for the proxy verify upstream) and each
waits at least its configured delay (a lower bound: sleeps never end early)."""

from __future__ import annotations

import time
from contextlib import ExitStack

import boto3
import pytest
from botocore.config import Config

from loadtest.bench_latency import start_proxy

pytestmark = pytest.mark.integration


def test_objects_pass_through_and_wait_their_delay(llog_env: dict[str, str]) -> None:
    with ExitStack() as stack:
        proxy = start_proxy(stack, llog_env["LLOG_S3_ENDPOINT_URL"],
                            ["-jitter=0", "-put-base=150ms", "-put-per-mib=0", "-get-first-byte=120ms"])
        s3 = boto3.client("s3", endpoint_url=proxy, region_name=llog_env["LLOG_S3_REGION_NAME"],
                          aws_access_key_id=llog_env["LLOG_S3_ACCESS_KEY_ID"],
                          aws_secret_access_key=llog_env["LLOG_S3_SECRET_ACCESS_KEY"],
                          config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}))
        key = f"{llog_env['LLOG_ROOT_PREFIX']}/proxy-probe"
        started = time.monotonic()
        s3.put_object(Bucket=llog_env["LLOG_S3_BUCKET"], Key=key, Body=b"through the proxy")
        put_s = time.monotonic() - started
        started = time.monotonic()
        body = s3.get_object(Bucket=llog_env["LLOG_S3_BUCKET"], Key=key, Range="bytes=0-6")["Body"].read()
        get_s = time.monotonic() - started
    assert body == b"through"
    assert put_s >= 0.15 and get_s >= 0.12
