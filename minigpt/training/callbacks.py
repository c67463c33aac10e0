"""TrainerCallbacks of a MiniGPT run: log lines, metrics.jsonl, text samples, stops, each epoch's
block offset, what each process holds. Plain `TrainerCallback`s: a UI passes its own the same way.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FSDPModule
from torch.distributed.tensor import DTensor
from tqdm.auto import tqdm
from transformers import PreTrainedTokenizerBase, TrainerCallback, TrainerState, TrainingArguments
from transformers.trainer_callback import ProgressCallback

from ..atomic import atomic_write_file
from ..run_layout import format_sample
from .interrupt import StopController


class EpochCallback(TrainerCallback):
    """Tells the training data each epoch as it begins, in every process (`RunData.start_epoch`).
    Accelerate's `set_epoch` does not reach the dataset through a distributed sampler."""

    def __init__(self, start_epoch: Callable[[int], None]) -> None:
        self.start_epoch = start_epoch

    def on_epoch_begin(self, args, state, control, **kwargs) -> None:
        self.start_epoch(math.floor((state.epoch or 0.0) + 1e-9))  # a fraction on resume


class MaxTimeCallback(TrainerCallback):
    """`training.max_time`: save and end at the first step past that many seconds of this `train()`
    call (undecayed). Says once, at the first log interval, when fewer steps than the warmup fit."""

    def __init__(self, max_time: float, warmup_steps: int, say: bool) -> None:
        self.max_time, self.warmup_steps, self.say = max_time, warmup_steps, say
        self.started: float | None = None
        self.first_step, self.estimated = 0, False

    def on_train_begin(self, args, state, control, **kwargs) -> None:
        self.started, self.first_step = time.perf_counter(), state.global_step

    def on_step_end(self, args, state, control, **kwargs) -> None:
        elapsed = time.perf_counter() - (self.started or time.perf_counter())
        steps = state.global_step - self.first_step
        if not self.estimated and steps >= args.logging_steps and elapsed > 0:
            self.estimated = True
            fit = int(self.first_step + steps * self.max_time / elapsed)
            if fit < min(self.warmup_steps, state.max_steps) and self.say:
                print(f"training.max_time={self.max_time:g} fits about {fit} steps, fewer than training.warmup_steps="
                      f"{self.warmup_steps}: the learning rate never reaches its peak", file=sys.stderr, flush=True)
        if _max_over_processes([int(elapsed >= self.max_time)], args)[0]:  # every process ends at one step
            control.should_save = control.should_training_stop = True


class ParameterLayoutCallback(TrainerCallback):
    """Says, as training starts, whether each process holds a whole copy (DDP) or a shard (FSDP2)."""

    def on_train_begin(self, args, state, control, model=None, **kwargs) -> None:
        if args.world_size == 1 or model is None:
            return
        # FSDP2's parameters are DTensors: a process holds `to_local()`; numel is the whole parameter's.
        params = list(model.parameters())  # a tied weight once
        held = sum(p.to_local().numel() if isinstance(p, DTensor) else p.numel() for p in params)
        sharded = any(isinstance(p, DTensor) and any(pl.is_shard() for pl in p.placements) for p in params)
        everyone: list[tuple[int, bool] | None] = [None] * args.world_size
        dist.all_gather_object(everyone, (held, sharded))  # every process takes part
        if state.is_world_process_zero:
            total, counts = sum(p.numel() for p in params), [count for count, _ in everyone]
            if any(s for _, s in everyone):
                shares = " + ".join(f"{count:,}" for count in counts)
                line = f"parameters: sharded over {len(counts)} processes (FSDP2): {shares} of {total:,}, one shard on each"
            else:
                line = f"parameters: a whole copy on each of {len(counts)} processes ({total:,} each)"
            print(line, flush=True)


# How a log line shows each figure of a record, in order.
TRAINING_PARTS = (
    ("learning_rate", lambda v: f"lr {v:.2e}"), ("grad_norm", lambda v: f"grad norm {v:.3f}"),
    ("tokens_per_second", lambda v: f"{v:,.0f} tok/s"), ("mfu", lambda v: f"MFU {100 * v:.1f}%"),
    ("tokens_seen", lambda v: f"{format_count(v)} tokens"),
)
EVALUATION_PARTS = (("eval_perplexity", lambda v: f"ppl {v:.2f}"), ("eval_bpb", lambda v: f"bits/byte {v:.4f}"))


