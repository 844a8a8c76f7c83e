"""loadtest._harness.procfs: /proc parsing from fixture text, and live samples of this process."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from loadtest._harness.procfs import (
    CpuTimes,
    HostSample,
    outbound_tcp,
    parse_cpu_times,
    parse_diskstats,
    parse_meminfo_available,
    parse_net_dev,
    parse_pid_stat,
    parse_statm_rss,
    parse_status_rss,
    parse_tcp_ports,
    physical_disks,
    sample_host,
    sample_process,
)

# A command name with a space and a parenthesis, as a thread name can make it.
PID_STAT = (
    "4242 (python (worker) x) S 1 4242 4242 0 -1 4194560 5000 0 3 0 "
    "250 130 0 0 20 0 7 0 123456 900000000 3000 18446744073709551615 1 1 0 0 0 0 0 16781312 1266 0 0 0 17 1 0 0 0 0 0"
)
STATUS = "Name:\tpython\nState:\tS (sleeping)\nVmPeak:\t  900000 kB\nVmRSS:\t   12000 kB\nThreads:\t7\n"
ZOMBIE_STATUS = "Name:\tpython\nState:\tZ (zombie)\nThreads:\t1\n"
PROC_STAT = (
    "cpu  1000 50 300 8000 40 5 15 7 0 0\n"
    "cpu0 500 25 150 4000 20 2 7 3 0 0\n"
    "intr 12345\nctxt 999\n"
)
MEMINFO = "MemTotal:       24000000 kB\nMemFree:         1000000 kB\nMemAvailable:   20000000 kB\n"
NET_DEV = """Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:    1000      10    0    0    0     0          0         0     1000      10    0    0    0     0       0          0
  eth0:     500       5    0    0    0     0          0         0      200       2    0    0    0     0       0          0
"""
DISKSTATS = """   7       0 loop0 10 0 80 0 0 0 0 0 0 0 0 0 0 0 0 0 0
 254       0 vda 100 0 2000 0 50 0 1000 0 0 0 0 0 0 0 0 0 0
 254       1 vda1 90 0 1900 0 50 0 1000 0 0 0 0 0 0 0 0 0 0
 259       0 nvme0n1 10 0 30 0 5 0 40 0 0 0 0 0 0 0 0 0 0
 259       1 nvme0n1p1 10 0 30 0 5 0 40 0 0 0 0 0 0 0 0 0 0
 253       0 dm-0 100 0 2000 0 50 0 1000 0 0 0 0 0 0 0 0 0 0
 252       0 zram0 5 0 5 0 5 0 5 0 0 0 0 0 0 0 0 0 0
