"""Training speed: FLOPs per token, tokens per second and model FLOPs utilisation (MFU).

Written by hand because Trainer reports samples/s for the whole run only, and its `total_flos`
(6 x parameters x tokens) leaves out attention, which matters at small widths and long contexts.
MFU divides by a device's peak FLOP/s: a number from the spec sheet, or (`peak_flops: auto`) the
best matmul rate measured once on this machine and cached in `~/.cache/minigpt/peak_flops.json`,
only when it was measured on quiet cores; an MFU above 100% shows the peak wrong, and it is
measured again.
"""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from ..atomic import atomic_write_file
from ..model.configuration_minigpt import MiniGPTConfig

PEAK_FLOPS_FILE = "peak_flops.json"
QUIET_CPU_SHARE = 0.85  # a measurement whose threads got less of their cores than this was not alone


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
        # Called with the FLOP/s training reached when it beats peak_flops: returns a new peak or None.
        self.on_peak_too_low: Callable[[float], float | None] | None = None
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

        An MFU above 100% proves the peak wrong (measured while other jobs held the cores): it is
        re-measured through `on_peak_too_low`, and never below the rate training just reached, so
        no MFU above 100% is ever reported.
        """
        if self._window_steps == 0 or self._window_seconds <= 0:
            return {}
        tokens_per_second = self._window_steps * self.tokens_per_step / self._window_seconds
        achieved = tokens_per_second * self.flops_per_token / self.num_devices  # FLOP/s per device
        if achieved > self.peak_flops:
            remeasured = self.on_peak_too_low(achieved) if self.on_peak_too_low is not None else None
            self.peak_flops = max(achieved, remeasured or 0.0)
        self._window_seconds, self._window_steps = 0.0, 0
        return {"tokens_per_second": tokens_per_second, "mfu": achieved / self.peak_flops}


def cache_dir() -> Path:
    """MiniGPT's per-user cache folder: `$MINIGPT_CACHE_DIR`, else `$XDG_CACHE_HOME/minigpt`, else
    `~/.cache/minigpt`."""
    if os.environ.get("MINIGPT_CACHE_DIR"):
        return Path(os.environ["MINIGPT_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "minigpt"


def device_name(device: torch.device) -> str:
    """A name that identifies the hardware behind `device` (CPU model or GPU name)."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def peak_flops_key(device: torch.device, dtype: torch.dtype) -> str:
    """Cache key: what the measured rate depends on (hardware, threads on CPU, dtype, torch)."""
    where = f"{torch.get_num_threads()} threads" if device.type == "cpu" else device.type
    return (
        f"{device_name(device)} | {where} | {str(dtype).removeprefix('torch.')} | torch {torch.__version__}"
    )


@dataclass
class PeakMeasurement:
    """A measured matmul rate, and whether the cores were ours while it was measured."""

    flops: float
    cpu_share: float  # CPU time the process got / (wall time x threads) in the best run; 1.0 on a GPU

    @property
    def quiet(self) -> bool:
        """Measured without other processes on our cores: worth caching for good."""
        return self.cpu_share >= QUIET_CPU_SHARE


def measure_matmul_peak(
    device: torch.device, dtype: torch.dtype, size: int | None = None, repeats: int = 5
) -> PeakMeasurement:
    """Best FLOP/s of a square `size` x `size` matmul over `repeats` timed runs (after one warm-up).

    The best run, not the median: on a shared machine other jobs only ever make a run slower. On
    a CPU each run also records the share of its threads' wall time it got on a core: well below
    1, another process held the cores, and the rate is not the machine's peak.
    """
    size = size or (8192 if device.type == "cuda" else 2048)
    a = torch.randn(size, size, device=device).to(dtype)  # (size, size)
    b = torch.randn(size, size, device=device).to(dtype)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    threads = torch.get_num_threads() if device.type == "cpu" else None
    a @ b  # warm-up: thread pool, kernel selection
    sync()
    best, share = float("inf"), 1.0
    for _ in range(repeats):
        start, cpu_start = time.perf_counter(), time.process_time()
        a @ b
        sync()
        elapsed = time.perf_counter() - start
        if elapsed < best:
            best = elapsed
            if threads:
                share = min(1.0, (time.process_time() - cpu_start) / (elapsed * threads))
    return PeakMeasurement(2 * size**3 / best, share)  # a multiply and an add per term


def measure_matmul_flops(
    device: torch.device, dtype: torch.dtype, size: int | None = None, repeats: int = 5
) -> float:
    """`measure_matmul_peak`'s rate alone."""
    return measure_matmul_peak(device, dtype, size, repeats).flops


def resolve_peak_flops(
    setting: float | str, device: torch.device, dtype: torch.dtype, cache_file: Path | None = None
) -> float:
    """`hardware.peak_flops` as a number: itself, or for "auto" the cached or freshly measured
    matmul peak of `device` at `dtype` (with the current torch thread count on CPU).

    A measurement is cached only when the cores were ours while it ran (`PeakMeasurement.quiet`):
    one taken on a busy machine serves this run only, and the next run measures again.
    """
    if setting != "auto":
        return float(setting)
    cache_file = cache_file or cache_dir() / PEAK_FLOPS_FILE
    cached = _read_cache(cache_file)
    entry = cached.get(peak_flops_key(device, dtype))
    if isinstance(entry, dict) and isinstance(entry.get("flops"), int | float) and entry["flops"] > 0:
        return float(entry["flops"])
    measured = measure_matmul_peak(device, dtype)
    if measured.quiet:
        store_peak_flops(device, dtype, measured.flops, cache_file, "matmul on quiet cores")
    return measured.flops


def peak_is_cached(device: torch.device, dtype: torch.dtype, cache_file: Path | None = None) -> bool:
    """True when the cache holds a peak for `device` at `dtype` (measured on quiet cores, or
    raised to a rate training reached): a figure good enough to judge a run's speed by."""
    entry = _read_cache(cache_file or cache_dir() / PEAK_FLOPS_FILE).get(peak_flops_key(device, dtype))
    return isinstance(entry, dict) and isinstance(entry.get("flops"), int | float) and entry["flops"] > 0


def store_peak_flops(
    device: torch.device, dtype: torch.dtype, flops: float, cache_file: Path | None = None, how: str = ""
) -> None:
    """Cache `flops` as the peak of `device` at `dtype` (a read-only home only loses the cache)."""
    cache_file = cache_file or cache_dir() / PEAK_FLOPS_FILE
    cached = _read_cache(cache_file)
    cached[peak_flops_key(device, dtype)] = {
        "flops": flops,
        "measured": time.strftime("%Y-%m-%d %H:%M:%S"),
        **({"how": how} if how else {}),
    }
    try:
        with atomic_write_file(cache_file, encoding="utf-8") as handle:
            json.dump(cached, handle, indent=2)
    except OSError:
        pass  # a read-only home: measure again next time


def _read_cache(cache_file: Path) -> dict:
    try:
        cached = json.loads(cache_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return cached if isinstance(cached, dict) else {}
