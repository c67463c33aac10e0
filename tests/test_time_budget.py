"""warmup_stable_decay and `training.max_time`: the schedule, the plan, a run that fits its budget."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from minigpt.errors import ConfigError
from minigpt.training import time_budget
from minigpt.training.run_config import load_run_config
from minigpt.training.time_budget import SAFETY_MARGIN, WarmupStableDecay, plan_steps
from minigpt.training.trainer import run_training

REPO = Path(__file__).resolve().parent.parent
SMOKE = REPO / "configs" / "smoke.yaml"
QUIET = ["tokenizer.show_progress=false", "data.show_progress=false"]


def test_schedule_warms_up_holds_then_decays_to_the_floor_over_the_last_fraction():
    schedule = WarmupStableDecay(warmup_steps=10, total_steps=100, decay_fraction=0.3, min_ratio=0.1)
    assert schedule(0) == 0.0 and schedule(5) == 0.5 and schedule(10) == 1.0
    assert schedule.decay_start == 70 and schedule(69) == 1.0
    assert schedule(85) == pytest.approx(0.1 + 0.9 * 0.5)  # halfway through the cosine
    assert schedule(100) == pytest.approx(0.1) and schedule(150) == pytest.approx(0.1)
    schedule.total_steps = 50  # a plan moves the end, and the decay with it
    assert schedule.decay_start == 35 and schedule(50) == pytest.approx(0.1)


def test_the_plan_is_saved_and_restored_with_the_scheduler():
    weights = torch.nn.Parameter(torch.zeros(2))
    optimizer = torch.optim.SGD([weights], lr=1.0)
    planned = WarmupStableDecay(10, 1000, 0.3, 0.1)
    planned.total_steps, planned.planned = 120, True
    state = torch.optim.lr_scheduler.LambdaLR(optimizer, planned).state_dict()
    fresh = WarmupStableDecay(10, 1000, 0.3, 0.1)
    torch.optim.lr_scheduler.LambdaLR(optimizer, fresh).load_state_dict(state)
    assert (fresh.total_steps, fresh.planned) == (120, True)


def test_plan_fits_the_remaining_time_within_max_steps():
    # 100 s budget, 10 s gone, 0.1 s a step, 50 steps of evaluation still to come.
    fits = int(90 * (1 - SAFETY_MARGIN) / 0.1 - 50)
    assert plan_steps(100, 10, 0.1, 30, 10_000, 50) == 30 + fits
    assert plan_steps(100, 10, 0.1, 30, 500, 50) == 500  # a fast machine runs all of max_steps
    assert plan_steps(100, 99.9, 0.1, 30, 10_000, 50) == 31  # out of time: end at the next step


def test_max_time_needs_the_schedule_whose_decay_is_placed_from_the_end():
    with pytest.raises(
        ConfigError, match="training.max_time needs training.lr_scheduler_type=warmup_stable_decay"
    ):
        load_run_config(SMOKE, ["training.max_time=10"])
    with pytest.raises(ConfigError, match="training.decay_fraction"):
        load_run_config(SMOKE, ["training.decay_fraction=0"])


def test_a_run_with_a_time_budget_ends_at_the_planned_step_fully_decayed(tmp_path, monkeypatch):
    # A clock that advances 0.1 s each time the budget reads it (about once a step): 0.1 s a step
    # on any machine, so about 250 steps fit in the 30 s budget, less the evaluation's cost (~80
    # steps of this tiny model).
    ticks = iter(range(10**9))
    monkeypatch.setattr(time_budget, "clock", lambda: 0.1 * next(ticks))
    output_dir = tmp_path / "run"
    overrides = [
        f"training.output_dir={output_dir}",
        f"tokenizer.path={tmp_path / 'tokenizer'}",
        f"data.cache_dir={tmp_path / 'cache'}",
        *QUIET,
        "training.max_steps=100000",  # far more than fits: the budget decides
        "training.max_time=30",
        "training.lr_scheduler_type=warmup_stable_decay",
        "training.eval_steps=100000",
        "training.save_steps=100000",
        "training.sample_steps=0",
        "training.logging_steps=1",
    ]
    result = run_training(load_run_config(SMOKE, overrides))
    summary = json.loads((output_dir / "summary.json").read_text())
    steps = summary["global_step"]
    assert 25 + 100 <= steps <= 25 + int(27 * (1 - SAFETY_MARGIN) / 0.1), steps
    records = [json.loads(line) for line in (output_dir / "metrics.jsonl").read_text().splitlines()]
    last_lr = [r["learning_rate"] for r in records if "learning_rate" in r][-1]
    assert last_lr == pytest.approx(3e-4, rel=0.05)  # min_learning_rate: the decay finished
    assert any("eval_loss" in r and r["step"] == steps for r in records)  # evaluated at the end
    scheduler = torch.load(result.output_dir / f"checkpoint-{steps}" / "scheduler.pt", weights_only=False)
    plan = scheduler["lr_lambdas"][0]
    assert plan["total_steps"] == steps and plan["planned"] and 0.1 * steps <= plan["elapsed"] <= 30
    assert math.isfinite(summary["eval_bpb"])


def test_the_planned_end_is_read_back_from_a_checkpoints_scheduler(tmp_path):
    from minigpt.training.time_budget import planned_end

    schedule = WarmupStableDecay(warmup_steps=10, total_steps=3000, decay_fraction=0.3, min_ratio=0.1)
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    checkpoint = tmp_path / "checkpoint-40"
    checkpoint.mkdir()
    torch.save(scheduler.state_dict(), checkpoint / "scheduler.pt")
    assert planned_end(checkpoint) is None  # saved before any plan: the run ends at max_steps
    schedule.total_steps, schedule.planned = 1685, True
    torch.save(scheduler.state_dict(), checkpoint / "scheduler.pt")
    assert planned_end(checkpoint) == 1685
    (checkpoint / "scheduler.pt").write_bytes(b"not a torch file")
    assert planned_end(checkpoint) is None
    assert planned_end(tmp_path / "missing") is None
