"""A Prometheus server for local runs and tests, fed by file-based service discovery.

Layout under the given data directory::

    prometheus/
        prometheus.yml     one scrape job, ``llog``, reading targets.json every second
        targets.json       file_sd groups: {"targets": ["host:port"], "labels": {"job": ..., "__metrics_path__": ...}}
        data/              the TSDB
        prometheus.log

The scrape job's name is only a default: each target group carries its own
``job`` label (``broker``, ``compactor``), which Prometheus keeps, and its
own ``__metrics_path__`` (``/metrics/prometheus`` for llog's services).
Prometheus watches the targets file, and also re-reads it every
``refresh_interval``; it is replaced atomically so a half-written file is never read.

:func:`query` and :func:`query_range` speak the HTTP API (``/api/v1/query``,
``/api/v1/query_range``) and return its ``data`` object; a failed query
raises :class:`PrometheusQueryError` with Prometheus's own error text.
"""

from __future__ import annotations

import json
import logging
import os
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Iterable, Mapping

from ._process import ManagedProcess, StackError, http_ok

__all__ = ["PrometheusServer", "ScrapeTarget", "PrometheusQueryError", "query", "query_range"]

logger = logging.getLogger(__name__)

JOB_NAME = "llog"
DEFAULT_METRICS_PATH = "/metrics/prometheus"


class PrometheusQueryError(StackError):
    """Prometheus refused or failed a query (bad PromQL, timeout, server unreachable)."""


@dataclass(frozen=True)
class ScrapeTarget:
    """One endpoint Prometheus scrapes."""

    address: str
    """``host:port`` of the service."""
    job: str
    """The ``job`` label of its series: ``broker``, ``compactor``."""
    metrics_path: str = DEFAULT_METRICS_PATH
    """Path of the Prometheus text exposition on that service."""
    labels: Mapping[str, str] = field(default_factory=dict)
    """Further labels added to every series scraped from it."""

    def file_sd_group(self) -> dict[str, Any]:
        labels = {**self.labels, "job": self.job, "__metrics_path__": self.metrics_path}
        return {"targets": [self.address], "labels": labels}


