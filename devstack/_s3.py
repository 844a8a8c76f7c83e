"""The local S3 server: MinIO (default) or versitygw, and the bucket on it.

MinIO keeps its objects under ``<data>/minio/data``, versitygw (posix
backend) under ``<data>/versitygw/data``; each logs next to its data. The
stack creates the bucket here: the llog library itself never creates buckets.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from ._process import ManagedProcess, StackError, http_ok, tcp_open

__all__ = ["S3Server", "ACCESS_KEY_ID", "SECRET_ACCESS_KEY", "REGION_NAME", "s3_client", "ensure_bucket"]

logger = logging.getLogger(__name__)

# Fixed development credentials: the servers listen on 127.0.0.1 only.
ACCESS_KEY_ID = "llog-dev-access"
SECRET_ACCESS_KEY = "llog-dev-secret-key"
REGION_NAME = "us-east-1"


def s3_client(endpoint_url: str, *, access_key_id: str = ACCESS_KEY_ID, secret_access_key: str = SECRET_ACCESS_KEY):  # type: ignore[no-untyped-def]
    """A boto3 S3 client for the local server (path-style, few retries)."""
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=endpoint_url,
        aws_access_key_id=access_key_id,
        aws_secret_access_key=secret_access_key,
        region_name=REGION_NAME,
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 2}, connect_timeout=2, read_timeout=10),
    )


def ensure_bucket(endpoint_url: str, bucket: str, *, timeout_s: float = 30.0) -> None:
    """Create ``bucket`` unless it exists; retried while the server warms up."""
    from botocore.exceptions import BotoCoreError, ClientError

    client = s3_client(endpoint_url)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            try:
                client.head_bucket(Bucket=bucket)
                return
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") not in ("404", "NoSuchBucket", "NotFound"):
                    raise
            try:
                client.create_bucket(Bucket=bucket)
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                    raise
            logger.info("created bucket %s at %s", bucket, endpoint_url)
            return
        except (BotoCoreError, ClientError) as exc:
            if time.monotonic() >= deadline:
                raise StackError(f"could not create bucket {bucket!r} at {endpoint_url}: {exc}") from exc
            time.sleep(0.3)


def _list_buckets_ok(endpoint_url: str) -> bool:
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        s3_client(endpoint_url).list_buckets()
        return True
    except (BotoCoreError, ClientError):
        return False


class S3Server:
    """One S3-compatible server process on 127.0.0.1."""

    def __init__(
        self,
        kind: str,
        binary: Path,
        data_dir: Path,
        *,
        port: int,
        console_port: int,
        die_with_parent: bool = True,
    ) -> None:
        self.kind = kind
        self.port = port
        self.data_dir = data_dir / kind
        if kind == "minio":
            argv: list[object] = [
                binary, "server",
                "--address", f"127.0.0.1:{port}",
                "--console-address", f"127.0.0.1:{console_port}",
                "--certs-dir", self.data_dir / "certs",  # default is ~/.minio/certs
                self.data_dir / "data",
            ]
            env = {
                "MINIO_ROOT_USER": ACCESS_KEY_ID,
                "MINIO_ROOT_PASSWORD": SECRET_ACCESS_KEY,
                "MINIO_BROWSER": "off",
                "MINIO_UPDATE": "off",
            }
        elif kind == "versitygw":
            argv = [
                binary,
                "--access", ACCESS_KEY_ID,
                "--secret", SECRET_ACCESS_KEY,
                "--port", f"127.0.0.1:{port}",
                "--quiet", "--keep-alive",
                "posix", self.data_dir / "data",
            ]
            env = {}
        else:
            raise StackError(f"unknown S3 server kind {kind!r}")
        self._process = ManagedProcess(
            kind, argv, log_path=self.data_dir / f"{kind}.log", env=env, die_with_parent=die_with_parent
        )

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def processes(self) -> list[ManagedProcess]:
        return [self._process]

    def healthy(self) -> bool:
        if self.kind == "minio":
            return http_ok(f"{self.endpoint_url}/minio/health/live")
        return tcp_open(self.port) and _list_buckets_ok(self.endpoint_url)

    def start(self, timeout_s: float = 60.0) -> None:
        (self.data_dir / "data").mkdir(parents=True, exist_ok=True)
        self._process.start()
        self._process.wait_healthy(self.healthy, timeout_s=timeout_s)

    def stop(self) -> None:
        self._process.stop()
