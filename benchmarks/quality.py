"""Quality at equal wall-clock: the default run against GPT-2 under a stock Trainer given its time.

The default run (`default_run.py`: `scripts/train.py CONFIG` from nothing) sets the budget: the
seconds its `Trainer.train()` took (`train_runtime`: steps, and its periodic evaluations, samples
and checkpoints; not imports, tokenizer training, data preparation or the final save). GPT-2 of
the same size (`gpt2_twin`) then trains in its own worker process (`worker.py`) under a stock
`Trainer` with a good recipe (`GPT2Recipe`) on the same blocks, with the same tokenizer, CPU settings
and precision rule, until `TimeLimitCallback` spends that budget; both are scored the same way on
the same validation blocks: the Trainer's mean token loss, and bits per UTF-8 byte from the per-block
sums of `minigpt.data.token_bytes` (the loss of the tokens that encode text over their bytes).

A cosine schedule needs its length up front, and one sized by a huge `max_steps` would never
decay: an untimed calibration run first measures GPT-2's seconds per step, `max_steps` is the
number of steps that fit the budget, and the time limit stops the run should the steps be slower.
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from benchmarks import child_env
from minigpt.training.settings import RunConfig


@dataclass
class GPT2Recipe:
    """How GPT-2 trains under the stock Trainer: AdamW (the Trainer's default), linear warmup, cosine."""

    learning_rate: float = 2e-3  # peak learning rate
    lr_scheduler_type: str = "cosine"  # the Trainer's cosine, to zero at max_steps
    warmup_steps: int = 100  # linear warmup (at most half the planned steps)
    weight_decay: float = 0.1  # AdamW decay (the Trainer: all but biases and LayerNorm)
    calibration_steps: int = 30  # untimed steps that measure seconds per step, to size the schedule


class TimeLimitCallback(TrainerCallback):
    """Stops training at the first step end at least `seconds` after training began; records when
    each step ended (seconds since the start)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.started: float | None = None
        self.step_ends: list[float] = []
        self.stopped_by_time = False

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        self.started = time.perf_counter()

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> TrainerControl:
        assert self.started is not None, "on_step_end before on_train_begin"
        self.step_ends.append(time.perf_counter() - self.started)
        if self.step_ends[-1] >= self.seconds:
            control.should_training_stop = True
            self.stopped_by_time = True
        return control

    @property
    def elapsed(self) -> float:
        """Seconds from the start of training to the end of its last step."""
        return self.step_ends[-1] if self.step_ends else 0.0


def seconds_per_step(step_ends: list[float]) -> float:
    """Median step time from step end times, the first third (warm-up) left out."""
    if len(step_ends) < 2:
        raise ValueError("seconds_per_step needs at least two steps")
    skip = max(1, len(step_ends) // 3)
    return statistics.median(b - a for a, b in zip(step_ends[skip - 1 :], step_ends[skip:], strict=False))


def gpt2_at_budget(run: RunConfig, seconds: float, recipe: GPT2Recipe | None = None) -> dict[str, Any]:
    """Train GPT-2 of the run's size on the run's blocks for `seconds` of `Trainer.train()`, then
    score it on the validation blocks; the run's CPU settings must already be applied."""
    import datasets
    import torch
    from transformers import AutoModelForCausalLM, Trainer, default_data_collator, set_seed

    from benchmarks.contenders import block_array, load_blocks
    from benchmarks.gpt2_twin import gpt2_twin_config
    from minigpt.data.token_bytes import bits_per_byte, block_targets, next_token_scores, token_byte_lengths
    from minigpt.training.hardware import resolve_hardware

    recipe = recipe or GPT2Recipe()
    tokenizer, corpus = load_blocks(run)
    train_rows = block_array(corpus).tolist()
    validation_rows = corpus.validation.with_format("numpy")[:]["input_ids"].tolist()
    train_dataset = datasets.Dataset.from_dict({"input_ids": train_rows, "labels": train_rows})
    validation = datasets.Dataset.from_dict({"input_ids": validation_rows, "labels": validation_rows})
    hardware = resolve_hardware(run.hardware)  # bf16 auto and attention: the rule the default run follows
    output_dir = Path(run.training.output_dir)

    def trainer_for(max_steps: int, clock: TimeLimitCallback) -> Trainer:
        set_seed(run.training.seed)
        config = gpt2_twin_config(run.model, len(tokenizer), tokenizer.eos_token_id)
        model = AutoModelForCausalLM.from_config(config, attn_implementation=hardware.attn_implementation)
        args = TrainingArguments(
            output_dir=str(output_dir),
            max_steps=max_steps,
            per_device_train_batch_size=hardware.per_device_train_batch_size,
            per_device_eval_batch_size=hardware.per_device_eval_batch_size,
            learning_rate=recipe.learning_rate,
            lr_scheduler_type=recipe.lr_scheduler_type,
            warmup_steps=min(recipe.warmup_steps, max_steps // 2),
            weight_decay=recipe.weight_decay,
            bf16=bool(hardware.bf16),
            use_cpu=True,
            seed=run.training.seed,
            eval_strategy="no",
            save_strategy="no",
            logging_strategy="no",
            report_to="none",
            disable_tqdm=True,
            dataloader_num_workers=0,
        )
        return Trainer(
            model=model,
            args=args,
            train_dataset=train_dataset,
            data_collator=default_data_collator,
            callbacks=[clock],
        )

    calibration = TimeLimitCallback(math.inf)
    trainer_for(max(2, recipe.calibration_steps), calibration).train()
    step_s = seconds_per_step(calibration.step_ends)
    planned = max(1, int(seconds / step_s))
    limit = TimeLimitCallback(seconds)
    trainer = trainer_for(planned, limit)
    train_runtime = trainer.train().metrics["train_runtime"]
    token_bytes = torch.as_tensor(token_byte_lengths(tokenizer))
    # The stock Trainer's hook turns each batch's logits into per-block sums, as the default run's eval.
    trainer.preprocess_logits_for_metrics = lambda logits, labels: next_token_scores(
        logits, block_targets(labels), token_bytes
    )
    scored = trainer.predict(validation)  # mean token loss, and the per-block sums
    eval_loss = scored.metrics["test_loss"]
    return {
        "budget_s": seconds,
        "train_s": limit.elapsed,  # from the start of training to the end of its last step
        "train_runtime_s": train_runtime,  # the Trainer's own, as the default run's budget
        "steps": trainer.state.global_step,
        "planned_steps": planned,
        "stopped_by_time": limit.stopped_by_time,
        "calibration_s_per_step": step_s,
        "eval_loss": eval_loss,
        "eval_bpb": bits_per_byte(scored.predictions),
        "precision": "bf16" if hardware.bf16 else "fp32",
        "attention": hardware.attn_implementation,
        "batch": hardware.per_device_train_batch_size,
        "block_size": corpus.block_size,
        "recipe": {**dataclasses.asdict(recipe), "optim": str(trainer.args.optim.value)},  # the Trainer's default
    }


def compare_quality(
    config: Path,
    default_run: dict[str, Any],
    workdir: Path,
    overrides: list[str] | None = None,
    seconds: float | None = None,
) -> dict[str, Any]:
    """GPT-2 under a stock Trainer for the default run's training time (or `seconds`), in a worker
    process, on the default run's tokenizer and blocks; both runs' validation bits/byte."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    budget = float(seconds if seconds is not None else default_run["train_runtime_s"])
    child_overrides = [
        *(overrides or []),
        f"tokenizer.path={default_run['tokenizer_path']}",
        f"data.cache_dir={default_run['data_cache_dir']}",
        f"training.output_dir={workdir / 'gpt2-trainer'}",
    ]
    spec = {"contender": "gpt2_quality", "config": str(config), "overrides": child_overrides, "seconds": budget}
    log_path = workdir / "worker-gpt2-quality.log"
    with log_path.open("w") as log:
        result = subprocess.run(
            [sys.executable, "-m", "benchmarks.worker", json.dumps(spec)],
            env=child_env(),
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
        )
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines:
        tail = log_path.read_text()[-3000:]
        raise RuntimeError(f"the GPT-2 quality worker failed (exit {result.returncode}); the end of {log_path}:\n{tail}")
    gpt2 = json.loads(lines[-1])
    return {
        "budget_s": budget,
        "budget_from": "--quality-seconds" if seconds is not None else "default run's train_runtime",
        "default_run": {
            "eval_bpb": default_run["eval_bpb"],
            "train_runtime_s": default_run["train_runtime_s"],
            "steps": default_run["global_step"],
        },
        "gpt2_trainer": gpt2,
        "gpt2_minus_default_bpb": gpt2["eval_bpb"] - default_run["eval_bpb"],
    }


__all__ = ["GPT2Recipe", "TimeLimitCallback", "compare_quality", "gpt2_at_budget", "seconds_per_step"]
