"""The model stage: MiniGPTConfig and MiniGPTForCausalLM, a transformers model.

Its three files import only torch, transformers and each other, so `save_pretrained` ships them as
remote code. Taking a class from this package registers MiniGPT with the Auto classes and for
`register_for_auto_class`, so a saved folder loads with plain transformers and `trust_remote_code=True`.
The classes are imported on first use: the run config reads `architecture_minigpt.py` without torch.
"""

from __future__ import annotations

import importlib
from typing import Any

# public name -> the module of this package that defines it
_LAZY_EXPORTS = {
    "MiniGPTConfig": "configuration_minigpt",
    "MiniGPTForCausalLM": "modeling_minigpt",
    "MiniGPTModel": "modeling_minigpt",
    "MiniGPTPreTrainedModel": "modeling_minigpt",
}


def register_auto_classes() -> None:
    """Register MiniGPT with the Auto classes and for remote code (idempotent)."""
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

    from .configuration_minigpt import MiniGPTConfig
    from .modeling_minigpt import MiniGPTForCausalLM, MiniGPTModel

    AutoConfig.register(MiniGPTConfig.model_type, MiniGPTConfig, exist_ok=True)
    AutoModel.register(MiniGPTConfig, MiniGPTModel, exist_ok=True)
    AutoModelForCausalLM.register(MiniGPTConfig, MiniGPTForCausalLM, exist_ok=True)
    MiniGPTConfig.register_for_auto_class()
    MiniGPTModel.register_for_auto_class("AutoModel")
    MiniGPTForCausalLM.register_for_auto_class("AutoModelForCausalLM")


def __getattr__(name: str) -> Any:
    module = _LAZY_EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    register_auto_classes()
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY_EXPORTS])
