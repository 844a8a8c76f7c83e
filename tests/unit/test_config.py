"""Config from an environment mapping: required vars, parsing, masking."""

from __future__ import annotations

import dataclasses

import pytest

from server._config import MIN_SESSION_TIMEOUT_MS, BatchConfig, OxiaConfig, S3Config, env_int, env_str
from server._errors import ConfigError

OXIA_ENV = {"LLOG_OXIA_SERVICE_ADDRESS": "127.0.0.1:6648"}


# --- helpers --------------------------------------------------------------


def test_env_str_blank_means_unset() -> None:
    assert env_str({}, "X") is None
    assert env_str({"X": ""}, "X", "d") == "d"
    assert env_str({"X": "   "}, "X", "d") == "d"
    assert env_str({"X": "  v "}, "X") == "v"


@pytest.mark.parametrize(("raw", "value"), [("5", 5), (" 7 ", 7), ("1_000", 1000), ("-3", -3), ("", 9)])
def test_env_int(raw: str, value: int) -> None:
    assert env_int({"N": raw}, "N", 9) == value


@pytest.mark.parametrize("raw", ["abc", "1.5", "0x10", "5ms", "1e3"])
def test_env_int_bad_text_names_the_variable(raw: str) -> None:
    with pytest.raises(ConfigError, match="LLOG_BATCH_MAX_BYTES") as info:
        env_int({"LLOG_BATCH_MAX_BYTES": raw}, "LLOG_BATCH_MAX_BYTES", 1)
    assert raw in str(info.value)


# --- Oxia -----------------------------------------------------------------


def test_oxia_defaults() -> None:
    config = OxiaConfig.from_env(OXIA_ENV)
    assert config == OxiaConfig("127.0.0.1:6648", "default", "llog", 30_000, None)


def test_oxia_all_vars() -> None:
    config = OxiaConfig.from_env(
        {
            **OXIA_ENV,
            "LLOG_OXIA_NAMESPACE": "ns",
            "LLOG_ROOT_PREFIX": "test/abc",
            "LLOG_OXIA_SESSION_TIMEOUT_MS": "5000",
            "LLOG_CLIENT_IDENTIFIER": "broker-1",
        }
    )
    assert (config.namespace, config.root_prefix) == ("ns", "test/abc")
    assert (config.session_timeout_ms, config.client_identifier) == (5000, "broker-1")


@pytest.mark.parametrize("env", [{}, {"LLOG_OXIA_SERVICE_ADDRESS": ""}, {"LLOG_OXIA_SERVICE_ADDRESS": "  "}])
def test_oxia_address_required(env: dict) -> None:
    with pytest.raises(ConfigError, match="LLOG_OXIA_SERVICE_ADDRESS"):
        OxiaConfig.from_env(env)


def test_oxia_address_needs_port() -> None:
    with pytest.raises(ConfigError, match="LLOG_OXIA_SERVICE_ADDRESS"):
        OxiaConfig.from_env({"LLOG_OXIA_SERVICE_ADDRESS": "localhost"})


def test_oxia_address_may_list_every_server_of_a_cluster() -> None:
    from server._config import oxia_addresses

    config = OxiaConfig.from_env({"LLOG_OXIA_SERVICE_ADDRESS": "a:6648, b:6649,c:6650"})
    assert oxia_addresses(config.service_address) == ["a:6648", "b:6649", "c:6650"]
    with pytest.raises(ConfigError, match="several separated by commas"):
        OxiaConfig.from_env({"LLOG_OXIA_SERVICE_ADDRESS": "a:6648,b"})


def test_session_timeout_minimum_is_5000() -> None:
    assert MIN_SESSION_TIMEOUT_MS == 5000
    assert OxiaConfig.from_env({**OXIA_ENV, "LLOG_OXIA_SESSION_TIMEOUT_MS": "5000"}).session_timeout_ms == 5000


@pytest.mark.parametrize("timeout", ["4999", "3000", "2000", "1999", "0", "-1"])
def test_session_timeout_below_the_minimum_rejected_with_the_reason(timeout: str) -> None:
    """oxia==0.2.1 sends a keepalive only every 2 s: 2000 ms (the old minimum)
    lost its session within seconds; see MIN_SESSION_TIMEOUT_MS."""
    with pytest.raises(ConfigError, match="LLOG_OXIA_SESSION_TIMEOUT_MS") as info:
        OxiaConfig.from_env({**OXIA_ENV, "LLOG_OXIA_SESSION_TIMEOUT_MS": timeout})
    message = str(info.value)
    assert ">= 5000" in message and f"got {timeout}" in message
    assert "keepalive" in message and "2000 ms" in message


def test_session_timeout_minimum_also_applies_to_the_constructor() -> None:
    with pytest.raises(ConfigError, match=">= 5000"):
        OxiaConfig("127.0.0.1:6648", session_timeout_ms=2000)


def test_session_timeout_bad_text() -> None:
    with pytest.raises(ConfigError, match="LLOG_OXIA_SESSION_TIMEOUT_MS"):
        OxiaConfig.from_env({**OXIA_ENV, "LLOG_OXIA_SESSION_TIMEOUT_MS": "30s"})


@pytest.mark.parametrize("root", ["__oxia", "a//b", "../x", "/llog"])
def test_bad_root_prefix(root: str) -> None:
    with pytest.raises(ConfigError, match="LLOG_ROOT_PREFIX"):
        OxiaConfig.from_env({**OXIA_ENV, "LLOG_ROOT_PREFIX": root})


def test_blank_root_prefix_means_default() -> None:
    assert OxiaConfig.from_env({**OXIA_ENV, "LLOG_ROOT_PREFIX": " "}).root_prefix == "llog"


