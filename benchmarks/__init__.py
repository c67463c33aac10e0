"""Speed and quality benchmarks behind `scripts/benchmark.py`, measured side by side in one run.

machine            what the numbers were measured on: CPU model and speed flags, the precision
                   bf16 auto picks, cores, threads, versions, load
spread             every repeat's value, median, min, max, quartiles; ratios repeat by repeat
gpt2_twin          the GPT-2 config of MiniGPT's shape that training and generation compare against
training_speed     per-step time of the training path, a plain PyTorch loop and GPT-2 under a
                   stock Trainer, each in its own worker process (worker.py)
generation_speed   KV-cached sampling, MiniGPT against GPT-2, batch 1 and 8
data_speed         corpus preparation against raw `tokenizers`
default_run        the default training run from nothing: wall time and validation bits/byte
quality            GPT-2 under a stock Trainer for the default run's training time: bits/byte of both
gpu_check          scripts/gpu_check.py: a lent GPU checked in minutes, one dated report (standard library)
gpt2_small_speed   GPT-2 small's speed and MFU as a run trains it and as its model step alone; the
                   GPU budget check
step_profile       every step timed, a few profiled, the profile by kind of kernel
"""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def child_env() -> dict[str, str]:
    """This process's environment with the repository first on PYTHONPATH, so a child started with
    `python -m benchmarks.<module>` finds this folder (it ships outside the wheel)."""
    paths = [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
