"""Checkpoints that resume trusts only once they are complete, through Trainer's public hooks.

Trainer writes `checkpoint-N` in place, and its own `resume_from_checkpoint=True` takes the highest
folder, finished or not: a kill during a save leaves a partial folder that it would pick. Here
Trainer saves as it always does, with its own rotation off (`save_total_limit=None` in
`TrainingArguments`, so it deletes nothing); then `CompleteCheckpointCallback.on_save`, once every
process has written its files, flushes them to disk and the main process writes
`checkpoint-N/checkpoint_complete.json` (every file and its size) atomically. A folder without
that marker is a save that never finished: resume never loads it. Only after the marker are older
checkpoints rotated (`training.save_total_limit`, the newest and the best kept), so a kill at any
instant leaves the previous complete checkpoint whole.

At resume, `find_resume_checkpoint` walks the checkpoints newest first, removes unfinished saves,
sets aside any complete one that was damaged since, and returns the path to pass to
`trainer.train(resume_from_checkpoint=path)`. Trainer restores model, optimizer, scheduler,
grad scaler, RNG states and the data position: the run ends bit-identical to an uninterrupted one.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch.distributed as dist
import yaml
from transformers import TrainerCallback

from ..atomic import atomic_write_file, fsync_dir
from ..distributed import is_main_process
from ..errors import ConfigError, MiniGPTUserError
from ..run_layout import (
    COMPLETE_MARKER,
    RESOLVED_CONFIG_NAME,
    SET_ASIDE_PREFIX,
    TRAINER_STATE_NAME,
    checkpoint_step,
    list_checkpoints,
)

COMPARED_SECTIONS = ("model", "tokenizer", "data")  # run-config sections a resume must not change
# Keys of those sections that change how the data is prepared or shown, never what it is.
RESUME_MAY_DIFFER = ("tokenizer.show_progress", "data.show_progress", "data.num_proc", "data.cache_dir")


class CompleteCheckpointCallback(TrainerCallback):
    """Marks each checkpoint complete once Trainer has written it, then rotates older ones.

    `resolved_config` (YAML text) goes into every checkpoint, for `check_resume_compatible`.
    `save_total_limit`: complete checkpoints kept (None: all); the best one Trainer tracks is kept
    too. Give Trainer `save_total_limit=None`: it would rotate before this marks.
    """

    def __init__(self, resolved_config: str, save_total_limit: int | None) -> None:
        self.resolved_config = resolved_config
        self.save_total_limit = save_total_limit
        self.best: tuple[float, str] | None = None  # (eval_loss, folder) of the best evaluation with a checkpoint

    def on_train_begin(self, args, state, control, **kwargs) -> None:
        self.best = None
        if state.best_model_checkpoint and os.path.isdir(state.best_model_checkpoint):  # a resume's
            step = checkpoint_step(state.best_model_checkpoint)
            losses = [r["eval_loss"] for r in state.log_history if r.get("step") == step and "eval_loss" in r]
            self.best = (losses[-1], state.best_model_checkpoint) if losses else None

    def on_step_end(self, args, state, control, **kwargs) -> None:
        # A save follows: the folder exists before any process writes into it, so only the main
        # process creates what the run publishes (register this callback last: the others decide).
        if control.should_save:
            if args.should_save:
                warn_when_short_of_space(Path(args.output_dir))
                (Path(args.output_dir) / f"checkpoint-{state.global_step}").mkdir(parents=True, exist_ok=True)
            _wait_for_everyone()

    def on_save(self, args, state, control, **kwargs) -> None:
        checkpoint = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        _wait_for_everyone()  # each process writes its own rng_state_<rank>.pth
        # The best evaluation that has a checkpoint: what load_best_model_at_end loads (Trainer's own
        # pointer stays on an older one when its best evaluation had no checkpoint), and rotation keeps.
        evaluation = [r["eval_loss"] for r in state.log_history if r.get("step") == state.global_step and "eval_loss" in r]
        if evaluation and (self.best is None or evaluation[-1] < self.best[0]):
            self.best = (evaluation[-1], str(checkpoint))
        if self.best is not None:
            state.best_model_checkpoint = self.best[1]
        if args.should_save:
            (checkpoint / RESOLVED_CONFIG_NAME).write_text(self.resolved_config, encoding="utf-8")
            mark_complete(checkpoint)
            rotate_checkpoints(checkpoint.parent, self.save_total_limit, keep=state.best_model_checkpoint)
        _wait_for_everyone()  # no process reads or removes a checkpoint the main one is rotating


def _wait_for_everyone() -> None:
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()


def mark_complete(checkpoint: Path) -> None:
    """Flush every file of `checkpoint` to disk, then write its marker (itself atomically)."""
    sizes = {}
    for root, dirs, files in os.walk(checkpoint):
        dirs.sort()  # the marker lists files in one order, whatever the filesystem's
        for name in sorted(files):
            path = Path(root, name)
            if name == COMPLETE_MARKER:
                continue
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            sizes[str(path.relative_to(checkpoint))] = path.stat().st_size
        fsync_dir(root)
    with atomic_write_file(checkpoint / COMPLETE_MARKER) as handle:
        json.dump({"step": checkpoint_step(checkpoint), "files": sizes}, handle, indent=1)
    fsync_dir(checkpoint)


def is_complete(checkpoint: Path) -> bool:
    return (checkpoint / COMPLETE_MARKER).is_file()


def rotate_checkpoints(output_dir: Path, limit: int | None, keep: str | None = None) -> None:
    """Delete complete checkpoints beyond the newest `limit` (never `keep`), and unfinished saves
    older than the newest complete one (nothing can resume from them)."""
    checkpoints = list_checkpoints(output_dir)  # newest first
    complete = [c for c in checkpoints if is_complete(c)]
    if not complete:
        return
    newest = checkpoint_step(complete[0])
    kept = set(complete[:limit] if limit is not None else complete)
    if keep is not None:
        kept |= {c for c in complete if os.path.abspath(c) == os.path.abspath(keep)}
    for checkpoint in checkpoints:
        unfinished = not is_complete(checkpoint) and checkpoint_step(checkpoint) < newest
        if unfinished or (checkpoint in complete and checkpoint not in kept):
            shutil.rmtree(checkpoint, ignore_errors=True)


def checkpoint_bytes(checkpoint: Path) -> int:
    """What a complete checkpoint takes on disk, from its marker (0 when it has none)."""
    try:
        return sum(json.loads((checkpoint / COMPLETE_MARKER).read_text())["files"].values())
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return 0


def newest_complete(output_dir: Path) -> Path | None:
    return next((c for c in list_checkpoints(output_dir) if is_complete(c)), None)


def warn_when_short_of_space(output_dir: Path) -> None:
    """A line before a save when the disk has less free space than the last checkpoint took."""
    last = newest_complete(output_dir)
    needed = checkpoint_bytes(last) if last is not None else 0
    free = shutil.disk_usage(output_dir).free
    if free < needed:
        _warn(
            f"{_mb(free)} free in {output_dir}, less than {last.name} took ({_mb(needed)}): "
            "the next checkpoint may not fit"
        )


class DiskFullError(MiniGPTUserError):
    """The run's folder ran out of space: one line saying what it needed and how to go on."""


