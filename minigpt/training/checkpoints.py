"""Checkpoints that resume trusts only once they are complete (docs/training.md, "Checkpoints"): once
every process has written `checkpoint-N`, the main one flushes it, writes `checkpoint_complete.json`
(each file and its size) and rotates; `find_resume_checkpoint` never loads a folder without the marker.
"""

from __future__ import annotations

import contextlib
import errno
import json
import operator
import os
import shutil
import sys
from collections.abc import Callable, Iterator, Mapping
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
    """Marks each checkpoint complete, writes `resolved_config` into it, then keeps `save_total_limit`
    complete ones besides the best (give Trainer None: it would rotate first). Register it last."""

    def __init__(self, resolved_config: str, save_total_limit: int | None) -> None:
        self.resolved_config, self.save_total_limit = resolved_config, save_total_limit
        self.best: tuple[float, str] | None = None  # (metric, folder) of the best evaluation with a checkpoint

    @staticmethod
    def _metric(args, state, step: int) -> float | None:
        """Trainer's `metric_for_best_model` as logged at `step` (None when not evaluated there)."""
        metric = args.metric_for_best_model or "loss"
        key = metric if metric.startswith("eval_") else f"eval_{metric}"
        values = [r[key] for r in state.log_history if r.get("step") == step and key in r]
        return values[-1] if values else None

    def on_train_begin(self, args, state, control, **kwargs) -> None:
        self.best = None
        if state.best_model_checkpoint and os.path.isdir(state.best_model_checkpoint):  # a resume's
            value = self._metric(args, state, checkpoint_step(state.best_model_checkpoint))
            self.best = (value, state.best_model_checkpoint) if value is not None else None

    def on_step_end(self, args, state, control, **kwargs) -> None:
        # The folder of a save exists before any process writes into it (main process only).
        if control.should_save:
            if args.should_save:
                warn_when_short_of_space(Path(args.output_dir))
                (Path(args.output_dir) / f"checkpoint-{state.global_step}").mkdir(parents=True, exist_ok=True)
            _wait_for_everyone()

    def on_save(self, args, state, control, **kwargs) -> None:
        checkpoint = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        _wait_for_everyone()  # each process writes its own rng_state_<rank>.pth
        # The best evaluation that has a checkpoint: what load_best_model_at_end loads and rotation
        # keeps (Trainer's own pointer stays on an older one when its best evaluation had none).
        value = self._metric(args, state, state.global_step)
        better = operator.gt if args.greater_is_better else operator.lt
        if value is not None and (self.best is None or better(value, self.best[0])):
            self.best = (value, str(checkpoint))
        if self.best is not None:
            state.best_model_checkpoint = self.best[1]
        if args.should_save:
            (checkpoint / RESOLVED_CONFIG_NAME).write_text(self.resolved_config, encoding="utf-8")
            mark_complete(checkpoint)
            rotate_checkpoints(checkpoint.parent, self.save_total_limit, keep=state.best_model_checkpoint)
        _wait_for_everyone()  # no process reads a checkpoint the main one is rotating


def _distributed() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def _wait_for_everyone() -> None:
    if _distributed():
        dist.barrier()


def mark_complete(checkpoint: Path) -> None:
    """Flush every file of `checkpoint` to disk, then write its marker (itself atomically)."""
    sizes = {}
    for root, dirs, files in os.walk(checkpoint):
        dirs.sort()  # one order, whatever the filesystem's
        for name in sorted(set(files) - {COMPLETE_MARKER}):
            path = Path(root, name)
            fsync_dir(path)  # opens and fsyncs a file as it does a folder
            sizes[str(path.relative_to(checkpoint))] = path.stat().st_size
        fsync_dir(root)
    with atomic_write_file(checkpoint / COMPLETE_MARKER) as handle:
        json.dump({"step": checkpoint_step(checkpoint), "files": sizes}, handle, indent=1)
    fsync_dir(checkpoint)


def is_complete(checkpoint: Path) -> bool:
    return (checkpoint / COMPLETE_MARKER).is_file()


def rotate_checkpoints(output_dir: Path, limit: int | None, keep: str | None = None) -> None:
    """Delete complete checkpoints beyond the newest `limit` (never `keep`), and unfinished saves
    older than the newest complete one."""
    checkpoints = list_checkpoints(output_dir)  # newest first
    complete = [c for c in checkpoints if is_complete(c)]
    if not complete:
        return
    kept = set(complete[:limit])
    kept |= {c for c in complete if keep is not None and os.path.abspath(c) == os.path.abspath(keep)}
    for checkpoint in checkpoints:
        unfinished = checkpoint not in complete and checkpoint_step(checkpoint) < checkpoint_step(complete[0])
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
    needed, free = checkpoint_bytes(last) if last is not None else 0, shutil.disk_usage(output_dir).free
    if free < needed:
        _warn(f"{_mb(free)} free in {output_dir}, less than {last.name} took ({_mb(needed)}): the next checkpoint may not fit")


class DiskFullError(MiniGPTUserError):
    """The run's folder ran out of space."""


