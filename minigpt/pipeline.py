"""The whole job of `scripts/train.py` and the app's Train tab: the base model loaded when the config
names one (hub), the run trained (training), then its report (reporting)."""

from __future__ import annotations

from collections.abc import Sequence

from transformers import TrainerCallback

from .data.sources import Sources
from .distributed import is_main_process
from .hub.base_model import load_base
from .reporting.report import describe_result, report_after_training
from .training.interrupt import StopController
from .training.run import TrainingResult, train
from .training.settings import RunConfig


def run_training(
    run: RunConfig,
    callbacks: Sequence[TrainerCallback] = (),
    stop_controller: StopController | None = None,
    resume: bool = False,
    sources: Sources | None = None,
) -> TrainingResult:
    """Train as the run config says (`minigpt.training.run.train`'s arguments), then write loss.png and
    run.html and print the closing lines."""
    stop_controller = stop_controller or StopController()
    result = train(run, callbacks, stop_controller, resume, load_base=load_base, sources=sources)
    if is_main_process():
        closing = describe_result(result)
        result.page = report_after_training(result)
        if stop_controller.signum is None:  # a signal's one line has said what happened
            print(closing, flush=True)
            if result.page is not None:  # last: the one file to open
                print(f"run page: {result.page}", flush=True)
    return result
