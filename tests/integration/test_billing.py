"""The S3 billing estimate of a real broker over real MinIO: ``s3.billing``
in /metrics and the ``llog_s3_billing_*`` gauges."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.integration


def test_a_broker_reports_request_costs_and_the_prefix_it_stores(broker_factory) -> None:
    broker = broker_factory()
    for i in range(3):
        reply = broker.client.produce([{"topic": "bill", "partition": p, "records": [f"r{i}"] * 10} for p in range(2)])
        assert reply.status == 200, reply.body
    assert [v for _, v in broker.client.consume_all("bill", 0)] == [b"r0"] * 10 + [b"r1"] * 10 + [b"r2"] * 10

    billing = broker.client.metrics()["s3"]["billing"]  # validated against openapi.yaml too
    assert billing["put_requests"] >= 3 + 1  # three shared blobs, and the usage scan's LIST
    assert billing["request_cost_usd"] > 0
    assert billing["objects"] >= 3 and billing["stored_bytes"] > 0 and billing["usage_complete"] is True
    assert billing["aggregate"]["storage_cost_usd_per_month"] == "max"
    assert broker.client.counter("s3_operations_total", op="list") >= 1  # the scan is counted as op="list"

    text = broker.client.request("GET", "/metrics/prometheus").body.decode()
    for gauge in ("s3_billing_request_cost_usd", "s3_billing_objects", "s3_billing_stored_bytes",
                  "s3_billing_storage_cost_usd_per_month"):
        assert f"llog_{gauge}" in text, gauge