@contextlib.contextmanager
def full_disk_is_one_line(output_dir: str | os.PathLike, resume_command: str | None) -> Iterator[None]:
    """Turn a full disk during the run into a one-line `DiskFullError`: the unfinished checkpoint
    removed, the space a checkpoint needs, the last complete one and the command that resumes."""
    try:
        yield
    except (OSError, RuntimeError) as err:
        # ENOSPC, or torch's archive writer failing on it ("unexpected pos": it reports no errno)
        full = err.errno in (errno.ENOSPC, errno.EDQUOT) if isinstance(err, OSError) else "unexpected pos" in str(err)
        if not full or not is_main_process():
            raise
        output_dir = Path(output_dir)
        found = list_checkpoints(output_dir)  # newest first
        removed = [checkpoint for checkpoint in found if not is_complete(checkpoint)]
        for checkpoint in removed:
            shutil.rmtree(checkpoint, ignore_errors=True)
        last = next((checkpoint for checkpoint in found if checkpoint not in removed), None)
        kept = f"the last complete checkpoint is {last.name}" if last else "no complete checkpoint was written yet"
        needed = f"a checkpoint takes {_mb(checkpoint_bytes(last))}; " if last else ""
        unfinished = f"removed the unfinished {', '.join(c.name for c in removed)}; " if removed else ""
        raise DiskFullError(
            f"no space left on device in {output_dir} ({needed}{_mb(shutil.disk_usage(output_dir).free)} free): "
            f"{unfinished}{kept}; free some space, then resume with: {resume_command or '--resume'}"
        ) from None


def _mb(n_bytes: int) -> str:
    return f"{n_bytes / 1e6:.1f} MB"


def checkpoint_problems(checkpoint_dir: str | os.PathLike) -> list[str]:
    """What makes a checkpoint unusable for an exact resume ([] when complete): its marker, and every
    file it lists at the size it had (Trainer resumes silently and inexactly without some)."""
    folder = Path(checkpoint_dir)
    try:
        sizes = dict(json.loads((folder / COMPLETE_MARKER).read_text())["files"])
    except FileNotFoundError:
        return [f"no {COMPLETE_MARKER}: its save did not finish"]
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


def _warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr, flush=True)


def _info(message: str) -> None:
    print(message, flush=True)


def find_resume_checkpoint(output_dir: str | os.PathLike, *, info: Callable[[str], None] = _info) -> str | None:
    """The newest complete checkpoint in `output_dir` (None: none left), unfinished saves removed and
    damaged ones set aside, each said in a line; the main process decides for all."""
    distributed = _distributed()
    if distributed and not is_main_process():
        answer: list[str | None] = [None]
        dist.broadcast_object_list(answer, src=0)
        return answer[0]
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
        # Renamed to `corrupt-checkpoint-N[-k]`, out of reach of resume and rotation.
        moved_to, suffix = checkpoint.with_name(f"{SET_ASIDE_PREFIX}{checkpoint.name}"), 1
        while moved_to.exists():
            suffix += 1
            moved_to = checkpoint.with_name(f"{SET_ASIDE_PREFIX}{checkpoint.name}-{suffix}")
        os.replace(checkpoint, moved_to)
        fsync_dir(checkpoint.parent)
        _warn(f"{checkpoint.name} is incomplete or corrupt ({'; '.join(problems)}): "
              f"moved it to {moved_to.name}, trying an older checkpoint")
    info(f"resuming from {found}" if found else f"no complete checkpoint in {Path(output_dir)}: starting training from scratch")
    if distributed:
        dist.broadcast_object_list([found], src=0)
    return found


def check_resume_compatible(run_config: Mapping[str, Any], checkpoint_dir: str | os.PathLike) -> None:
    """`ConfigError` when the model, tokenizer or data settings (COMPARED_SECTIONS, but for
    RESUME_MAY_DIFFER) differ from the checkpoint's resolved_config.yaml: its weights, vocabulary and
    data position would no longer mean the same. A checkpoint without one (plain Trainer's) passes."""
    saved_file = Path(checkpoint_dir) / RESOLVED_CONFIG_NAME
    if not saved_file.exists():
        return
    try:
        saved = yaml.safe_load(saved_file.read_text()) or {}
    except yaml.YAMLError as err:
        raise ConfigError(f"{saved_file} is not valid YAML: {err}") from err
    current, previous = _flatten(run_config), _flatten(saved)
    differences = [
        f"{key} is {current.get(key, '<unset>')!r} here but {previous.get(key, '<unset>')!r} in the checkpoint"
        for key in sorted(current.keys() | previous.keys())
        if key.split(".")[0] in COMPARED_SECTIONS and key not in RESUME_MAY_DIFFER and current.get(key) != previous.get(key)
    ]
    if differences:
        more = f"; and {len(differences) - 3} more" if len(differences) > 3 else ""
        raise ConfigError(f"cannot resume from {Path(checkpoint_dir).name}: {'; '.join(differences[:3])}{more}. "
                          "Use the checkpoint's settings or a new output_dir")


def _flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"model": {"hidden_size": 64}} -> {"model.hidden_size": 64}; lists become tuples."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, Mapping):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = tuple(value) if isinstance(value, list | tuple) else value
    return flat
