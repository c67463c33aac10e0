"""training.dropout_start_epoch: the model's dropout off for the first epochs, then at its rate, resuming exactly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from conftest import REPO_ROOT, small_run, tiny_model, write_small_corpus
from safetensors.torch import load_file
from torch import nn
from transformers import TrainerCallback, TrainerState

from minigpt.errors import ConfigError
from minigpt.training.interrupt import StopController
from minigpt.training.late_dropout import LateDropoutCallback
from minigpt.training.run import run_training
from minigpt.training.run_config import load_run_config


@pytest.mark.parametrize(
    ("epoch", "on"), [(None, False), (0.0, False), (1.999, False), (2.0 - 1e-12, True), (2.0, True), (5.5, True)]
)
def test_every_dropout_is_off_before_the_start_epoch_and_at_its_own_rate_from_it(epoch, on):
    model = tiny_model(hidden_dropout=0.1)
    model.extra = nn.Sequential(nn.Dropout(0.3), nn.Dropout(0.0))  # any nn.Dropout, not only MiniGPT's
    dropouts = [module for module in model.modules() if isinstance(module, nn.Dropout)]
    built = [module.p for module in dropouts]
    assert built.count(0.1) == 1 + 2 * model.config.num_hidden_layers  # embeddings, and two per block
    callback = LateDropoutCallback(model, start_epoch=2.0)
    state = TrainerState()
    state.epoch = epoch
    callback.on_step_begin(None, state, None)
    assert [module.p for module in dropouts] == (built if on else [0.0] * len(built))
    state.epoch = 0.0 if on else 3.0  # and it switches back and forth with the epoch (a resume)
    callback.on_step_begin(None, state, None)
    assert [module.p for module in dropouts] == ([0.0] * len(built) if on else built)


def test_a_negative_start_epoch_is_a_config_error():
    with pytest.raises(ConfigError, match="training.dropout_start_epoch"):
        load_run_config(str(REPO_ROOT / "configs" / "smoke.yaml"), ["training.dropout_start_epoch=-1"])


class StopAt(TrainerCallback):
    def __init__(self, stop: StopController, step: int) -> None:
        self.stop, self.step = stop, step

    def on_step_end(self, args, state, control, **kwargs) -> None:
        if state.global_step == self.step:
            self.stop.request_stop()


def step_losses(folder: Path) -> list[float]:
    records = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    return [record["loss"] for record in records if "loss" in record]


def test_a_run_trains_without_dropout_until_the_start_epoch_then_with_it_and_resumes_exactly(tmp_path, monkeypatch):
    """The small corpus gives 3 steps an epoch: epoch 2 starts at step 7. Until then the run's losses
    are those of a run built without dropout, bit for bit (no masks, no random draws); from step 7
    they leave it. A run stopped at step 5 and resumed switches at the same step and ends on the
    same weights."""
    monkeypatch.chdir(REPO_ROOT)
    corpus = write_small_corpus(tmp_path)
    late = ("model.hidden_dropout=0.2", "training.dropout_start_epoch=2")
    run_training(small_run(tmp_path / "late", corpus, *late))
    run_training(small_run(tmp_path / "never", corpus, "model.hidden_dropout=0"))
    late_losses, never_losses = step_losses(tmp_path / "late"), step_losses(tmp_path / "never")
    assert len(late_losses) == len(never_losses) == 14
    assert late_losses[:6] == never_losses[:6]
    assert all(a != b for a, b in zip(late_losses[6:], never_losses[6:], strict=True))

    stop = StopController()
    stopped = run_training(
        small_run(tmp_path / "resumed", corpus, *late), callbacks=[StopAt(stop, 5)], stop_controller=stop
    )
    assert stopped.stopped
    run_training(small_run(tmp_path / "resumed", corpus, *late), resume=True)
    assert step_losses(tmp_path / "resumed") == late_losses
    final = load_file(tmp_path / "resumed" / "final" / "model.safetensors")
    expected = load_file(tmp_path / "late" / "final" / "model.safetensors")
    for name in expected:
        assert torch.equal(final[name], expected[name]), f"{name} differs after stop and resume"
