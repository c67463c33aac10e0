"""What a benchmark ran on: CPU model, usable cores, torch threads and the load around it."""

from __future__ import annotations

import os
import platform

import torch

from ..training.throughput import device_name


def load_average() -> float:
    """The 1-minute load average (runnable processes); 0.0 where the OS does not say."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return 0.0


def describe_machine() -> dict[str, object]:
    """A JSON-ready record of the machine and the software that a benchmark ran on."""
    import transformers

    return {
        "cpu": device_name(torch.device("cpu")),
        "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
    }


__all__ = ["describe_machine", "load_average"]