"""


def test_pid_stat_counts_fields_from_the_last_parenthesis() -> None:
    s = parse_pid_stat(PID_STAT, ticks=100)
    assert s.state == "S"
    assert s.cpu_s == pytest.approx(3.8)  # (250 + 130) / 100
    assert (s.threads, s.start_ticks, s.rss_pages) == (7, 123456, 3000)


def test_pid_stat_refuses_other_text() -> None:
    with pytest.raises(ValueError, match="not a /proc/PID/stat"):
        parse_pid_stat("hello", 100)
    with pytest.raises(ValueError, match="fields"):
        parse_pid_stat("1 (x) S 1 2", 100)


def test_rss_from_status_and_statm() -> None:
    assert parse_status_rss(STATUS) == 12000 * 1024
    assert parse_status_rss(ZOMBIE_STATUS) is None
    assert parse_statm_rss("219000 3000 900 1 0 5000 0\n", 4096) == 3000 * 4096


def test_host_cpu_times_sum_nice_into_user_and_irqs_into_system() -> None:
    assert parse_cpu_times(PROC_STAT, ticks=100) == CpuTimes(user=10.5, system=3.2, idle=80.0, iowait=0.4)
    with pytest.raises(ValueError, match="no 'cpu' line"):
        parse_cpu_times("intr 1\n", 100)


def test_meminfo_available() -> None:
    assert parse_meminfo_available(MEMINFO) == 20000000 * 1024
    with pytest.raises(ValueError, match="MemAvailable"):
        parse_meminfo_available("MemTotal: 1 kB\n")


def test_net_dev_sums_every_interface_loopback_included() -> None:
    assert parse_net_dev(NET_DEV) == (1500, 1200)


def test_diskstats_counts_whole_physical_disks_once() -> None:
    # vda and nvme0n1; not their partitions, not loop, dm or zram
    assert parse_diskstats(DISKSTATS) == ((2000 + 30) * 512, (1000 + 40) * 512)
    assert parse_diskstats(DISKSTATS, {"vda"}) == (2000 * 512, 1000 * 512)
    assert parse_diskstats(DISKSTATS, {"sdz"}) == (0, 0)


def test_physical_disks_leaves_out_virtual_devices(tmp_path: Path) -> None:
    block = tmp_path / "block"
    block.mkdir()
    for name, target in (("vda", "devices/pci0000:00/virtio1/block/vda"),
                         ("loop0", "devices/virtual/block/loop0")):
        (tmp_path / target).mkdir(parents=True)
        (block / name).symlink_to(tmp_path / target)
    assert physical_disks(tmp_path) == {"vda"}
    assert physical_disks(tmp_path / "missing") is None


def test_sample_process_from_a_fake_proc(tmp_path: Path) -> None:
    pid_dir = tmp_path / "4242"
    (pid_dir / "fd").mkdir(parents=True)
    (pid_dir / "stat").write_text(PID_STAT)
    (pid_dir / "status").write_text(STATUS)
    for fd in ("0", "1", "2"):
        (pid_dir / "fd" / fd).touch()
    s = sample_process(4242, tmp_path, ticks=100)
    assert s.to_json() == {"pid": 4242, "cpu_s": 3.8, "rss_bytes": 12000 * 1024, "threads": 7,
                           "open_files": 3, "alive": True}


def test_a_zombie_is_not_alive_and_its_rss_comes_from_statm(tmp_path: Path) -> None:
    pid_dir = tmp_path / "4242"
    pid_dir.mkdir()
    (pid_dir / "stat").write_text(PID_STAT.replace(") S ", ") Z "))
    (pid_dir / "status").write_text(ZOMBIE_STATUS)
    (pid_dir / "statm").write_text("0 0 0 0 0 0 0\n")
    s = sample_process(4242, tmp_path, ticks=100)
    assert (s.alive, s.rss_bytes, s.open_files) == (False, 0, None)


def test_a_missing_pid_is_dead_not_an_error(tmp_path: Path) -> None:
    assert sample_process(4242, tmp_path).to_json() == {
        "pid": 4242, "cpu_s": None, "rss_bytes": None, "threads": None, "open_files": None, "alive": False}


def test_host_sample_with_unreadable_files_gives_nones(tmp_path: Path) -> None:
    (tmp_path / "stat").write_text(PROC_STAT)
    (tmp_path / "meminfo").write_text("garbage\n")  # parse failure: None, not an error
    h = sample_host(tmp_path, tmp_path / "sys", ticks=100)
    assert h == HostSample(cpu_s=CpuTimes(10.5, 3.2, 80.0, 0.4), mem_available_bytes=None,
                           net_bytes=None, disk_bytes=None)
    assert h.to_json() == {"cpu_s": {"user": 10.5, "system": 3.2, "idle": 80.0, "iowait": 0.4},
                           "mem_available_bytes": None, "net_bytes": None, "disk_bytes": None}


# -- live ------------------------------------------------------------------------------


def test_live_sample_of_this_process() -> None:
    sum(i * i for i in range(200_000))  # some CPU of our own, whatever ran before
    stop = threading.Event()
    t = threading.Thread(target=stop.wait, name="procfs-test-extra-thread")
    t.start()
    try:
        s = sample_process(os.getpid())
    finally:
        stop.set()
        t.join()
    assert s.alive and s.pid == os.getpid()
    assert s.cpu_s > 0 and s.rss_bytes > 0
    assert s.threads >= 2  # this one and the extra thread
    assert s.open_files >= 3  # stdin, stdout, stderr at least


def test_live_sample_of_a_reaped_child_is_dead() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert not sample_process(child.pid).alive


def test_live_host_sample() -> None:
    h = sample_host()
    assert h.cpu_s is not None and h.cpu_s.user > 0 and h.cpu_s.idle > 0
    assert h.mem_available_bytes > 0
    assert h.net_bytes is not None and min(h.net_bytes) >= 0
    assert h.disk_bytes is not None and min(h.disk_bytes) >= 0


NET_TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1111 1 0 100 0 0 10 0
   1: 0100007F:1F90 0100007F:D431 01 00000000:00000000 00:00000000 00000000     0        0 2222 1 0 20 4 30 10 -1
   2: 0100007F:D432 0100007F:2328 01 00000000:00000000 00:00000000 00000000     0        0 3333 1 0 20 4 30 10 -1
"""


def test_tcp_ports_by_socket_inode() -> None:
    assert parse_tcp_ports(NET_TCP) == {1111: (8080, 0), 2222: (8080, 54321), 3333: (54322, 9000)}
    with pytest.raises(ValueError):
        parse_tcp_ports(NET_TCP + "   3: 0100007F 0100007F:2328 01 0 0 0 0 0 4444\n")


def test_outbound_tcp_counts_the_connections_a_process_opened_not_those_it_accepted(tmp_path: Path) -> None:
    base = tmp_path / "4242"
    (base / "net").mkdir(parents=True)
    (base / "fd").mkdir()
    (base / "net" / "tcp").write_text(NET_TCP)
    (base / "net" / "tcp6").write_text(NET_TCP.splitlines()[0] + "\n")
    for fd, target in enumerate(("/dev/null", "socket:[1111]", "socket:[2222]", "socket:[3333]", "pipe:[9]",
                                 "socket:[7777]")):  # 7777: a Unix socket, in no TCP table
        os.symlink(target, base / "fd" / str(fd))
    assert outbound_tcp(4242, (8080,), tmp_path) == 1  # 3333 only: 2222 was accepted on 8080, 1111 listens
    assert outbound_tcp(4242, (), tmp_path) == 2
    assert outbound_tcp(4243, (), tmp_path) is None  # no such pid
