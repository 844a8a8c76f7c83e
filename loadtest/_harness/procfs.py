"""Reading ``/proc``: one process's CPU, memory, threads and open files, and the host's counters.

The ``parse_*`` functions take a file's text, so tests feed them fixtures;
:func:`sample_process` and :func:`sample_host` read the files (under
``proc_root``, ``/proc`` unless a test points elsewhere).

Per process (``/proc/PID/...``):

- ``cpu_s``: user + system time of ``stat`` (fields 14 and 15), in clock
  ticks divided by ``SC_CLK_TCK``; it includes the process's threads, not
  its children;
- ``rss_bytes``: ``VmRSS`` of ``status`` (kB), or resident pages of
  ``statm`` times the page size when ``status`` has none;
- ``threads``: ``num_threads`` of ``stat`` (field 20);
- ``open_files``: the entries of ``fd`` (None when we may not list them);
  :func:`outbound_tcp` counts those that are TCP connections the process
  opened (``fd``'s socket inodes looked up in ``net/tcp`` and ``net/tcp6``);
- ``alive``: the pid exists and is not a zombie. A pid that now belongs to
  another process (its start time, ``stat`` field 22, differs from the one
  the caller saw first) is reported dead too.

The host:

- ``cpu_s``: the ``cpu`` line of ``/proc/stat`` in seconds, all CPUs
  summed: ``user`` = user + nice (guest time is inside user), ``system`` =
  system + irq + softirq, ``idle``, ``iowait`` (steal is left out);
- ``mem_available_bytes``: ``MemAvailable`` of ``/proc/meminfo``;
- ``net_bytes``: received and sent bytes of ``/proc/net/dev`` summed over
  every interface, loopback included: a local run's brokers, Oxia and MinIO
  talk over ``lo``, so leaving it out would hide the run's traffic (each
  loopback byte counts once in ``rx`` and once in ``tx``);
- ``disk_bytes``: sectors read and written of ``/proc/diskstats`` times
  512, over whole physical disks only (the block devices of ``/sys/block``
  that are not virtual), so partitions, device-mapper, loop and zram
  devices do not count twice.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Any, Collection, NamedTuple

__all__ = [
    "CpuTimes",
    "HostSample",
    "PidStat",
    "ProcessSample",
    "clock_ticks",
    "parse_cpu_times",
    "parse_diskstats",
    "parse_meminfo_available",
    "parse_net_dev",
    "parse_tcp_ports",
    "outbound_tcp",
    "parse_pid_stat",
    "parse_statm_rss",
    "parse_status_rss",
    "physical_disks",
    "sample_host",
    "sample_process",
]

log = logging.getLogger(__name__)

SECTOR_BYTES = 512  # /proc/diskstats counts 512-byte sectors whatever the device's sector size
_VIRTUAL_DISK = re.compile(r"^(loop|ram|zram|dm-|md|nbd|sr|fd)")


def clock_ticks() -> int:
    """Clock ticks per second (``SC_CLK_TCK``), the unit of ``/proc`` CPU times."""
    return os.sysconf("SC_CLK_TCK")


def page_size() -> int:
    return os.sysconf("SC_PAGE_SIZE")


# -- one process ---------------------------------------------------------------------------


class PidStat(NamedTuple):
    """What ``/proc/PID/stat`` says."""

    state: str
    """One letter: R, S, D, Z (zombie), X (dead) ..."""
    cpu_s: float
    """User + system CPU time, in seconds."""
    threads: int
    start_ticks: int
    """Start time after boot, in clock ticks: tells a reused pid apart."""
    rss_pages: int


class ProcessSample(NamedTuple):
    """One process at one moment; None where it could not be read."""

    pid: int
    cpu_s: float | None
    rss_bytes: int | None
    threads: int | None
    open_files: int | None
    alive: bool
    start_ticks: int | None = None
    """Not exported: the collector compares it to tell a reused pid apart."""

    def to_json(self) -> dict[str, Any]:
        """The ``processes`` entry of a ``metrics-30s.jsonl`` line."""
        return {"pid": self.pid, "cpu_s": self.cpu_s, "rss_bytes": self.rss_bytes, "threads": self.threads,
                "open_files": self.open_files, "alive": self.alive}


def parse_pid_stat(text: str, ticks: int) -> PidStat:
    """``/proc/PID/stat``. The command name (field 2) is in parentheses and may
    hold spaces and parentheses itself, so the fields are counted from the last ``)``."""
    head, sep, tail = text.rpartition(")")
    if not sep or "(" not in head:
        raise ValueError(f"not a /proc/PID/stat line: {text[:80]!r}")
    rest = tail.split()  # rest[0] is field 3 (state), so field n is rest[n - 3]
    if len(rest) < 22:
        raise ValueError(f"/proc/PID/stat has {len(rest) + 2} fields, expected at least 24")
    utime, stime = int(rest[11]), int(rest[12])
    return PidStat(state=rest[0], cpu_s=(utime + stime) / ticks, threads=int(rest[17]),
                   start_ticks=int(rest[19]), rss_pages=int(rest[21]))


def parse_status_rss(text: str) -> int | None:
    """``VmRSS`` of ``/proc/PID/status`` in bytes (None when absent, as for a zombie)."""
    for line in text.splitlines():
        if line.startswith("VmRSS:"):
            value, unit = line.split()[1:3]
            if unit != "kB":
                raise ValueError(f"unexpected VmRSS unit {unit!r}")
            return int(value) * 1024
    return None


def parse_statm_rss(text: str, page_bytes: int) -> int:
    """Resident pages (the second field) of ``/proc/PID/statm``, in bytes."""
    return int(text.split()[1]) * page_bytes


def sample_process(pid: int, proc_root: str | Path = "/proc", *, ticks: int | None = None) -> ProcessSample:
    """Sample ``pid``; a pid that does not exist gives ``alive=False`` and Nones, never an error."""
    base = Path(proc_root) / str(pid)
    try:
        stat = parse_pid_stat((base / "stat").read_text(), ticks or clock_ticks())
        status = (base / "status").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return ProcessSample(pid, None, None, None, None, alive=False)
    rss = parse_status_rss(status)
    if rss is None:
        rss = _read_or_none(lambda: parse_statm_rss((base / "statm").read_text(), page_size()))
    open_files = _read_or_none(lambda: len(os.listdir(base / "fd")))
    return ProcessSample(pid, stat.cpu_s, rss, stat.threads, open_files,
                         alive=stat.state not in ("Z", "X"), start_ticks=stat.start_ticks)


def parse_tcp_ports(text: str) -> dict[int, tuple[int, int]]:
    """``socket inode -> (local port, remote port)`` of a ``/proc/PID/net/tcp`` or ``tcp6`` table
    (columns ``local_address`` and ``rem_address`` as ``HEXADDR:HEXPORT``, ``inode`` the tenth)."""
    out: dict[int, tuple[int, int]] = {}
    for line in text.splitlines()[1:]:
        cols = line.split()
        if len(cols) < 10:
            continue
        try:
            out[int(cols[9])] = (int(cols[1].rsplit(":", 1)[1], 16), int(cols[2].rsplit(":", 1)[1], 16))
        except (IndexError, ValueError):
            raise ValueError(f"not a /proc/net/tcp line: {line!r}") from None
    return out


def outbound_tcp(pid: int, own_ports: Collection[int], proc_root: str | Path = "/proc") -> int | None:
    """How many of ``pid``'s descriptors are TCP connections it opened: a local port not in
    ``own_ports`` (the ports it serves) and a remote port set; None when not readable."""
    base = Path(proc_root) / str(pid)

    def count() -> int:
        ports: dict[int, tuple[int, int]] = {}
        for table in ("tcp", "tcp6"):
            path = base / "net" / table
            if path.exists():
                ports.update(parse_tcp_ports(path.read_text()))
        n = 0
        for fd in os.listdir(base / "fd"):
            try:
                target = os.readlink(base / "fd" / fd)
            except OSError:  # closed meanwhile
                continue
            if target.startswith("socket:["):
                local, remote = ports.get(int(target[8:-1]), (0, 0))
                n += remote != 0 and local not in own_ports
        return n

    return _read_or_none(count)


def _read_or_none(read: Any) -> Any:
    try:
        return read()
    except OSError:  # gone meanwhile, or not ours to look at
        return None
    except ValueError as exc:  # a format this module does not know: say so, keep sampling
        log.warning("cannot parse /proc: %s", exc)
        return None


# -- the host ----------------------------------------------------------------------------------


class CpuTimes(NamedTuple):
    """Host CPU time in seconds, all CPUs summed (see the module docstring for the sums)."""

    user: float
    system: float
    idle: float
    iowait: float


class HostSample(NamedTuple):
    """The host's counters at one moment; None where a file could not be read."""

    cpu_s: CpuTimes | None
    mem_available_bytes: int | None
    net_bytes: tuple[int, int] | None
    """(received, sent)"""
    disk_bytes: tuple[int, int] | None
    """(read, written)"""

    def to_json(self) -> dict[str, Any]:
        """The ``host`` entry of a ``metrics-30s.jsonl`` line."""
        net, disk = self.net_bytes, self.disk_bytes
        return {
            "cpu_s": self.cpu_s._asdict() if self.cpu_s else None,
            "mem_available_bytes": self.mem_available_bytes,
            "net_bytes": {"rx": net[0], "tx": net[1]} if net else None,
            "disk_bytes": {"read": disk[0], "written": disk[1]} if disk else None,
        }


