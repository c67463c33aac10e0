"""Several machines must share one run folder: checked at the start, before anything is trained.

Only the global main process writes the run's files, and a checkpoint gathers every process's RNG
state in one staging folder the main process renames into place; at resume every process loads
the checkpoint the main process picked. On machines that each have their own disk, the main
process's checkpoints would lack the other machines' RNG states (an inexact resume), their states
would pile up in staging folders nobody renames, and a resume would look for the checkpoint on
disks that do not hold it. Trainer's `save_on_each_node` does not mend that: each machine's copy
would still hold only its own machines' RNG states, and two processes would write the run files.
So such a run stops at its start with one line; the folder must be on a filesystem every machine
mounts (NFS, Lustre, a cloud filesystem).
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import torch.distributed as dist

from ..errors import ConfigError

MARKER_PREFIX = ".shared-folder-check-"
# A network filesystem may show a file another machine created late (cached directory entries):
# wait this long before calling the folder unshared. On a local one the file is there at once.
NETWORK_WAIT_S = 30.0
LOCAL_FILESYSTEMS = {"ext2", "ext3", "ext4", "xfs", "btrfs", "zfs", "f2fs", "tmpfs", "overlay", "ramfs"}


def several_machines() -> bool:
    """True when the processes of this run are spread over more than one machine."""
    if not (dist.is_available() and dist.is_initialized()):
        return False
    world = dist.get_world_size()
    # torchrun (and so `accelerate launch`) sets LOCAL_WORLD_SIZE: the processes on this machine.
    return int(os.environ.get("LOCAL_WORLD_SIZE", world)) < world


def check_shared_output_dir(output_dir: str | os.PathLike) -> None:
    """Raise `ConfigError` on every process unless every process sees `output_dir` as one folder.

    The main process leaves a marker file in the folder (created for the check and removed again
    if it was not there) and the others look for it. A run on one machine is not checked.
    """
    if not several_machines():
        return
    folder = Path(output_dir)
    main = dist.get_rank() == 0
    marker: list[tuple[str | None, str]] = [(None, "")]  # (its name, or None and why not)
    created = False
    if main:
        try:
            created = not folder.exists()
            folder.mkdir(parents=True, exist_ok=True)
            name = f"{MARKER_PREFIX}{uuid.uuid4().hex}"
            (folder / name).touch()
            marker[0] = (name, "")
        except OSError as err:  # said on every process below, not left for the others to wait on
            marker[0] = (None, err.strerror or str(err))
    dist.broadcast_object_list(marker, src=0)  # the marker exists before any process looks for it
    name, why = marker[0]
    if name is None:
        raise ConfigError(f"training.output_dir {folder}: process 0 cannot write there ({why})")
    seen = main or _appears(folder / name)
    everyone: list[bool | None] = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, seen)
    if main:
        (folder / name).unlink()
        if created:
            folder.rmdir()  # a run refused later leaves no folder it made for this check
    blind = [rank for rank, saw in enumerate(everyone) if not saw]
    if blind:
        raise ConfigError(
            f"training.output_dir {folder} is not one folder for every machine: process(es) "
            f"{', '.join(map(str, blind))} do not see the file process 0 wrote there. Put it on a "
            "filesystem every machine mounts at the same path (NFS, Lustre, ...): checkpoints "
            "gather every process's files in it"
        )


def _appears(path: Path) -> bool:
    """Whether `path` exists here, given the time a network filesystem may take to show it."""
    deadline = time.monotonic() + (0.0 if _local_filesystem(path) else NETWORK_WAIT_S)
    while not path.exists():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.2)
    return True


def _local_filesystem(path: Path) -> bool:
    """True when `path` (or its nearest existing folder) is on a disk filesystem of this machine,
    by the type of its mount in /proc/self/mounts; False where that cannot be told (not Linux)."""
    existing = path.resolve()
    while not existing.exists():
        existing = existing.parent
    try:
        mounts = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return False
    best, kind = "", ""
    for line in mounts:
        fields = line.split()
        point = fields[1].replace("\\040", " ")  # /proc/self/mounts writes a space as \040
        if existing.is_relative_to(point) and len(point) > len(best):
            best, kind = point, fields[2]
    return kind in LOCAL_FILESYSTEMS


__all__ = ["check_shared_output_dir", "several_machines"]
