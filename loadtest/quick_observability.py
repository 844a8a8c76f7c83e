"""Prometheus (and Grafana, where one is installed) for a load-test run.

Starts the project's Prometheus (devstack: Debian's package, cached per
user) with file-based service discovery pointed at the run's live brokers
and compactor services, waits until Prometheus has scraped every one of them
(so the dashboard has data from the first second of load), and at the end
draws the dashboard to PNG into ``<run-dir>/dashboard/``. The Prometheus data
stays in ``<run-dir>/prometheus/``.

Grafana: the provisioning files (a Prometheus data source and the dashboard)
are written to ``<run-dir>/grafana/provisioning/``; when ``grafana-server``
(or ``grafana``) is on PATH it is started with them on port 3000. Without
one, the PNGs are the way to look.

    python -m loadtest.quick_observability --run-dir loadtest/results/<run>   # for `orchestrate.py up`

runs in the foreground until Ctrl-C, then renders the dashboard over the time
it ran. ``orchestrate.py run`` uses it when the scenario says
``stack.prometheus = true`` (or with ``--prometheus``).
"""

from __future__ import annotations

import argparse
import functools
import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from devstack import PrometheusServer, ScrapeTarget, ensure_prometheus, free_ports, query_range

from dashboard._model import load_dashboard
from dashboard._panel_data import TimeRange
from dashboard.render import DEFAULT_DASHBOARD, RenderResult, auto_step_s, render

__all__ = ["QuickObservability", "scrape_targets", "main"]

SCRAPE_INTERVAL_MS = 1000


def scrape_targets(stack: dict[str, Any]) -> list[ScrapeTarget]:
    """Every broker and compactor of stack.json, labelled with the run's shape
    (``scrape_labels``: scenario, run_id, brokers, partitions ...), so every
    series Prometheus scrapes from the run carries it."""
    labels = stack.get("scrape_labels") or {"run_id": stack["run_id"]}
    return [ScrapeTarget(f"{p['host']}:{p['port']}", job=p["kind"], labels=labels)
            for p in stack["processes"] if p["kind"] in ("broker", "compactor")]


class QuickObservability:
    """Prometheus scraping the services of a stack.json; renders the dashboard."""

    def __init__(self, run_dir: Path, *, scrape_interval_ms: int = SCRAPE_INTERVAL_MS,
                 say: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True),
                 die_with_parent: bool = True) -> None:
        self.run_dir = run_dir
        self.scrape_interval_ms = scrape_interval_ms
        self._say = say
        self.prometheus = PrometheusServer(ensure_prometheus(), run_dir, port=free_ports(1)[0],
                                           scrape_interval_ms=scrape_interval_ms, die_with_parent=die_with_parent)
        self._grafana: subprocess.Popen[bytes] | None = None
        self.started_at_s = 0.0

    @property
    def url(self) -> str:
        return self.prometheus.url

    def start(self, stack: dict[str, Any], *, timeout_s: float = 60.0) -> None:
        """Start Prometheus on the stack's services and wait until it has scraped each."""
        self.prometheus.start()
        self.started_at_s = time.time()
        targets = self.set_targets(stack)
        self._say(f"[observability] prometheus {self.url} scraping {len(targets)} services")
        deadline = time.monotonic() + timeout_s
        while not self._all_up(targets):
            if time.monotonic() > deadline:
                raise TimeoutError(f"Prometheus did not scrape every service in {timeout_s:.0f}s: "
                                   f"{self.prometheus.active_targets()}")
            time.sleep(0.25)
        self._provision_grafana()

    def set_targets(self, stack: dict[str, Any]) -> list[ScrapeTarget]:
        targets = scrape_targets(stack)
        self.prometheus.set_targets(targets)
        return targets

    def _all_up(self, targets: list[ScrapeTarget]) -> bool:
        up = {s["metric"].get("instance") for s in self.prometheus.query("up == 1")["result"]}
        return all(t.address in up for t in targets)

    def render(self, start_s: float, end_s: float, out_dir: Path | None = None) -> RenderResult:
        """Draw the dashboard over [start_s, end_s] into ``<run-dir>/dashboard``."""
        out = out_dir or self.run_dir / "dashboard"
        window = TimeRange(start_s, end_s, auto_step_s(end_s - start_s))
        fetch = functools.partial(query_range, self.url, timeout_s=30.0)
        result = render(load_dashboard(DEFAULT_DASHBOARD), out, fetch, window,
                        scrape_interval_s=self.scrape_interval_ms / 1000,
                        progress=lambda line: self._say(f"[observability] {line}"))
        if result.empty:
            self._say(f"[observability] panels without data: {', '.join(result.empty)}")
        return result

    def stop(self) -> None:
        if self._grafana is not None and self._grafana.poll() is None:
            self._grafana.terminate()
            self._grafana.wait(10)
        self.prometheus.stop()

    def _provision_grafana(self) -> None:
        """Write Grafana provisioning for this Prometheus; start Grafana if one is installed."""
        base = self.run_dir / "grafana" / "provisioning"
        (base / "datasources").mkdir(parents=True, exist_ok=True)
        (base / "dashboards").mkdir(parents=True, exist_ok=True)
        datasource = {"apiVersion": 1, "datasources": [
            {"name": "Prometheus", "type": "prometheus", "uid": "llog-prometheus", "access": "proxy",
             "url": self.url, "isDefault": True}]}
        (base / "datasources" / "llog.json").write_text(json.dumps(datasource, indent=2))
        shutil.copy(DEFAULT_DASHBOARD, base / "dashboards" / DEFAULT_DASHBOARD.name)
        provider = {"apiVersion": 1, "providers": [
            {"name": "llog", "type": "file", "options": {"path": str(base / "dashboards")}}]}
        (base / "dashboards" / "llog-provider.json").write_text(json.dumps(provider, indent=2))
        binary = shutil.which("grafana-server") or shutil.which("grafana")
        if binary is None:
            self._say("[observability] no Grafana server on PATH: the dashboard is rendered to PNG at the end "
                      f"(provisioning for your own Grafana: {base})")
            return
        argv = [binary, "server"] if binary.endswith("grafana") else [binary]
        log = open(self.run_dir / "logs" / "grafana.log", "ab")
        self._grafana = subprocess.Popen(
            [*argv, f"cfg:paths.provisioning={base}", f"cfg:paths.data={self.run_dir / 'grafana' / 'data'}"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        self._say("[observability] Grafana on http://127.0.0.1:3000 (dashboard provisioned)")


def _parser() -> argparse.ArgumentParser:
    doc = __doc__ or ""
    parser = argparse.ArgumentParser(prog="python -m loadtest.quick_observability",
                                     description=doc.split("\n\n")[0], epilog=doc.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run-dir", type=Path, required=True, help="a run directory with stack.json (orchestrate.py up)")
    parser.add_argument("--scrape-interval-ms", type=int, default=SCRAPE_INTERVAL_MS)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    stack = json.loads((args.run_dir / "stack.json").read_text())
    obs = QuickObservability(args.run_dir, scrape_interval_ms=args.scrape_interval_ms)
    stop = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
    try:
        obs.start(stack)
        print(obs.url, flush=True)
        while not stop["now"]:
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        end = time.time()
        if obs.started_at_s:
            for image in obs.render(obs.started_at_s, end).images:
                print(image)
        obs.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
