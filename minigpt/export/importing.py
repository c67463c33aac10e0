"""A stock transformers folder whose architecture MiniGPT expresses, loaded as MiniGPTForCausalLM.

The inverse of `exporting`: GPT-2, GPT-NeoX, Starcoder2, Llama and Qwen3 folders (local, or a repo
id with `from_pretrained`'s keyword arguments) load with the stock class, without remote code, and
their weights are mapped into a MiniGPT model that computes the same logits. A setting MiniGPT has
no equivalent for (grouped-query attention, parallel residuals, partial rotary, sliding windows...)
is an ExportError naming it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

from ..model import MiniGPTConfig, MiniGPTForCausalLM
from .architectures import STOCK_ARCHITECTURES, architecture_for_model_type
from .errors import ExportError


def is_stock_model_dir(path: str | os.PathLike) -> bool:
    """A folder with a config.json whose model_type is not MiniGPT's."""
    config = Path(path) / "config.json"
    try:
        return json.loads(config.read_text()).get("model_type") != MiniGPTConfig.model_type
    except (OSError, ValueError, AttributeError):
        return False


def import_stock_model(name_or_path: str | os.PathLike, **from_pretrained_kwargs: Any) -> MiniGPTForCausalLM:
    """Load the stock model at `name_or_path` and return the MiniGPT model that computes it exactly."""
    try:
        stock_config = AutoConfig.from_pretrained(str(name_or_path), **from_pretrained_kwargs)
    except (OSError, ValueError) as err:
        raise ExportError(f"{name_or_path} is not a loadable transformers model: {err}") from None
    architecture = architecture_for_model_type(stock_config.model_type)
    if architecture is None:
        known = ", ".join(arch.model_type for arch in STOCK_ARCHITECTURES.values())
        raise ExportError(
            f"model_type={stock_config.model_type!r}: MiniGPT imports only {known} (the stock models it can express)"
        )
    stock = AutoModelForCausalLM.from_pretrained(
        str(name_or_path), dtype=torch.float32, **from_pretrained_kwargs
    )
    kwargs, weights = architecture.from_stock(stock.config, stock.state_dict())
    try:
        config = MiniGPTConfig(**kwargs)
    except ValueError as err:
        raise ExportError(f"{name_or_path}: {err}") from None
    model = MiniGPTForCausalLM(config)
    model.load_state_dict(weights, strict=True)
    model.generation_config = GenerationConfig.from_dict(stock.generation_config.to_dict())
    return model.eval()


__all__ = ["import_stock_model", "is_stock_model_dir"]
