"""Warmup-stable-decay, and a run that fits a wall-clock budget by planning its step count.

`training.lr_scheduler_type: warmup_stable_decay` is `WarmupStableDecay`: linear warmup, the peak
learning rate held, then a cosine decay to `min_learning_rate` over the last `decay_fraction` of the
run (Hägele et al. 2024, "Scaling Laws and Compute-Optimal Training Beyond Fixed Training Durations").
Because the decay is placed from the end, the length of the run can be decided late: with
`training.max_time`, `TimeBudgetCallback` times the first steps, plans how many fit in the budget
(never more than `max_steps`) and moves the end of the schedule there. It plans again every
`REPLAN_EVERY` steps from the pace of the steps since the last plan, to the end of the run: on a
shared machine whose speed changes mid-run, a plan made from the first minute would end the run
early (or late). Once the decay has begun, a new end keeps the learning rate where it is and
spreads the rest of the cosine over the steps left. The same recipe then fits a fast machine (all
of max_steps) and a slow one (fewer steps, still fully decayed).

The plan lives in the schedule object, which `LambdaLR` saves with its state in each checkpoint's
scheduler.pt, so a resumed run keeps the planned length and its learning rates exactly.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path

import torch
from transformers import TrainerCallback

# Steps timed before planning; the first ones (thread start-up, allocator warm-up) are left out.
SKIPPED_STEPS = 5
TIMED_STEPS = 20
REPLAN_EVERY = 100  # steps between plans, each from the pace of the steps since the previous one
# Planned steps leave this share of the remaining budget free for evaluation, saving and the
# noise of a shared machine: a run that plans too long overshoots its budget.
SAFETY_MARGIN = 0.05
clock = time.monotonic  # what the budget is measured with (a module attribute, so tests can set it)


class WarmupStableDecay:
    """Learning-rate multiplier at each step: warmup, stable, cosine decay over the last part.

    A callable object (not a function), so `LambdaLR.state_dict()` saves its attributes: the
    planned length `total_steps` is restored with the scheduler on resume.
    """

    def __init__(self, warmup_steps: int, total_steps: int, decay_fraction: float, min_ratio: float) -> None:
        self.warmup_steps = warmup_steps
        self.total_steps = total_steps
        self.decay_fraction = decay_fraction
        self.min_ratio = min_ratio
        self.planned = False  # True once a time budget fixed total_steps
        self.elapsed = 0.0  # seconds of the budget spent, as of the last step (saved with the plan)
        self.decay_from: float | None = None  # set once a plan moved the end during the decay

    @property
    def decay_start(self) -> float:
        if self.decay_from is not None:
            return self.decay_from
        return max(self.warmup_steps, self.total_steps - round(self.decay_fraction * self.total_steps))

    def move_end(self, step: int, total_steps: int) -> None:
        """End the schedule at `total_steps` (planned at `step`) without a jump in the learning rate.

        Before the decay the decay moves with the end; a new end whose decay would already have
        begun starts it at `step`. During the decay the cosine keeps the progress p it reached at
        `step` and runs the rest over the new steps left: the decay's start moves to d' with
        (step - d') / (total_steps - d') = p.
        """
        start = self.decay_start
        if step < start:
            self.total_steps = total_steps
            if self.decay_start < step:
                self.decay_from = float(step)
            return
        progress = min(1.0, (step - start) / max(1, self.total_steps - start))
        if progress < 1.0:
            self.decay_from = (step - progress * total_steps) / (1.0 - progress)
            self.total_steps = total_steps

    def __call__(self, step: int) -> float:
        if step < self.warmup_steps:
            return step / max(1, self.warmup_steps)
        if step < self.decay_start:
            return 1.0
        progress = min(1.0, (step - self.decay_start) / max(1, self.total_steps - self.decay_start))
        return self.min_ratio + (1.0 - self.min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


def plan_steps(
    max_time: float,
    elapsed: float,
    step_seconds: float,
    current_step: int,
    max_steps: int,
    overhead_steps: float,
) -> int:
    """The run's length: what fits in `max_time` at `step_seconds` a step, within [current_step, max_steps].

    `overhead_steps`: evaluation and saving still to come, in training-step equivalents.
    """
    remaining = (max_time - elapsed) * (1.0 - SAFETY_MARGIN)
    fitting = int(remaining / step_seconds - overhead_steps)
    return max(current_step + 1, min(max_steps, current_step + fitting))


class TimeBudgetCallback(TrainerCallback):
    """Plan the run's length from the measured step time and end it there (`training.max_time`).

    The budget counts from the start of training (tokenizer and data preparation, which happen
    before, are not in it); evaluation, sampling and checkpoints inside the loop are.
    """

    def __init__(
        self, schedule: WarmupStableDecay, max_time: float, eval_cost_steps: float, max_steps: int
    ) -> None:
        self.schedule = schedule
        self.max_time = max_time
        self.eval_cost_steps = eval_cost_steps  # one evaluation, in training-step equivalents
        self.started: float | None = None
        self.first_step: int | None = None  # the step this process started at (0, or a resume's)
        self.timing_from: tuple[int, float] | None = None  # (step, clock) the pace is measured from
        self.evaluation_seconds = 0.0  # evaluations since timing_from: planned apart, not in the pace
        self.max_steps = max_steps  # training.max_steps: the upper bound of every plan

    def on_train_begin(self, args, state, control, **kwargs) -> None:
        self.started = clock() - self.schedule.elapsed  # a resumed run spends what is left
        if self.schedule.planned:  # resumed after the plan: the checkpoint's scheduler holds it
            state.max_steps = self.schedule.total_steps

    def on_step_end(self, args, state, control, **kwargs) -> None:
        step = state.global_step
        self.schedule.elapsed = clock() - self.started
        if self.first_step is None:
            self.first_step = step - 1
        if step == self.first_step + SKIPPED_STEPS:
            self.timing_from = (step, clock())
        elif self.timing_from is not None and step - self.timing_from[0] == (
            REPLAN_EVERY if self.schedule.planned else TIMED_STEPS
        ):
            # The first plan after TIMED_STEPS, then one every REPLAN_EVERY steps, each from the
            # pace since the previous plan, to the end of the run.
            if step < self.schedule.total_steps or not self.schedule.planned:
                self._plan(state, step)
        if self.schedule.planned and step >= self.schedule.total_steps:
            control.should_training_stop = True
            control.should_evaluate = True
            control.should_save = True

    def on_evaluate(self, args, state, control, metrics=None, **kwargs) -> None:
        if self.timing_from is not None and metrics:
            self.evaluation_seconds += metrics.get("eval_runtime", 0.0)

    def _plan(self, state, step: int) -> None:
        start_step, start_time = self.timing_from
        now = clock()
        # Sampling and checkpoints stay in the pace; evaluations are counted in overhead_steps.
        step_seconds = max(now - start_time - self.evaluation_seconds, 1e-9) / (step - start_step)
        self.timing_from, self.evaluation_seconds = (step, now), 0.0
        planned = self.schedule.total_steps if self.schedule.planned else self.max_steps
        for _ in range(3):  # the evaluations still to come depend on the end, and the end on them
            evaluations_left = max(1, (planned - step) // max(1, state.eval_steps or planned) + 1)
            planned = plan_steps(
                self.max_time,
                now - self.started,
                step_seconds,
                step,
                self.max_steps,
                overhead_steps=evaluations_left * self.eval_cost_steps,
            )
        self.schedule.move_end(step, planned)
        self.schedule.planned = True
        state.max_steps = planned


def planned_end(checkpoint: str | os.PathLike) -> int | None:
    """The last step a time budget planned for the run, as `checkpoint`'s scheduler.pt holds it;
    None when no plan was made (no time budget, another schedule, or planned after this step)."""
    path = Path(checkpoint) / "scheduler.pt"
    if not path.is_file():
        return None
    try:  # LambdaLR saves each callable multiplier's attributes: plain numbers and flags
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception:  # unreadable here: the resume's own load says what is wrong
        return None
    for multiplier in state.get("lr_lambdas") or []:
        if isinstance(multiplier, dict) and multiplier.get("planned"):
            return int(multiplier["total_steps"])
    return None


__all__ = ["TimeBudgetCallback", "WarmupStableDecay", "plan_steps", "planned_end"]