def is_disk_full(err: BaseException) -> bool:
    """ENOSPC, or torch's archive writer failing on it ("unexpected pos": it reports no errno)."""
    if isinstance(err, OSError):
        return err.errno in (errno.ENOSPC, errno.EDQUOT)
    return isinstance(err, RuntimeError) and "unexpected pos" in str(err)


@contextlib.contextmanager
def full_disk_is_one_line(output_dir: str | os.PathLike, resume_command: str | None) -> Iterator[None]:
    """Turn a full disk during the run (a checkpoint, the final model, a log line) into a
    `DiskFullError`: the unfinished checkpoint removed (its space back), the space a checkpoint
    needs, the last complete one and the command that resumes from it, in one line."""
    try:
        yield
    except (OSError, RuntimeError) as err:
        if not is_disk_full(err) or not is_main_process():
            raise
        output_dir = Path(output_dir)
        removed = []
        for checkpoint in list_checkpoints(output_dir):
            if not is_complete(checkpoint):
                shutil.rmtree(checkpoint, ignore_errors=True)
                removed.append(checkpoint.name)
        last = newest_complete(output_dir)
        kept = f"the last complete checkpoint is {last.name}" if last else "no complete checkpoint was written yet"
        needed = f"a checkpoint takes {_mb(checkpoint_bytes(last))}; " if last else ""
        unfinished = f"removed the unfinished {', '.join(removed)}; " if removed else ""
        raise DiskFullError(
            f"no space left on device in {output_dir} ({needed}{_mb(shutil.disk_usage(output_dir).free)} free): "
            f"{unfinished}{kept}; free some space, then resume with: {resume_command or '--resume'}"
        ) from None


def _mb(n_bytes: int) -> str:
    return f"{n_bytes / 1e6:.1f} MB"


def checkpoint_problems(checkpoint_dir: str | os.PathLike) -> list[str]:
    """What makes a checkpoint unusable for an exact resume; an empty list when it is complete.

    The marker must be there (else the save never finished) and every file it lists, whatever the
    layout (Trainer's, FSDP's, DeepSpeed's), must still have the size it had when it was marked:
    Trainer resumes silently and inexactly without its optimizer, scheduler or RNG files.
    """
    folder = Path(checkpoint_dir)
    try:
        sizes = dict(json.loads((folder / COMPLETE_MARKER).read_text())["files"])
    except FileNotFoundError:
        return ["not a folder"] if not folder.is_dir() else [f"no {COMPLETE_MARKER}: its save did not finish"]
    except (ValueError, KeyError, TypeError, OSError):
        return [f"{COMPLETE_MARKER} is unreadable"]
    problems = []
    for name, size in sizes.items():
        path = folder / name
        if not path.is_file():
            problems.append(f"{name} is missing")
        elif path.stat().st_size != size:
            problems.append(f"{name} is truncated or unreadable")
    if TRAINER_STATE_NAME not in sizes:
        problems.append(f"{TRAINER_STATE_NAME} is missing")
    return problems


