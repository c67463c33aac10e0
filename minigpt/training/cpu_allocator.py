"""Keep freed memory in the process: no page faults for the buffers every training step reallocates.

glibc's malloc serves a large request (over 128 KiB, a threshold that grows up to 32 MiB as such
blocks are freed) with a fresh `mmap` and returns the heap's free top to the kernel once it passes
a trim threshold. A training step frees and reallocates the same activations, gradients and
logits every time, so each step the kernel hands back zeroed pages, one minor fault per 4 KiB:
about 4,000 faults in a step of the reference shape (4 layers, hidden 128, 12 x 64 tokens), 7-8% of
its time. With both thresholds raised, freed blocks stay in the heap and the next step reuses them
(25 faults a step). The cost: memory freed late in a run is returned to the OS only at exit.

Process-wide and for good (glibc cannot be given its adaptive thresholds back), so only a process
that exists for one run sets it: `scripts/train.py` at its start, a benchmark worker; never
`run_training` called from a notebook or the web app. A no-op off glibc (macOS, musl).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

M_TRIM_THRESHOLD = -1  # mallopt parameters, from glibc's malloc.h
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_MAX = 32 << 20  # glibc's ceiling on 64-bit: larger requests keep their own mmap
TRIM_THRESHOLD = 1 << 30  # free heap kept before any is returned to the kernel


def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds for this process; True if glibc took both."""
    if not sys.platform.startswith("linux"):
        return False
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    # Both or neither: setting either one stops glibc adapting the other, which then stays at its
    # 128 KiB start (the trim threshold alone sent every block over it to mmap: 13x the faults).
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_MAX)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))


__all__ = ["keep_freed_memory"]
