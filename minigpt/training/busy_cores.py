"""Training on cores other jobs also use: pick the thread count that works, re-check it, and warn.

torch's CPU thread pool stalls badly when another process holds one of its cores: every parallel
region waits for the thread that shares a core (measured here: a step at the reference shape took
1,613 ms with two threads while another job ran, against 85 ms idle; one thread lost 1.4x only).
So with `hardware.torch_num_threads: null` a run first probes how much of its cores it gets
(`cpu_share`: CPU time / (wall time x threads) of a short matmul loop) and starts with as many
threads as there are free cores; every few log windows, and whenever speed collapses, it probes
again and moves the thread count up or down. A warning compares each window with two
expectations: the run's own early speed, and an absolute one, the model-FLOP share of the
machine's matmul peak (measured on quiet cores) that a free machine gives.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable

import torch
from transformers import TrainerCallback

SLOWDOWN_FACTOR = 0.4  # a window below 40% of the early speed counts as stalled
BASELINE_WINDOWS = 3  # log windows that set the early speed (the very first, with warm-up, is skipped)
PROBE_SECONDS = 0.15  # length of one cpu_share probe
RECHECK_WINDOWS = 10  # log windows between two probes for more threads, once a run has fewer than it may
EXPECTED_MFU = 0.08  # below this share of a quiet-measured peak, a CPU run is stalled, not just small


def cpu_share(threads: int, seconds: float = PROBE_SECONDS) -> float:
    """The share of `threads` cores this process got while `threads` torch threads did small matmuls
    (the kind of work a training step is made of) for about `seconds`; about 1.0 on free cores."""
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        a, b = torch.randn(384, 384), torch.randn(384, 384)  # (384, 384): well under a millisecond
        a @ b  # warm-up: the thread pool
        start, cpu_start = time.perf_counter(), time.process_time()
        while time.perf_counter() - start < seconds:
            a @ b
        wall, used = time.perf_counter() - start, time.process_time() - cpu_start
    finally:
        torch.set_num_threads(previous)
    return min(1.0, used / (wall * threads))


def threads_for(available: int, share: float) -> int:
    """Threads for the free cores: all `available` when our threads got nearly all of them, else
    about as many as they got (2 cores with one busy: 1; 8 with one busy: 7)."""
    free = available * share
    if free >= available - 0.5:
        return available
    return max(1, min(available - 1, math.floor(free + 0.5)))


def choose_threads(available: int) -> tuple[int, float]:
    """(threads to use, the measured share of `available` cores) at the start of a run."""
    if available <= 1:
        return available, 1.0
    share = cpu_share(available)
    return threads_for(available, share), share


class SlowdownDetector:
    """Feed it each log window's tokens/s; it returns a warning once, when speed collapses."""

    def __init__(self, factor: float = SLOWDOWN_FACTOR, baseline_windows: int = BASELINE_WINDOWS) -> None:
        self.factor = factor
        self.baseline_windows = baseline_windows
        self._seen = 0
        self._baseline: list[float] = []
        self.warned = False

    @property
    def baseline(self) -> float | None:
        """The median of the early windows' tokens/s, once there are enough of them."""
        if len(self._baseline) < self.baseline_windows:
            return None
        return sorted(self._baseline)[len(self._baseline) // 2]

    def observe(self, tokens_per_second: float, mfu: float | None = None) -> str | None:
        """The warning for this window, once: against the early speed or, given the window's MFU
        (against a quiet-measured peak), against EXPECTED_MFU."""
        self._seen += 1
        if self._seen == 1:
            return None  # the first window pays for warm-up (allocations, caches)
        baseline = self.baseline
        if baseline is None:
            self._baseline.append(tokens_per_second)
        if self.warned:
            return None
        if mfu is not None and mfu < EXPECTED_MFU:
            self.warned = True
            return (
                f"warning: training runs at {tokens_per_second:,.0f} tokens/s, {mfu:.1%} of this machine's "
                f"matmul peak, where free cores give a model this size {EXPECTED_MFU:.0%} or more: the cores "
                "look busy (another process?); on a shared machine set hardware.torch_num_threads=1"
            )
        if baseline is None or tokens_per_second >= self.factor * baseline:
            return None
        self.warned = True
        return (
            f"warning: training slowed to {tokens_per_second:,.0f} tokens/s from {baseline:,.0f} at the start: "
            "the cores look busy (another process?); on a shared machine set hardware.torch_num_threads=1"
        )


class BusyCoresCallback(TrainerCallback):
    """Each log window (main process prints): the busy-cores warning, and with `adapt` (thread
    count chosen by the run, not the config) a new thread count when the free cores changed.

    `max_threads` is what the run may use (the cores); `peak_threads`, the thread count MFU's peak
    was measured with: at that count, MFU is the absolute expectation (None: no MFU check).
    """

    def __init__(
        self,
        detector: SlowdownDetector | None = None,
        adapt: bool = False,
        max_threads: int | None = None,
        peak_threads: int | None = None,
        probe: Callable[[int], float] = cpu_share,
    ) -> None:
        self.detector = detector or SlowdownDetector()
        self.adapt = adapt
        self.max_threads = max_threads or torch.get_num_threads()
        self.peak_threads = peak_threads
        self.probe = probe
        self._best: dict[int, float] = {}  # best tokens/s seen at each thread count
        self._windows_since_probe = 0
        self.changes: list[tuple[int, int, int]] = []  # (step, from threads, to threads)

    def on_log(self, args, state, control, logs=None, **kwargs) -> None:
        if not logs or "tokens_per_second" not in logs:
            return
        tokens_per_second = float(logs["tokens_per_second"])
        threads = torch.get_num_threads()
        # The MFU expectation holds for the thread count the peak was measured with.
        mfu = logs.get("mfu") if threads == self.peak_threads else None
        warning = self.detector.observe(tokens_per_second, mfu)
        if warning is not None and state.is_world_process_zero:
            print(warning, file=sys.stderr, flush=True)
        if self.adapt:
            self._adapt(state, tokens_per_second, threads)

    def _adapt(self, state, tokens_per_second: float, threads: int) -> None:
        self._windows_since_probe += 1
        best = self._best.get(threads, 0.0)
        self._best[threads] = max(best, tokens_per_second)
        stalled = threads > 1 and best > 0 and tokens_per_second < SLOWDOWN_FACTOR * best
        recheck = threads < self.max_threads and self._windows_since_probe >= RECHECK_WINDOWS
        if not (stalled or recheck):
            return
        self._windows_since_probe = 0
        wanted = threads_for(self.max_threads, self.probe(self.max_threads))
        if wanted == threads:
            return
        torch.set_num_threads(wanted)
        self.changes.append((state.global_step, threads, wanted))
        self._best.pop(wanted, None)  # the speed seen at that count before is no guide now
        if state.is_world_process_zero:
            why = "cores busy" if wanted < threads else "cores free again"
            print(
                f"{why} at step {state.global_step}: training on with {wanted} thread(s) instead of {threads}",
                file=sys.stderr,
                flush=True,
            )


__all__ = ["BusyCoresCallback", "SlowdownDetector", "choose_threads", "cpu_share", "threads_for"]
