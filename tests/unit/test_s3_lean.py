"""SigV4 signing of the lean S3 GET (server/_storage/s3_lean.py), pinned by AWS's
published example and cross-checked against botocore's own signer."""

from __future__ import annotations

import datetime
import hashlib
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from server._storage.s3_lean import LeanS3Client, SigV4Signer

AWS_EXAMPLE = SigV4Signer("AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "us-east-1")
WHEN = datetime.datetime(2013, 5, 24, tzinfo=datetime.timezone.utc)
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


def test_aws_documented_get_object_example():
    """'Example: GET Object' of the S3 SigV4 documentation (header-based auth)."""
    h = AWS_EXAMPLE.signed_headers("GET", "examplebucket.s3.amazonaws.com", "/test.txt", {"Range": "bytes=0-9"},
                                   now=WHEN, payload_hash=EMPTY_SHA256)
    assert h["authorization"] == (
        "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
        "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
        "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
    )
    assert h["x-amz-date"] == "20130524T000000Z"


@pytest.mark.parametrize("token", [None, "FQoGZXIvYXdzEXAMPLETOKEN"])
@pytest.mark.parametrize("path,range_", [("/llog/a/b/c.bin", None), ("/llog/t%C3%A9st/x%20y%2Bz", "bytes=5-99")])
def test_matches_botocore_for_path_style_urls(token, path, range_):
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    signer = SigV4Signer("AKID", "secret/key+", "eu-west-3", token)
    headers = {"Range": range_} if range_ else {}
    req = AWSRequest(method="GET", url=f"http://127.0.0.1:9000{path}",
                     headers={**headers, "X-Amz-Content-SHA256": "UNSIGNED-PAYLOAD"})
    S3SigV4Auth(Credentials("AKID", "secret/key+", token), "s3", "eu-west-3").add_auth(req)
    signed_at = datetime.datetime.strptime(req.headers["X-Amz-Date"], "%Y%m%dT%H%M%SZ").replace(
        tzinfo=datetime.timezone.utc)
    # Over http botocore signs the (empty) payload's hash instead of UNSIGNED-PAYLOAD; use its choice.
    ours = signer.signed_headers("GET", "127.0.0.1:9000", path, headers, now=signed_at,
                                 payload_hash=req.headers["X-Amz-Content-SHA256"])
    assert ours["authorization"] == req.headers["Authorization"]
    if token:
        assert ours["x-amz-security-token"] == token == req.headers["X-Amz-Security-Token"]


def test_secret_is_not_in_repr():
    assert "secret" not in repr(SigV4Signer("AKID", "secret", "us-east-1"))


def test_endpoint_must_be_http():
    with pytest.raises(ValueError, match="http"):
        LeanS3Client("ftp://x", AWS_EXAMPLE)


class _CountingS3(BaseHTTPRequestHandler):
    """Answers every GET with 10 bytes (keep-alive), counting the connections it was given."""

    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        with self.server.lock:
            self.server.opened += 1

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        if self.server.barrier is not None:
            self.server.barrier.wait(10)
        self.send_response(200)
        self.send_header("Content-Length", "10")
        self.end_headers()
        self.wfile.write(b"x" * 10)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def s3_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _CountingS3)
    server.daemon_threads = True
    server.lock, server.opened, server.barrier = threading.Lock(), 0, None
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def test_a_connection_is_reused_across_threads_and_none_outlives_its_use(s3_server):
    # The broker answers each HTTP connection on a new thread: a connection
    # kept per thread stayed open after its thread ended, one socket each.
    url = f"http://127.0.0.1:{s3_server.server_address[1]}"
    client = LeanS3Client(url, AWS_EXAMPLE)
    for _ in range(30):
        t = threading.Thread(target=client.get, args=("b", "k"))
        t.start()
        t.join()
    assert s3_server.opened == 1
    assert client.idle_connections == 1
    client.close()
    client = LeanS3Client(url, AWS_EXAMPLE, max_idle_connections=4)
    s3_server.opened = 0
    s3_server.barrier = threading.Barrier(8)  # eight GETs in flight at once: eight connections
    threads = [threading.Thread(target=client.get, args=("b", "k")) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert s3_server.opened == 8 and client.idle_connections == 4  # the rest were closed when given back
    client.close()
    assert client.idle_connections == 0
