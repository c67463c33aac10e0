"""Several training processes (`accelerate launch`): who is the main process, and a clean exit.

Accelerate and Trainer own the process group; this module only answers "should this process
print or write?" before Trainer exists, and tears the group down at exit, which gloo needs: without
it about one run in four aborted at exit with SIGABRT.
"""

from __future__ import annotations

import gc
import os
import sys
from types import ModuleType


def _process_group() -> ModuleType | None:
    """`torch.distributed` when a process group is up, else None.

    Never imports torch: before torch is imported no process group can exist, and config
    checking and `--help` (which use `is_main_process`) must stay free of torch's import time.
    """
    dist = sys.modules.get("torch.distributed")
    return dist if dist is not None and dist.is_available() and dist.is_initialized() else None


def process_index() -> int:
    """Global rank of this process: from the process group, else the launcher's RANK, else 0."""
    dist = _process_group()
    return dist.get_rank() if dist is not None else int(os.environ.get("RANK", "0"))


def world_size() -> int:
    """Number of training processes (1 without a launcher)."""
    dist = _process_group()
    return dist.get_world_size() if dist is not None else int(os.environ.get("WORLD_SIZE", "1"))


def is_main_process() -> bool:
    """True on the one process that prints progress and writes files."""
    return process_index() == 0


def teardown_distributed() -> None:
    """Destroy the process group at the end of a run; a no-op with one process.

    Call it after the last reference to the Trainer is gone (return from the function that held
    it): the Trainer's garbage is collected first, and there is deliberately no barrier, because a
    barrier plus destroy while the Trainer was alive deadlocked one rank in 1 of 5 runs.
    """
    gc.collect()
    dist = _process_group()
    if dist is not None:
        dist.destroy_process_group()


def processes_not_started() -> int | None:
    """The process count `accelerate launch --num_processes N` asked for, when it started this one
    process alone instead (no GPU, no `--multi_gpu`, no config that says how); else None."""
    if "ACCELERATE_MIXED_PRECISION" not in os.environ or "WORLD_SIZE" in os.environ:
        return None  # not under accelerate launch, or several processes were started
    import psutil  # only under accelerate launch

    try:
        launcher = psutil.Process().parent().cmdline()
    except (psutil.Error, AttributeError):
        return None
    for i, arg in enumerate(launcher):
        value = arg.partition("=")[2] if arg.startswith("--num_processes=") else None
        if arg == "--num_processes" and i + 1 < len(launcher):
            value = launcher[i + 1]
        if value is not None and value.isdigit() and int(value) > 1:
            return int(value)
    return None
