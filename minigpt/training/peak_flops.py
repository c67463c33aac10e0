"""The peak FLOP/s that MFU divides by: a datasheet figure for known GPUs, else one bounded measurement.

MFU (model FLOPs utilisation, PaLM, Chowdhery et al. 2022) is the FLOP/s training achieves over the
device's peak. The field quotes it against the datasheet's dense peak at the training precision
(bf16 tensor cores for a bf16 run), so `hardware.peak_flops: auto` looks GPUs up in `DATASHEET_PEAKS`.
CPUs (and GPUs not in the table) have no such figure that oneDNN reaches, so their peak is the best
rate of a square matmul at the training precision, measured once per machine, thread count, dtype
and torch version, in about `MEASURE_SECONDS`, and cached in `~/.cache/minigpt/peak_flops.json` when
other work left the cores alone meanwhile (`cpu_load`). A CPU that emulates bf16 (AVX2 only) runs a
bf16 matmul at a few GFLOP/s: the measurement grows its matrix only while a multiply stays short,
so it stays within its time there too.
"""

from __future__ import annotations

import json
import platform
import re
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from ..atomic import atomic_write_file
from ..cache_dir import user_cache_dir
from ..cpu_load import is_busy, others_busy_cores, read_cpu_times

PEAK_FLOPS_FILE = "peak_flops.json"
MEASURE_SECONDS = 1.0  # time a measurement may take, warm-ups included (about 1.5x at worst)
START_SIZE = 256  # the first matrix side tried; it doubles while a multiply takes under 1/20 of the time
MAX_SIZE = {"cpu": 2048, "cuda": 8192}  # reach the peak (on an AMX Xeon 2048 beat 4096), fit anywhere

