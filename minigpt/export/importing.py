"""A stock transformers folder whose architecture MiniGPT expresses, loaded as MiniGPTForCausalLM.

The inverse of `exporting`: a GPT-2, GPT-NeoX, Starcoder2, Llama or Qwen3 model's weights go into a
MiniGPT model that computes the same logits; a setting MiniGPT has no equivalent for (grouped-query
attention, parallel residuals, sliding windows...) is an ExportError naming it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

from ..console import transformers_progress_bars
from ..model import MiniGPTConfig, MiniGPTForCausalLM
from .architectures import STOCK_ARCHITECTURES, from_stock_weights, load_with_zero_biases
from .errors import ExportError


def is_stock_model_dir(path: str | os.PathLike) -> bool:
    """A folder with a config.json whose model_type is not MiniGPT's."""
    try:
        return json.loads((Path(path) / "config.json").read_text()).get("model_type") != MiniGPTConfig.model_type
    except (OSError, ValueError, AttributeError):
        return False


def import_stock_model(name_or_path: str | os.PathLike, **from_pretrained_kwargs: Any) -> MiniGPTForCausalLM:
    """Load the stock model at `name_or_path` and return the MiniGPT model that computes it exactly."""
    try:
        model_type = AutoConfig.from_pretrained(str(name_or_path), **from_pretrained_kwargs).model_type
    except (OSError, ValueError) as err:
        raise ExportError(f"{name_or_path} is not a loadable transformers model: {err}") from None
    if model_type not in STOCK_ARCHITECTURES:
        raise ExportError(
            f"model_type={model_type!r}: MiniGPT imports only {', '.join(STOCK_ARCHITECTURES)} "
            "(the stock models it can express)"
        )
    family = STOCK_ARCHITECTURES[model_type]
    with transformers_progress_bars(False):  # per-tensor bars: instant for these models
        stock = AutoModelForCausalLM.from_pretrained(str(name_or_path), dtype=torch.float32, **from_pretrained_kwargs)
    kwargs = family.minigpt_kwargs(stock.config)
    weights = from_stock_weights(family, stock.config, stock.state_dict())
    # All-zero biases (what an export of bias=False writes) read back as bias=False.
    declared = any(getattr(stock.config, flag, False) for flag in family.bias_flags)
    biases = [tensor for name, tensor in weights.items() if name.endswith(".bias")]
    try:
        config = MiniGPTConfig(**kwargs, bias=declared or any(bool(t.any()) for t in biases))
    except ValueError as err:
        raise ExportError(f"{name_or_path}: {err}") from None
    model = MiniGPTForCausalLM(config)
    load_with_zero_biases(model, weights)
    model.generation_config = GenerationConfig.from_dict(stock.generation_config.to_dict())
    return model.eval()
