"""Checkpoints that appear whole or not at all, and resume that only ever loads a complete one.

Trainer writes `checkpoint-N` in place and its `resume_from_checkpoint=True` takes the highest
folder, finished or not: a kill during a save leaves a partial folder that resume then picks.
Here every checkpoint is written into a staging folder `output_dir/.staging-checkpoint-N`, every
process waits for the others (each writes its own `rng_state_<rank>.pth`), and the main process
renames it to `checkpoint-N` in one `os.replace`.
Older checkpoints are rotated only after that rename, so a kill at any instant leaves every
earlier checkpoint intact. At resume, `find_resume_checkpoint` walks checkpoints newest first,
sets aside any that is incomplete or unreadable, and returns the path to pass to
`trainer.train(resume_from_checkpoint=path)`.

Trainer itself restores model, optimizer, scheduler, grad scaler, RNG states and the data
position; resuming from a checkpoint written here ends bit-identical to an uninterrupted run.

Trainer has no public way to write a checkpoint elsewhere first (a callback's `on_save` runs once
the files are in place), so `AtomicCheckpointTrainer` overrides private Trainer methods and calls
its private save steps. setup.cfg pins transformers to the minor version they were written for;
tests/test_transformers_contract.py fails, naming the method, when one of them changes.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import zipfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch.distributed as dist
import yaml
from safetensors import safe_open
from torch.distributed.checkpoint import FileSystemReader
from transformers import Trainer
from transformers.trainer_callback import ExportableState, TrainerState
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, SaveStrategy, rotate_checkpoints

from ..atomic import fsync_dir, replace_dir
from ..distributed import is_main_process
from ..errors import ConfigError
from ..progress import transformers_progress_bars
from .callbacks import StopTrainingCallback
from .fsdp import own_class, shard_on_cpu, without_tied_copies
from .interrupt import StopController
from .run_folder import (
    RESOLVED_CONFIG_NAME,
    SET_ASIDE_PREFIX,
    STAGING_PREFIX,
    checkpoint_step,
    list_checkpoints,
)

TRAINER_STATE_NAME = "trainer_state.json"
WEIGHTS_NAME = "model.safetensors"
WEIGHTS_INDEX_NAME = "model.safetensors.index.json"
OPTIMIZER_NAME = "optimizer.pt"
SCHEDULER_NAME = "scheduler.pt"
SCALER_NAME = "scaler.pt"
FSDP_MODEL_NAME = "pytorch_model_fsdp"  # accelerate's FSDP model state: `.bin`, or a `_0/` folder when sharded
FSDP_OPTIMIZER_NAME = "optimizer.bin"  # accelerate's FSDP optimizer state (full); `optimizer_0/` when sharded
COMPARED_SECTIONS = ("model", "tokenizer", "data")  # run-config sections a resume must not change
# Keys of those sections that change how the data is prepared or shown, never what it is.
RESUME_MAY_DIFFER = ("tokenizer.show_progress", "data.show_progress", "data.num_proc", "data.cache_dir")
# Keys a checkpoint of an older MiniGPT may hold that no longer exist, at the value the code keeps
# computing: a checkpoint holding them at these values resumes as if they were absent.
RETIRED_KEYS = {"model.residual_init": "scaled", "model.final_logit_softcapping": None}


class AtomicCheckpointTrainer(Trainer):
    """A `Trainer` whose checkpoints appear atomically and carry the resolved run config.

    Args beyond `Trainer`'s:
        resolved_config: the run config (a plain mapping, or YAML text) written as
            `resolved_config.yaml` into every checkpoint, for `check_resume_compatible`.
        stop_controller: when given, SIGINT/SIGTERM or `stop_controller.request_stop()` save a
            checkpoint and stop at the next step boundary (adds `StopTrainingCallback`).
    """

    def __init__(
        self,
        *args: Any,
        resolved_config: Mapping[str, Any] | str | None = None,
        stop_controller: StopController | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.resolved_config = resolved_config
        self.stop_controller = stop_controller
        if stop_controller is not None:
            self.add_callback(StopTrainingCallback(stop_controller))

    def create_accelerator_and_postprocess(self) -> None:
        """Trainer's, then FSDP for CPU processes launched with an FSDP config, which accelerate
        alone runs unsharded (fsdp.py)."""
        super().create_accelerator_and_postprocess()
        if shard_on_cpu(self.accelerator):
            self.is_fsdp_enabled = True  # what Trainer sets from the state it has just read

    def restore_without_training(self, checkpoint: str | os.PathLike) -> None:
        """Load `checkpoint`'s weights and state (its step, its log history) and train nothing: what
        finishes a run that was stopped while evaluating or saving its final model."""
        self.state = TrainerState.load_from_json(os.path.join(checkpoint, TRAINER_STATE_NAME))
        self._load_from_checkpoint(str(checkpoint))

    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        """Write `checkpoint-N` into a staging folder on every process, then rename it into place.

        Mirrors `Trainer._save_checkpoint` (transformers 5.24) step by step; only the folder the
        files go to and the moment old checkpoints are rotated differ. A change of that body fails
        tests/test_transformers_contract.py.
        """
        run_dir = Path(self._get_output_dir(trial=trial))
        final_dir = run_dir / f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
        staging_dir = run_dir / f"{STAGING_PREFIX}{final_dir.name}"
        if self.args.should_save:
            remove_unfinished_saves(run_dir, log=None)
            staging_dir.mkdir(parents=True)
        self.accelerator.wait_for_everyone()  # the staging folder exists before anyone writes

        with transformers_progress_bars(False):  # a bar for one small weights file is noise
            self._write_checkpoint_files(model, trial, staging_dir, final_dir)

        self.accelerator.wait_for_everyone()  # every process's files are in the staging folder
        if self.args.should_save:
            _fsync_files(staging_dir)
            replace_dir(staging_dir, final_dir)  # the checkpoint appears whole, in one rename
            rotate_checkpoints(
                output_dir=str(run_dir),
                save_total_limit=self.args.save_total_limit,
                best_model_checkpoint=self.state.best_model_checkpoint,
                use_mtime=False,  # checkpoint-N is named by step; mtimes can tie on fast saves
            )
        self.accelerator.wait_for_everyone()  # no process reads checkpoint-N before it exists
        if self.args.push_to_hub:
            self._push_from_checkpoint(str(final_dir))

    def _write_checkpoint_files(self, model: Any, trial: Any, staging_dir: Path, final_dir: Path) -> None:
        """The body of `Trainer._save_checkpoint`, writing into `staging_dir`."""
        if self.hp_search_backend is None and trial is None:
            self.store_flos()
        self.save_model(str(staging_dir), _internal_call=True)

        best_step = self.state.best_global_step
        if (
            self.args.save_strategy in (SaveStrategy.STEPS, SaveStrategy.EPOCH, SaveStrategy.BEST)
            and best_step
        ):
            best_dir = final_dir.parent / f"{PREFIX_CHECKPOINT_DIR}-{best_step}"
            # The best may be the checkpoint being written, which exists only after the rename.
            if best_step == self.state.global_step or best_dir.exists():
                self.state.best_model_checkpoint = str(best_dir)

        if not self.args.save_only_model:
            self._save_optimizer_and_scheduler(str(staging_dir))
            self._save_scaler(str(staging_dir))
            self._save_rng_state(str(staging_dir))  # rng_state.pth, or rng_state_<rank>.pth per process

        if self.args.should_save:
            stateful = [
                c for c in self.callback_handler.callbacks + [self.control] if isinstance(c, ExportableState)
            ]
            for callback in stateful:
                name = callback.__class__.__name__
                if isinstance(self.state.stateful_callbacks[name], list):
                    self.state.stateful_callbacks[name].append(callback.state())
                else:
                    self.state.stateful_callbacks[name] = callback.state()
            self.state.save_to_json(str(staging_dir / TRAINER_STATE_NAME))
            if self.resolved_config is not None:
                (staging_dir / RESOLVED_CONFIG_NAME).write_text(_config_text(self.resolved_config))

    def _save(self, output_dir: str | None = None, state_dict: dict | None = None) -> None:
        """Trainer's, with a sharded model saved as an unsharded one is (fsdp.py): as its own class,
        not FSDP2's wrapper from torch (the folder's code and auto_map), and a tied weight once."""
        model = self.accelerator.unwrap_model(self.model, keep_torch_compile=False)  # what Trainer saves
        with own_class(model):
            super()._save(output_dir, state_dict=without_tied_copies(model, state_dict))

    def _issue_warnings_after_load(self, load_result: Any) -> None:
        """Tied weights (`lm_head.weight`) are left out of `model.safetensors` by design: not missing."""
        tied = set(getattr(self.model, "all_tied_weights_keys", None) or ())
        missing = [key for key in load_result.missing_keys if key not in tied]
        if len(missing) < len(load_result.missing_keys):
            self.model.tie_weights()
        super()._issue_warnings_after_load(load_result._replace(missing_keys=missing))

    def _finalize_training(self, trial: Any, num_train_samples: int, start_time: float) -> Any:
        """After a requested stop, keep the checkpoint just written and the weights as they are.

        At the end of training Trainer loads the best model and, with `save_total_limit=1`,
        deletes every checkpoint but the best: after an interruption that would delete the
        checkpoint the run must resume from. (No callback can do this: `on_train_end` comes after
        that cleanup, and a stop requested after the last save has no event before it.)
        """
        if self.stop_controller is None or not self.stop_controller.stop_requested:
            return super()._finalize_training(trial, num_train_samples, start_time)
        saved = self.args.load_best_model_at_end, self.args.save_total_limit
        self.args.load_best_model_at_end, self.args.save_total_limit = False, None
        try:
            return super()._finalize_training(trial, num_train_samples, start_time)
        finally:
            self.args.load_best_model_at_end, self.args.save_total_limit = saved


def _config_text(config: Mapping[str, Any] | str) -> str:
    if isinstance(config, str):
        return config
    return yaml.safe_dump(dict(config), sort_keys=False)


def _fsync_files(folder: Path) -> None:
    """Flush every file of a finished checkpoint to disk before it is renamed into place."""
    for root, _dirs, files in os.walk(folder):
        for name in files:
            fd = os.open(os.path.join(root, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(root)


# ---- Resume discovery -------------------------------------------------------------------------


def checkpoint_problems(checkpoint_dir: str | os.PathLike) -> list[str]:
    """What makes a checkpoint unusable for an exact resume; an empty list when it is complete.

    Checks the files Trainer's resume loads exist and are readable: `trainer_state.json` parses
    and names the folder's step, `model.safetensors` (or its shards) has a valid header covering
    the whole file, and `optimizer.pt`, `scheduler.pt`, `scaler.pt` and every `rng_state*.pth` are
    whole torch archives. Trainer resumes silently and inexactly without these (measured).
    Under FSDP the model and optimizer are accelerate's files instead (`_fsdp_problems`); DeepSpeed's
    `global_stepN/` is left to its loader.
    """
    folder = Path(checkpoint_dir)
    if not folder.is_dir():
        return ["not a folder"]
    problems = []
    problems += _trainer_state_problems(folder)
    if any(folder.glob(f"{FSDP_MODEL_NAME}*")):  # FSDP: what resume loads is its own layout
        problems += _fsdp_problems(folder)
    elif not any(folder.glob("global_step*")):  # DeepSpeed's layout its loader checks; else Trainer's
        problems += _weights_problems(folder)
        for name in (OPTIMIZER_NAME, SCHEDULER_NAME):
            problems += _torch_archive_problems(folder / name)
    if (folder / SCALER_NAME).exists():
        problems += _torch_archive_problems(folder / SCALER_NAME)
    rng_files = sorted(folder.glob("rng_state*.pth"))
    if not rng_files:
        problems.append("no rng_state*.pth")
    for rng_file in rng_files:
        problems += _torch_archive_problems(rng_file)
    return problems


def _trainer_state_problems(folder: Path) -> list[str]:
    try:
        state = json.loads((folder / TRAINER_STATE_NAME).read_text())
        step = state["global_step"]
    except FileNotFoundError:
        return [f"{TRAINER_STATE_NAME} is missing"]
    except (ValueError, KeyError, TypeError, OSError):
        return [f"{TRAINER_STATE_NAME} is unreadable"]
    expected = checkpoint_step(folder)
    if expected is not None and step != expected:
        return [f"{TRAINER_STATE_NAME} is for step {step}"]
    return []


def _weights_problems(folder: Path) -> list[str]:
    if (folder / WEIGHTS_INDEX_NAME).exists():
        try:
            shards = sorted(set(json.loads((folder / WEIGHTS_INDEX_NAME).read_text())["weight_map"].values()))
        except (ValueError, KeyError, TypeError, AttributeError):
            return [f"{WEIGHTS_INDEX_NAME} is unreadable"]
    else:
        shards = [WEIGHTS_NAME]
    problems = []
    for shard in shards:
        path = folder / shard
        if not path.exists():
            problems.append(f"{shard} is missing")
            continue
        try:  # safe_open checks the header and that the data covers the whole file (no truncation)
            with safe_open(str(path), framework="pt") as weights:
                weights.keys()
        except Exception:  # safetensors raises its own error type for every malformed file
            problems.append(f"{shard} is truncated or unreadable")
    return problems


def _fsdp_problems(folder: Path) -> list[str]:
    """Accelerate's FSDP files, which resume loads (`model.safetensors` beside them is for
    `from_pretrained`): a full state dict as one torch archive each (`pytorch_model_fsdp.bin`,
    `optimizer.bin`), or a sharded one as a torch.distributed.checkpoint folder each
    (`pytorch_model_fsdp_0/`, `optimizer_0/`: one file per process and their index)."""
    problems = []
    if (folder / WEIGHTS_NAME).exists() or (folder / WEIGHTS_INDEX_NAME).exists():
        problems += _weights_problems(folder)
    for full, sharded in ((f"{FSDP_MODEL_NAME}.bin", f"{FSDP_MODEL_NAME}_0"), (FSDP_OPTIMIZER_NAME, "optimizer_0")):
        if (folder / sharded).is_dir():
            problems += _distributed_checkpoint_problems(folder / sharded)
        else:
            problems += _torch_archive_problems(folder / full)
    return problems + _torch_archive_problems(folder / SCHEDULER_NAME)


def _distributed_checkpoint_problems(path: Path) -> list[str]:
    """A torch.distributed.checkpoint folder: its `.metadata` (written last, by the coordinating
    process) reads, and every file it indexes holds the bytes it says (each process wrote one)."""
    try:
        metadata = FileSystemReader(str(path)).read_metadata()
    except Exception:  # a missing, truncated or foreign index: whatever torch raises for it
        return [f"{path.name}/.metadata is missing or unreadable"]
    ends: dict[str, int] = {}
    for info in metadata.storage_data.values():
        ends[info.relative_path] = max(ends.get(info.relative_path, 0), info.offset + info.length)
    problems = []
    for name, end in sorted(ends.items()):
        size = (path / name).stat().st_size if (path / name).exists() else None
        if size is None:
            problems.append(f"{path.name}/{name} is missing")
        elif size < end:
            problems.append(f"{path.name}/{name} is truncated")
    return problems


def _torch_archive_problems(path: Path) -> list[str]:
    """`torch.save` writes a zip archive; a truncated one has no central directory at its end."""
    if not path.exists():
        return [f"{path.name} is missing"]
    if not zipfile.is_zipfile(path):
        return [f"{path.name} is truncated or unreadable"]
    return []


def remove_unfinished_saves(output_dir: str | os.PathLike, log: Callable[[str], None] | None = print) -> None:
    """Delete staging folders left by a save that was killed before its rename."""
    output_dir = Path(output_dir)
    if not output_dir.is_dir():
        return
    for staging in sorted(output_dir.glob(f"{STAGING_PREFIX}{PREFIX_CHECKPOINT_DIR}-*")):
        shutil.rmtree(staging, ignore_errors=True)
        if log is not None:
            log(f"removed {staging.name}: a checkpoint save that was interrupted before it finished")


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

    Walks `checkpoint-N` newest first; one with problems is renamed to `corrupt-checkpoint-N`
    with a warning saying why, and the walk goes on. Returns None, after saying that training
    starts from scratch, when no complete checkpoint is left. Unfinished staging folders are
    deleted. With several processes the main process decides (and renames) and the others
    receive its answer, so all resume from the same step.
    """
    distributed = dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
    if distributed and not is_main_process():
        answer: list[str | None] = [None]
        dist.broadcast_object_list(answer, src=0)
        return answer[0]

    output_dir = Path(output_dir)
    remove_unfinished_saves(output_dir, log=info)
    found = None
    for checkpoint in list_checkpoints(output_dir):
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
        if key.split(".")[0] in sections and not (key in RETIRED_KEYS and RETIRED_KEYS[key] == value)
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


def resolve_resume_checkpoint(output_dir: str | os.PathLike, run_config: Mapping[str, Any]) -> str | None:
    """`--resume` in one call: the newest complete checkpoint, checked against the run config."""
    checkpoint = find_resume_checkpoint(output_dir)
    if checkpoint is not None:
        check_resume_compatible(run_config, checkpoint)
    return checkpoint
