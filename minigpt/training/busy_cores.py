"""Training on cores other jobs also use: pick the thread count that works, re-check it, and warn.

torch's CPU thread pool stalls badly when another process holds one of its cores: every parallel
region waits for the thread that shares a core (measured: a step at the reference shape took
1,613 ms with two threads while another job ran, against 85 ms idle; one thread lost 1.4x only).
So with `hardware.torch_num_threads: null` a run starts with a thread per core other work leaves
free (`cpu_load`, the one judge of busy cores); every few hundred steps, and whenever steps get much
slower, it tries another thread count for a few steps and keeps the faster. A warning compares each
window with two expectations: the run's own early speed, and an absolute one, the model-FLOP share
of the machine's matmul peak (measured on quiet cores) that a free machine gives.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

import torch
from transformers import TrainerCallback

from ..cpu_load import free_cores, sample_others_busy_cores

SLOWDOWN_FACTOR = 0.4  # a window below 40% of the early speed counts as stalled
BASELINE_WINDOWS = 3  # log windows that set the early speed (the very first, with warm-up, is skipped)
RECHECK_STEPS = 200  # steps between two trials of another thread count
TRIAL_STEPS = 5  # steps a trial runs, and steps its median is compared with
EXPECTED_MFU = 0.08  # below this share of a quiet-measured peak, a CPU run is stalled, not just small


def choose_threads(available: int) -> tuple[int, float]:
    """(threads to use, cores' worth of CPU time other processes use) at the start of a run."""
    if available <= 1:
        return available, 0.0
    others = sample_others_busy_cores()
    return free_cores(available, others), others


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
    """The busy-cores warning each log window (main process), and with `adapt` (a thread count the
    run chose, not the config) a thread count that follows what works.

    Adapting measures, not guesses: every `recheck_steps` steps, or as soon as steps get
    SLOWDOWN_FACTOR slower than the best seen at this count, the run tries another count
    (`free_cores` by what `probe` says other work uses, else the other end) for `trial_steps` steps and
    keeps whichever gave the faster median step. `max_threads` is what the run may use (the cores);
    `peak_threads` the thread count MFU's peak was measured with: at that count MFU is the
    absolute expectation (None: no MFU check).
    """

    def __init__(
        self,
        detector: SlowdownDetector | None = None,
        adapt: bool = False,
        max_threads: int | None = None,
        peak_threads: int | None = None,
        probe: Callable[[], float] = sample_others_busy_cores,
        recheck_steps: int = RECHECK_STEPS,
        trial_steps: int = TRIAL_STEPS,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.detector = detector or SlowdownDetector()
        self.adapt = adapt
        self.max_threads = max_threads or torch.get_num_threads()
        self.peak_threads = peak_threads
        self.probe = probe
        self.recheck_steps = recheck_steps
        self.trial_steps = trial_steps
        self.clock = clock
        self.changes: list[tuple[int, int, int]] = []  # (step, from threads, to threads)
        self._step_started = 0.0
        self._settled: list[float] = []  # recent step times at the settled count
        self._best_median: dict[int, float] = {}
        self._trial: list[float] | None = None  # step times of a trial in progress
        self._trial_from: int | None = None
        self._steps_since_check = 0

    def on_log(self, args, state, control, logs=None, **kwargs) -> None:
        if not logs or "tokens_per_second" not in logs:
            return
        # The MFU expectation holds for the thread count the peak was measured with.
        mfu = logs.get("mfu") if torch.get_num_threads() == self.peak_threads else None
        warning = self.detector.observe(float(logs["tokens_per_second"]), mfu)
        if warning is not None and state.is_world_process_zero:
            print(warning, file=sys.stderr, flush=True)

    def on_step_begin(self, args, state, control, **kwargs) -> None:
        self._step_started = self.clock()

    def on_step_end(self, args, state, control, **kwargs) -> None:
        if not self.adapt:
            return
        seconds = self.clock() - self._step_started
        threads = torch.get_num_threads()
        if self._trial is not None:
            self._trial.append(seconds)
            if len(self._trial) >= self.trial_steps:
                self._end_trial(state, threads)
            return
        self._settled = (self._settled + [seconds])[-self.trial_steps * 2 :]
        self._steps_since_check += 1
        if len(self._settled) < self.trial_steps:
            return
        current = _median(self._settled[-self.trial_steps :])
        best = self._best_median.setdefault(threads, current)
        self._best_median[threads] = min(best, current)
        stalled = current * SLOWDOWN_FACTOR > best
        if stalled or self._steps_since_check >= self.recheck_steps:
            self._start_trial(threads)

    def _start_trial(self, threads: int) -> None:
        candidate = free_cores(self.max_threads, self.probe())
        if candidate == threads:
            candidate = self.max_threads if threads < self.max_threads else max(1, threads // 2)
        self._steps_since_check = 0
        if candidate == threads:
            return
        self._trial, self._trial_from = [], threads
        torch.set_num_threads(candidate)

    def _end_trial(self, state, trial_threads: int) -> None:
        before = _median(self._settled[-self.trial_steps :])
        during = _median(self._trial or [])
        previous = self._trial_from or trial_threads
        self._trial, self._trial_from = None, None
        if during < 0.9 * before:  # clearly faster: keep it
            self.changes.append((state.global_step, previous, trial_threads))
            self._settled = []
            self._best_median.pop(trial_threads, None)
            if state.is_world_process_zero:
                print(
                    f"step {state.global_step}: {trial_threads} thread(s) train faster than {previous} now "
                    f"({1000 * during:.0f} against {1000 * before:.0f} ms/step): training on with {trial_threads}",
                    file=sys.stderr,
                    flush=True,
                )
        else:
            torch.set_num_threads(previous)


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2] if ordered else float("inf")


__all__ = ["BusyCoresCallback", "SlowdownDetector", "choose_threads"]
