"""What a benchmark ran on: CPU model and speed flags, the precision picked, cores, threads, load.

Speed on a CPU depends on its matrix instructions: AMX-BF16 tiles and AVX512-BF16 dot products
make bf16 matmuls fast (the CPU profile's `bf16: auto` turns bf16 autocast on where either is
present, `cpu_has_fast_bf16`), AVX-512F and AVX2 set the width of fp32 kernels.
"""

from __future__ import annotations

import os
import platform
import subprocess

import torch

from minigpt.training.flops import device_name
from minigpt.training.hardware import cpu_has_fast_bf16

SPEED_FLAGS = ("amx_bf16", "avx512_bf16", "avx512f", "avx2")  # /proc/cpuinfo names


def load_average() -> float:
    """The 1-minute load average (runnable processes); 0.0 where the OS does not say."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return 0.0


def cpu_model_name() -> str:
    """The CPU's model name: lscpu's "Model name", else /proc/cpuinfo's "model name", else the platform's."""
    try:
        out = subprocess.run(
            ["lscpu"], capture_output=True, text=True, timeout=10, env={**os.environ, "LC_ALL": "C"}
        ).stdout
    except (OSError, subprocess.SubprocessError):
        out = ""
    for line in out.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "Model name" and value.strip():
            return value.strip()
    return device_name(torch.device("cpu"))  # /proc/cpuinfo, then platform.processor()


def cpu_flags(names: tuple[str, ...] = SPEED_FLAGS) -> dict[str, bool] | None:
    """Which of `names` the first CPU lists in /proc/cpuinfo's flags; None where there is no such file."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                if key.strip() == "flags":
                    present = set(value.split())
                    return {name: name in present for name in names}
    except OSError:
        pass
    return None


def describe_machine() -> dict[str, object]:
    """A JSON-ready record of the machine and the software that a benchmark ran on."""
    import transformers

    return {
        "cpu": cpu_model_name(),
        "cpu_flags": cpu_flags(),
        "bf16_auto": "bf16" if cpu_has_fast_bf16() else "fp32",  # what the CPU profile's bf16: auto picks
        "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
    }


def describe_flags(flags: dict[str, bool] | None) -> str:
    """The flags present, then those missing: "avx512_bf16 avx512f avx2, no amx_bf16"."""
    if flags is None:
        return "unknown (no /proc/cpuinfo)"
    present = " ".join(name for name, on in flags.items() if on)
    missing = " ".join(name for name, on in flags.items() if not on)
    if not present:
        return f"none of {missing}"
    return f"{present}, no {missing}" if missing else present


__all__ = ["SPEED_FLAGS", "cpu_flags", "cpu_model_name", "describe_flags", "describe_machine", "load_average"]
