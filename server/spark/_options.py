"""Options of the ``llog`` data source: case-insensitive lookup, the topic and
partition list, storage settings, and offset specs (the table of options is in
:mod:`server.spark.datasource`)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Mapping, Sequence

from .._config import OxiaConfig, S3Config
from .._errors import ConfigError, LlogError
from .._protocol.keys import validate_topic
from .._settings import Declared, Flags, check_settings, check_value, declared, parse_text, setting
from ..client import ProducerConfig

__all__ = ["storage_env", "parse_offsets", "PRODUCER_SETTINGS", "producer_options", "ReadOptions", "read_options"]

PRODUCER_SETTINGS = Flags(ProducerConfig)
"""The client settings a writer option (``maxRequestBytes``) or a produce job
flag (``--max-request-bytes``) may change: those of :class:`ProducerConfig`
with an ``option``."""


@dataclass(frozen=True)
class ReadOptions:
    """Settings of the batch and the streaming reader declared once, each with
    its Spark option (read with :func:`read_options`)."""

    include_headers: bool = setting(
        "Add Kafka's headers column (array<struct<key string, value binary>>, null for a record "
        "without headers) after the other columns, as Kafka's source option includeHeaders does.",
        default=False, option="includeHeaders", flag=False,
    )

    def __post_init__(self) -> None:
        check_settings(self)


_STORAGE_OPTIONS = {
    "oxia.serviceaddress": "LLOG_OXIA_SERVICE_ADDRESS",
    "oxia.namespace": "LLOG_OXIA_NAMESPACE",
    "rootprefix": "LLOG_ROOT_PREFIX",
    "s3.endpoint": "LLOG_S3_ENDPOINT_URL",
    "s3.region": "LLOG_S3_REGION_NAME",
    "s3.accesskeyid": "LLOG_S3_ACCESS_KEY_ID",
    "s3.secretaccesskey": "LLOG_S3_SECRET_ACCESS_KEY",
    "s3.sessiontoken": "LLOG_S3_SESSION_TOKEN",
}
_ENV_PREFIXES = ("LLOG_", "AWS_")


# -- options -------------------------------------------------------------------------------


def _opt(options: Mapping[str, str], name: str, default: str | None = None) -> str | None:
    low = name.lower()
    for k, v in options.items():
        if k.lower() == low:
            return None if v is None else str(v)
    return default


def _int_opt(options: Mapping[str, str], name: str, default: int | None, minimum: int = 1) -> int | None:
    raw = _opt(options, name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"option {name} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise ConfigError(f"option {name} must be >= {minimum}, got {value}")
    return value


def producer_options(options: Mapping[str, str]) -> dict[str, object]:
    """The :data:`PRODUCER_SETTINGS` that ``options`` set, by field name."""
    return _declared_options(PRODUCER_SETTINGS.declared(), options)


def read_options(options: Mapping[str, str]) -> ReadOptions:
    """The :class:`ReadOptions` that ``options`` set (ConfigError names a bad one)."""
    return ReadOptions(**_declared_options(declared(ReadOptions), options))  # type: ignore[arg-type]


def _declared_options(settings: Sequence[Declared], options: Mapping[str, str]) -> dict[str, object]:
    """The ``settings`` that ``options`` set, by field name, parsed and
    checked against their declarations (errors name the option)."""
    values: dict[str, object] = {}
    for d in settings:
        name = d.setting.option
        raw = _opt(options, name) if name else None
        if raw is not None:
            value = parse_text(d, raw, f"option {name}")
            check_value(d, value, f"option {name}")
            values[d.name] = value
    return values


def _topic(options: Mapping[str, str], *, required: bool = True) -> str | None:
    """The topic option, checked; None when absent and not ``required`` (a write may
    take each row's topic from a ``topic`` column, as Kafka's sink does)."""
    topic = _opt(options, "topic")
    if not topic:
        if not required:
            return None
        raise ConfigError('option "topic" is required: .option("topic", "orders")')
    try:
        return validate_topic(topic)
    except LlogError as exc:
        raise ConfigError(f"option topic: {exc}") from None


def _partition_list(options: Mapping[str, str]) -> list[int] | None:
    raw = _opt(options, "partitions")
    if raw is None or not raw.strip():
        return None
    text = raw.strip()
    try:
        items = json.loads(text) if text.startswith("[") else [p for p in text.split(",") if p.strip()]
        parts = sorted({int(p) for p in items})
    except (ValueError, TypeError):
        raise ConfigError(f'option partitions must look like "0,1,5" or [0, 1, 5], got {raw!r}') from None
    if not parts or parts[0] < 0:
        raise ConfigError(f"option partitions must list partition numbers >= 0, got {raw!r}")
    return parts


def storage_env(options: Mapping[str, str], environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``LLOG_*``/``AWS_*`` settings: the options first, then the environment.
    Validated here (ConfigError), on the driver."""
    environ = os.environ if environ is None else environ
    env = {k: v for k, v in environ.items() if k.startswith(_ENV_PREFIXES)}
    for opt, var in _STORAGE_OPTIONS.items():
        value = _opt(options, opt)
        if value is not None and value.strip():
            env[var] = value.strip()
    try:
        OxiaConfig.from_env(env)
        S3Config.from_env(env)
    except ConfigError as exc:
        raise ConfigError(f"{exc} (or set option oxia.serviceAddress / s3.endpoint ...)") from None
    return env


