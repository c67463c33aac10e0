"""The model stage: MiniGPTConfig and MiniGPTForCausalLM, a transformers model.

`configuration_minigpt.py` and `modeling_minigpt.py` import only torch, transformers and each
other, so `save_pretrained` ships them as remote code. Importing this package registers MiniGPT
with transformers' Auto classes and marks the classes for `register_for_auto_class`, so a saved
folder carries `auto_map` and the two source files and loads with plain transformers and
`trust_remote_code=True`.
"""

from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

from .configuration_minigpt import MiniGPTConfig
from .modeling_minigpt import MiniGPTForCausalLM, MiniGPTModel, MiniGPTPreTrainedModel


def register_auto_classes() -> None:
    """Register MiniGPT with the Auto classes and for remote code (idempotent; done at import)."""
    AutoConfig.register(MiniGPTConfig.model_type, MiniGPTConfig, exist_ok=True)
    AutoModel.register(MiniGPTConfig, MiniGPTModel, exist_ok=True)
    AutoModelForCausalLM.register(MiniGPTConfig, MiniGPTForCausalLM, exist_ok=True)
    MiniGPTConfig.register_for_auto_class()
    MiniGPTModel.register_for_auto_class("AutoModel")
    MiniGPTForCausalLM.register_for_auto_class("AutoModelForCausalLM")


register_auto_classes()

__all__ = [
    "MiniGPTConfig",
    "MiniGPTForCausalLM",
    "MiniGPTModel",
    "MiniGPTPreTrainedModel",
    "register_auto_classes",
]
