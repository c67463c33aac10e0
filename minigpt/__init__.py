"""MiniGPT: train small GPT language models from scratch, the Hugging Face way.

The package is laid out by pipeline stage, each importing only the stages below it (see
tests/test_package_layout.py). The names below are imported on first use, so `import minigpt`
imports nothing heavy (no torch); taking a model class registers MiniGPT with transformers' Auto classes.
"""

from __future__ import annotations

import importlib
from typing import Any

# public name -> module that defines it
_LAZY_EXPORTS = {
    "MiniGPTConfig": "minigpt.model",
    "MiniGPTForCausalLM": "minigpt.model",
    "MiniGPTModel": "minigpt.model",
    "MiniGPTPreTrainedModel": "minigpt.model",
    "RunConfig": "minigpt.training.settings",
    "load_run_config": "minigpt.training.run_config",
    "StopController": "minigpt.training.interrupt",
    "run_training": "minigpt.pipeline",
    "TrainingResult": "minigpt.training.run",
    "prepare_corpus": "minigpt.data.corpus",
    "load_or_train_tokenizer": "minigpt.data.tokenizer",
    "publish": "minigpt.hub.publishing",
    "resolve_model": "minigpt.hub.loading",
    "load_model": "minigpt.hub.loading",
    "load_tokenizer": "minigpt.hub.loading",
    "generate_samples": "minigpt.generation",
    "evaluate_model": "minigpt.evaluation",
}

def __getattr__(name: str) -> Any:
    module = _LAZY_EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'minigpt' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY_EXPORTS])


__all__ = list(_LAZY_EXPORTS)
