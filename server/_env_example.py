"""``.env.example``, generated from the settings declarations.

    python -m server._env_example > .env.example

One section per config, in the order a deployment meets them; each variable
with its help as a comment and its default (or, where there is none, an
example) as the value. ``tests/unit/test_settings.py`` fails when the file in
the repository differs from :func:`render`.
"""

from __future__ import annotations

import sys
from typing import Sequence

from ._broker.config import BrokerConfig
from ._catalogue.topic_config import TopicDefaults
from ._compaction.config import CompactorServiceConfig, VacuumConfig
from ._config import BatchConfig, OxiaConfig, ProducerStateConfig, S3Config
from ._settings import Section, env_example
from ._storage.billing import S3Prices

__all__ = ["HEADER", "SECTIONS", "render", "main"]

HEADER = """\
# llog configuration. Copy to .env, adjust, then load it into your shell:
#   set -a && source .env && set +a
# The library never reads .env by itself; only from_env() reads these variables.
# Generated from the settings declarations: python -m server._env_example > .env.example"""

SECTIONS = (
    Section("Oxia (required for every component)", OxiaConfig),
    Section("S3 (bucket required for the writer, broker and compactor)", S3Config),
    Section(
        "S3 billing estimate", S3Prices,
        note="/metrics s3.billing and the llog_s3_billing_* gauges, in US dollars; defaults are S3 Standard "
             "in us-east-1. Request cost is per process (sum it across brokers and compactors); object "
             "count, stored bytes and monthly storage cost describe the shared prefix (take the max).",
    ),
    Section("Defaults of new topics (the topic catalogue)", TopicDefaults),
    Section("Broker-side batching (BatchingProducer)", BatchConfig),
    Section("Idempotent producers' state per partition (writer, broker)", ProducerStateConfig),
    Section(
        "HTTP broker and its tail cache", BrokerConfig,
        note="Read by llog-broker; each of its flags overrides its variable.",
    ),
    Section(
        "Compactor service", CompactorServiceConfig,
        note="Read by llog-compactor; each of its flags overrides its variable.",
    ),
    Section(
        "Vacuum (unreferenced S3 objects)", VacuumConfig,
        note="Run by the compactor service on its interval, or once by llog-vacuum.",
    ),
)


def render() -> str:
    return env_example(HEADER, SECTIONS)


def main(argv: Sequence[str] | None = None) -> int:
    sys.stdout.write(render())
    return 0


if __name__ == "__main__":
    sys.exit(main())
