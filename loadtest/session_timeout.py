"""Which ``LLOG_OXIA_SESSION_TIMEOUT_MS`` works with ``oxia==0.2.1``?

Starts a dedicated standalone Oxia (the devstack binary, in a temporary
directory) and one client process per timeout, all at once. Each client holds
one ephemeral key for the whole run and, every 100 ms, creates and deletes a
second ephemeral key the way the compactor service claims a log. It prints,
per timeout, the claim cycles that worked, the failures by type, whether the
held key survived (same session), and the client's own session warnings.

Faults, to see the margin a timeout leaves:
  --drop-keepalives N   the client's next N keepalives fail, half-way through
  --stall-ms MS         every client is SIGSTOPped for MS, half-way through
  --burn-threads N      N busy pure-Python threads per client (GIL pressure)

    python -m loadtest.session_timeout 2000 3000 4000 5000 --seconds 30

The figures behind ``MIN_SESSION_TIMEOUT_MS`` (server/_config.py) came from
this script; see ARCHITECTURE.md.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path


def _child(address: str, timeout_ms: int, seconds: float, drops: int, burn_threads: int) -> None:
    import oxia

    from server._storage import oxia_compat

    oxia_compat.apply()
    warnings: dict[str, int] = {}

    class _Count(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            warnings[record.getMessage()] = warnings.get(record.getMessage(), 0) + 1

    logging.getLogger("oxia").addHandler(_Count())
    logging.getLogger("oxia").setLevel(logging.WARNING)

    def burn() -> None:  # holds the GIL like a busy compactor
        x = 0
        while True:
            for i in range(100_000):
                x += i * i

    for _ in range(burn_threads):
        threading.Thread(target=burn, daemon=True).start()
    client = oxia.Client(address, session_timeout_ms=timeout_ms, client_identifier=f"measure-{timeout_ms}")
    if drops:
        _drop_keepalives(client, drops, after=time.monotonic() + seconds / 2)
    held = f"measure/{timeout_ms}/held"
    _, version = client.put(held, b"x", ephemeral=True)
    held_session = version.session_id()
    failures: dict[str, int] = {}
    ok = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            _, cv = client.put(f"measure/{timeout_ms}/claim", b"c", expected_version_id=-1, ephemeral=True)
            client.delete(f"measure/{timeout_ms}/claim", expected_version_id=cv.version_id())
            ok += 1
        except Exception as exc:  # the point is to count them
            failures[type(exc).__name__] = failures.get(type(exc).__name__, 0) + 1
            try:
                client.delete(f"measure/{timeout_ms}/claim")
            except Exception:
                pass
        time.sleep(0.1)
    try:
        _, _, hv = client.get(held)
        held_lost = hv.session_id() != held_session
    except oxia.ex.KeyNotFound:
        held_lost = True
    client.close()
    print(json.dumps({
        "timeout_ms": timeout_ms, "claim_cycles_ok": ok, "claim_failures": failures,
        "held_key_lost": held_lost, "client_warnings": warnings,
    }))


def _drop_keepalives(client, drops: int, after: float) -> None:
    """Make the client's next ``drops`` keepalives fail once ``after`` has
    passed (a lost packet or a server hiccup). Reaches into the client's
    private service discovery: this is a measurement, not product code."""
    discovery = client._service_discovery
    real_get_stub = discovery.get_stub
    left = [drops]

    class _Stub:
        def __init__(self, stub) -> None:
            self._stub = stub

        def keep_alive(self, request):
            if left[0] > 0 and time.monotonic() > after:
                left[0] -= 1
                raise RuntimeError("keepalive dropped by the measurement")
            return self._stub.keep_alive(request)

        def __getattr__(self, name):
            return getattr(self._stub, name)

    discovery.get_stub = lambda shard: _Stub(real_get_stub(shard))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m loadtest.session_timeout",
        description="Measure which Oxia session timeouts survive with oxia==0.2.1 (see the module docstring).",
    )
    parser.add_argument("timeouts_ms", nargs="*", type=int, default=[2000, 3000, 4000, 5000])
    parser.add_argument("--seconds", type=float, default=30.0, help="length of each client's run (default 30)")
    parser.add_argument("--drop-keepalives", type=int, default=0, help="keepalives to fail half-way through")
    parser.add_argument("--stall-ms", type=int, default=0, help="SIGSTOP every client this long, half-way through")
    parser.add_argument("--burn-threads", type=int, default=0, help="busy Python threads per client")
    parser.add_argument("--child", nargs=2, metavar=("ADDRESS", "TIMEOUT_MS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(args.child[0], int(args.child[1]), args.seconds, args.drop_keepalives, args.burn_threads)
        return 0

    from devstack import OxiaServerPorts, OxiaStandalone, ensure_oxia, free_ports

    with tempfile.TemporaryDirectory() as tmp:
        oxia_server = OxiaStandalone(ensure_oxia(), Path(tmp), ports=OxiaServerPorts(*free_ports(3)), shards=1)
        oxia_server.start()
        print(f"oxia standalone at {oxia_server.address}; {len(args.timeouts_ms)} clients for {args.seconds:.0f} s",
              flush=True)
        try:
            common = ["--seconds", str(args.seconds), "--drop-keepalives", str(args.drop_keepalives),
                      "--burn-threads", str(args.burn_threads)]
            procs = [
                subprocess.Popen(
                    [sys.executable, "-m", "loadtest.session_timeout", *common, "--child", oxia_server.address, str(t)],
                    stdout=subprocess.PIPE, text=True,
                )
                for t in args.timeouts_ms
            ]
            if args.stall_ms:
                time.sleep(args.seconds / 2)
                for p in procs:
                    os.kill(p.pid, signal.SIGSTOP)
                time.sleep(args.stall_ms / 1000)
                for p in procs:
                    os.kill(p.pid, signal.SIGCONT)
                print(f"stalled every client for {args.stall_ms} ms", flush=True)
            failed = False
            for p in procs:
                out, _ = p.communicate(timeout=args.seconds + 120)
                failed |= p.returncode != 0
                print(out.strip(), flush=True)
        finally:
            oxia_server.stop()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