def parse_offsets(
    raw: str | None, name: str, *, default: str, allowed: Sequence[str]
) -> tuple[str, dict[int, int | str]]:
    """``(mode, per_partition)``. A plain ``earliest``/``latest`` is the mode
    for every partition; a JSON object (``{"0": 5, "1": "earliest"}``: ints
    >= 1 or one of ``allowed``) names some partitions, the rest get ``default``."""
    text = (raw if raw is not None else default).strip()
    if not text.startswith("{"):
        if text.lower() in allowed:
            return text.lower(), {}
        raise ConfigError(
            f"option {name} must be {' or '.join(allowed)} or a JSON object like "
            f'{{"0": 5, "1": "{allowed[0]}"}}, got {text!r}'
        )
    try:
        obj = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"option {name} is not valid JSON ({exc}): {text!r}") from None
    if not isinstance(obj, dict):
        raise ConfigError(f"option {name} must be a JSON object of partition -> offset, got {text!r}")
    out: dict[int, int | str] = {}
    for k, v in obj.items():
        try:
            p = int(k)
            if p < 0 or str(p) != k.strip():
                raise ValueError
        except ValueError:
            raise ConfigError(f"option {name}: {k!r} is not a partition number") from None
        if isinstance(v, str) and v.lower() in allowed:
            out[p] = v.lower()
        elif isinstance(v, int) and not isinstance(v, bool) and v >= 1:
            out[p] = v
        else:
            raise ConfigError(
                f"option {name}: partition {p} has {v!r}; use an offset >= 1 (offsets start at 1) "
                f"or {' / '.join(repr(a) for a in allowed)}"
            )
    return default, out


def _resolve(spec: int | str | None, hw: int, name: str, partition: int, log_start: int = 1) -> int:
    """A starting offset: earliest -> the log start, latest -> hw + 1, an int within [log start, hw + 1]."""
    if spec == "earliest":
        return log_start
    if spec == "latest":
        return hw + 1
    assert isinstance(spec, int)
    if spec < log_start:
        raise ConfigError(
            f"{name} for partition {partition} is {spec}, below the log start {log_start} (retention or "
            f"DeleteRecords let the records before it go); use 'earliest' or an offset >= {log_start}"
        )
    if spec > hw + 1:
        raise ConfigError(
            f"{name} for partition {partition} is {spec}, past the high watermark {hw} "
            f"(the next offset to be written is {hw + 1})"
        )
    return spec


def _resolve_end(spec: int | str | None, hw: int, partition: int) -> int:
    if spec == "latest":
        return hw
    assert isinstance(spec, int)
    if spec > hw:
        raise ConfigError(f"endingOffsets for partition {partition} is {spec}, past the high watermark {hw}")
    return spec