def format_log_line(logs: dict[str, Any], step: int, max_steps: int) -> str | None:
    """One line for a training or evaluation log record (None for other records)."""
    if "loss" in logs:
        parts = [f"step {step}/{max_steps}", f"loss {logs['loss']:.4f}"]
        parts += [show(logs[key]) for key, show in TRAINING_PARTS if logs.get(key) is not None]
    elif "eval_loss" in logs:
        parts = [f"eval step {step}", f"val loss {logs['eval_loss']:.4f}"]
        parts += [show(logs[key]) for key, show in EVALUATION_PARTS if logs.get(key) is not None]
        if logs.get("eval_blocks", 0) < logs.get("validation_blocks", 0):  # a sample (training.eval_tokens)
            parts.append(f"sample of {logs['eval_blocks']:,}/{logs['validation_blocks']:,} blocks")
    else:
        return None
    return " | ".join(parts)


def format_count(n: float) -> str:
    """4000 -> "4.0k", 1234567 -> "1.23M"."""
    for scale, suffix, digits in ((1e9, "B", 2), (1e6, "M", 2), (1e3, "k", 1)):
        if abs(n) >= scale:
            return f"{n / scale:.{digits}f}{suffix}"
    return f"{n:.0f}"


class LogLineProgressCallback(ProgressCallback):
    """Trainer's progress bars in a terminal with each log record as a line above them; to a file or
    a pipe the lines alone. Silent once a stop is requested: the stop's own line is the last."""

    def __init__(self, stop_controller: StopController | None = None, bars: bool | None = None) -> None:
        super().__init__()
        self.stop_controller = stop_controller
        if not (sys.stderr.isatty() if bars is None else bars):  # no bar: the events that draw one do nothing
            for event in ("on_train_begin", "on_prediction_step", "on_step_end", "on_train_end"):
                setattr(self, event, lambda *args, **kwargs: None)

    def on_log(self, args, state, control, logs=None, **kwargs) -> None:
        if not state.is_world_process_zero or logs is None or (self.stop_controller and self.stop_controller.stop_requested):
            return
        line = format_log_line(logs, state.global_step, state.max_steps)
        if line is not None:
            (self.training_bar.write if self.training_bar is not None else print)(line)


class MetricsFileCallback(TrainerCallback):
    """Appends every log record to metrics.jsonl (main process); at the start it drops the records after
    the starting step (redone) and records `segment`, the settings a resume may change."""

    def __init__(self, path: str | os.PathLike, segment: dict[str, Any] | None = None) -> None:
        self.path, self.segment = Path(path), segment

    def on_train_begin(self, args, state, control, **kwargs) -> None:
        if state.is_world_process_zero:
            self.keep_through(state.global_step, new_segment=True)

    def keep_through(self, step: int, *, new_segment: bool = False, evaluation_at_step: bool = True) -> None:
        """Drop the records after `step` (and its evaluation unless `evaluation_at_step`);
        `new_segment` records this (re)start's settings at `step`."""
        dropped = [mark for mark, drop in (('"segment"', new_segment), ('"eval_loss"', not evaluation_at_step)) if drop]
        lines = self.path.read_text().splitlines() if self.path.exists() else []
        kept = [line for line in lines if _step_of(line) < step or (
            _step_of(line) == step and not any(mark in line for mark in dropped))]
        if new_segment and self.segment is not None:
            kept.append(json.dumps({"step": step, "segment": self.segment}))
        if kept or self.path.exists():
            with atomic_write_file(self.path, encoding="utf-8") as handle:  # a kill here keeps the old file
                handle.write("".join(line + "\n" for line in kept))

    def on_log(self, args, state, control, logs=None, **kwargs) -> None:
        if not state.is_world_process_zero or logs is None:
            return
        record = {"step": state.global_step, **{k: _jsonable(v) for k, v in logs.items()}}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")


def _step_of(line: str) -> int:
    try:
        return int(json.loads(line).get("step", 0))
    except (ValueError, AttributeError):
        return 0


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # JSON has no NaN/inf
    if isinstance(value, torch.Tensor):
        return value.item()
    return value


