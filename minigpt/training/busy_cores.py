"""Say so when training slows down far below its own start: the cores are probably busy.

torch's CPU thread pool stalls badly when another process holds its cores (measured here: a
2-thread run on 2 busy cores took 3 to 10 times longer per step). The run cannot see the other
process, but it sees its own tokens/s fall far below what the same run did in its first log
windows; then one line suggests `hardware.torch_num_threads=1`.
"""

from __future__ import annotations

import sys

from transformers import TrainerCallback

SLOWDOWN_FACTOR = 0.4  # a window below 40% of the early speed counts as stalled
BASELINE_WINDOWS = 3  # log windows that set the early speed (the very first, with warm-up, is skipped)


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

    def observe(self, tokens_per_second: float) -> str | None:
        self._seen += 1
        if self._seen == 1:
            return None  # the first window pays for warm-up (allocations, caches)
        baseline = self.baseline
        if baseline is None:
            self._baseline.append(tokens_per_second)
            return None
        if self.warned or tokens_per_second >= self.factor * baseline:
            return None
        self.warned = True
        return (
            f"warning: training slowed to {tokens_per_second:,.0f} tokens/s from {baseline:,.0f} at the start: "
            "the cores look busy (another process?); on a shared machine set hardware.torch_num_threads=1"
        )


class BusyCoresCallback(TrainerCallback):
    """Prints the detector's warning once (main process) when tokens/s collapses mid-run."""

    def __init__(self, detector: SlowdownDetector | None = None) -> None:
        self.detector = detector or SlowdownDetector()

    def on_log(self, args, state, control, logs=None, **kwargs) -> None:
        if not state.is_world_process_zero or not logs or "tokens_per_second" not in logs:
            return
        warning = self.detector.observe(float(logs["tokens_per_second"]))
        if warning is not None:
            print(warning, file=sys.stderr, flush=True)


__all__ = ["BusyCoresCallback", "SlowdownDetector"]
