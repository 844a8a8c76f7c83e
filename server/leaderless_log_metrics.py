"""Process-local metrics: counters, gauges and latency histograms.

One :class:`LlogMetrics` object is passed to the writer, reader, compactor and
HTTP services of a process; each storage call is counted and timed by
operation type (``oxia_op("put")``, ``s3_op("range_get", nbytes)``). The
snapshot is exported as JSON (``/metrics``) and Prometheus text
(``/metrics/prometheus``). Metrics are never persisted.

Names follow Prometheus conventions: ``llog_oxia_operations_total{op,outcome}``,
``llog_oxia_operation_seconds{op}`` (histogram), ``llog_s3_operations_total``,
``llog_s3_bytes_total{op}``, ``llog_s3_operation_seconds{op}``.
"""

from __future__ import annotations

import bisect
from collections import deque
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator

__all__ = ["LlogMetrics", "Histogram", "LATENCY_BUCKETS_S"]

LATENCY_BUCKETS_S = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)

LabelKey = tuple[str, tuple[tuple[str, str], ...]]


def _key(name: str, labels: dict[str, object]) -> LabelKey:
    return name, tuple(sorted((k, str(v)) for k, v in labels.items()))


@dataclass
class Histogram:
    """Cumulative-bucket latency histogram (seconds), with exact count/sum/max.

    The last ``RECENT`` raw samples are kept too, so quantiles over recent
    traffic are exact rather than bucket bounds.
    """

    RECENT = 4096
    buckets: tuple[float, ...] = LATENCY_BUCKETS_S
    counts: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS_S) + 1))
    count: int = 0
    total: float = 0.0
    max: float = 0.0
    recent: deque = field(default_factory=lambda: deque(maxlen=Histogram.RECENT))

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, value)] += 1
        self.count += 1
        self.total += value
        self.recent.append(value)
        if value > self.max:
            self.max = value

    def quantile(self, q: float) -> float:
        """The q-quantile of the recent samples (exact while count <= RECENT)."""
        if not self.count:
            return 0.0
        ordered = sorted(self.recent)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    def bucket_quantile(self, q: float) -> float:
        """Upper bucket bound holding the q-quantile over all samples."""
        if not self.count:
            return 0.0
        rank = q * self.count
        seen = 0
        for i, c in enumerate(self.counts):
            seen += c
            if seen >= rank:
                return self.buckets[i] if i < len(self.buckets) else self.max
        return self.max

    def to_json(self) -> dict[str, float]:
        return {
            "count": self.count,
            "sum_s": round(self.total, 6),
            "max_s": round(self.max, 6),
            "p50_s": round(self.quantile(0.5), 6),
            "p99_s": round(self.quantile(0.99), 6),
        }


