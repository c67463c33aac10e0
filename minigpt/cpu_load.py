"""How much of this machine's CPU other work takes (/proc/stat's CPU time minus this process's own),
and the process-wide CPU settings made before torch loads (standard library only). torch's thread pool
stalls when another process holds one of its cores, and spinning OpenMP threads make it worse.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
import time
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass

# Other work above this share of a core makes it not ours; below (a shell, a logger) it counts as free.
BUSY_CORE_SHARE = 0.3
SAMPLE_SECONDS = 0.2  # one sample at a run's start: 20 clock ticks a core at Linux's 100 Hz


@dataclass(frozen=True)
class CPUTimes:
    """The machine's and this process's CPU time, for the load between two readings."""

    wall: float  # time.perf_counter()
    machine_busy: float  # seconds of CPU time all processes used, over all cores (0 if unknown)
    machine_total: float  # seconds of CPU time the cores had in all (busy + idle)
    own: float  # seconds of CPU time this process used (every thread)


def read_cpu_times() -> CPUTimes:
    """The machine's busy and total CPU time (/proc/stat) and this process's, now."""
    busy = total = 0.0
    try:
        with open("/proc/stat", encoding="ascii") as stat:
            fields = [int(value) for value in stat.readline().split()[1:]]
        ticks = os.sysconf("SC_CLK_TCK")
        idle = fields[3] + fields[4]  # idle + iowait; steal (another VM holding the core) counts as busy
        total = sum(fields[:8]) / ticks  # user .. steal (guest time is already inside user)
        busy = total - idle / ticks
    except (OSError, ValueError, IndexError):
        pass
    own = os.times()
    return CPUTimes(time.perf_counter(), busy, total, own.user + own.system)


def others_busy_cores(start: CPUTimes, end: CPUTimes) -> float:
    """Cores' worth of CPU time other processes used between two readings (0.0 when unknown)."""
    wall = end.wall - start.wall
    if wall <= 0 or end.machine_total <= start.machine_total:
        return 0.0
    others = (end.machine_busy - start.machine_busy) - (end.own - start.own)
    # Clock ticks (10 ms) make short readings jumpy: never more than the machine's cores.
    return min(max(0.0, others / wall), float(os.cpu_count() or 1))


def sample_others_busy_cores(seconds: float = SAMPLE_SECONDS) -> float:
    """Cores' worth of CPU time other processes use, sampled over `seconds` of sleep."""
    start = read_cpu_times()
    time.sleep(seconds)
    return others_busy_cores(start, read_cpu_times())


def cpuinfo(field: str) -> str | None:
    """The first `field` of Linux's /proc/cpuinfo (None elsewhere)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            return next((line.split(":", 1)[1].strip() for line in handle if line.startswith(field)), None)
    except OSError:
        return None


def is_busy(others: float) -> bool:
    """True when other work holds more than BUSY_CORE_SHARE of a core."""
    return others > BUSY_CORE_SHARE


def choose_wait_policy(
    environ: MutableMapping[str, str] = os.environ, sample: Callable[[], float] = sample_others_busy_cores
) -> str | None:
    """Set OMP_WAIT_POLICY=PASSIVE when other work keeps the cores busy; a line saying so, else None.
    Call it before torch is imported (OpenMP reads the variable once); a value of the user's is kept.
    On free cores spinning keeps steps fast, so nothing changes there."""
    if "OMP_WAIT_POLICY" in environ or "torch" in sys.modules:
        return None
    others = sample()
    if not is_busy(others):
        return None
    environ["OMP_WAIT_POLICY"] = "PASSIVE"
    return (f"cores busy: other processes use {others:.1f} core(s), so OpenMP threads wait passively "
            "(OMP_WAIT_POLICY=PASSIVE; set it yourself to choose)")


# glibc serves a large request with a fresh mmap and returns the heap's free top to the kernel past a
# trim threshold, so a training step that frees and reallocates the same buffers page-faults them back
# in each time. With both thresholds raised freed blocks stay in the heap. Process-wide and for good:
# only a process that exists for one run sets it. No-op off glibc.
M_TRIM_THRESHOLD = -1  # mallopt parameters, from glibc's malloc.h
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_MAX = 32 << 20  # glibc's ceiling on 64-bit: larger requests keep their own mmap
TRIM_THRESHOLD = 1 << 30  # free heap kept before any is returned to the kernel


def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds for this process; True if glibc took both."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    # Both or neither: setting either one stops glibc adapting the other (it stays at 128 KiB).
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_MAX)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
