"""Late dropout: the model's dropout off for the first passes over the training data, then on.

`training.dropout_start_epoch: E` keeps every `nn.Dropout` of the model at p = 0 until the run has
made E passes over its training split, then at the rate the model was built with
(`model.hidden_dropout` for MiniGPT). Dropout slows a small model's early learning and pays only
against overfitting, which begins once the data repeats ("late dropout", Liu et al. 2023, "Dropout
Reduces Underfitting"). The epoch is the Trainer's `state.epoch`, a function of the step, so a
resumed run switches at the same step, and a run that never repeats its data never drops out.
A module at p = 0 costs no random draws (torch's dropout returns its input), so the steps before
the switch are also a little cheaper, and their losses are those of a model built without dropout.
"""

from __future__ import annotations

from torch import nn
from transformers import TrainerCallback


class LateDropoutCallback(TrainerCallback):
    """Sets each dropout module of `model` to 0 before epoch `start_epoch` and back to its rate after."""

    def __init__(self, model: nn.Module, start_epoch: float) -> None:
        self.start_epoch = start_epoch
        # The rates the model was built with; modules already at 0 stay there.
        self.rates = {module: module.p for module in model.modules() if isinstance(module, nn.Dropout) and module.p > 0}

    def dropout_is_on(self, epoch: float | None) -> bool:
        # state.epoch is epochs done + the fraction of the current one; 1e-9 absorbs its rounding.
        return (epoch or 0.0) + 1e-9 >= self.start_epoch

    def on_step_begin(self, args, state, control, **kwargs) -> None:
        on = self.dropout_is_on(state.epoch)
        for module, rate in self.rates.items():
            module.p = rate if on else 0.0
