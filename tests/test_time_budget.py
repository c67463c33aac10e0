"""warmup_stable_decay and `training.max_time`: the schedule, the plan, a run that fits its budget."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from minigpt.errors import ConfigError
from minigpt.training import time_budget
from minigpt.training.run import run_training
from minigpt.training.run_config import load_run_config
from minigpt.training.time_budget import SAFETY_MARGIN, WarmupStableDecay, plan_steps

REPO = Path(__file__).resolve().parent.parent
SMOKE = REPO / "configs" / "smoke.yaml"
QUIET = ["tokenizer.show_progress=false", "data.show_progress=false"]
# A slowdown right after a plan is seen at the next one: at most REPLAN_EVERY steps at the old pace
# (here 100 x 0.2 s more a step) overshoot the budget.
REPLAN_WINDOW_SLACK = time_budget.REPLAN_EVERY * 0.2


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


@pytest.mark.parametrize("new_end", [300, 180, 161])
def test_moving_the_end_during_the_decay_keeps_the_learning_rate_and_still_ends_at_the_floor(new_end):
    schedule = WarmupStableDecay(warmup_steps=10, total_steps=200, decay_fraction=0.3, min_ratio=0.1)
    step = 160  # two thirds of the way through the decay (140 -> 200)
    before = schedule(step)
    schedule.move_end(step, new_end)
    assert schedule(step) == pytest.approx(before, abs=1e-12)  # no jump
    after = [schedule(s) for s in range(step, new_end + 1)]
    assert all(a >= b for a, b in zip(after, after[1:], strict=False))  # still falling, never back up
    assert after[-1] == pytest.approx(0.1) and schedule.total_steps == new_end


def test_moving_the_end_before_the_decay_moves_the_decay_or_starts_it_now():
    schedule = WarmupStableDecay(warmup_steps=10, total_steps=1000, decay_fraction=0.3, min_ratio=0.1)
    schedule.move_end(100, 500)
    assert schedule.decay_start == 350 and schedule(349) == 1.0
    schedule.move_end(300, 320)  # the new end's decay (from 224) would have begun: it begins at 300
    assert schedule.decay_start == 300 and schedule(300) == 1.0 and schedule(320) == pytest.approx(0.1)


def drive_budget(
    monkeypatch, seconds_per_step, max_time: float, max_steps: int = 100_000, eval_steps=None, eval_cost=0.0
) -> tuple[int, float, list[float]]:
    """TimeBudgetCallback alone over a scripted clock: steps until it stops the run, the clock
    then, and the learning-rate multiplier of every step."""
    now = [0.0]
    monkeypatch.setattr(time_budget, "clock", lambda: now[0])
    schedule = WarmupStableDecay(warmup_steps=10, total_steps=max_steps, decay_fraction=0.3, min_ratio=0.1)
    callback = time_budget.TimeBudgetCallback(schedule, max_time, eval_cost_steps=eval_cost, max_steps=max_steps)
    state = SimpleNamespace(global_step=0, max_steps=max_steps, eval_steps=eval_steps)
    control = SimpleNamespace(should_training_stop=False, should_evaluate=False, should_save=False)
    callback.on_train_begin(None, state, control)
    multipliers = []
    while not control.should_training_stop:
        state.global_step += 1
        multipliers.append(schedule(state.global_step))
        now[0] += seconds_per_step(state.global_step)
        callback.on_step_end(None, state, control)
    return state.global_step, now[0], multipliers


def test_a_machine_that_speeds_up_mid_run_gets_the_steps_it_has_time_for(monkeypatch):
    # 0.2 s a step for 600 steps (120 s), then 0.1 s: the first plans say 950 steps; 80 s at the
    # new pace fit about 800 more. A plan that stopped at the decay would end the run near 100 s early.
    steps, seconds, multipliers = drive_budget(monkeypatch, lambda step: 0.2 if step <= 600 else 0.1, 200)
    assert 1300 <= steps and 190 <= seconds <= 200, (steps, seconds)
    assert multipliers[-1] == pytest.approx(0.1)  # fully decayed at the end
    jumps = [abs(a - b) for a, b in zip(multipliers[10:], multipliers[11:], strict=False)]
    assert max(jumps) < 0.01  # every re-plan kept the learning rate continuous


def test_a_machine_that_slows_down_in_the_decay_ends_near_its_budget(monkeypatch):
    # 0.1 s a step, then 0.3 s from step 1500 (inside the decay the first plans placed at 1330-1900).
    steps, seconds, multipliers = drive_budget(monkeypatch, lambda step: 0.1 if step < 1500 else 0.3, 200)
    assert seconds <= 200 + REPLAN_WINDOW_SLACK, (steps, seconds)
    assert steps < 1900 and multipliers[-1] == pytest.approx(0.1)


def test_a_short_budget_plans_for_the_evaluations_its_own_end_leaves_not_max_steps(monkeypatch):
    # 10 s at 0.05 s a step, an evaluation every 500 steps costing 20 steps, max_steps 3000: the
    # run ends long before step 500, so one evaluation (the final one) is to come, not six.
    steps, seconds, _ = drive_budget(monkeypatch, lambda step: 0.05, 10, max_steps=3000, eval_steps=500, eval_cost=20)
    with_final_evaluation = seconds + 20 * 0.05
    assert 9.0 <= with_final_evaluation <= 10, (steps, seconds)  # planned for six: 71 steps, 4.6 s
