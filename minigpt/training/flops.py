"""FLOPs of a training token (6N + 12 L C T, PaLM App. B; Trainer's `total_flos` leaves out attention),
the device's peak MFU divides by (a known GPU's datasheet figure, else a square matmul's best rate,
cached when the cores were quiet), and the throughput of the steps between two log lines.
"""

from __future__ import annotations

import contextlib
import json
import platform
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import TrainerCallback

from ..atomic import atomic_write_file
from ..cache_dir import user_cache_dir
from ..cpu_load import cpuinfo, is_busy, others_busy_cores, read_cpu_times

PEAK_FLOPS_FILE = "peak_flops.json"
MEASURE_SECONDS = 1.0  # time a measurement may take, warm-ups included (about 1.5x at worst)
START_SIZE = 256  # the first matrix side tried; it doubles while a multiply takes under 1/20 of the time
MAX_SIZE = {"cpu": 2048, "cuda": 8192}  # large enough to reach the peak, small enough to fit anywhere

# (pattern of torch's device name, datasheet name, dense peak FLOP/s by precision), specific first;
# "tf32" is fp32 with TensorFloat-32 matmuls.
DATASHEET_PEAKS: list[tuple[str, str, dict[str, float]]] = [
    (r"H200 NVL", "NVIDIA H200 NVL", {"bf16": 835e12, "fp16": 835e12, "tf32": 418e12, "fp32": 60e12}),
    (r"H200", "NVIDIA H200 SXM", {"bf16": 989e12, "fp16": 989e12, "tf32": 494e12, "fp32": 67e12}),
    (r"H100 NVL", "NVIDIA H100 NVL", {"bf16": 835e12, "fp16": 835e12, "tf32": 418e12, "fp32": 60e12}),
    (r"H100 PCIe", "NVIDIA H100 PCIe", {"bf16": 756e12, "fp16": 756e12, "tf32": 378e12, "fp32": 51e12}),
    (r"H100", "NVIDIA H100 SXM", {"bf16": 989e12, "fp16": 989e12, "tf32": 494e12, "fp32": 67e12}),
    (r"GH200", "NVIDIA GH200", {"bf16": 989e12, "fp16": 989e12, "tf32": 494e12, "fp32": 67e12}),
    (r"B200", "NVIDIA B200", {"bf16": 2250e12, "fp16": 2250e12, "tf32": 1100e12}),
    (r"A100", "NVIDIA A100", {"bf16": 312e12, "fp16": 312e12, "tf32": 156e12, "fp32": 19.5e12}),
    (r"L40S", "NVIDIA L40S", {"bf16": 362e12, "fp16": 362e12, "tf32": 183e12, "fp32": 91.6e12}),
    (r"\bL4\b", "NVIDIA L4", {"bf16": 121e12, "fp16": 121e12, "tf32": 60e12, "fp32": 30.3e12}),
    (r"\bA10\b", "NVIDIA A10", {"bf16": 125e12, "fp16": 125e12, "tf32": 62.5e12, "fp32": 31.2e12}),
    (r"RTX 4090", "NVIDIA GeForce RTX 4090", {"bf16": 165e12, "fp16": 165e12, "tf32": 82.6e12, "fp32": 82.6e12}),
    (r"RTX 3090", "NVIDIA GeForce RTX 3090", {"bf16": 71e12, "fp16": 71e12, "tf32": 35.6e12, "fp32": 35.6e12}),
    (r"RTX A6000", "NVIDIA RTX A6000", {"bf16": 155e12, "fp16": 155e12, "tf32": 77.4e12, "fp32": 38.7e12}),
    (r"V100", "NVIDIA V100", {"fp16": 125e12, "fp32": 15.7e12}),
    (r"\bT4\b", "NVIDIA T4", {"fp16": 65e12, "fp32": 8.1e12}),
    (r"MI300X", "AMD Instinct MI300X", {"bf16": 1307e12, "fp16": 1307e12, "tf32": 654e12, "fp32": 163e12}),
]


@dataclass(frozen=True)
class PeakFlops:
    """A device's peak FLOP/s and where the figure came from (printed at the start of a run)."""

    flops: float
    source: str  # e.g. "datasheet: NVIDIA H100 SXM, bf16 dense", "measured: ...", "hardware.peak_flops"
    trusted: bool  # a datasheet figure, a given number, or measured on quiet cores
    measured: bool = False  # a matmul measured on this machine (now or cached)


