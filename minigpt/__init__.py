"""MiniGPT: train small GPT language models from scratch, the Hugging Face way.

Importing the package registers MiniGPT with transformers' Auto classes, and marks the config
and model for `register_for_auto_class`, so `save_pretrained` writes `auto_map` and the model's
source files: a saved folder then loads with plain transformers and `trust_remote_code=True`.
"""

from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

from .configuration_minigpt import MiniGPTConfig
from .modeling_minigpt import MiniGPTForCausalLM, MiniGPTModel, MiniGPTPreTrainedModel

AutoConfig.register(MiniGPTConfig.model_type, MiniGPTConfig, exist_ok=True)
AutoModel.register(MiniGPTConfig, MiniGPTModel, exist_ok=True)
AutoModelForCausalLM.register(MiniGPTConfig, MiniGPTForCausalLM, exist_ok=True)
MiniGPTConfig.register_for_auto_class()
MiniGPTModel.register_for_auto_class("AutoModel")
MiniGPTForCausalLM.register_for_auto_class("AutoModelForCausalLM")

__all__ = ["MiniGPTConfig", "MiniGPTForCausalLM", "MiniGPTModel", "MiniGPTPreTrainedModel"]
