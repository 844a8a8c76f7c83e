"""Metrics: the declared catalogue and the per-process registry over prometheus_client."""

from .catalogue import BY_NAME, CATALOGUE, PRESENT_AT_START
from .registry import CONTENT_TYPE, Histogram, LlogMetrics
from .spec import COUNT_BUCKETS, LATENCY_BUCKETS_S, SIZE_BUCKETS_BYTES, Kind, MetricSpec, UnknownMetric

__all__ = [
    "BY_NAME", "CATALOGUE", "CONTENT_TYPE", "PRESENT_AT_START", "COUNT_BUCKETS", "Histogram", "Kind", "LATENCY_BUCKETS_S",
    "LlogMetrics", "MetricSpec", "SIZE_BUCKETS_BYTES", "UnknownMetric",
]
