"""The machine side of a run: `auto` settings decided for this machine (bf16 where matmuls are faster in
it: GPUs with bf16, CPUs with AMX-BF16 or AVX512-BF16), and the CPU settings a run changes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from ..cpu_load import cpuinfo, keep_freed_memory
from .settings import HardwareSettings

BF16_CPU_FLAGS = ("amx_bf16", "avx512_bf16")  # /proc/cpuinfo flags of CPUs with bf16 matmul instructions


def on_cpu(hardware: HardwareSettings) -> bool:
    """True when the run trains on the CPU (asked to, or no GPU)."""
    return hardware.use_cpu or not torch.cuda.is_available()


def resolve_hardware(hardware: HardwareSettings) -> HardwareSettings:
    """The hardware section with its `auto` values decided for this machine: bf16 where it is fast
    (never with fp16); "eager" attention for bf16 on a CPU (torch's sdpa is slower there), else sdpa."""
    cpu = on_cpu(hardware)
    bf16 = hardware.bf16
    if bf16 == "auto":
        bf16 = not hardware.fp16 and (cpu_has_fast_bf16() if cpu else torch.cuda.is_bf16_supported())
    attention = hardware.attn_implementation
    if attention == "auto":
        attention = "eager" if cpu and bf16 else "sdpa"
    return dataclasses.replace(hardware, bf16=bf16, attn_implementation=attention)


def cpu_flags() -> set[str]:
    """The CPU's feature flags (empty without /proc/cpuinfo)."""
    return set((cpuinfo("flags") or "").split())


def cpu_has_fast_bf16() -> bool:
    """True on CPUs with bf16 matmul instructions (AMX-BF16 or AVX512-BF16), which oneDNN uses."""
    flags = cpu_flags()
    if flags:
        return any(flag in flags for flag in BF16_CPU_FLAGS)
    checks = ("_is_amx_tile_supported", "_is_avx512_bf16_supported")  # no /proc/cpuinfo: torch's own probes
    return any(bool(getattr(torch.cpu, name, lambda: False)()) for name in checks)


def training_dtype(hardware: HardwareSettings) -> torch.dtype:
    """The dtype matmuls run in: bf16 / fp16 under mixed precision, else fp32."""
    hardware = resolve_hardware(hardware)
    return torch.bfloat16 if hardware.bf16 else torch.float16 if hardware.fp16 else torch.float32


def tf32_matmuls(hardware: HardwareSettings) -> bool:
    """True when fp32 matmuls run as TensorFloat-32 (a GPU setting): MFU's peak is then tf32's."""
    tf32 = hardware.tf32 if hardware.tf32 is not None else torch.backends.cuda.matmul.allow_tf32
    return not on_cpu(hardware) and tf32


@contextmanager
def cpu_run_settings(hardware: HardwareSettings) -> Iterator[None]:
    """The run's thread count (`torch_num_threads`), given back when the run ends. glibc's allocator
    setting (`keep_freed_memory`) cannot be undone: it is made where a process starts."""
    threads_before = torch.get_num_threads()
    if hardware.torch_num_threads is not None:
        torch.set_num_threads(hardware.torch_num_threads)
    try:
        yield
    finally:
        torch.set_num_threads(threads_before)


def apply_process_settings(hardware: HardwareSettings) -> None:
    """The run's CPU settings (`keep_freed_memory`, the thread count) for the rest of a process that
    does one job and exits (a benchmark worker)."""
    if hardware.keep_freed_memory:
        keep_freed_memory()
    if hardware.torch_num_threads is not None:
        torch.set_num_threads(hardware.torch_num_threads)