class PrometheusServer:
    """``prometheus`` on 127.0.0.1:``port`` with its own data directory; a context manager."""

    def __init__(
        self,
        binary: Path,
        data_dir: Path,
        *,
        port: int,
        scrape_interval_ms: int = 1000,
        enable_lifecycle: bool = False,
        die_with_parent: bool = True,
    ) -> None:
        if scrape_interval_ms < 100:
            raise StackError(f"scrape_interval_ms must be at least 100, got {scrape_interval_ms}")
        self.port = port
        self.data_dir = data_dir / "prometheus"
        self.config_path = self.data_dir / "prometheus.yml"
        self.targets_path = self.data_dir / "targets.json"
        self.scrape_interval_ms = scrape_interval_ms
        self._targets: dict[tuple[str, str], ScrapeTarget] = {}
        argv: list[object] = [
            binary,
            f"--config.file={self.config_path}",
            f"--storage.tsdb.path={self.data_dir / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=info",
        ]
        if enable_lifecycle:
            argv.append("--web.enable-lifecycle")  # POST /-/reload and /-/quit
        self._process = ManagedProcess(
            "prometheus", argv, log_path=self.data_dir / "prometheus.log", die_with_parent=die_with_parent
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def processes(self) -> list[ManagedProcess]:
        return [self._process]

    @property
    def targets(self) -> list[ScrapeTarget]:
        return list(self._targets.values())

    def start(self, timeout_s: float = 30.0) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._write_config()
        self._write_targets()
        self._process.start()
        self._process.wait_healthy(lambda: http_ok(f"{self.url}/-/ready"), timeout_s=timeout_s, what="ready")

    def stop(self) -> None:
        self._process.stop()

    def __enter__(self) -> PrometheusServer:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def set_targets(self, targets: Iterable[ScrapeTarget]) -> None:
        """Scrape exactly ``targets`` from now on (Prometheus notices within about a second)."""
        self._targets = {}
        self.add_targets(targets)

    def add_targets(self, targets: Iterable[ScrapeTarget]) -> None:
        """Add ``targets``; one with the address and metrics path of a known target replaces it."""
        for target in targets:
            self._targets[(target.address, target.metrics_path)] = target
        self._write_targets()

    def remove_target(self, address: str, metrics_path: str = DEFAULT_METRICS_PATH) -> None:
        self._targets.pop((address, metrics_path), None)
        self._write_targets()

    def query(self, promql: str, *, at_s: float | None = None, timeout_s: float = 10.0) -> dict[str, Any]:
        return query(self.url, promql, at_s=at_s, timeout_s=timeout_s)

    def query_range(
        self, promql: str, *, start_s: float, end_s: float, step_s: float = 1.0, timeout_s: float = 10.0
    ) -> dict[str, Any]:
        return query_range(self.url, promql, start_s=start_s, end_s=end_s, step_s=step_s, timeout_s=timeout_s)

    def active_targets(self) -> list[dict[str, Any]]:
        """``/api/v1/targets``'s active targets (health, lastError, labels): what a failed wait should show."""
        return list(_api_get(self.url, "/api/v1/targets", {"state": "active"}, 10.0)["activeTargets"])

    def reload(self, timeout_s: float = 10.0) -> None:
        """Re-read prometheus.yml (needs ``enable_lifecycle``); targets.json needs no reload."""
        request = urllib.request.Request(f"{self.url}/-/reload", method="POST")
        try:
            with urllib.request.urlopen(request, timeout=timeout_s):
                pass
        except (urllib.error.URLError, OSError) as exc:
            raise StackError(f"POST {self.url}/-/reload failed (is enable_lifecycle set?): {exc}") from exc

    def _write_config(self) -> None:
        # Plain YAML by hand: a fixed shape, not worth a YAML dependency here.
        interval = f"{self.scrape_interval_ms}ms"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(
            "global:\n"
            f"  scrape_interval: {interval}\n"
            f"  scrape_timeout: {interval}\n"
            f"  evaluation_interval: {interval}\n"
            "scrape_configs:\n"
            f"  - job_name: {JOB_NAME}\n"
            "    file_sd_configs:\n"
            f"      - files: [{json.dumps(str(self.targets_path.resolve()))}]\n"
            "        refresh_interval: 1s\n"
        )

    def _write_targets(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        groups = [t.file_sd_group() for t in self._targets.values()]
        tmp = self.targets_path.with_name(f".{self.targets_path.name}.tmp{os.getpid()}")
        tmp.write_text(json.dumps(groups, indent=2) + "\n")
        os.replace(tmp, self.targets_path)
        logger.info("prometheus targets: %s", ", ".join(f"{t.job}={t.address}" for t in self._targets.values()))


def query(url: str, promql: str, *, at_s: float | None = None, timeout_s: float = 10.0) -> dict[str, Any]:
    """An instant query at ``url``: the answer's ``data`` (``resultType``, ``result``)."""
    params = {"query": promql}
    if at_s is not None:
        params["time"] = f"{at_s:.3f}"
    return _api_get(url, "/api/v1/query", params, timeout_s)


def query_range(
    url: str, promql: str, *, start_s: float, end_s: float, step_s: float = 1.0, timeout_s: float = 10.0
) -> dict[str, Any]:
    """A range query (Unix seconds): the answer's ``data`` (``resultType`` ``matrix``, ``result``)."""
    params = {"query": promql, "start": f"{start_s:.3f}", "end": f"{end_s:.3f}", "step": f"{step_s:g}"}
    return _api_get(url, "/api/v1/query_range", params, timeout_s)


def _api_get(url: str, path: str, params: Mapping[str, str], timeout_s: float) -> dict[str, Any]:
    full = f"{url}{path}?{urllib.parse.urlencode(params)}"
    what = params.get("query", path)
    try:
        with urllib.request.urlopen(full, timeout=timeout_s) as response:
            body = response.read()
    except urllib.error.HTTPError as exc:  # 400 bad query, 422 execution error, 503 timeout: JSON bodies
        body = exc.read()
        if not body:
            raise PrometheusQueryError(f"{what!r} at {url}: HTTP {exc.code}") from exc
    except (urllib.error.URLError, OSError) as exc:
        raise PrometheusQueryError(f"{what!r}: cannot reach Prometheus at {url}: {exc}") from exc
    try:
        answer = json.loads(body)
    except ValueError as exc:
        raise PrometheusQueryError(f"{what!r} at {url}: not JSON: {body[:200]!r}") from exc
    if answer.get("status") != "success":
        raise PrometheusQueryError(f"{what!r} at {url}: {answer.get('errorType')}: {answer.get('error')}")
    return dict(answer["data"])
