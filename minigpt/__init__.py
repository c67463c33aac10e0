"""MiniGPT: train small GPT language models from scratch, the Hugging Face way.

The package is laid out by pipeline stage, each importing only the stages below it:

    errors, atomic, distributed, cpu_load, cache_dir, console   leaf helpers every stage may use
    model/       MiniGPTConfig, MiniGPTForCausalLM, their options table (the remote code)
    data/        settings -> sources -> tokenizer -> packing, conversations -> corpus -> run_data (what training gets)
    export/      stock transformers architectures and GGUF, out and in
    hub/         store -> loading -> model_card, publishing
    generation/  sampling from a model (the CLI, the app and training's samples)
    chat/        session, terminal (talking to a model)
    training/    settings -> run_config -> callbacks, checkpoints, trainer -> run (run_training)
    evaluation   loss, perplexity and bits per byte of a trained model
    app/         the web app on the training API
    serving/     OpenAI-compatible servers on exports: transformers serve, llama.cpp (scripts/serve.py)

The names below are imported on first use, so `import minigpt` imports nothing heavy (no torch),
sleeps nowhere and changes nothing in the process or its environment; loading a run config never
imports torch; taking a model class (`minigpt.MiniGPTForCausalLM`, `minigpt.model.MiniGPTConfig`)
registers MiniGPT with transformers' Auto classes.
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


__all__ = [
    "MiniGPTConfig",
    "MiniGPTForCausalLM",
    "MiniGPTModel",
    "MiniGPTPreTrainedModel",
    "RunConfig",
    "StopController",
    "TrainingResult",
    "evaluate_model",
    "generate_samples",
    "load_model",
    "load_or_train_tokenizer",
    "load_run_config",
    "load_tokenizer",
    "prepare_corpus",
    "publish",
    "resolve_model",
    "run_training",
]
