"""TrainerCallbacks of a MiniGPT run: readable log lines, metrics.jsonl, text samples, a stop on
request or at a time, each epoch's block offset, what each process holds (step timing: flops.py).

Each is a plain `transformers.TrainerCallback`, so a UI can watch a run the same way: pass your
own callbacks to `run_training(..., callbacks=[...])` and read `logs` in `on_log`.
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
from torch import nn
from torch.distributed.fsdp import FSDPModule
from torch.distributed.tensor import DTensor
from tqdm.auto import tqdm
from transformers import (
    PreTrainedTokenizerBase,
    TrainerCallback,
    TrainerControl,
    TrainerState,
    TrainingArguments,
)
from transformers.trainer_callback import ProgressCallback

from ..atomic import atomic_write_file
from ..run_layout import format_sample
from .interrupt import StopController


class EpochCallback(TrainerCallback):
    """Tells the training data each epoch as it begins, in every process (`RunData.start_epoch`:
    shifted blocks move to that epoch's offset).

    The epoch comes from the Trainer's state: `state.epoch` is a whole number at an epoch's start
    and the resumed fraction (epochs trained + part) on resume. (Accelerate's `set_epoch` reaches
    a dataset only when no sampler in between takes it, so not under several processes.)
    """

    def __init__(self, start_epoch: Callable[[int], None]) -> None:
        self.start_epoch = start_epoch

    def on_epoch_begin(self, args, state, control, **kwargs) -> None:
        self.start_epoch(math.floor((state.epoch or 0.0) + 1e-9))


class MaxTimeCallback(TrainerCallback):
    """`training.max_time`: the run saves and ends at the first step past that many seconds of
    training (this `train()` call's). The schedule stays planned for max_steps, so a run this
    stops has not decayed its learning rate: for a finished schedule, set max_steps instead.
    At the first log line it says, once, when the steps that fit are fewer than the warmup.
    """

    def __init__(self, max_time: float, warmup_steps: int, say: bool) -> None:
        self.max_time, self.warmup_steps, self.say = max_time, warmup_steps, say
        self.started: float | None = None
        self.first_step = 0
        self.estimated = False

    def on_train_begin(self, args, state, control, **kwargs) -> None:
        self.started, self.first_step = time.perf_counter(), state.global_step

    def on_step_end(self, args, state, control, **kwargs) -> None:
        elapsed = time.perf_counter() - (self.started or time.perf_counter())
        steps = state.global_step - self.first_step
        if not self.estimated and steps >= args.logging_steps and elapsed > 0:
            self.estimated = True
            fit = int(self.first_step + steps * self.max_time / elapsed)
            if fit < min(self.warmup_steps, state.max_steps) and self.say:
                print(
                    f"training.max_time={self.max_time:g} fits about {fit} steps, fewer than "
                    f"training.warmup_steps={self.warmup_steps}: the learning rate never reaches its peak",
                    file=sys.stderr,
                    flush=True,
                )
        over = torch.tensor([int(elapsed >= self.max_time)], device=args.device)
        if args.world_size > 1 and dist.is_available() and dist.is_initialized():
            dist.all_reduce(over, op=dist.ReduceOp.MAX)  # every process ends at the same step
        if over.item():
            control.should_training_stop = True
            control.should_save = True


class ParameterLayoutCallback(TrainerCallback):
    """Says on the main process, when training starts, what each process holds of the model: a
    whole copy (DDP) or a shard (FSDP2), which nothing else a run prints tells apart."""

    def on_train_begin(self, args, state, control, model=None, **kwargs) -> None:
        if args.world_size == 1 or model is None:
            return
        held, total, sharded = held_parameters(model)
        everyone: list[tuple[int, bool] | None] = [None] * args.world_size
        dist.all_gather_object(everyone, (held, sharded))  # every process takes part
        if state.is_world_process_zero:
            counts = [count for count, _ in everyone]
            print(describe_layout(counts, total, any(s for _, s in everyone)), flush=True)


def held_parameters(model: nn.Module) -> tuple[int, int, bool]:
    """(parameters this process holds, parameters of the whole model, whether any is sharded)."""
    held = total = 0
    sharded = False
    for param in model.parameters():  # a tied weight once
        if isinstance(param, DTensor):  # FSDP2's: a process holds `to_local()`
            held += param.to_local().numel()
            sharded = sharded or any(placement.is_shard() for placement in param.placements)
        else:
            held += param.numel()
        total += param.numel()  # a DTensor's numel is the whole parameter's
    return held, total, sharded


def describe_layout(held: list[int], total: int, sharded: bool) -> str:
    """The run's line: `held` = the parameters each process holds, by process index."""
    if sharded:
        shares = " + ".join(f"{count:,}" for count in held)
        return f"parameters: sharded over {len(held)} processes (FSDP2): {shares} of {total:,}, one shard on each"
    return f"parameters: a whole copy on each of {len(held)} processes ({total:,} each)"


def format_log_line(logs: dict[str, Any], step: int, max_steps: int) -> str | None:
    """One human line for a training or evaluation log record (None for other records)."""
    if "loss" in logs:
        parts = [f"step {step}/{max_steps}", f"loss {logs['loss']:.4f}"]
        if "learning_rate" in logs:
            parts.append(f"lr {logs['learning_rate']:.2e}")
        if logs.get("grad_norm") is not None:
            parts.append(f"grad norm {logs['grad_norm']:.3f}")
        if "tokens_per_second" in logs:
            parts.append(f"{logs['tokens_per_second']:,.0f} tok/s")
        if "mfu" in logs:
            parts.append(f"MFU {100 * logs['mfu']:.1f}%")
        if "tokens_seen" in logs:
            parts.append(f"{format_count(logs['tokens_seen'])} tokens")
        return " | ".join(parts)
    if "eval_loss" in logs:
        parts = [f"eval step {step}", f"val loss {logs['eval_loss']:.4f}"]
        if "eval_perplexity" in logs:
            parts.append(f"ppl {logs['eval_perplexity']:.2f}")
        if "eval_bpb" in logs:
            parts.append(f"bits/byte {logs['eval_bpb']:.4f}")
        if logs.get("eval_blocks", 0) < logs.get("validation_blocks", 0):  # a sample (training.eval_tokens)
            parts.append(f"sample of {logs['eval_blocks']:,}/{logs['validation_blocks']:,} blocks")
        return " | ".join(parts)
    return None


def format_count(n: float) -> str:
    """4000 -> "4.0k", 1234567 -> "1.23M"."""
    for scale, suffix, digits in ((1e9, "B", 2), (1e6, "M", 2), (1e3, "k", 1)):
        if abs(n) >= scale:
            return f"{n / scale:.{digits}f}{suffix}"
    return f"{n:.0f}"


class LogLineProgressCallback(ProgressCallback):
    """Trainer's progress bars in a terminal, with each log record written above them as one readable
    line; written to a file or a pipe, the lines alone (a bar's cursor codes would garble the log).

    Once a stop is requested (Ctrl-C), no more lines are printed: the stop's own line is the last
    (the records still go to metrics.jsonl).
    """

    def __init__(self, stop_controller: StopController | None = None, bars: bool | None = None) -> None:
        super().__init__()
        self.stop_controller = stop_controller
        self.bars = sys.stderr.isatty() if bars is None else bars

    def on_train_begin(self, args, state, control, **kwargs) -> None:
        if self.bars:
            super().on_train_begin(args, state, control, **kwargs)

    def on_prediction_step(self, args, state, control, eval_dataloader=None, **kwargs) -> None:
        if self.bars:
            super().on_prediction_step(args, state, control, eval_dataloader=eval_dataloader, **kwargs)

    def on_step_end(self, args, state, control, **kwargs) -> None:
        if self.training_bar is not None:
            super().on_step_end(args, state, control, **kwargs)

    def on_train_end(self, args, state, control, **kwargs) -> None:
        if self.training_bar is not None:
            super().on_train_end(args, state, control, **kwargs)

    def on_log(self, args, state, control, logs=None, **kwargs) -> None:
        if not state.is_world_process_zero or logs is None:
            return
        if self.stop_controller is not None and self.stop_controller.stop_requested:
            return
        line = format_log_line(logs, state.global_step, state.max_steps)
        if line is not None:
            (self.training_bar.write if self.training_bar is not None else print)(line)


class MetricsFileCallback(TrainerCallback):
    """Appends every log record as one JSON line to `<output_dir>/metrics.jsonl` (main process only).

    At the start, records after the starting step are dropped: on resume those the interrupted run
    wrote after its checkpoint (about to be redone), on a fresh start all of them, so the file
    reads as one run.
    """

    def __init__(self, path: str | os.PathLike, segment: dict[str, Any] | None = None) -> None:
        self.path = Path(path)
        # Settings that may change on resume (the hardware section): recorded at each (re)start as
        # {"step": N, "segment": {...}}, so a model card can say what the whole run used.
        self.segment = segment

    def on_train_begin(self, args, state, control, **kwargs) -> None:
        if state.is_world_process_zero:
            self.keep_through(state.global_step, new_segment=True)

    def keep_through(self, step: int, *, new_segment: bool = False, evaluation_at_step: bool = True) -> None:
        """Drop the records after `step` (and its evaluation, when `evaluation_at_step` is False:
        it is about to be redone); `new_segment` records this (re)start's settings at `step`."""
        kept = []
        if self.path.exists():
            kept = [line for line in self.path.read_text().splitlines() if _step_of(line) <= step]
            if new_segment:
                kept = [line for line in kept if not ('"segment"' in line and _step_of(line) == step)]
            if not evaluation_at_step:
                kept = [line for line in kept if not ('"eval_loss"' in line and _step_of(line) == step)]
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
    """Every `every` steps and at the end, continue each prompt, print it and append it to samples.txt.

    Sampling leaves torch's random state as it was: drawing from the training RNG would give a
    resumed run other dropout masks than an uninterrupted one (`texts_at`).
    """

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        prompts: list[str],
        path: str | os.PathLike,
        every: int,
        max_new_tokens: int,
        temperature: float,
        top_k: int | None,
        seed: int,
        stop_controller: StopController | None = None,
    ) -> None:
        self.stop_controller = stop_controller  # no samples once a stop is requested: it exits promptly
        self.tokenizer = tokenizer
        self.prompts = prompts
        self.path = Path(path)
        self.every = every
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.top_k = top_k  # None: no top-k filter
        self.seed = seed
        self.last_sampled_step: int | None = None
        self.last_samples: list[str] = []

    def on_train_begin(self, args, state, control, **kwargs) -> None:
        if state.is_world_process_zero and state.global_step == 0 and self.path.exists():
            self.path.unlink()  # a fresh start: samples of an earlier, unfinished attempt are not this run's

    def on_step_end(self, args, state, control, model=None, **kwargs) -> None:
        stopping = self.stop_controller is not None and self.stop_controller.stop_requested
        # A sharded model samples on every process (below), so all must agree whether to: by the
        # step alone, as a stop one process saw first is agreed on only after this.
        if isinstance(model, FSDPModule):
            stopping = False
        if self.every and state.global_step % self.every == 0 and not stopping:
            self.sample(args, state, model)

    def on_train_end(self, args, state, control, model=None, **kwargs) -> None:
        # At the end of the run; not after a stop request, which should exit promptly.
        if state.global_step >= state.max_steps and self.last_sampled_step != state.global_step:
            self.sample(args, state, model)

    @torch.no_grad()
    def texts_at(self, model: torch.nn.Module, step: int) -> list[str]:
        """One continuation per prompt (the prompt included), as `model.generate` samples it at `step`.

        Inside `fork_rng`, seeded with seed + step: the training RNG is never drawn from. An empty
        prompt starts a new document; a long one keeps the tail that leaves room for the new tokens.
        """
        tokenizer = self.tokenizer
        room = model.config.max_position_embeddings - self.max_new_tokens  # prompt tokens that fit
        start = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
        sampling = (
            {"do_sample": True, "temperature": self.temperature, "top_k": self.top_k or 0}
            if self.temperature > 0
            else {"do_sample": False, "temperature": None, "top_k": None, "top_p": None}
        )
        devices = list(range(torch.cuda.device_count())) if torch.cuda.is_initialized() else []
        was_training, texts = model.training, []
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(self.seed + step)
            model.eval()
            for prompt in self.prompts:
                ids = tokenizer(prompt, add_special_tokens=False).input_ids[-room:] if prompt else [start]
                input_ids = torch.tensor([ids], device=model.device)  # (1, T)
                output = model.generate(
                    input_ids,
                    attention_mask=torch.ones_like(input_ids),
                    max_length=len(ids) + self.max_new_tokens,  # the generation config bounds by max_length
                    pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else start,
                    **sampling,
                )  # (1, T + new)
                texts.append(tokenizer.decode(output[0], skip_special_tokens=not self.writes_special_tokens(prompt)))
        model.train(was_training)
        return texts

    def writes_special_tokens(self, prompt: str) -> bool:
        """A prompt written with special tokens (a chat turn's `<|im_start|>user`...) is shown with
        them, so its sample reads as a conversation and not as bare role words; text without them
        is shown as text (no end-of-text token)."""
        return any(token in prompt for token in self.tokenizer.all_special_tokens)

    def sample(self, args: TrainingArguments, state: TrainerState, model: torch.nn.Module) -> list[str]:
        """Generate one continuation per prompt (main process only); returns the texts.

        A model sharded by FSDP2 gathers its weights in every forward pass, a collective: then
        every process generates the same texts, and the main one writes them.
        """
        self.last_sampled_step = state.global_step
        if model is None or not (state.is_world_process_zero or isinstance(model, FSDPModule)):
            return []
        texts = self.texts_at(model, state.global_step)
        if not state.is_world_process_zero:
            return []
        block = "".join(format_sample(state.global_step, p, t) for p, t in zip(self.prompts, texts, strict=True))
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(block)
        tqdm.write(block.rstrip("\n"))
        self.last_samples = texts
        return texts




class StopTrainingCallback(TrainerCallback):
    """At each optimizer step end: if a stop was requested on any process, save and stop."""

    def __init__(self, controller: StopController) -> None:
        self.controller = controller

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs
    ) -> TrainerControl:
        requested, signum = self.agree_across_processes(args)
        if requested:
            if not self.controller.stop_requested:  # another process got the signal
                self.controller.request_stop("stop requested on another process", signum or None)
            self.controller.stopped_at_step = state.global_step
            control.should_save = True
            control.should_training_stop = True
            control.should_evaluate = False  # a stop is a save and an exit: no scheduled evaluation first
        return control

    def agree_across_processes(self, args: TrainingArguments) -> tuple[bool, int]:
        """Every process must stop at the same step, or the next collective deadlocks."""
        requested = self.controller.stop_requested
        signum = self.controller.signum or 0
        if args.world_size <= 1 or not (dist.is_available() and dist.is_initialized()):
            return requested, signum
        flags = torch.tensor([int(requested), signum], dtype=torch.int64, device=args.device)
        dist.all_reduce(flags, op=dist.ReduceOp.MAX)  # (2,): any process asked, and its signal
        return bool(flags[0].item()), int(flags[1].item())