def parse_cpu_times(text: str, ticks: int) -> CpuTimes:
    """The aggregate ``cpu`` line of ``/proc/stat``."""
    for line in text.splitlines():
        fields = line.split()
        if fields and fields[0] == "cpu":
            v = [int(x) for x in fields[1:]] + [0] * 8  # old kernels have fewer columns
            user, nice, system, idle, iowait, irq, softirq = v[:7]
            return CpuTimes(user=(user + nice) / ticks, system=(system + irq + softirq) / ticks,
                            idle=idle / ticks, iowait=iowait / ticks)
    raise ValueError("no 'cpu' line in /proc/stat")


def parse_meminfo_available(text: str) -> int:
    """``MemAvailable`` of ``/proc/meminfo``, in bytes."""
    for line in text.splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    raise ValueError("no MemAvailable in /proc/meminfo")


def parse_net_dev(text: str) -> tuple[int, int]:
    """(received, sent) bytes of ``/proc/net/dev`` over every interface, ``lo`` included."""
    rx = tx = 0
    for line in text.splitlines():
        name, sep, counters = line.partition(":")
        if not sep or "|" in name:  # the two header lines
            continue
        fields = counters.split()
        rx += int(fields[0])
        tx += int(fields[8])
    return rx, tx


def parse_diskstats(text: str, disks: Collection[str] | None = None) -> tuple[int, int]:
    """(read, written) bytes of ``/proc/diskstats`` over ``disks``; when
    ``disks`` is None, over the devices that look like whole physical disks
    (not loop, ram, zram, dm, md, nbd, sr; not a partition of a listed device)."""
    rows: dict[str, tuple[int, int]] = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 10:
            rows[fields[2]] = (int(fields[5]), int(fields[9]))  # sectors read, sectors written
    if disks is None:
        disks = [d for d in rows if not _VIRTUAL_DISK.match(d) and not _is_partition(d, rows)]
    chosen = [rows[d] for d in disks if d in rows]
    return sum(r for r, _ in chosen) * SECTOR_BYTES, sum(w for _, w in chosen) * SECTOR_BYTES


