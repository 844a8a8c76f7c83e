"""The S3 billing estimate (the reference system's ``s3.billing``).

What a process has cost in S3 requests so far, and what the deployment's
objects cost to keep per month, for visibility only:

- **request cost**, from this process's observed S3 operations: PUT and
  LIST at the PUT/COPY/POST/LIST price, GET and ranged GET at the GET price;
  DELETE is free in S3 and not counted. The bucket-usage refresher's own
  list calls are counted like any other (``op="list"``). Request cost is
  per process: **sum** it across brokers and compactors.
- **storage**, from a cached, bounded ``list_objects_v2`` scan of
  ``s3://{bucket}/{LLOG_ROOT_PREFIX}/``: object count, stored bytes, stored
  GB (2^30 bytes, as S3 bills) and the monthly storage cost. Every process
  sees the same prefix: aggregate these with **max**, never sum.

Prices default to S3 Standard in us-east-1 ($0.023 per GB-month, $0.005 per
1,000 PUT/COPY/POST/LIST, $0.004 per 10,000 GET and other requests) and are
set with ``LLOG_S3_PRICE_STORAGE_GB_MONTH``, ``LLOG_S3_PRICE_PUT_PER_1000``
and ``LLOG_S3_PRICE_GET_PER_10000``. Not included: data transfer,
replication, lifecycle transitions, KMS, taxes and account-level discounts.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from .._errors import ConfigError, LlogError
from .._metrics import LlogMetrics
from .._settings import check_settings, from_env, setting
from .objectstore import ObjectStore

__all__ = [
    "S3Prices", "BucketUsage", "BillingEstimate", "estimate_billing", "BucketUsageRefresher", "S3Billing", "GIB",
]

GIB = 1 << 30
PUT_PRICED_OPS = ("put", "list")
"""Operations billed at the PUT/COPY/POST/LIST price."""
GET_PRICED_OPS = ("get", "range_get")
"""Operations billed at the GET price."""


@dataclass(frozen=True)
class S3Prices:
    """Prices in US dollars; defaults: S3 Standard, us-east-1."""

    storage_usd_per_gb_month: float = setting(
        "Storage, per GB-month.", env="LLOG_S3_PRICE_STORAGE_GB_MONTH", default=0.023, min=0
    )
    put_usd_per_1000: float = setting(
        "PUT, COPY, POST and LIST requests, per 1,000.", env="LLOG_S3_PRICE_PUT_PER_1000", default=0.005, min=0
    )
    get_usd_per_10000: float = setting(
        "GET and other requests, per 10,000.", env="LLOG_S3_PRICE_GET_PER_10000", default=0.004, min=0
    )

    def __post_init__(self) -> None:
        check_settings(self)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> S3Prices:
        return from_env(cls, env)


@dataclass(frozen=True)
class BucketUsage:
    """One scan of the deployment's prefix."""

    objects: int
    stored_bytes: int
    complete: bool
    """False when the scan stopped at its object bound: the figures are a floor."""
    scanned_at: float
    """``time.monotonic()`` of the scan."""


@dataclass(frozen=True)
class BillingEstimate:
    put_requests: int
    """PUT and LIST requests this process made."""
    get_requests: int
    """GET and ranged GET requests this process made."""
    request_cost_usd: float
    objects: int | None
    stored_bytes: int | None
    stored_gb: float | None
    storage_cost_usd_per_month: float | None
    usage_complete: bool | None

    def to_json(self) -> dict[str, Any]:
        return {
            "request_cost_usd": round(self.request_cost_usd, 6),
            "put_requests": self.put_requests,
            "get_requests": self.get_requests,
            "objects": self.objects,
            "stored_bytes": self.stored_bytes,
            "stored_gb": None if self.stored_gb is None else round(self.stored_gb, 6),
            "storage_cost_usd_per_month": (
                None if self.storage_cost_usd_per_month is None else round(self.storage_cost_usd_per_month, 6)
            ),
            "usage_complete": self.usage_complete,
            "aggregate": {"request_cost_usd": "sum", "objects": "max", "stored_bytes": "max",
                          "storage_cost_usd_per_month": "max"},
        }


