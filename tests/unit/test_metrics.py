"""The metric catalogue and the registry over prometheus_client.

Every metric is declared once; a use the catalogue does not declare (name,
kind, labels) fails at the call, and a scan of the source checks every
literal use in ``server/`` against the catalogue so a typo fails here first.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

import server
from server._errors import LlogError, VersionConflict
from server._metrics import BY_NAME, CATALOGUE, PRESENT_AT_START, Kind, LlogMetrics, MetricSpec, UnknownMetric

SERVER = Path(server.__file__).parent
_RECORDING = {"inc": Kind.COUNTER, "set_gauge": Kind.GAUGE, "observe": Kind.HISTOGRAM, "set_info_metric": Kind.INFO}


def _families(metrics: LlogMetrics) -> dict[str, object]:
    return {f.name: f for f in text_string_to_metric_families(metrics.prometheus_text().decode())}


def _samples(metrics: LlogMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(metrics.prometheus_text().decode()) for s in f.samples
    }


# -- the catalogue ---------------------------------------------------------------------------------------------


def test_every_metric_has_help_and_a_unit_or_count_name():
    for spec in CATALOGUE:
        assert spec.help and spec.help[0].isupper(), spec.name
        assert spec.name == spec.name.lower() and " " not in spec.name
    assert len(CATALOGUE) == len(BY_NAME)


def test_declarations_that_break_prometheus_conventions_are_refused():
    with pytest.raises(ValueError, match="must end in _total"):
        MetricSpec("requests", Kind.COUNTER, "Requests")
    with pytest.raises(ValueError, match="only counters"):
        MetricSpec("requests_total", Kind.GAUGE, "Requests")
    with pytest.raises(ValueError, match="must end in _info"):
        MetricSpec("broker", Kind.INFO, "Broker")
    with pytest.raises(ValueError, match="undeclared labels"):
        MetricSpec("x_total", Kind.COUNTER, "X", ("op",), values={"outcome": ("ok",)})


def test_what_each_process_presents_is_declared():
    for names in PRESENT_AT_START.values():
        assert set(names) <= set(BY_NAME)


def _literal_uses() -> list[tuple[str, int, str, str, set[str]]]:
    uses = []
    for path in sorted(SERVER.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            method = node.func.attr
            if method not in _RECORDING or not node.args:
                continue
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                labels = {k.arg for k in node.keywords if k.arg is not None}
                uses.append((str(path.relative_to(SERVER)), node.lineno, method, first.value, labels))
    return uses


def test_every_literal_metric_use_in_the_source_matches_the_catalogue():
    uses = _literal_uses()
    assert len(uses) > 80  # the scan sees the call sites
    wrong = []
    for where, line, method, name, labels in uses:
        spec = BY_NAME.get(name)
        if spec is None:
            wrong.append(f"{where}:{line} {name}: not declared")
        elif spec.kind is not _RECORDING[method]:
            wrong.append(f"{where}:{line} {name}: a {spec.kind.value} used with {method}")
        elif labels != set(spec.labels):
            wrong.append(f"{where}:{line} {name}: labels {sorted(labels)}, declared {sorted(spec.labels)}")
    assert not wrong, "\n".join(wrong)


# -- the registry refuses what is not declared ---------------------------------------------------------------


def test_a_typo_raises_instead_of_creating_a_series():
    m = LlogMetrics()
    with pytest.raises(UnknownMetric, match="not in the catalogue"):
        m.inc("writer_record_total")
    with pytest.raises(UnknownMetric, match="is a counter, used as a gauge"):
        m.set_gauge("writer_records_total", 1)
    with pytest.raises(UnknownMetric, match="takes labels"):
        m.inc("oxia_operations_total", op="get")
    with pytest.raises(UnknownMetric, match="takes labels"):
        m.inc("writer_records_total", topic="t")
    assert isinstance(UnknownMetric("x"), LlogError)
    assert b"writer_record_total" not in m.prometheus_text()


# -- exposition ------------------------------------------------------------------------------------------------


def test_prometheus_text_has_help_type_and_static_labels_and_no_created_series():
    m = LlogMetrics(static_labels={"broker_id": "b-1"})
    m.inc("produce_records_total", 5)
    m.set_gauge("batcher_inflight_bytes", 1024)
    m.observe("batcher_flush_seconds", 0.2)
    m.inc("http_requests_total", path="/produce", method="POST", status=200)
    text = m.prometheus_text().decode()
    assert "# HELP llog_produce_records_total Records acknowledged to /produce" in text
    assert "# TYPE llog_batcher_flush_seconds histogram" in text
    assert "_created" not in text
    samples = _samples(m)
    b = ("broker_id", "b-1")
    assert samples[("llog_produce_records_total", (b,))] == 5
    assert samples[("llog_batcher_inflight_bytes", (b,))] == 1024
    assert samples[("llog_batcher_flush_seconds_count", (b,))] == 1
    assert samples[("llog_batcher_flush_seconds_bucket", (b, ("le", "0.2")))] == 1  # 0.2 falls in (0.15, 0.2]
    assert samples[("llog_batcher_flush_seconds_bucket", (b, ("le", "0.15")))] == 0
    key = ("llog_http_requests_total", (b, ("method", "POST"), ("path", "/produce"), ("status", "200")))
    assert samples[key] == 1


def test_every_catalogue_metric_exports_with_its_declared_type():
    m = LlogMetrics()
    for spec in CATALOGUE:
        labels = {label: "x" for label in spec.labels}
        if spec.kind is Kind.COUNTER:
            m.inc(spec.name, 2, **labels)
        elif spec.kind is Kind.GAUGE:
            m.set_gauge(spec.name, 3, **labels)
        elif spec.kind is Kind.HISTOGRAM:
            m.observe(spec.name, 0.5, **labels)
        else:
            m.set_info_metric(spec.name, **labels)
    families = _families(m)
    for spec in CATALOGUE:
        family = families[f"llog_{spec.name.removesuffix('_total')}"]
        expected = "gauge" if spec.kind is Kind.INFO else spec.kind.value
        assert family.type == expected, spec.name
        assert family.documentation == spec.help


def test_info_metric_replaces_its_previous_label_set():
    m = LlogMetrics()
    labels = {"compactor_id": "c1", "workers": 2, "discovery_interval_ms": 0, "blob_cache_bytes": 0,
              "root_prefix": "llog"}
    m.set_info_metric("compactor_info", vacuum_interval_ms=1, **labels)
    m.set_info_metric("compactor_info", vacuum_interval_ms=2, **labels)
    infos = [dict(k[1]) for k in _samples(m) if k[0] == "llog_compactor_info"]
    assert [i["vacuum_interval_ms"] for i in infos] == ["2"]


def test_present_exports_every_enumerated_series_at_zero():
    m = LlogMetrics()
    m.present("oxia_operations_total", "writer_records_total", "compactor_lag_offsets")
    samples = _samples(m)
    assert samples[("llog_writer_records_total", ())] == 0
    ops = {dict(k[1])["op"] for k in samples if k[0] == "llog_oxia_operations_total"}
    assert ops == set(BY_NAME["oxia_operations_total"].values["op"])
    assert samples[("llog_oxia_operations_total", (("op", "put_cas"), ("outcome", "error")))] == 0
    assert not [k for k in samples if k[0] == "llog_compactor_lag_offsets"]  # labels not enumerable
    assert "# TYPE llog_compactor_lag_offsets gauge" in m.prometheus_text().decode()
    with pytest.raises(UnknownMetric):
        m.present("no_such_metric_total")


def test_process_metrics_are_exported_when_asked():
    assert "process_cpu_seconds_total" not in _families(LlogMetrics()) and "process_cpu_seconds" not in _families(
        LlogMetrics()
    )
    families = _families(LlogMetrics(process_metrics=True))
    assert "process_cpu_seconds" in families and "python_info" in families


# -- the JSON snapshot and readers -----------------------------------------------------------------------------


def test_snapshot_is_derived_from_the_same_objects():
    m = LlogMetrics(static_labels={"broker_id": "b-1"})
    m.inc("s3_operations_total", 3, op="put", outcome="ok")
    m.inc("s3_operations_total", op="put", outcome="error")
    m.set_gauge("tail_cache_bytes", 77)
    for v in (0.1, 0.2, 0.3, 0.4):
        m.observe("produce_request_seconds", v)
    m.observe("writer_blob_size_bytes", 4096)
    m.set_info(broker_id="b-1")
    snap = m.snapshot()
    assert snap["info"] == {"broker_id": "b-1"}
    assert snap["counters"]["s3_operations_total"] == {"op=put,outcome=ok": 3, "op=put,outcome=error": 1}
    assert snap["gauges"]["tail_cache_bytes"] == {"": 77}
    h = snap["histograms"]["produce_request_seconds"][""]
    assert h == {"count": 4, "sum_s": 1.0, "max_s": 0.4, "p50_s": 0.3, "p99_s": 0.4}
    assert snap["histograms"]["writer_blob_size_bytes"][""]["max_bytes"] == 4096
    assert m.counter("s3_operations_total", op="put") == 4
    assert m.counter("s3_operations_total", outcome="error") == 1
    view = m.histogram("produce_request_seconds")
    assert view is not None and (view.count, view.max) == (4, 0.4) and view.quantile(0.5) == 0.3
    assert m.histogram("batcher_flush_seconds") is None
    with pytest.raises(UnknownMetric, match="histogram"):
        m.counter("produce_request_seconds")


def test_timed_counts_outcome_latency_and_bytes():
    m = LlogMetrics()
    with m.oxia_op("put", 10):
        pass
    with pytest.raises(RuntimeError):
        with m.s3_op("get"):
            raise RuntimeError("boom")
    assert m.counter("oxia_operations_total", op="put", outcome="ok") == 1
    assert m.counter("oxia_bytes_total", op="put") == 10
    assert m.counter("s3_operations_total", op="get", outcome="error") == 1
    assert m.counter("s3_bytes_total") == 0
    assert m.histogram("oxia_operation_seconds", op="put").count == 1
    with pytest.raises(VersionConflict):
        with m.oxia_op("put_cas", 10):
            raise VersionConflict("another version")
    assert m.counter("oxia_operations_total", op="put_cas", outcome="conflict") == 1
    assert m.counter("oxia_operations_total", op="put_cas", outcome="error") == 0


# -- docs and dashboard follow the catalogue ---------------------------------------------------------------------

REPO = SERVER.parent
_LLOG_NAME = re.compile(r"\bllog_([a-z0-9_]+)")


def _declared(exported: str) -> bool:
    """``exported`` (without ``llog_``) is a declared metric or one of its histogram series."""
    for suffix in ("", "_bucket", "_sum", "_count"):
        base = exported.removesuffix(suffix) if suffix else exported
        if (not suffix or exported.endswith(suffix)) and base in BY_NAME:
            return True
    return False


def test_observability_md_lists_every_metric_and_no_other():
    text = (REPO / "OBSERVABILITY.md").read_text()
    named = set(_LLOG_NAME.findall(text))
    missing = sorted(spec.name for spec in CATALOGUE if spec.name not in named)
    assert not missing, f"OBSERVABILITY.md does not list {missing}"
    unknown = sorted(n for n in named if not n.endswith("_") and not _declared(n))  # llog_s3_billing_*: a family
    assert not unknown, f"OBSERVABILITY.md names undeclared metrics {unknown}"


def test_the_dashboard_queries_only_declared_metrics():
    doc = json.loads((REPO / "grafana" / "leaderless-log-observability.json").read_text())
    exprs = [t["expr"] for p in doc["panels"] for t in p.get("targets", [])]
    assert len(exprs) > 60
    unknown = sorted({n for e in exprs for n in _LLOG_NAME.findall(e) if not _declared(n)})
    assert not unknown, f"the dashboard queries undeclared metrics {unknown}"