def _is_partition(name: str, devices: Collection[str]) -> bool:
    """``sda1`` of ``sda``, ``nvme0n1p1`` of ``nvme0n1``, ``mmcblk0p2`` of ``mmcblk0``."""
    return any(name != d and name.startswith(d) and re.fullmatch(r"p?\d+", name[len(d):]) for d in devices)


def physical_disks(sys_root: str | Path = "/sys") -> set[str] | None:
    """Names of the block devices of ``/sys/block`` that are not virtual (None when
    there is no ``/sys/block`` or it lists nothing, as in some containers)."""
    block = Path(sys_root) / "block"
    try:
        entries = list(block.iterdir())
    except OSError:
        return None
    return {e.name for e in entries if "/devices/virtual/" not in os.path.realpath(e)} or None


def sample_host(proc_root: str | Path = "/proc", sys_root: str | Path = "/sys",
                *, ticks: int | None = None) -> HostSample:
    """Sample the host's counters; a file that cannot be read gives None for its part."""
    proc = Path(proc_root)
    ticks = ticks or clock_ticks()
    disks = physical_disks(sys_root)
    return HostSample(
        cpu_s=_read_or_none(lambda: parse_cpu_times((proc / "stat").read_text(), ticks)),
        mem_available_bytes=_read_or_none(lambda: parse_meminfo_available((proc / "meminfo").read_text())),
        net_bytes=_read_or_none(lambda: parse_net_dev((proc / "net" / "dev").read_text())),
        disk_bytes=_read_or_none(lambda: parse_diskstats((proc / "diskstats").read_text(), disks)),
    )