def set_aside(checkpoint_dir: Path) -> Path:
    """Rename a bad checkpoint to `corrupt-checkpoint-N[-k]`, out of reach of resume and rotation."""
    target = checkpoint_dir.with_name(f"{SET_ASIDE_PREFIX}{checkpoint_dir.name}")
    suffix = 1
    while target.exists():
        suffix += 1
        target = checkpoint_dir.with_name(f"{SET_ASIDE_PREFIX}{checkpoint_dir.name}-{suffix}")
    os.replace(checkpoint_dir, target)
    fsync_dir(checkpoint_dir.parent)
    return target


def _warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr, flush=True)


def _info(message: str) -> None:
    print(message, flush=True)


def find_resume_checkpoint(
    output_dir: str | os.PathLike,
    *,
    info: Callable[[str], None] = _info,
    warn: Callable[[str], None] = _warn,
) -> str | None:
    """The newest complete checkpoint in `output_dir`, to pass to `train(resume_from_checkpoint=...)`.

    Walks `checkpoint-N` newest first. A folder without its marker is a save that never finished:
    removed, with a line saying so. A marked one with problems (damaged since) is renamed to
    `corrupt-checkpoint-N` with a warning saying why. The walk goes on to the next; None, after
    saying that training starts from scratch, when no complete checkpoint is left. With several
    processes the main process decides (and removes) and the others receive its answer, so all
    resume from the same step.
    """
    distributed = dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
    if distributed and not is_main_process():
        answer: list[str | None] = [None]
        dist.broadcast_object_list(answer, src=0)
        return answer[0]

    output_dir = Path(output_dir)
    found = None
    for checkpoint in list_checkpoints(output_dir):
        if not is_complete(checkpoint):
            shutil.rmtree(checkpoint, ignore_errors=True)
            info(f"removed {checkpoint.name}: a checkpoint save that was interrupted before it finished")
            continue
        problems = checkpoint_problems(checkpoint)
        if not problems:
            found = str(checkpoint)
            break
        moved_to = set_aside(checkpoint)
        warn(
            f"{checkpoint.name} is incomplete or corrupt ({'; '.join(problems)}): "
            f"moved it to {moved_to.name}, trying an older checkpoint"
        )
    if found is None:
        info(f"no complete checkpoint in {output_dir}: starting training from scratch")
    else:
        info(f"resuming from {found}")
    if distributed:
        dist.broadcast_object_list([found], src=0)
    return found


# ---- Resume compatibility ---------------------------------------------------------------------


def check_resume_compatible(
    run_config: Mapping[str, Any],
    checkpoint_dir: str | os.PathLike,
    sections: Sequence[str] = COMPARED_SECTIONS,
    ignore: Sequence[str] = RESUME_MAY_DIFFER,
) -> None:
    """Raise `ConfigError` when the run config's model/tokenizer/data settings differ from the checkpoint's.

    Compares the given sections of `run_config` with the checkpoint's `resolved_config.yaml`, key
    by dotted key (`ignore` lists dotted keys allowed to differ, by default worker counts, caches
    and progress bars). Training
    settings may change on resume (more steps, another logging interval); these may not, because
    the weights, vocabulary and data position in the checkpoint would no longer mean the same.
    A checkpoint without `resolved_config.yaml` (written by plain Trainer) is not checked.
    """
    saved_file = Path(checkpoint_dir) / RESOLVED_CONFIG_NAME
    if not saved_file.exists():
        return
    try:
        saved = yaml.safe_load(saved_file.read_text()) or {}
    except yaml.YAMLError as err:
        raise ConfigError(f"{saved_file} is not valid YAML: {err}") from err
    current = {key: value for key, value in _flatten(run_config).items() if key.split(".")[0] in sections}
    previous = {
        key: value
        for key, value in _flatten(saved).items()
        if key.split(".")[0] in sections
    }
    ignored = set(ignore)
    differences = [
        f"{key} is {current.get(key, '<unset>')!r} here but {previous.get(key, '<unset>')!r} in the checkpoint"
        for key in sorted(current.keys() | previous.keys())
        if key not in ignored and current.get(key) != previous.get(key)
    ]
    if differences:
        shown = "; ".join(differences[:3]) + (
            f"; and {len(differences) - 3} more" if len(differences) > 3 else ""
        )
        raise ConfigError(
            f"cannot resume from {Path(checkpoint_dir).name}: {shown}. "
            "Use the checkpoint's settings or a new output_dir"
        )


def _flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"model": {"hidden_size": 64}} -> {"model.hidden_size": 64}; lists become tuples."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(_flatten(value, f"{dotted}."))
        elif isinstance(value, list | tuple):
            flat[dotted] = tuple(value)
        elif isinstance(value, os.PathLike):
            flat[dotted] = os.fspath(value)
        else:
            flat[dotted] = value
    return flat
