"""SigV4 signing of the lean S3 GET (server/_storage/s3_lean.py), pinned by AWS's
published example and cross-checked against botocore's own signer."""

from __future__ import annotations

import datetime
import hashlib

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
