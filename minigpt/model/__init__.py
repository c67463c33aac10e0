"""The model stage: MiniGPTConfig and MiniGPTForCausalLM, a transformers model.

`configuration_minigpt.py` and `modeling_minigpt.py` import only torch, transformers, each other
and `architecture_minigpt.py` (the architecture options, standard library only), so
`save_pretrained` ships the three as remote code. Taking a class from this package
(`from minigpt.model import MiniGPTConfig`, or from `minigpt`) registers MiniGPT with transformers'
Auto classes and marks the classes for `register_for_auto_class`, so a saved folder carries
`auto_map` and the source files and loads with plain transformers and `trust_remote_code=True`.

The classes are imported on first use, not here: the run config reads `architecture_minigpt.py`
without torch or transformers, and importing any module of this package runs this file first.
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
    """Register MiniGPT with the Auto classes and for remote code (idempotent; done when a class is
    first taken from this package)."""
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


__all__ = [
    "MiniGPTConfig",
    "MiniGPTForCausalLM",
    "MiniGPTModel",
    "MiniGPTPreTrainedModel",
    "register_auto_classes",
]
