"""Training speed: FLOPs per token, tokens per second and model FLOPs utilisation (MFU).

Written by hand because Trainer reports samples/s for the whole run only, and its `total_flos`
(6 x parameters x tokens) leaves out attention, which matters at small widths and long contexts.
MFU divides by a device's peak FLOP/s (`peak_flops.py`: a datasheet figure or a measured matmul).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from torch import nn

from ..model.configuration_minigpt import MiniGPTConfig


def matmul_parameter_count(model: nn.Module, config: MiniGPTConfig) -> int:
    """Parameters that take part in a matmul per token: all but the embedding lookups, plus the head.

    Token and position embeddings are table lookups (no FLOPs); the output head is a
    (hidden x vocab) matmul even when it shares its weight with the token embedding.
    """
    embedding_params = sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Embedding))
    total = sum(p.numel() for p in model.parameters())  # tied weights counted once
    return total - embedding_params + config.vocab_size * config.hidden_size


def flops_per_token(model: nn.Module, config: MiniGPTConfig, seq_len: int) -> float:
    """Training FLOPs per token (forward + backward): 6N + 12 L C T (PaLM, Chowdhery et al. 2022, App. B).

    6N: two FLOPs per multiply-add, forward once and backward twice over N matmul parameters.
    12 L C T: attention scores (QK^T) and the weighted sum (AV), each 2 C T per token and layer
    forward, times 3 for forward + backward, over the full T x T matrix as kernels compute it.
    """
    n = matmul_parameter_count(model, config)
    attention = 12 * config.num_hidden_layers * config.hidden_size * seq_len
    return 6.0 * n + attention


class ThroughputMeter:
    """Tokens/s and MFU over the optimizer steps between two log lines.

    Only time inside optimizer steps counts (start_step/end_step), so evaluation, sampling and
    checkpointing between steps do not make training look slower than it is.
    """

    def __init__(self, tokens_per_step: int, flops_per_token: float, peak_flops: float, num_devices: int):
        self.tokens_per_step = tokens_per_step  # across all processes
        self.flops_per_token = flops_per_token
        self.peak_flops = peak_flops  # of one device
        self.num_devices = num_devices
        # Called with (old peak, rate reached) when training beats peak_flops, which then becomes that rate.
        self.on_peak_raised: Callable[[float, float], None] | None = None
        self._step_started: float | None = None
        self._window_seconds = 0.0
        self._window_steps = 0

    def start_step(self) -> None:
        self._step_started = time.perf_counter()

    def end_step(self) -> None:
        if self._step_started is not None:
            self._window_seconds += time.perf_counter() - self._step_started
            self._window_steps += 1
            self._step_started = None

    def take_window(self) -> dict[str, float]:
        """{"tokens_per_second", "mfu"} over the steps since the last call (empty if none); resets.

        An MFU above 100% proves the peak wrong (measured while other work held the cores): the rate
        training reached becomes the peak (`on_peak_raised` hears of it), so no MFU above 100% is
        ever reported, and nothing is measured again.
        """
        if self._window_steps == 0 or self._window_seconds <= 0:
            return {}
        tokens_per_second = self._window_steps * self.tokens_per_step / self._window_seconds
        achieved = tokens_per_second * self.flops_per_token / self.num_devices  # FLOP/s per device
        if achieved > self.peak_flops:
            old, self.peak_flops = self.peak_flops, achieved
            if self.on_peak_raised is not None:
                self.on_peak_raised(old, achieved)
        self._window_seconds, self._window_steps = 0.0, 0
        return {"tokens_per_second": tokens_per_second, "mfu": achieved / self.peak_flops}


__all__ = ["ThroughputMeter", "flops_per_token", "matmul_parameter_count"]
