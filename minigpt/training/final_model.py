"""The run's final model: weights, tokenizer and resolved config in `<output_dir>/final/`, whole or absent."""

from __future__ import annotations

from pathlib import Path

import torch
import yaml
from transformers import PreTrainedTokenizerBase, Trainer

from ..atomic import atomic_output_dir
from ..progress import transformers_progress_bars
from .fsdp import own_class, without_tied_copies
from .run_folder import RESOLVED_CONFIG_NAME
from .settings import RunConfig


def save_final_model(
    trainer: Trainer,
    tokenizer: PreTrainedTokenizerBase,
    run: RunConfig,
    final_dir: Path,
    state_dict: dict[str, torch.Tensor] | None = None,
) -> Path:
    """Model, tokenizer and resolved config to `final_dir`, which appears whole or not at all.

    `state_dict` is the full (gathered) one when the model is sharded; None saves the model's own.
    """
    model = trainer.accelerator.unwrap_model(trainer.model)  # no DDP wrapper, no compiled module
    model.config.use_cache = True  # Trainer turned the KV cache off for training; generation wants it
    state_dict = without_tied_copies(model, state_dict)  # a gathered one holds a tied weight twice
    with atomic_output_dir(final_dir) as staging, transformers_progress_bars(False), own_class(model):
        model.save_pretrained(staging, state_dict=state_dict)  # as its own class, not FSDP2's wrapper
        tokenizer.save_pretrained(staging)
        (staging / RESOLVED_CONFIG_NAME).write_text(yaml.safe_dump(run.to_dict(), sort_keys=False))
    return final_dir


__all__ = ["save_final_model"]
