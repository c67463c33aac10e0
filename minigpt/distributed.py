"""Several training processes (`accelerate launch`): who is the main process before Trainer exists,
and tearing the group down at exit (without it gloo runs sometimes aborted with SIGABRT).
"""

from __future__ import annotations

import gc
import os
import sys
from types import ModuleType


def _process_group() -> ModuleType | None:
    """`torch.distributed` when a process group is up, else None; never imports torch (no group can
    exist before it is imported, and `--help` must stay fast)."""
    dist = sys.modules.get("torch.distributed")
    return dist if dist is not None and dist.is_available() and dist.is_initialized() else None


def process_index() -> int:
    """Global rank of this process: from the process group, else the launcher's RANK, else 0."""
    dist = _process_group()
    return dist.get_rank() if dist is not None else int(os.environ.get("RANK", "0"))


def is_main_process() -> bool:
    """True on the one process that prints progress and writes files."""
    return process_index() == 0


def teardown_distributed() -> None:
    """Destroy the process group at the end of a run (a no-op with one process). Call it once the
    Trainer is gone; no barrier: one with the Trainer alive deadlocked a rank."""
    gc.collect()
    dist = _process_group()
    if dist is not None:
        dist.destroy_process_group()


def processes_not_started() -> int | None:
    """N, when `accelerate launch --num_processes N` started this one process alone (no GPU, no
    `--multi_gpu`, no config that says how); else None."""
    if "ACCELERATE_MIXED_PRECISION" not in os.environ or "WORLD_SIZE" in os.environ:
        return None  # not under accelerate launch, or several processes were started
    import psutil  # only under accelerate launch

    try:
        launcher = psutil.Process().parent().cmdline()
    except (psutil.Error, AttributeError):
        return None
    words = [word for arg in launcher for word in arg.split("=", 1)]  # --num_processes=N or --num_processes N
    values = [words[i + 1] for i, word in enumerate(words[:-1]) if word == "--num_processes"]
    return next((int(value) for value in values if value.isdigit() and int(value) > 1), None)
