"""TrainerCallbacks of a MiniGPT run: readable log lines, metrics.jsonl, text samples, step timing.

Each is a plain `transformers.TrainerCallback`, so a UI can watch a run the same way: pass your
own callbacks to `run_training(..., callbacks=[...])` and read `logs` in `on_log`.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FSDPModule
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
from ..data.training_blocks import TrainingBlocks
from ..generation import SamplingSettings, generate_samples
from .interrupt import StopController
from .throughput import ThroughputMeter


class StepTimerCallback(TrainerCallback):
    """Times each optimizer step for the throughput meter (register it before other callbacks)."""

    def __init__(self, meter: ThroughputMeter) -> None:
        self.meter = meter

    def on_step_begin(self, args, state, control, **kwargs) -> None:
        self.meter.start_step()

    def on_step_end(self, args, state, control, **kwargs) -> None:
        if args.device.type == "cuda":
            torch.cuda.synchronize(args.device)  # kernels are asynchronous: time them, not their launch
        self.meter.end_step()


class EpochOffsetCallback(TrainerCallback):
    """Moves shifted `TrainingBlocks` to each epoch's offset as the epoch begins, in every process.

    The epoch comes from the Trainer's state: `state.epoch` is a whole number at an epoch's start
    and the resumed fraction (epochs trained + part) on resume. (Accelerate's `set_epoch` reaches
    a dataset only when no sampler in between takes it, so not under several processes.)
    """

    def __init__(self, dataset: TrainingBlocks) -> None:
        self.dataset = dataset

    def on_epoch_begin(self, args, state, control, **kwargs) -> None:
        self.dataset.start_epoch(math.floor((state.epoch or 0.0) + 1e-9))


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
    """Trainer's progress bar, with each log record written above it as one readable line.

    The bar's length follows `state.max_steps`, which a time budget moves when it plans the run.
    Once a stop is requested (Ctrl-C), no more lines are printed: the stop's own line is the last
    (the records still go to metrics.jsonl).
    """

    def __init__(self, stop_controller: StopController | None = None) -> None:
        super().__init__()
        self.stop_controller = stop_controller

    def on_step_end(self, args, state, control, **kwargs) -> None:
        if self.training_bar is not None and self.training_bar.total != state.max_steps:
            self.training_bar.total = state.max_steps
            self.training_bar.refresh()
        super().on_step_end(args, state, control, **kwargs)

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

    Sampling (`minigpt.generation.generate_samples`) leaves torch's random state as it was: it must
    not consume the training RNG, or a resumed run would draw different dropout masks than an
    uninterrupted one. The samples of a step are the same for the same seed (`seed` + the step).
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

    def texts_at(self, model: torch.nn.Module, step: int) -> list[str]:
        """One continuation per prompt, as sampled at `step`; an empty prompt starts a new document,
        a long one keeps its tail that leaves room for the new tokens."""
        settings = SamplingSettings(
            max_new_tokens=self.max_new_tokens,
            temperature=self.temperature,
            top_k=self.top_k or 0,  # 0: no filter (None would take the generation config's)
            seed=self.seed + step,
        )
        return [
            generate_samples(model, self.tokenizer, prompt, settings, stream=False, fit_prompt=True)[0]
            for prompt in self.prompts
        ]

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
        block = "".join(
            f"--- step {state.global_step}, prompt {p!r} ---\n{t}\n"
            for p, t in zip(self.prompts, texts, strict=True)
        )
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(block)
        tqdm.write(block.rstrip("\n"))
        self.last_samples = texts
        return texts


__all__ = [
    "LogLineProgressCallback",
    "MetricsFileCallback",
    "SampleTextCallback",
    "StepTimerCallback",
    "format_log_line",
]


class StopTrainingCallback(TrainerCallback):
    """At each optimizer step end: if a stop was requested on any process, save and stop."""

    def __init__(self, controller: StopController) -> None:
        self.controller = controller

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs
    ) -> TrainerControl:
        requested, signum = self._agree_across_processes(args)
        if requested:
            if not self.controller.stop_requested:  # another process got the signal
                self.controller.request_stop("stop requested on another process", signum or None)
            self.controller.stopped_at_step = state.global_step
            control.should_save = True
            control.should_training_stop = True
            control.should_evaluate = False  # a stop is a save and an exit: no scheduled evaluation first
        return control

    def _agree_across_processes(self, args: TrainingArguments) -> tuple[bool, int]:
        """Every process must stop at the same step, or the next collective deadlocks."""
        requested = self.controller.stop_requested
        signum = self.controller.signum or 0
        if args.world_size <= 1 or not (dist.is_available() and dist.is_initialized()):
            return requested, signum
        flags = torch.tensor([int(requested), signum], dtype=torch.int64, device=args.device)
        dist.all_reduce(flags, op=dist.ReduceOp.MAX)  # (2,): any process asked, and its signal
        return bool(flags[0].item()), int(flags[1].item())