@dataclass(frozen=True)
class PeakMeasurement:
    """A measured matmul rate, and how busy other processes kept the cores meanwhile."""

    flops: float
    size: int  # side of the square matrices of the best run
    seconds: float  # wall time the whole measurement took
    others_cores: float  # cores' worth of CPU time other processes used meanwhile (0.0 on a GPU)

    @property
    def quiet(self) -> bool:
        """Measured without other work on the cores: worth caching for good."""
        return not is_busy(self.others_cores)


def precision_name(dtype: torch.dtype, tf32: bool = False) -> str:
    """"bf16", "fp16", "tf32" (fp32 with TensorFloat-32 matmuls) or "fp32"."""
    return {torch.bfloat16: "bf16", torch.float16: "fp16"}.get(dtype, "tf32" if tf32 else "fp32")


def datasheet_peak(device_name: str, precision: str) -> tuple[str, float] | None:
    """(datasheet name, dense peak FLOP/s) of a known GPU at `precision`, else None."""
    for pattern, name, peaks in DATASHEET_PEAKS:
        if re.search(pattern, device_name) and precision in peaks:
            return name, peaks[precision]
    return None


def _matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a @ b


def measure_matmul_peak(device: torch.device, dtype: torch.dtype, seconds: float = MEASURE_SECONDS) -> PeakMeasurement:
    """Best FLOP/s of a square matmul at `dtype` in about `seconds`: the side doubles from START_SIZE
    while a multiply takes under 1/20 of the time, then the largest repeats; the best run counts
    (other work only ever slows a run down)."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    max_size = MAX_SIZE.get(device.type, MAX_SIZE["cpu"])
    started, load_start = time.perf_counter(), read_cpu_times()

    def timed(a: torch.Tensor, b: torch.Tensor) -> float:
        start = time.perf_counter()
        _matmul(a, b)
        sync()
        return time.perf_counter() - start

    size, best = START_SIZE, (0.0, START_SIZE)  # (FLOP/s, side) of the best run
    while True:
        a = torch.randn(size, size, device=device).to(dtype)  # (size, size)
        b = torch.randn(size, size, device=device).to(dtype)
        elapsed = timed(a, b)  # the first run at a size also warms up (thread pool, kernel choice)
        best = max(best, (2 * size**3 / elapsed, size))  # a multiply and an add per term
        # A doubled side costs 8x: grow while its first run and one more still fit.
        if size * 2 > max_size or elapsed >= seconds / 20 or time.perf_counter() - started + 16 * elapsed >= seconds:
            break
        size *= 2
    while time.perf_counter() - started + elapsed <= seconds:
        elapsed = timed(a, b)
        best = max(best, (2 * size**3 / elapsed, size))
    others = others_busy_cores(load_start, read_cpu_times()) if device.type == "cpu" else 0.0
    return PeakMeasurement(*best, time.perf_counter() - started, others)


def resolve_peak_flops(
    setting: float | str, device: torch.device, dtype: torch.dtype, tf32: bool = False, cache_file: Path | None = None
) -> PeakFlops:
    """`hardware.peak_flops` as a number and its source. "auto": a known GPU's datasheet figure, else the
    cached measurement for this machine, threads and dtype, or a new one (cached when the cores were quiet)."""
    if setting != "auto":
        return PeakFlops(float(setting), "hardware.peak_flops", trusted=True)
    precision = precision_name(dtype, tf32)
    if device.type == "cuda":
        known = datasheet_peak(device_name(device), precision)
        if known is not None:
            return PeakFlops(known[1], f"datasheet: {known[0]}, {precision} dense", trusted=True)
    cache_file, key = cache_file or user_cache_dir() / PEAK_FLOPS_FILE, peak_flops_key(device, dtype)
    entry = _read_cache(cache_file).get(key)
    if isinstance(entry, dict) and isinstance(entry.get("flops"), int | float) and entry["flops"] > 0:
        how = entry.get("how", "measured")
        return PeakFlops(float(entry["flops"]), f"{how}, cached in {cache_file}", trusted=True, measured=True)
    measured = measure_matmul_peak(device, dtype)
    how = f"{precision} {measured.size}x{measured.size} matmul, {_threads(device)}, {measured.seconds:.1f} s"
    if measured.quiet:
        cached = _read_cache(cache_file)  # again: another process may have written meanwhile
        cached[key] = {"flops": measured.flops, "measured": time.strftime("%Y-%m-%d %H:%M:%S"), "how": f"measured: {how}"}
        with contextlib.suppress(OSError), atomic_write_file(cache_file, encoding="utf-8") as handle:
            json.dump(cached, handle, indent=2)  # a read-only home only loses the cache
        return PeakFlops(measured.flops, f"measured: {how}; cached in {cache_file}", trusted=True, measured=True)
    busy = f"measured: {how}, while other processes used {measured.others_cores:.1f} core(s): not cached"
    return PeakFlops(measured.flops, busy, trusted=False, measured=True)


def device_name(device: torch.device) -> str:
    """A name that identifies the hardware behind `device` (CPU model or GPU name)."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return cpuinfo("model name") or platform.processor() or platform.machine()


