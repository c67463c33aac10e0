"""Several training processes (`accelerate launch`): who is the main process, and a clean exit.

Accelerate and Trainer own the process group; this module only answers "should this process
print or write?" before Trainer exists, and tears the group down at exit, which gloo needs: without
it about one run in four aborted at exit with SIGABRT (see shared/hf5-notes.md).
"""

from __future__ import annotations

import gc
import os

import torch.distributed as dist


def process_index() -> int:
    """Global rank of this process: from the process group, else the launcher's RANK, else 0."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return int(os.environ.get("RANK", "0"))


def world_size() -> int:
    """Number of training processes (1 without a launcher)."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size()
    return int(os.environ.get("WORLD_SIZE", "1"))


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
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
