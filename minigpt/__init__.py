"""MiniGPT: train small GPT language models from scratch, the Hugging Face way.

The package is laid out by pipeline stage, each importing only the stages below it:

    errors, atomic, distributed   leaf helpers every stage may use
    model/       MiniGPTConfig, MiniGPTForCausalLM (the remote-code pair)
    data/        settings -> sources -> tokenizer -> packing -> corpus -> compatibility
    export/      stock transformers architectures and GGUF, out and in
    hub/         store -> loading -> model_card, publishing
    training/    settings -> run_config -> callbacks, checkpoints, base_model -> trainer (run_training)
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
import time
from collections.abc import MutableMapping
from typing import Any

# On a machine other jobs already use, OpenMP threads that sleep rather than spin while they wait
# for work: a spinning thread takes the time slice the thread that has work needs (measured: a
# training step took 5.5 s instead of 0.44 s with two threads and a busy core). On idle cores
# spinning is what keeps steps fast (passive waiting cost the default run 40% of its tokens/s on an
# idle 2-core EPYC), so only a machine busy when MiniGPT is imported (more than a third of its CPU
# time in use over 0.1 s) gets passive waits. It must be set before torch loads OpenMP; a value of
# the user's own is kept. One this package set is marked, so a child process (the benchmark's
# default run and workers, any script started by a program that imported minigpt) decides again
# for itself, on the load it sees, rather than inherit its parent's decision as the user's.
BUSY_FRACTION = 0.35
OWN_WAIT_POLICY_MARK = "MINIGPT_SET_OMP_WAIT_POLICY"  # holds the value this package put in OMP_WAIT_POLICY


def _cpu_busy_fraction(interval: float = 0.1) -> float:
    """The share of all cores' time in use right now (Linux /proc/stat), else the load average's."""
    def times() -> tuple[int, int]:
        with open("/proc/stat") as stat:
            fields = [int(v) for v in stat.readline().split()[1:]]
        return sum(fields), fields[3] + fields[4]  # total, idle + iowait

    try:
        total0, idle0 = times()
        time.sleep(interval)
        total1, idle1 = times()
        return 1.0 - (idle1 - idle0) / max(1, total1 - total0)
    except (OSError, ValueError, IndexError):
        try:
            return os.getloadavg()[0] / (os.cpu_count() or 1)
        except OSError:
            return 0.0


def _drop_inherited_wait_policy(environ: MutableMapping[str, str]) -> None:
    """Remove an OMP_WAIT_POLICY that a parent's `import minigpt` set (and the user did not change)."""
    mark = environ.pop(OWN_WAIT_POLICY_MARK, None)
    if mark is not None and environ.get("OMP_WAIT_POLICY") == mark:
        del environ["OMP_WAIT_POLICY"]


if "torch" not in sys.modules:
    _drop_inherited_wait_policy(os.environ)
    if "OMP_WAIT_POLICY" not in os.environ and _cpu_busy_fraction() > BUSY_FRACTION:
        os.environ["OMP_WAIT_POLICY"] = os.environ[OWN_WAIT_POLICY_MARK] = "PASSIVE"

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