def _threads(device: torch.device) -> str:
    return f"{torch.get_num_threads()} threads" if device.type == "cpu" else device.type


def peak_flops_key(device: torch.device, dtype: torch.dtype) -> str:
    """Cache key: what the measured rate depends on (hardware, threads on CPU, dtype, torch)."""
    return f"{device_name(device)} | {_threads(device)} | {str(dtype).removeprefix('torch.')} | torch {torch.__version__}"


def _read_cache(cache_file: Path) -> dict:
    try:
        cached = json.loads(cache_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return cached if isinstance(cached, dict) else {}


def matmul_parameter_count(model: nn.Module, config: Any) -> int:
    """Parameters that take part in a matmul per token: all but the embedding lookups (no FLOPs), plus
    the (hidden x vocab) head, tied to the token embedding or not."""
    embedding_params = sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Embedding))
    total = sum(p.numel() for p in model.parameters())  # tied weights counted once
    return total - embedding_params + config.vocab_size * config.hidden_size


def flops_per_token(model: nn.Module, config: Any, seq_len: int) -> float:
    """Training FLOPs per token: 6N (a multiply-add is 2 FLOPs; forward once, backward twice) plus
    12 L C T (QK^T and AV, 2 C T each per layer forward, x3, over the full T x T matrix)."""
    attention = 12 * config.num_hidden_layers * config.hidden_size * seq_len
    return 6.0 * matmul_parameter_count(model, config) + attention


class ThroughputMeter(TrainerCallback):
    """Tokens/s and MFU over the optimizer steps between two log lines: only time inside steps counts,
    not evaluation, sampling or checkpointing between them (register it before other callbacks)."""

    def __init__(
        self, samples_per_step: int, block_size: int, flops_per_token: float, peak_flops: float, num_devices: int
    ) -> None:
        self.samples_per_step = samples_per_step  # blocks per optimizer step, across all processes
        self.tokens_per_step = samples_per_step * block_size
        self.flops_per_token, self.peak_flops, self.num_devices = flops_per_token, peak_flops, num_devices  # peak: one device's
        self.step_started: float | None = None
        self.window_seconds, self.window_steps = 0.0, 0
        self.steps_timed = 0  # optimizer steps of this session (a resumed run counts from its resume)

    def on_step_begin(self, args, state, control, **kwargs) -> None:
        self.step_started = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs) -> None:
        if args.device.type == "cuda":
            torch.cuda.synchronize(args.device)  # kernels are asynchronous: time them, not their launch
        if self.step_started is not None:
            self.window_seconds += time.perf_counter() - self.step_started
            self.window_steps += 1
            self.steps_timed += 1
            self.step_started = None

    def take_window(self) -> dict[str, float]:
        """{"tokens_per_second", "mfu"} over the steps since the last call (empty if none); resets."""
        if self.window_steps == 0 or self.window_seconds <= 0:
            return {}
        tokens_per_second = self.window_steps * self.tokens_per_step / self.window_seconds
        achieved = tokens_per_second * self.flops_per_token / self.num_devices  # FLOP/s per device
        self.window_seconds, self.window_steps = 0.0, 0
        return {"tokens_per_second": tokens_per_second, "mfu": achieved / self.peak_flops}

    def session_rates(self, runtime: float) -> dict[str, float]:
        """Steps, samples and tokens per second of the steps trained in `runtime` seconds (Trainer's
        own count max_steps, which a stopped or resumed run never trained)."""
        steps = self.steps_timed
        if runtime <= 0:
            return {}
        return {
            "train_steps_per_second": steps / runtime,
            "train_samples_per_second": steps * self.samples_per_step / runtime,
            "train_tokens_per_second": steps * self.tokens_per_step / runtime,
        }