def estimate_billing(
    op_counts: Mapping[str, float], usage: BucketUsage | None, prices: S3Prices = S3Prices()
) -> BillingEstimate:
    """The estimate from S3 request counts by operation and the last usage scan."""
    puts = int(sum(op_counts.get(op, 0) for op in PUT_PRICED_OPS))
    gets = int(sum(op_counts.get(op, 0) for op in GET_PRICED_OPS))
    request_cost = puts / 1000 * prices.put_usd_per_1000 + gets / 10_000 * prices.get_usd_per_10000
    if usage is None:
        return BillingEstimate(puts, gets, request_cost, None, None, None, None, None)
    gb = usage.stored_bytes / GIB
    return BillingEstimate(
        puts, gets, request_cost, usage.objects, usage.stored_bytes, gb,
        gb * prices.storage_usd_per_gb_month, usage.complete,
    )


class BucketUsageRefresher:
    """Object count and stored bytes under one prefix, from a cached scan.

    A scan runs at most once per ``max_age_s`` (callers in between get the
    cached figures) and stops after ``max_objects`` objects, so a huge bucket
    costs a bounded number of LIST calls (1,000 objects each); its list calls
    go through the object store adapter and are counted as ``op="list"``.
    A failed scan keeps the last figures and is retried at the next refresh.
    """

    def __init__(
        self,
        objects: ObjectStore,
        bucket: str,
        prefix: str,
        *,
        max_age_s: float = 60.0,
        max_objects: int = 100_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_age_s < 0 or max_objects < 1:
            raise ConfigError("the bucket usage refresher needs max_age_s >= 0 and max_objects >= 1")
        self._objects = objects
        self._bucket = bucket
        self._prefix = prefix if prefix.endswith("/") else prefix + "/"
        self._max_age_s = max_age_s
        self._max_objects = max_objects
        self._clock = clock
        self._lock = threading.Lock()
        self._usage: BucketUsage | None = None
        self._last_attempt: float | None = None

    def usage(self) -> BucketUsage | None:
        """The figures, refreshed first if they are older than ``max_age_s``
        (None until a scan has succeeded)."""
        with self._lock:
            now = self._clock()
            if self._last_attempt is None or now - self._last_attempt >= self._max_age_s:
                self._last_attempt = now
                try:
                    self._usage = self._scan(now)
                except LlogError:
                    pass  # keep the last figures; the next refresh tries again
            return self._usage

    def _scan(self, now: float) -> BucketUsage:
        count = nbytes = 0
        for info in self._objects.list(self._bucket, self._prefix):
            if count >= self._max_objects:
                return BucketUsage(count, nbytes, False, now)
            count += 1
            nbytes += info.size
        return BucketUsage(count, nbytes, True, now)


class S3Billing:
    """One process's estimate: its own S3 request counters (from its
    ``LlogMetrics``) and the shared prefix's usage (from a refresher), also
    published as ``s3_billing_*`` gauges."""

    def __init__(
        self, metrics: LlogMetrics, refresher: BucketUsageRefresher | None, prices: S3Prices | None = None
    ) -> None:
        self.metrics = metrics
        self.refresher = refresher
        self.prices = prices or S3Prices()

    def estimate(self) -> BillingEstimate:
        # The scan first, so its own LIST calls are in the counts.
        usage = self.refresher.usage() if self.refresher is not None else None
        counts = {op: self.metrics.counter("s3_operations_total", op=op) for op in PUT_PRICED_OPS + GET_PRICED_OPS}
        return estimate_billing(counts, usage, self.prices)

    def publish(self) -> dict[str, Any]:
        """Refresh the gauges; return the JSON of ``s3.billing``."""
        est = self.estimate()
        self.metrics.set_gauge("s3_billing_request_cost_usd", est.request_cost_usd)
        if est.objects is not None:
            self.metrics.set_gauge("s3_billing_objects", est.objects)
            self.metrics.set_gauge("s3_billing_stored_bytes", est.stored_bytes or 0)
            self.metrics.set_gauge("s3_billing_storage_cost_usd_per_month", est.storage_cost_usd_per_month or 0.0)
        return est.to_json()

    @classmethod
    def for_stores(
        cls, metrics: LlogMetrics, objects: ObjectStore, bucket: str | None, root_prefix: str, prices: S3Prices
    ) -> S3Billing:
        """Request costs always; the usage scan only when the bucket is known."""
        refresher = BucketUsageRefresher(objects, bucket, root_prefix) if bucket else None
        return cls(metrics, refresher, prices)