class LlogMetrics:
    """Thread-safe metric registry for one process."""

    def __init__(self, *, prefix: str = "llog", static_labels: dict[str, str] | None = None) -> None:
        self._prefix = prefix
        self._static = dict(static_labels or {})
        self._lock = threading.Lock()
        self._counters: dict[LabelKey, float] = {}
        self._gauges: dict[LabelKey, float] = {}
        self._histograms: dict[LabelKey, Histogram] = {}
        self._info: dict[str, object] = {}
        self.started_at = time.time()

    # -- recording ---------------------------------------------------------
    def inc(self, name: str, value: float = 1, **labels: object) -> None:
        k = _key(name, labels)
        with self._lock:
            self._counters[k] = self._counters.get(k, 0) + value

    def set_gauge(self, name: str, value: float, **labels: object) -> None:
        with self._lock:
            self._gauges[_key(name, labels)] = value

    def observe(self, name: str, seconds: float, **labels: object) -> None:
        k = _key(name, labels)
        with self._lock:
            h = self._histograms.get(k)
            if h is None:
                h = self._histograms[k] = Histogram()
            h.observe(seconds)

    def set_info(self, **info: object) -> None:
        """Static facts shown in the JSON snapshot (ids, settings)."""
        with self._lock:
            self._info.update(info)

    @contextmanager
    def timed(self, family: str, op: str, nbytes: int = 0) -> Iterator[None]:
        """Count and time one ``family`` (oxia, s3) operation, by outcome."""
        start = time.perf_counter()
        outcome = "error"
        try:
            yield
            outcome = "ok"
        finally:
            elapsed = time.perf_counter() - start
            self.inc(f"{family}_operations_total", op=op, outcome=outcome)
            self.observe(f"{family}_operation_seconds", elapsed, op=op)
            if nbytes and outcome == "ok":
                self.inc(f"{family}_bytes_total", nbytes, op=op)

    def oxia_op(self, op: str):  # -> ContextManager[None]
        return self.timed("oxia", op)

    def s3_op(self, op: str, nbytes: int = 0):
        return self.timed("s3", op, nbytes)

    # -- reading -----------------------------------------------------------
    def counter(self, name: str, **labels: object) -> float:
        """Sum of a counter over every label set that includes ``labels``."""
        want = {(k, str(v)) for k, v in labels.items()}
        with self._lock:
            return sum(
                v for (n, lbl), v in self._counters.items() if n == name and want <= set(lbl)
            )

    def histogram(self, name: str, **labels: object) -> Histogram | None:
        with self._lock:
            h = self._histograms.get(_key(name, labels))
            return None if h is None else Histogram(h.buckets, list(h.counts), h.count, h.total, h.max, deque(h.recent, maxlen=Histogram.RECENT))

    def snapshot(self) -> dict[str, object]:
        """JSON-ready view: info, counters, gauges, histograms."""

        def label_str(lbl: tuple[tuple[str, str], ...]) -> str:
            return ",".join(f"{k}={v}" for k, v in lbl)

        with self._lock:
            counters: dict[str, dict[str, float]] = {}
            for (n, lbl), v in sorted(self._counters.items()):
                counters.setdefault(n, {})[label_str(lbl)] = v
            gauges: dict[str, dict[str, float]] = {}
            for (n, lbl), v in sorted(self._gauges.items()):
                gauges.setdefault(n, {})[label_str(lbl)] = v
            hists: dict[str, dict[str, dict[str, float]]] = {}
            for (n, lbl), h in sorted(self._histograms.items()):
                hists.setdefault(n, {})[label_str(lbl)] = h.to_json()
            info = dict(self._info)
        return {
            "info": info,
            "uptime_s": round(time.time() - self.started_at, 3),
            "counters": counters,
            "gauges": gauges,
            "histograms": hists,
        }

    def prometheus_text(self) -> str:
        """Prometheus exposition format (text/plain; version=0.0.4)."""

        def fmt_labels(lbl: tuple[tuple[str, str], ...], extra: tuple[tuple[str, str], ...] = ()) -> str:
            items = tuple(sorted(self._static.items())) + lbl + extra
            if not items:
                return ""
            body = ",".join(
                f'{k}="{v.replace(chr(92), chr(92) * 2).replace(chr(34), chr(92) + chr(34)).replace(chr(10), " ")}"'
                for k, v in items
            )
            return "{" + body + "}"

        lines: list[str] = []
        with self._lock:
            seen: set[str] = set()
            for (n, lbl), v in sorted(self._counters.items()):
                full = f"{self._prefix}_{n}"
                if full not in seen:
                    lines.append(f"# TYPE {full} counter")
                    seen.add(full)
                lines.append(f"{full}{fmt_labels(lbl)} {v}")
            for (n, lbl), v in sorted(self._gauges.items()):
                full = f"{self._prefix}_{n}"
                if full not in seen:
                    lines.append(f"# TYPE {full} gauge")
                    seen.add(full)
                lines.append(f"{full}{fmt_labels(lbl)} {v}")
            for (n, lbl), h in sorted(self._histograms.items()):
                full = f"{self._prefix}_{n}"
                if full not in seen:
                    lines.append(f"# TYPE {full} histogram")
                    seen.add(full)
                cumulative = 0
                for bound, c in zip(h.buckets, h.counts):
                    cumulative += c
                    lines.append(f"{full}_bucket{fmt_labels(lbl, (('le', repr(bound)),))} {cumulative}")
                lines.append(f"{full}_bucket{fmt_labels(lbl, (('le', '+Inf'),))} {h.count}")
                lines.append(f"{full}_sum{fmt_labels(lbl)} {h.total}")
                lines.append(f"{full}_count{fmt_labels(lbl)} {h.count}")
        return "\n".join(lines) + "\n"
