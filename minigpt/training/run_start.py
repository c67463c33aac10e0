"""Where a run starts from, decided before it writes anything: a new run, a resumed one, or a base model.

A new run checks that a tokenizer already at `tokenizer.path` fits its data; a resume takes the
newest complete checkpoint (and, for a run begun from a base, the settings that start adopted); a
new run from a base reads the base and fits the config to it. Then the run either continues its
folder (the checkpoint must fit the config) or claims the folder for a new run.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from transformers import PreTrainedModel, PreTrainedTokenizerBase

from ..data.tokenizer import check_existing_tokenizer
from .base_model import (
    BaseModel,
    adopt_base_architecture,
    adopt_saved_settings,
    load_base_tokenizer,
    load_base_weights,
    read_base_model,
    record_base_location,
)
from .checkpoints import check_resume_compatible, find_resume_checkpoint
from .hardware import resolve_hardware
from .run_config import check_fits_model
from .run_folder import check_resume_target, claim_output_dir
from .settings import RunConfig
from .time_budget import planned_end


@dataclass
class RunStart:
    """Where a run starts from, and what deciding that has already read."""

    run: RunConfig  # the config as the run uses it (a base's architecture adopted, say)
    own_tokenizer: str  # <output_dir>/tokenizer: suggested when the one at tokenizer.path does not fit
    checkpoint: str | None = None  # the checkpoint a resume continues from; None for a new run
    finishing: bool = False  # the checkpoint is the run's last step: only its final model is missing
    checked_tokenizer: str | None = None  # check_existing_tokenizer's answer (a run without a base)
    base: BaseModel | None = None  # the base model a new run starts from (model.init_from)
    base_tokenizer: PreTrainedTokenizerBase | None = None
    base_weights: PreTrainedModel | None = None


def choose_start(run: RunConfig, resume: bool, main: bool) -> RunStart:
    """Decide where `run` starts and make its folder ready; `main` is the process that writes files.

    Every check that can refuse the run comes before anything is written or removed.
    """
    output_dir = Path(run.training.output_dir)
    start = RunStart(run, own_tokenizer=str(output_dir / "tokenizer"))
    start.checkpoint = find_resume_checkpoint(output_dir) if resume else None
    if run.model.init_from is None:
        start.checked_tokenizer = check_existing_tokenizer(
            run.tokenizer, run.data, new_path=start.own_tokenizer
        )
    elif start.checkpoint is not None:  # resuming a run that started from a base: its own checkpoint only
        start.run = adopt_saved_settings(run, start.checkpoint)
    else:  # a new run from a base: read it, and fit the config to it, before anything is written
        _read_base(start)
    run = start.run
    if start.checkpoint is not None:
        check_resume_compatible(run.to_dict(), start.checkpoint)
        start.finishing = check_resume_target(
            start.checkpoint, run.training.max_steps, planned_end(start.checkpoint)
        )
    elif main or not run.training.overwrite_output_dir:  # every process refuses; only the main one removes
        removed = claim_output_dir(output_dir, overwrite=run.training.overwrite_output_dir)
        if removed:
            print(f"training.overwrite_output_dir: removed the previous run's {', '.join(removed)}", flush=True)
    return start


def _read_base(start: RunStart) -> None:
    """The base model of a new run: its architecture adopted into the config, its tokenizer and weights."""
    base = read_base_model(start.run.model)
    run, model_config = adopt_base_architecture(start.run, base.config, base.name)
    start.base_tokenizer = load_base_tokenizer(run, base)  # checks the config's own tokenizer.path
    run = record_base_location(run, base.location)
    check_fits_model(run, whose="the base model's ")
    attention = resolve_hardware(run.hardware).attn_implementation
    start.base_weights = load_base_weights(base, model_config, attention)
    start.base, start.run = base, run


__all__ = ["RunStart", "choose_start"]
