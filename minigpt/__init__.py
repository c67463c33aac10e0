"""MiniGPT: train small GPT language models from scratch, the Hugging Face way.

The package is laid out by pipeline stage, each importing only the stages below it:

    errors, atomic, distributed   leaf helpers every stage may use
    model/       MiniGPTConfig, MiniGPTForCausalLM (the remote-code pair)
    data/        settings -> sources -> tokenizer -> packing -> corpus -> compatibility
    training/    settings -> run_config -> callbacks, checkpoints -> trainer (run_training)
    hub/         store -> loading -> model_card, publishing
    generation, evaluation   using a trained model
    app/         the web app on the training API
    benchmarks/  speed and quality against GPT-2 and a plain loop (scripts/benchmark.py)

The names below are imported on first use, so `import minigpt` is cheap and loading a run config
never imports torch; importing the model (`minigpt.MiniGPTForCausalLM`, `minigpt.model`)
registers MiniGPT with transformers' Auto classes.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any


# On a machine other jobs already use, OpenMP threads that sleep rather than spin while they wait
# for work: a spinning thread takes the time slice the thread that has work needs (measured: a
# training step took 5.5 s instead of 0.44 s with two threads and a busy core). On idle cores
# spinning is what keeps steps fast (passive waiting cost the default run 40% of its tokens/s on an
# idle 2-core EPYC), so only a machine busy when MiniGPT is imported (more than a third of its cores
# on average over the last minute) gets passive waits. It must be set before torch loads OpenMP;
# a value of the user's own is kept.
def _machine_is_busy() -> bool:
    try:
        return os.getloadavg()[0] > 0.35 * (os.cpu_count() or 1)
    except OSError:  # no load average on this platform
        return False


if "torch" not in sys.modules and _machine_is_busy():
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# public name -> module that defines it
_LAZY_EXPORTS = {
    "MiniGPTConfig": "minigpt.model",
    "MiniGPTForCausalLM": "minigpt.model",
    "MiniGPTModel": "minigpt.model",
    "MiniGPTPreTrainedModel": "minigpt.model",
    "RunConfig": "minigpt.training.settings",
    "load_run_config": "minigpt.training.run_config",
    "StopController": "minigpt.training.interrupt",
    "run_training": "minigpt.training.trainer",
    "TrainingResult": "minigpt.training.trainer",
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
