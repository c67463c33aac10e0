"""A run owns its output folder: what a run writes there, and who may start in a folder that has one.

Starting a new run where another run's checkpoints or `final/` are would mix the two: the new
run's checkpoints sit beside the old ones, and `--resume` later picks whichever has the higher
step. So a fresh start in such a folder is refused with one line, unless the config says
`training.overwrite_output_dir: true` (Trainer's name), which removes the old run's outputs first;
and `--resume` of a run already at its end is refused without touching anything (or, when the run
was stopped while saving its final model, finishes it without training a step).

Plain Python (no torch), so these checks run before anything heavy.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from ..errors import ConfigError
from ..run_layout import (  # what a run writes into its output folder (shared with the hub stage)
    CHECKPOINT_PREFIX,
    FINAL_DIR,
    LOSS_PLOT_FILE,
    METRICS_FILE,
    RESOLVED_CONFIG_NAME,
    RUN_FILES,
    SAMPLES_FILE,
    SET_ASIDE_PREFIX,
    STAGING_PREFIX,
    SUMMARY_FILE,
    checkpoint_step,
    list_checkpoints,
)


def run_outputs(output_dir: str | os.PathLike) -> list[Path]:
    """Everything a run wrote into `output_dir` (checkpoints, final/, logs), sorted; nothing else."""
    output_dir = Path(output_dir)
    if not output_dir.is_dir():
        return []
    prefixes = (f"{CHECKPOINT_PREFIX}-", f"{STAGING_PREFIX}", f"{SET_ASIDE_PREFIX}{CHECKPOINT_PREFIX}-")
    return sorted(
        p
        for p in output_dir.iterdir()
        if p.name in RUN_FILES or p.name == FINAL_DIR or p.name.startswith(prefixes)
    )


def holds_a_run(output_dir: str | os.PathLike) -> bool:
    """True when `output_dir` has another run's checkpoints or finished model."""
    return bool(list_checkpoints(output_dir)) or (Path(output_dir) / FINAL_DIR).is_dir()


def claim_output_dir(output_dir: str | os.PathLike, overwrite: bool, resume_command: str = "--resume") -> list[str]:
    """Make `output_dir` ready for a run that starts from step 0; returns the names it removed.

    Raises `ConfigError` (and changes nothing) when the folder holds another run and `overwrite`
    is false. With `overwrite`, removes only what a run writes (`run_outputs`), never other files.
    """
    output_dir = Path(output_dir)
    if not holds_a_run(output_dir):
        return []
    if not overwrite:
        found = [p.name + ("/" if p.is_dir() else "") for p in run_outputs(output_dir) if p.is_dir()]
        shown = ", ".join(found[:3]) + (f" and {len(found) - 3} more" if len(found) > 3 else "")
        raise ConfigError(
            f"{output_dir} already holds a run ({shown}): continue it with {resume_command}, start over with "
            "training.overwrite_output_dir=true (removes its checkpoints and final/), "
            "or pick another training.output_dir"
        )
    removed = []
    for path in run_outputs(output_dir):
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()
        removed.append(path.name)
    return removed


def final_model_saved_at(output_dir: str | os.PathLike, step: int) -> bool:
    """True when `output_dir/final/` holds the model of step `step` or a later one.

    `summary.json` is written after `final/` and says the step it was saved at; a run stopped while
    saving its final model has a checkpoint at its last step and no final/ (or the previous one).
    """
    output_dir = Path(output_dir)
    if not (output_dir / FINAL_DIR).is_dir():
        return False
    try:
        summary = json.loads((output_dir / SUMMARY_FILE).read_text())
        saved_step = int(summary["global_step"])
    except (OSError, ValueError, TypeError, KeyError):  # no summary, or not one this code wrote
        return False
    return not summary.get("stopped") and saved_step >= step


def check_resume_target(checkpoint: str | os.PathLike, max_steps: int) -> bool:
    """Whether `--resume` from `checkpoint` has steps to train (False) or only the end to finish (True).

    A checkpoint at `training.max_steps` whose final model was never saved (the run was stopped
    while evaluating or saving it) is finished: evaluated and saved, no step trained. One already
    finished is refused: there is nothing to resume, and a step past the end would be one too many.
    """
    step = checkpoint_step(checkpoint)
    if step is None or step < max_steps:
        return False
    if not final_model_saved_at(Path(checkpoint).parent, step):
        return True
    raise ConfigError(
        f"{Path(checkpoint).name} is already at step {step} and training.max_steps is {max_steps}: "
        f"nothing to resume; raise training.max_steps (e.g. training.max_steps={step + max(step // 2, 1)}) "
        "to train further"
    )


__all__ = [
    "FINAL_DIR",
    "LOSS_PLOT_FILE",
    "METRICS_FILE",
    "RESOLVED_CONFIG_NAME",
    "SAMPLES_FILE",
    "SUMMARY_FILE",
    "check_resume_target",
    "checkpoint_step",
    "claim_output_dir",
    "final_model_saved_at",
    "holds_a_run",
    "list_checkpoints",
    "run_outputs",
]
