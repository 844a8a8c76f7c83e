"""Build, configure and run ``loadtest/http_hammer.go``, the harness's HTTP load generator.

:func:`ensure_hammer` builds the binary with the machine's Go toolchain into the
per-user cache (``$LLOG_CACHE_DIR``, default ``~/.cache/llog``)::

    bin/http_hammer-<key>       key: the first 16 hex digits of sha256(source, Go version)
    bin/http_hammer.build.log   go's output of the last build
    bin/.http_hammer.lock       held while building, so two processes never both build
    go-build/                   GOCACHE of the build ($GOCACHE wins when set)

The exact source bytes that were hashed are copied into a temporary directory
and built there, so a binary is always the build of its key; it is written
under a temporary name and renamed, so a binary under its key is complete and
the fast path is one hash, one ``go env GOVERSION`` and one ``stat``.

:class:`HammerConfig` holds every flag of the binary (``argv``), and
:func:`run_hammer` runs one load with its output in a log file. The flags and
the artifacts are documented in ``loadtest/README.md`` ("http_hammer").
"""

from __future__ import annotations

import math
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from devstack import die_with_parent_argv
from server._errors import ConfigError

from devstack._gobuild import GoBuildError, ensure_go_binary, source_key

__all__ = [
    "HAMMER_SOURCE",
    "HammerBuildError",
    "HammerConfig",
    "drive_scenario",
    "ensure_hammer",
    "hammer_config_for",
    "hammer_key",
    "run_hammer",
]

HAMMER_SOURCE = Path(__file__).resolve().parents[1] / "http_hammer.go"
HEADER_BYTES = 17
"""Every payload starts with 16 hex digits of its send time and a separator."""

_EXIT_GRACE_S = 60.0
"""How long past its own deadline (duration, drain, request timeout) the hammer may take to exit."""


HammerBuildError = GoBuildError
"""``go build`` of the hammer failed; the message holds the end of the build log."""


# -- configuration ----------------------------------------------------------------------


@dataclass(frozen=True)
class HammerConfig:
    """One run of the hammer: every flag of ``http_hammer`` (``-h`` explains each)."""

    mode: str = "closed"
    """``closed``: ``concurrency`` requests in flight; ``open``: ``rate_records_per_s`` on a schedule."""
    rate_records_per_s: float = 10_000.0
    """Open loop: target records per second."""
    concurrency: int = 16
    """Closed loop: produce requests in flight."""
    max_inflight: int = 512
    """Open loop: a request due while this many are in flight is not sent (``errors.backlog``)."""
    duration_s: float = 30.0
    record_bytes: int = 1024
    records_per_request: int = 100
    partitions_per_request: int = 1
    body: str = "json"
    """Produce body: ``json`` or ``binary`` (``application/vnd.llog.produce.v1``)."""
    topic: str | None = None
    """Only the manifest's partitions of this topic (None: all)."""
    selection: str | None = None
    """``round_robin`` or ``least_inflight`` (None: the manifest's)."""
    consumers: int = 0
    consume_body: str = "json"
    """Consume answer: ``json`` or ``binary`` (``Accept: application/vnd.llog.consume.v1``)."""
    consume_from: str = "end"
    """``end``: each partition's high watermark when first asked; ``start``: offset 1."""
    max_wait_ms: int = 500
    window_s: float = 30.0
    timeout_s: float = 10.0
    down_backoff_s: float = 1.0
    drain_s: float = 5.0
    """After producing stops, how long consumers may read on to catch up."""
    seed: int = 1

    def __post_init__(self) -> None:
        def need(ok: bool, message: str) -> None:
            if not ok:
                raise ConfigError(f"HammerConfig: {message}")

        need(self.mode in ("open", "closed"), f"mode must be open or closed, got {self.mode!r}")
        need(self.mode != "open" or (self.rate_records_per_s > 0 and math.isfinite(self.rate_records_per_s)),
             f"rate_records_per_s must be > 0 in open mode, got {self.rate_records_per_s}")
        need(self.concurrency >= 1 and self.max_inflight >= 1, "concurrency and max_inflight must be >= 1")
        need(self.duration_s > 0, f"duration_s must be > 0, got {self.duration_s}")
        need(self.record_bytes >= HEADER_BYTES, f"record_bytes must be >= {HEADER_BYTES}, got {self.record_bytes}")
        need(self.records_per_request >= 1 and self.partitions_per_request >= 1,
             "records_per_request and partitions_per_request must be >= 1")
        need(self.body in ("json", "binary"), f"body must be json or binary, got {self.body!r}")
        need(self.selection in (None, "round_robin", "least_inflight"),
             f"selection must be round_robin or least_inflight, got {self.selection!r}")
        need(self.consumers >= 0 and self.max_wait_ms >= 0, "consumers and max_wait_ms must be >= 0")
        need(self.consume_body in ("json", "binary"), f"consume_body must be json or binary, got {self.consume_body!r}")
        need(self.consume_from in ("end", "start"), f"consume_from must be end or start, got {self.consume_from!r}")
        need(self.window_s > 0 and self.timeout_s > 0 and self.down_backoff_s > 0,
             "window_s, timeout_s and down_backoff_s must be > 0")
        need(self.drain_s >= 0, f"drain_s must be >= 0, got {self.drain_s}")

    def argv(self, binary: Path | str, manifest: Path | str, out_dir: Path | str) -> list[str]:
        """The command line that runs this configuration."""
        args = [
            str(binary),
            "-manifest", str(manifest),
            "-out", str(out_dir),
            "-mode", self.mode,
            "-rate", f"{self.rate_records_per_s:g}",
            "-concurrency", str(self.concurrency),
            "-max-inflight", str(self.max_inflight),
            "-duration", _go_duration(self.duration_s),
            "-record-bytes", str(self.record_bytes),
            "-records-per-request", str(self.records_per_request),
            "-partitions-per-request", str(self.partitions_per_request),
            "-body", self.body,
            "-consumers", str(self.consumers),
            "-consume-body", self.consume_body,
            "-consume-from", self.consume_from,
            "-max-wait-ms", str(self.max_wait_ms),
            "-window", _go_duration(self.window_s),
            "-timeout", _go_duration(self.timeout_s),
            "-down-backoff", _go_duration(self.down_backoff_s),
            "-drain", _go_duration(self.drain_s),
            "-seed", str(self.seed),
        ]
        if self.topic is not None:
            args += ["-topic", self.topic]
        if self.selection is not None:
            args += ["-selection", self.selection]
        return args

    @property
    def deadline_s(self) -> float:
        """When a run of this configuration has surely ended (its exit may take a little longer)."""
        return self.duration_s + self.drain_s + 2 * self.timeout_s + self.max_wait_ms / 1000


