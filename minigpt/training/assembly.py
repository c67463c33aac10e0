"""The run's Trainer put together: MiniGPTTrainer, its callbacks, MFU's peak and the training blocks.

`build_trainer` is where every piece a run config turns on joins the Trainer: the step timer and
throughput meter (MFU against `resolve_peak_flops`), metrics.jsonl, text samples, busy-core
watching, shifted training blocks, late dropout and the time budget of warmup_stable_decay.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import (
    PreTrainedModel,
    PreTrainedTokenizerBase,
    TrainerCallback,
    TrainingArguments,
    default_data_collator,
)
from transformers.trainer_callback import ProgressCallback

from ..chat.collator import ChatCollator
from ..data.training_blocks import TrainingBlocks
from .arguments import muon_kwargs
from .busy_cores import BusyCoresCallback
from .callbacks import (
    EpochOffsetCallback,
    LogLineProgressCallback,
    MetricsFileCallback,
    SampleTextCallback,
    StepTimerCallback,
)
from .hardware import tf32_matmuls, training_dtype
from .interrupt import StopController
from .late_dropout import LateDropoutCallback
from .parameter_layout import ParameterLayoutCallback
from .peak_flops import PeakFlops, resolve_peak_flops, store_peak_flops
from .run_folder import METRICS_FILE, SAMPLES_FILE
from .settings import RunConfig, effective_batch_size
from .throughput import ThroughputMeter, flops_per_token
from .time_budget import TimeBudgetCallback, WarmupStableDecay
from .trainer import MiniGPTTrainer


def build_trainer(
    run: RunConfig,
    args: TrainingArguments,
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    train_dataset: Any,
    eval_dataset: Any,
    token_bytes: torch.Tensor | None = None,
    validation_blocks: int | None = None,
    callbacks: Sequence[TrainerCallback] = (),
    stop_controller: StopController | None = None,
    max_threads: int | None = None,
) -> MiniGPTTrainer:
    """The run's Trainer, with MiniGPT's callbacks: step timer, log lines, metrics.jsonl, samples.

    `eval_dataset`: the validation blocks every evaluation reads (`validation_sample`), of
    `validation_blocks` in the split (said in each evaluation's record). `token_bytes`: UTF-8 bytes
    per token id (`minigpt.data.token_bytes`), for bits per byte; None: none is reported.
    `max_threads`: the cores a run with a chosen thread count may use (`cpu_run_settings`).
    """
    output_dir = Path(run.training.output_dir)
    tokens_per_step = effective_batch_size(run.hardware, args.world_size) * run.data.block_size
    dtype = training_dtype(run.hardware)
    with args.main_process_first(desc="peak FLOP/s"):  # one process measures, the others read the cache
        peak = resolve_peak_flops(run.hardware.peak_flops, args.device, dtype, tf32=tf32_matmuls(run.hardware))
    meter = ThroughputMeter(
        tokens_per_step=tokens_per_step,
        flops_per_token=flops_per_token(model, model.config, run.data.block_size),
        peak_flops=peak.flops,
        num_devices=args.world_size,
    )
    meter.on_peak_raised = PeakRaisedNotice(peak, args.device, dtype, say=args.should_save)
    own_callbacks: list[TrainerCallback] = [
        StepTimerCallback(meter),  # first, so sampling at step end is not timed as training
        MetricsFileCallback(
            output_dir / METRICS_FILE,
            segment={"hardware": dataclasses.asdict(run.hardware), "threads": torch.get_num_threads()},
        ),
        SampleTextCallback(
            tokenizer,
            prompts=run.training.sample_prompts,
            path=output_dir / SAMPLES_FILE,
            every=run.training.sample_steps,
            max_new_tokens=run.training.sample_max_new_tokens,
            temperature=run.training.sample_temperature,
            top_k=run.training.sample_top_k,
            seed=run.training.seed,
            stop_controller=stop_controller,
        ),
    ]
    if args.world_size > 1:  # whole copies or shards: the run says which
        own_callbacks.append(ParameterLayoutCallback())
    if args.device.type == "cpu" and (torch.get_num_threads() > 1 or (max_threads or 0) > 1):
        # One thread cannot stall this way; a thread count the run chose moves with the free cores.
        # MFU is an absolute expectation only against a peak measured on quiet cores (or given).
        own_callbacks.append(
            BusyCoresCallback(
                adapt=max_threads is not None,
                max_threads=max_threads,
                peak_threads=torch.get_num_threads() if peak.trusted else None,
            )
        )
    if TrainingBlocks.readable(train_dataset):  # packed blocks: read zero-copy, maybe shifted
        train_dataset = TrainingBlocks(train_dataset, seed=run.training.seed, shift=run.data.shift_blocks)
        if run.data.shift_blocks:  # each epoch's windows from another offset in the token stream
            own_callbacks.append(EpochOffsetCallback(train_dataset))
    if run.training.dropout_start_epoch > 0:
        own_callbacks.append(LateDropoutCallback(model, run.training.dropout_start_epoch))
    schedule = None
    if run.training.lr_scheduler_type == "warmup_stable_decay":
        t = run.training
        schedule = WarmupStableDecay(
            t.warmup_steps, t.max_steps, t.decay_fraction, t.min_learning_rate / t.learning_rate
        )
        if t.max_time is not None:
            own_callbacks.append(
                TimeBudgetCallback(schedule, t.max_time, evaluation_cost_steps(run, eval_dataset), t.max_steps)
            )
    trainer = MiniGPTTrainer(
        model=model,
        args=args,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        processing_class=tokenizer,
        data_collator=_collator(run, tokenizer),
        callbacks=[*own_callbacks, *callbacks],
        resolved_config=run.to_dict(),
        stop_controller=stop_controller,
        decay_embeddings=run.training.decay_embeddings,
        muon_kwargs=muon_kwargs(run.training),
        throughput=meter,
        token_bytes=token_bytes,
        validation_blocks=validation_blocks,
        schedule=schedule,
    )
    trainer.peak_flops = peak  # what MFU divides by, and where it came from (the run's first lines say)
    trainer.remove_callback(ProgressCallback)
    trainer.add_callback(LogLineProgressCallback(stop_controller))
    return trainer


def _collator(run: RunConfig, tokenizer: PreTrainedTokenizerBase) -> Any:
    """Conversations are padded to the batch's longest; blocks are equal length: stacked, no mask."""
    if run.data.format == "chat":
        return ChatCollator(tokenizer.pad_token_id)
    return default_data_collator


class PeakRaisedNotice:
    """What happens when training beats the peak MFU divides by (`ThroughputMeter.on_peak_raised`).

    The meter then counts against the rate reached; this says so once, and caches that rate when
    the peak was a measured one (a rate training reached is a lower bound of the machine's peak),
    so the next run starts from it. Nothing is measured again.
    """

    def __init__(self, peak: PeakFlops, device: torch.device, dtype: torch.dtype, say: bool = True) -> None:
        self.peak, self.device, self.dtype, self.say = peak, device, dtype, say
        self.said = False

    def __call__(self, old_peak: float, achieved: float) -> None:
        if self.peak.measured and self.say:
            store_peak_flops(self.device, self.dtype, achieved, how="a rate training reached")
        if self.say and not self.said:
            self.said = True
            print(
                f"MFU: training reached {achieved:.3g} FLOP/s, above the peak of {old_peak:.3g} "
                f"({self.peak.source}); MFU counts against the rate reached from here",
                file=sys.stderr,
                flush=True,
            )


def evaluation_cost_steps(run: RunConfig, eval_dataset: Any) -> float:
    """One evaluation in training-step equivalents: its forward passes over the blocks it reads
    against a step's forward and backward (about 3 forwards) over a training batch."""
    hardware = run.hardware
    train_blocks = hardware.per_device_train_batch_size * hardware.gradient_accumulation_steps
    return len(eval_dataset) / (3.0 * train_blocks) if eval_dataset is not None else 0.0


__all__ = ["PeakRaisedNotice", "build_trainer", "evaluation_cost_steps"]