class SampleTextCallback(TrainerCallback):
    """Every `every` steps and at the end, continue each prompt, print it and append it to samples.txt,
    without drawing from the training RNG (a resumed run then draws the same dropout masks)."""

    def __init__(
        self, tokenizer: PreTrainedTokenizerBase, prompts: list[str], path: str | os.PathLike, every: int,
        max_new_tokens: int, temperature: float, top_k: int | None, seed: int, stop_controller: StopController | None = None,
    ) -> None:
        self.stop_controller = stop_controller  # no samples once a stop is requested
        self.tokenizer, self.prompts, self.path, self.every = tokenizer, prompts, Path(path), every
        self.max_new_tokens, self.temperature, self.top_k, self.seed = max_new_tokens, temperature, top_k, seed
        self.last_sampled_step: int | None = None

    def on_train_begin(self, args, state, control, **kwargs) -> None:
        if state.is_world_process_zero and state.global_step == 0 and self.path.exists():
            self.path.unlink()  # a fresh start: samples of an earlier, unfinished attempt are not this run's

    def on_step_end(self, args, state, control, model=None, **kwargs) -> None:
        # A sharded model samples on every process, which must agree: by the step alone, as a stop
        # one process saw first is agreed on only after this.
        stopping = self.stop_controller is not None and self.stop_controller.stop_requested
        stopping = stopping and not isinstance(model, FSDPModule)
        if self.every and state.global_step % self.every == 0 and not stopping:
            self.sample(args, state, model)

    def on_train_end(self, args, state, control, model=None, **kwargs) -> None:
        # At the end of the run; not after a stop request, which should exit promptly.
        if state.global_step >= state.max_steps and self.last_sampled_step != state.global_step:
            self.sample(args, state, model)

    @torch.no_grad()
    def texts_at(self, model: torch.nn.Module, step: int) -> list[str]:
        """One continuation per prompt (included), sampled inside `fork_rng` seeded with seed + step. An
        empty prompt starts a new document; a long one keeps the tail that leaves room to generate."""
        tokenizer = self.tokenizer
        room = model.config.max_position_embeddings - self.max_new_tokens  # prompt tokens that fit
        start = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
        sampling = {"do_sample": True, "temperature": self.temperature, "top_k": self.top_k or 0}
        if self.temperature <= 0:
            sampling = {"do_sample": False, "temperature": None, "top_k": None, "top_p": None}
        devices = list(range(torch.cuda.device_count())) if torch.cuda.is_initialized() else []
        was_training, texts = model.training, []
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(self.seed + step)
            model.eval()
            for prompt in self.prompts:
                ids = tokenizer(prompt, add_special_tokens=False).input_ids[-room:] if prompt else [start]
                input_ids = torch.tensor([ids], device=model.device)  # (1, T)
                pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else start
                # (1, T + new); max_length, as the generation config bounds by it
                output = model.generate(input_ids, attention_mask=torch.ones_like(input_ids),
                                        max_length=len(ids) + self.max_new_tokens, pad_token_id=pad, **sampling)
                # A prompt written with special tokens (a chat turn) is shown with them, text as text.
                special = any(token in prompt for token in tokenizer.all_special_tokens)
                texts.append(tokenizer.decode(output[0], skip_special_tokens=not special))
        model.train(was_training)
        return texts

    def sample(self, args: TrainingArguments, state: TrainerState, model: torch.nn.Module) -> None:
        """Sample and write on the main process; on every process for a model sharded by FSDP2, whose
        forward gathers its weights (a collective)."""
        self.last_sampled_step = state.global_step
        if model is None or not (state.is_world_process_zero or isinstance(model, FSDPModule)):
            return
        texts = self.texts_at(model, state.global_step)
        if not state.is_world_process_zero:
            return
        block = "".join(format_sample(state.global_step, p, t) for p, t in zip(self.prompts, texts, strict=True))
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(block)
        tqdm.write(block.rstrip("\n"))


class StopTrainingCallback(TrainerCallback):
    """At each optimizer step end: if a stop was requested on any process, save and stop there
    (every process at the same step, or the next collective deadlocks)."""

    def __init__(self, controller: StopController) -> None:
        self.controller = controller

    def on_step_end(self, args, state, control, **kwargs) -> None:
        controller = self.controller
        requested, signum = _max_over_processes([int(controller.stop_requested), controller.signum or 0], args)
        if requested:
            if not controller.stop_requested:  # another process got the signal
                controller.request_stop("stop requested on another process", signum or None)
            controller.stopped_at_step = state.global_step
            control.should_save = control.should_training_stop = True
            control.should_evaluate = False  # a stop is a save and an exit: no scheduled evaluation first


def _max_over_processes(values: list[int], args: TrainingArguments) -> list[int]:
    """Each value's maximum over the processes (one process's stop is everyone's)."""
    if args.world_size <= 1 or not (dist.is_available() and dist.is_initialized()):
        return values
    flags = torch.tensor(values, dtype=torch.int64, device=args.device)
    dist.all_reduce(flags, op=dist.ReduceOp.MAX)
    return flags.tolist()

