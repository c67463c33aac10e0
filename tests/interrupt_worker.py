"""`scripts/train.py` with one stage made slow, so a test can press Ctrl-C inside it.

    python tests/interrupt_worker.py STAGE [train.py arguments ...]

STAGE is one of: `none` (train.py as it is: tokenizer training and training steps are slow enough
with the right settings), `map` (each `Dataset.map` batch of the tokenizing workers sleeps),
`packing` (packing waits before it starts), `evaluation` (each evaluation batch sleeps), `saving`
(the final model's save waits), `stuck` (packing waits and swallows the first Ctrl-C, as a call
that never returns would). A slowed stage prints `STAGE <name>` when it starts. Everything else is
the real code: the signal reaches the real handlers, staging folders and worker processes.
"""

from __future__ import annotations

import os
import runpy
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
_announced: set[str] = set()


def announce(stage: str) -> None:
    if stage not in _announced:
        _announced.add(stage)
        os.write(1, f"STAGE {stage}\n".encode())


def slow_map() -> None:
    from minigpt.data import corpus

    real = corpus.tokenize_batch

    def tokenize_batch(*args, **kwargs):  # runs in the map's worker processes
        announce("map")
        time.sleep(0.2)
        return real(*args, **kwargs)

    corpus.tokenize_batch = tokenize_batch


def slow_packing(swallow_first_interrupt: bool = False) -> None:
    from minigpt.data import corpus

    real = corpus.write_blocks

    def write_blocks(*args, **kwargs):
        announce("stuck" if swallow_first_interrupt else "packing")
        try:
            time.sleep(60)
        except KeyboardInterrupt:
            if not swallow_first_interrupt:
                raise
            time.sleep(60)  # stuck: only the guard's grace period or a second press ends it
        return real(*args, **kwargs)

    corpus.write_blocks = write_blocks


def slow_evaluation() -> None:
    from minigpt.training.trainer import MiniGPTTrainer  # Trainer's prediction_step, slowed below

    real = MiniGPTTrainer.prediction_step

    def prediction_step(self, *args, **kwargs):
        if self.state.global_step > 0:  # the evaluations inside training
            announce("evaluation")
            time.sleep(0.3)
        return real(self, *args, **kwargs)

    MiniGPTTrainer.prediction_step = prediction_step


def slow_saving() -> None:
    from transformers import PreTrainedModel

    real = PreTrainedModel.save_pretrained

    def save_pretrained(self, save_directory, *args, **kwargs):
        if Path(save_directory).name.startswith(".final."):  # the final model's staging folder
            announce("saving")
            time.sleep(60)
        return real(self, save_directory, *args, **kwargs)

    PreTrainedModel.save_pretrained = save_pretrained


STAGES = {
    "none": lambda: None,
    "map": slow_map,
    "packing": slow_packing,
    "stuck": lambda: slow_packing(swallow_first_interrupt=True),
    "evaluation": slow_evaluation,
    "saving": slow_saving,
}


if __name__ == "__main__":
    stage, *train_args = sys.argv[1:]
    STAGES[stage]()
    sys.argv = [str(REPO / "scripts" / "train.py"), *train_args]
    runpy.run_path(sys.argv[0], run_name="__main__")
