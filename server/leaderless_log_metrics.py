"""Process-local metrics (the reference system's module name).

One :class:`LlogMetrics` object is passed to the writer, reader, compactor and
HTTP services of a process; each storage call is counted and timed by
operation type (``oxia_op("put")``, ``s3_op("range_get", nbytes)``). Every
metric is declared in ``server/_metrics/catalogue.py`` (name, type, help,
labels); the registry is ``prometheus_client``'s, exported as JSON
(``GET /metrics``) and Prometheus text (``GET /metrics/prometheus``).
Metrics are never persisted. OBSERVABILITY.md lists them all.
"""

from ._metrics import (
    CATALOGUE,
    CONTENT_TYPE,
    LATENCY_BUCKETS_S,
    Histogram,
    LlogMetrics,
    MetricSpec,
    UnknownMetric,
)

__all__ = ["CATALOGUE", "CONTENT_TYPE", "LATENCY_BUCKETS_S", "Histogram", "LlogMetrics", "MetricSpec", "UnknownMetric"]
