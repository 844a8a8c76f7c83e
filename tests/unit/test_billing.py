"""The S3 billing estimate: pinned arithmetic, prices from the environment,
and the bucket-usage refresher's cache and bounds."""

from __future__ import annotations

import pytest

from server._errors import ConfigError, ObjectStoreError
from server._storage.billing import GIB, BucketUsage, BucketUsageRefresher, S3Prices, estimate_billing
from server._storage.objectstore import InMemoryObjectStore


def test_request_cost_uses_the_put_and_get_prices_of_s3_standard():
    est = estimate_billing({"put": 1_000, "list": 1_000, "get": 5_000, "range_get": 15_000, "delete": 700}, None)
    # 2,000 PUT/LIST at $0.005 per 1,000 + 20,000 GET at $0.004 per 10,000; DELETE is free.
    assert (est.put_requests, est.get_requests) == (2_000, 20_000)
    assert est.request_cost_usd == pytest.approx(0.010 + 0.008)
    assert est.objects is None and est.storage_cost_usd_per_month is None


def test_storage_cost_is_per_gib_month():
    usage = BucketUsage(objects=3, stored_bytes=50 * GIB, complete=True, scanned_at=0.0)
    est = estimate_billing({}, usage)
    assert est.stored_gb == 50
    assert est.storage_cost_usd_per_month == pytest.approx(1.15)  # 50 x $0.023
    doc = est.to_json()
    assert doc["storage_cost_usd_per_month"] == 1.15 and doc["objects"] == 3
    assert doc["aggregate"] == {"request_cost_usd": "sum", "objects": "max", "stored_bytes": "max",
                                "storage_cost_usd_per_month": "max"}


def test_prices_come_from_the_environment_and_are_checked():
    prices = S3Prices.from_env({"LLOG_S3_PRICE_STORAGE_GB_MONTH": "0.0125", "LLOG_S3_PRICE_GET_PER_10000": "0.01"})
    assert prices == S3Prices(storage_usd_per_gb_month=0.0125, put_usd_per_1000=0.005, get_usd_per_10000=0.01)
    est = estimate_billing({"get": 10_000}, BucketUsage(1, 2 * GIB, True, 0.0), prices)
    assert est.request_cost_usd == pytest.approx(0.01)
    assert est.storage_cost_usd_per_month == pytest.approx(0.025)
    with pytest.raises(ConfigError, match="LLOG_S3_PRICE_PUT_PER_1000 must be a number"):
        S3Prices.from_env({"LLOG_S3_PRICE_PUT_PER_1000": "five"})
    with pytest.raises(ConfigError, match="LLOG_S3_PRICE_STORAGE_GB_MONTH must be a number >= 0"):
        S3Prices(storage_usd_per_gb_month=-1)


class ListCounting(InMemoryObjectStore):
    def __init__(self) -> None:
        super().__init__()
        self.lists = 0
        self.fail = False

    def list(self, bucket, prefix):
        self.lists += 1
        if self.fail:
            raise ObjectStoreError("injected list failure")
        return super().list(bucket, prefix)


def test_the_refresher_scans_only_its_prefix_and_caches_for_max_age():
    objs = ListCounting()
    for i in range(5):
        objs.put("llog", f"root/wal-shared/{i}", b"x" * 100)
    objs.put("llog", "other-root/wal-shared/9", b"y" * 1000)
    objs.put("llog", "rootless/obj", b"z")
    now = [100.0]
    refresher = BucketUsageRefresher(objs, "llog", "root", max_age_s=60, clock=lambda: now[0])
    usage = refresher.usage()
    assert (usage.objects, usage.stored_bytes, usage.complete) == (5, 500, True)
    objs.put("llog", "root/wal-shared/new", b"x" * 50)
    now[0] += 59
    assert refresher.usage() == usage and objs.lists == 1  # cached
    now[0] += 1
    assert refresher.usage().objects == 6 and objs.lists == 2


def test_the_refresher_is_bounded_and_keeps_its_figures_when_a_scan_fails():
    objs = ListCounting()
    for i in range(10):
        objs.put("llog", f"root/o/{i}", b"ab")
    now = [0.0]
    refresher = BucketUsageRefresher(objs, "llog", "root/", max_age_s=1, max_objects=4, clock=lambda: now[0])
    usage = refresher.usage()
    assert (usage.objects, usage.stored_bytes, usage.complete) == (4, 8, False)
    objs.fail = True
    now[0] += 5
    assert refresher.usage() == usage  # the last figures, not an error
    objs.fail = False
    now[0] += 5
    assert refresher.usage().scanned_at == 10.0