def test_configs_are_frozen() -> None:
    config = OxiaConfig.from_env(OXIA_ENV)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.namespace = "x"  # type: ignore[misc]


# --- S3 -------------------------------------------------------------------


def test_s3_empty_env() -> None:
    config = S3Config.from_env({})
    assert config.bucket is None
    assert config.endpoint_url is None and config.region_name is None
    with pytest.raises(ConfigError, match="LLOG_S3_BUCKET"):
        config.require_bucket()


def test_s3_llog_vars() -> None:
    config = S3Config.from_env(
        {
            "LLOG_S3_BUCKET": "leaderless-log-wal",
            "LLOG_S3_ENDPOINT_URL": "http://127.0.0.1:9000",
            "LLOG_S3_REGION_NAME": "eu-west-1",
            "LLOG_S3_ACCESS_KEY_ID": "AKID",
            "LLOG_S3_SECRET_ACCESS_KEY": "s3cr3t",
            "LLOG_S3_SESSION_TOKEN": "t0k3n",
            "AWS_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": "aws-akid",
            "AWS_SECRET_ACCESS_KEY": "aws-secret",
            "AWS_SESSION_TOKEN": "aws-token",
        }
    )
    assert config.require_bucket() == "leaderless-log-wal"
    assert config.region_name == "eu-west-1"  # LLOG_* wins over AWS_*
    assert (config.access_key_id, config.secret_access_key, config.session_token) == ("AKID", "s3cr3t", "t0k3n")


def test_s3_aws_fallbacks() -> None:
    config = S3Config.from_env(
        {
            "AWS_REGION": "us-east-2",
            "AWS_DEFAULT_REGION": "us-west-1",
            "AWS_ACCESS_KEY_ID": "aws-akid",
            "AWS_SECRET_ACCESS_KEY": "aws-secret",
            "AWS_SESSION_TOKEN": "aws-token",
        }
    )
    assert config.region_name == "us-east-2"
    assert (config.access_key_id, config.secret_access_key, config.session_token) == (
        "aws-akid",
        "aws-secret",
        "aws-token",
    )
    assert S3Config.from_env({"AWS_DEFAULT_REGION": "us-west-1"}).region_name == "us-west-1"


def test_s3_secrets_masked_in_repr() -> None:
    config = S3Config.from_env(
        {
            "LLOG_S3_BUCKET": "bucket",
            "LLOG_S3_ACCESS_KEY_ID": "AKID",
            "LLOG_S3_SECRET_ACCESS_KEY": "s3cr3t-value",
            "LLOG_S3_SESSION_TOKEN": "t0k3n-value",
        }
    )
    text = repr(config)
    assert "s3cr3t-value" not in text and "t0k3n-value" not in text
    assert "secret_access_key='***'" in text and "session_token='***'" in text
    assert "bucket='bucket'" in text and "access_key_id='AKID'" in text
    assert "s3cr3t-value" not in str(config)
    assert "secret_access_key=None" in repr(S3Config(bucket="bucket"))


@pytest.mark.parametrize("bucket", ["ab", "x" * 64])
def test_s3_bucket_name_length(bucket: str) -> None:
    with pytest.raises(ConfigError, match="LLOG_S3_BUCKET"):
        S3Config.from_env({"LLOG_S3_BUCKET": bucket})


def test_s3_endpoint_needs_scheme() -> None:
    with pytest.raises(ConfigError, match="LLOG_S3_ENDPOINT_URL"):
        S3Config.from_env({"LLOG_S3_ENDPOINT_URL": "127.0.0.1:9000"})
    assert S3Config.from_env({"LLOG_S3_ENDPOINT_URL": "https://s3.example"}).endpoint_url == "https://s3.example"


def test_s3_pool_size() -> None:
    with pytest.raises(ConfigError):
        S3Config(bucket=None, max_pool_connections=0)


# --- batching -------------------------------------------------------------


def test_batch_defaults() -> None:
    config = BatchConfig.from_env({})
    assert config == BatchConfig()
    assert (config.max_bytes, config.max_delay_ms) == (8 * 1024 * 1024, 500)
    assert config.max_buffer_bytes >= config.max_bytes


def test_batch_from_env() -> None:
    config = BatchConfig.from_env(
        {"LLOG_BATCH_MAX_BYTES": "1024", "LLOG_BATCH_MAX_DELAY_MS": "0", "LLOG_BATCH_MAX_BUFFER_BYTES": "4096",
         "LLOG_BATCH_MAX_BLOCK_MS": "0"}
    )
    assert config == BatchConfig(1024, 0, 4096, max_block_ms=0)


@pytest.mark.parametrize(
    ("kwargs", "var"),
    [
        ({"max_bytes": 0}, "LLOG_BATCH_MAX_BYTES"),
        ({"max_delay_ms": -1}, "LLOG_BATCH_MAX_DELAY_MS"),
        ({"max_bytes": 100, "max_buffer_bytes": 99}, "LLOG_BATCH_MAX_BUFFER_BYTES"),
        ({"max_block_ms": -1}, "LLOG_BATCH_MAX_BLOCK_MS"),
    ],
)
def test_batch_validation(kwargs: dict, var: str) -> None:
    with pytest.raises(ConfigError, match=var):
        BatchConfig(**kwargs)


@pytest.mark.parametrize(
    "var", ["LLOG_BATCH_MAX_BYTES", "LLOG_BATCH_MAX_DELAY_MS", "LLOG_BATCH_MAX_BUFFER_BYTES", "LLOG_BATCH_MAX_BLOCK_MS"]
)
def test_batch_bad_text_names_the_variable(var: str) -> None:
    with pytest.raises(ConfigError, match=var):
        BatchConfig.from_env({var: "lots"})