# Dense (no structured sparsity) peak FLOP/s by precision, from each vendor's datasheet; "tf32" is an
# fp32 run with TensorFloat-32 matmuls. Matched in order against torch's device name: specific first.
DATASHEET_PEAKS: list[tuple[str, str, dict[str, float]]] = [
    # (pattern, datasheet name, {precision: FLOP/s})
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
    trusted: bool  # a datasheet figure, a given number, or measured on quiet cores: MFU is absolute
    measured: bool = False  # a matmul measured on this machine (now or cached), not a given figure


@dataclass(frozen=True)
class PeakMeasurement:
    """A measured matmul rate, and whether the cores were ours while it was measured."""

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
    if dtype == torch.bfloat16:
        return "bf16"
    if dtype == torch.float16:
        return "fp16"
    return "tf32" if tf32 else "fp32"


def datasheet_peak(device_name: str, precision: str) -> tuple[str, float] | None:
    """(datasheet name, dense peak FLOP/s) of a known GPU at `precision`, else None."""
    for pattern, name, peaks in DATASHEET_PEAKS:
        if re.search(pattern, device_name) and precision in peaks:
            return name, peaks[precision]
    return None


def _matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a @ b


def measure_matmul_peak(
    device: torch.device, dtype: torch.dtype, seconds: float = MEASURE_SECONDS
) -> PeakMeasurement:
    """Best FLOP/s of a square matmul at `dtype`, in about `seconds`.

    The side starts at START_SIZE and doubles while one multiply takes under 1/20 of the time (a
    doubled side costs 8x), up to MAX_SIZE; the rest of the time repeats the largest size, and the
    best run counts (on a shared machine other work only ever makes a run slower). Other processes'
    CPU time over the whole measurement says whether the rate is the machine's (`quiet`).
    """
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    max_size = MAX_SIZE.get(device.type, MAX_SIZE["cpu"])
    started, load_start = time.perf_counter(), read_cpu_times()

    def timed(a: torch.Tensor, b: torch.Tensor) -> float:
        start = time.perf_counter()
        _matmul(a, b)
        sync()
        return time.perf_counter() - start

    def spent() -> float:
        return time.perf_counter() - started

    size, best = START_SIZE, (0.0, START_SIZE)  # (FLOP/s, side) of the best run
    while True:
        a = torch.randn(size, size, device=device).to(dtype)  # (size, size)
        b = torch.randn(size, size, device=device).to(dtype)
        elapsed = timed(a, b)  # the first run at a size also warms up (thread pool, kernel choice)
        best = max(best, (2 * size**3 / elapsed, size))  # a multiply and an add per term
        # A doubled side costs 8x: grow while its first run and one more still fit, from short runs only.
        if size * 2 > max_size or elapsed >= seconds / 20 or spent() + 16 * elapsed >= seconds:
            break
        size *= 2
    while spent() + elapsed <= seconds:  # the rest of the time at the largest size; the best run counts
        elapsed = timed(a, b)
        best = max(best, (2 * size**3 / elapsed, size))
    best_rate, best_size = best
    others = others_busy_cores(load_start, read_cpu_times()) if device.type == "cpu" else 0.0
    return PeakMeasurement(best_rate, best_size, time.perf_counter() - started, others)


def resolve_peak_flops(
    setting: float | str,
    device: torch.device,
    dtype: torch.dtype,
    tf32: bool = False,
    cache_file: Path | None = None,
) -> PeakFlops:
    """`hardware.peak_flops` as a number and its source.

    A number is used as given. "auto": a GPU in DATASHEET_PEAKS gets its datasheet figure at the
    training precision; anything else the cached measurement for this machine, threads and dtype,
    or a new one (`measure_matmul_peak`, cached only when measured on quiet cores).
    """
    if setting != "auto":
        return PeakFlops(float(setting), "hardware.peak_flops", trusted=True)
    precision = precision_name(dtype, tf32)
    if device.type == "cuda":
        known = datasheet_peak(device_name(device), precision)
        if known is not None:
            return PeakFlops(known[1], f"datasheet: {known[0]}, {precision} dense", trusted=True)
    cache_file = cache_file or user_cache_dir() / PEAK_FLOPS_FILE
    entry = _read_cache(cache_file).get(peak_flops_key(device, dtype))
    if _valid(entry):
        how = entry.get("how", "measured")
        return PeakFlops(float(entry["flops"]), f"{how}, cached in {cache_file}", trusted=True, measured=True)
    measured = measure_matmul_peak(device, dtype)
    how = f"{precision} {measured.size}x{measured.size} matmul, {_threads(device)}, {measured.seconds:.1f} s"
    if measured.quiet:
        store_peak_flops(device, dtype, measured.flops, cache_file, how=f"measured: {how}")
        return PeakFlops(measured.flops, f"measured: {how}; cached in {cache_file}", trusted=True, measured=True)
    return PeakFlops(
        measured.flops,
        f"measured: {how}, while other processes used {measured.others_cores:.1f} core(s): not cached",
        trusted=False,
        measured=True,
    )


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


def _threads(device: torch.device) -> str:
    return f"{torch.get_num_threads()} threads" if device.type == "cpu" else device.type


def peak_flops_key(device: torch.device, dtype: torch.dtype) -> str:
    """Cache key: what the measured rate depends on (hardware, threads on CPU, dtype, torch)."""
    return (
        f"{device_name(device)} | {_threads(device)} | {str(dtype).removeprefix('torch.')} | "
        f"torch {torch.__version__}"
    )


def peak_is_cached(device: torch.device, dtype: torch.dtype, cache_file: Path | None = None) -> bool:
    """True when the cache holds a peak for `device` at `dtype` (measured on quiet cores, or
    raised to a rate training reached): a figure good enough to judge a run's speed by."""
    return _valid(_read_cache(cache_file or user_cache_dir() / PEAK_FLOPS_FILE).get(peak_flops_key(device, dtype)))


def store_peak_flops(
    device: torch.device, dtype: torch.dtype, flops: float, cache_file: Path | None = None, how: str = ""
) -> None:
    """Cache `flops` as the peak of `device` at `dtype` (a read-only home only loses the cache)."""
    cache_file = cache_file or user_cache_dir() / PEAK_FLOPS_FILE
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


def _valid(entry: object) -> bool:
    return isinstance(entry, dict) and isinstance(entry.get("flops"), int | float) and entry["flops"] > 0


def _read_cache(cache_file: Path) -> dict:
    try:
        cached = json.loads(cache_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return cached if isinstance(cached, dict) else {}


__all__ = [
    "DATASHEET_PEAKS",
    "PEAK_FLOPS_FILE",
    "PeakFlops",
    "PeakMeasurement",
    "datasheet_peak",
    "device_name",
    "measure_matmul_peak",
    "peak_flops_key",
    "peak_is_cached",
    "precision_name",
    "resolve_peak_flops",
    "store_peak_flops",
]
