"""Where a run starts: new, resumed from its newest complete checkpoint, or from a base model loaded by
the caller's `load_base` (minigpt.hub.base_model: this stage knows `BaseStart`, not where models live);
and the checks that can refuse it (docs/training.md, "Checkpoints"), all before anything is written.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch.distributed as dist
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from ..data.sources import Sources, find_sources
from ..data.tokenizer import check_existing_tokenizer
from ..errors import ConfigError
from ..run_layout import (
    CHECKPOINT_PREFIX,
    FINAL_DIR,
    RUN_FILES,
    SET_ASIDE_PREFIX,
    STAGING_PREFIX,
    SUMMARY_FILE,
    checkpoint_step,
    list_checkpoints,
    read_run_config,
)
from .checkpoints import check_resume_compatible, find_resume_checkpoint
from .settings import ModelSettings, RunConfig
from .sizing import Plan, apply_settings

# A network filesystem may show a file another machine created late: wait this long before calling
# the output folder unshared. On a disk of this machine the file is there at once.
NETWORK_WAIT_S = 30.0
LOCAL_FILESYSTEMS = {"ext2", "ext3", "ext4", "xfs", "btrfs", "zfs", "f2fs", "tmpfs", "overlay", "ramfs"}


@dataclass
class BaseStart:
    """A base model loaded for a new run: the run config fitted to it (its architecture, the base's
    folder as tokenizer.path), its weights (float32, the run's attention) and tokenizer."""

    run: RunConfig
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    name: str  # how the run names it: ORG/NAME@revision, or the folder as given
    record: dict[str, Any]  # what summary.json records: repo id, revision and commit, or a folder name


@dataclass
class RunStart:
    """Where a run starts from, and what deciding that has already read."""

    run: RunConfig  # the config as the run uses it (a base's architecture adopted, say)
    own_tokenizer: str  # <output_dir>/tokenizer: suggested when the one at tokenizer.path does not fit
    checkpoint: str | None = None  # the checkpoint a resume continues from; None for a new run
    finishing: bool = False  # the checkpoint is the run's last step: only its final model is missing
    sources: Sources | None = None  # the data files, found, checked and fingerprinted once
    checked_tokenizer: str | None = None  # check_existing_tokenizer's answer (a run without a base)
    base: BaseStart | None = None  # the base model a new run starts from (model.init_from)
    plan: Plan | None = None  # what training.budget chose (a new run with a budget)
    plan_adopted: bool = False  # resumed with a budget: the plan its checkpoint recorded


def choose_start(
    run: RunConfig,
    resume: bool,
    main: bool,
    load_base: Callable[[RunConfig], BaseStart] | None = None,
    sources: Sources | None = None,
) -> RunStart:
    """Decide where `run` starts and make its folder ready; `main` is the process that writes files.
    `sources`: the data files as the caller found them (`find_sources(run.data)`), else found here."""
    output_dir = Path(run.training.output_dir)
    start = RunStart(run, own_tokenizer=str(output_dir / "tokenizer"), sources=sources or find_sources(run.data))
    start.checkpoint = find_resume_checkpoint(output_dir) if resume else None
    if run.model.init_from is None:
        start.checked_tokenizer = check_existing_tokenizer(run.tokenizer, start.sources, new_path=start.own_tokenizer)
    elif start.checkpoint is not None:  # resuming a run that started from a base: its own checkpoint only
        start.run = adopt_saved_settings(run, start.checkpoint)
    elif load_base is None:
        raise ConfigError("model.init_from needs a base model loader: train through minigpt.run_training")
    else:  # a new run from a base: read it and fit the config to it, before anything is written
        start.base = load_base(run)
        start.run = start.base.run
    if start.checkpoint is not None and start.run.training.budget is not None:
        # resumed: the plan the run chose at its start, not a new one from today's step times
        apply_settings(start.run, read_run_config(start.checkpoint))
        start.plan_adopted = True
    run = start.run
    if start.checkpoint is not None:
        check_resume_compatible(run.to_dict(), start.checkpoint)
        start.finishing = check_resume_target(start.checkpoint, run.training.max_steps)
    elif main or not run.training.overwrite_output_dir:  # every process refuses; only the main one removes
        removed = claim_output_dir(output_dir, overwrite=run.training.overwrite_output_dir)
        if removed:
            print(f"training.overwrite_output_dir: removed the previous run's {', '.join(removed)}", flush=True)
    return start


def adopt_saved_settings(run: RunConfig, checkpoint_dir: str | Path) -> RunConfig:
    """For `--resume` of a run started from a base: the `model:` keys and `tokenizer.path` the config
    does not write come from the checkpoint's resolved config (what the start adopted from the base),
    so the resume comparison sees only what the config changed. The base is not read."""
    saved = read_run_config(checkpoint_dir)
    if not saved:
        return run
    saved_model = saved.get("model") or {}
    values = dataclasses.asdict(run.model)
    for key in values:
        if f"model.{key}" not in run.explicit_keys and key in saved_model:
            values[key] = saved_model[key]
    tokenizer = run.tokenizer
    saved_path = (saved.get("tokenizer") or {}).get("path")
    if "tokenizer.path" not in run.explicit_keys and isinstance(saved_path, str):
        tokenizer = dataclasses.replace(tokenizer, path=saved_path)
    return dataclasses.replace(run, model=ModelSettings(**values), tokenizer=tokenizer)


# ---- the output folder -----------------------------------------------------------------------------


def run_outputs(output_dir: str | os.PathLike) -> list[Path]:
    """Everything a run wrote into `output_dir` (checkpoints, final/, logs), sorted; nothing else."""
    output_dir = Path(output_dir)
    if not output_dir.is_dir():
        return []
    prefixes = (f"{CHECKPOINT_PREFIX}-", STAGING_PREFIX, f"{SET_ASIDE_PREFIX}{CHECKPOINT_PREFIX}-")
    return sorted(p for p in output_dir.iterdir() if p.name in RUN_FILES or p.name == FINAL_DIR or p.name.startswith(prefixes))


def claim_output_dir(output_dir: str | os.PathLike, overwrite: bool, resume_command: str = "--resume") -> list[str]:
    """Make `output_dir` ready for a run from step 0; returns the names removed. Refuses (changing
    nothing) when it holds another run's checkpoints or final/ and `overwrite` is false."""
    output_dir = Path(output_dir)
    if not (list_checkpoints(output_dir) or (output_dir / FINAL_DIR).is_dir()):
        return []
    if not overwrite:
        found = [p.name + "/" for p in run_outputs(output_dir) if p.is_dir()]
        shown = ", ".join(found[:3]) + (f" and {len(found) - 3} more" if len(found) > 3 else "")
        raise ConfigError(
            f"{output_dir} already holds a run ({shown}): continue it with {resume_command}, start over with "
            "training.overwrite_output_dir=true (removes its checkpoints and final/), "
            "or pick another training.output_dir"
        )
    removed = []
    for path in run_outputs(output_dir):
        shutil.rmtree(path) if path.is_dir() else path.unlink()
        removed.append(path.name)
    return removed


def check_resume_target(checkpoint: str | os.PathLike, max_steps: int) -> bool:
    """Whether `--resume` from `checkpoint` only has the end to finish (True: at training.max_steps
    with no final model saved at that step, as summary.json says) or steps to train. One already
    finished is refused: a step past the end would be too many."""
    step = checkpoint_step(checkpoint)
    if step is None or step < max_steps:
        return False
    output_dir = Path(checkpoint).parent
    try:
        summary = json.loads((output_dir / SUMMARY_FILE).read_text())
        saved = (output_dir / FINAL_DIR).is_dir() and not summary.get("stopped") and int(summary["global_step"]) >= step
    except (OSError, ValueError, TypeError, KeyError):  # no summary, or not one this code wrote
        saved = False
    if not saved:
        return True
    raise ConfigError(
        f"{Path(checkpoint).name} is already at step {step} and training.max_steps is {max_steps}: "
        f"nothing to resume; raise training.max_steps (e.g. training.max_steps={step + max(step // 2, 1)}) "
        "to train further"
    )


def check_shared_output_dir(output_dir: str | os.PathLike) -> None:
    """On several machines, raise `ConfigError` on every process unless all see `output_dir` as one
    folder (a checkpoint gathers every process's RNG state there): the main process leaves a marker
    file (removed again) and the others look for it."""
    if not (dist.is_available() and dist.is_initialized()):
        return
    world = dist.get_world_size()
    if int(os.environ.get("LOCAL_WORLD_SIZE", world)) >= world:  # torchrun's processes on this machine
        return
    folder, main = Path(output_dir), dist.get_rank() == 0
    marker: list[tuple[str | None, str]] = [(None, "")]  # (its name, or None and why not)
    created = False
    if main:
        try:
            created = not folder.exists()
            folder.mkdir(parents=True, exist_ok=True)
            name = f".shared-folder-check-{uuid.uuid4().hex}"
            (folder / name).touch()
            marker[0] = (name, "")
        except OSError as err:  # said on every process below, not left for the others to wait on
            marker[0] = (None, err.strerror or str(err))
    dist.broadcast_object_list(marker, src=0)
    name, why = marker[0]
    if name is None:
        raise ConfigError(f"training.output_dir {folder}: process 0 cannot write there ({why})")
    seen = main or _appears(folder / name)
    everyone: list[bool | None] = [None] * world
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
    """True when `path` is on a disk filesystem of this machine (its mount's type in /proc/self/mounts)."""
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