def _go_duration(seconds: float) -> str:
    """A Go ``time.ParseDuration`` string: whole milliseconds when exact, else microseconds."""
    millis = seconds * 1000
    if millis == int(millis):
        return f"{int(millis)}ms"
    return f"{round(seconds * 1_000_000)}us"


def hammer_config_for(scenario: Any) -> HammerConfig:
    """The hammer's configuration for a harness scenario (``scenario.duration_s`` and
    ``scenario.load``: topic, mode, rate, concurrency, record_bytes, records_per_request,
    partitions_per_request, consumers, selection, seed, window_s, timeout_s)."""
    load = scenario.load
    open_loop = load.mode == "open"
    return HammerConfig(
        mode=load.mode,
        rate_records_per_s=float(load.rate) if open_loop else HammerConfig.rate_records_per_s,
        concurrency=load.concurrency if load.concurrency >= 1 else HammerConfig.concurrency,
        duration_s=float(scenario.duration_s),
        record_bytes=load.record_bytes,
        records_per_request=load.records_per_request,
        partitions_per_request=load.partitions_per_request,
        topic=load.topic,
        selection=load.selection,
        consumers=load.consumers,
        window_s=float(load.window_s),
        timeout_s=float(load.timeout_s),
        seed=load.seed,
    )


# -- building ---------------------------------------------------------------------------


def hammer_key(source: bytes, go_version: str) -> str:
    """What a cached hammer binary is named for (see :func:`gobuild.source_key`)."""
    return source_key(source, go_version)


def ensure_hammer(source: Path = HAMMER_SOURCE) -> Path:
    """Return the cached hammer binary for ``source``, building it on first use."""
    return ensure_go_binary(source, "http_hammer")


# -- running ----------------------------------------------------------------------------


def run_hammer(config: HammerConfig, manifest_path: Path, out_dir: Path, log_path: Path) -> int:
    """Run one load (building the binary if needed) with stdout and stderr in
    ``log_path``; return the hammer's exit status (0: the run completed, even
    with request errors). A hammer still running well past its deadline is
    killed and reported as an error."""
    binary = ensure_hammer()
    out_dir.mkdir(parents=True, exist_ok=True)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(  # SIGTERM if we die, so no hammer outlives its caller
            die_with_parent_argv(config.argv(binary, manifest_path, out_dir)),
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )
        try:
            return proc.wait(timeout=config.deadline_s + _EXIT_GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise RuntimeError(
                f"the hammer did not exit within {config.deadline_s + _EXIT_GRACE_S:.0f} s; killed; see {log_path}"
            ) from None
        except BaseException:
            proc.kill()
            proc.wait()
            raise


def drive_scenario(scenario: Any, run_dir: Path, say: Callable[[str], None]) -> int:
    """Run the hammer over ``scenario``'s routing manifest in ``run_dir``; say
    where to look when it exits non-zero. Returns its exit status."""
    log_path = run_dir / "logs" / "http_hammer.log"
    code = run_hammer(hammer_config_for(scenario), run_dir / "routing-manifest.json", run_dir, log_path)
    if code != 0:
        say(f"the hammer exited with status {code}: see {log_path}")
    return code
