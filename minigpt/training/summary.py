"""What a run says about itself: the lines printed before training, and the result, summary and
loss-curve picture after.

`TrainingResult` is what `run_training` returns; `summary_record` is its JSON form (summary.json),
`describe_result` its closing line, `plot_loss_curves` the picture (`<output_dir>/loss.png`).
"""

from __future__ import annotations

import io
import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from matplotlib.figure import Figure
from torch import nn
from transformers import TrainingArguments

from ..atomic import atomic_write_file
from ..model.configuration_minigpt import MiniGPTConfig
from ..run_layout import model_folder_name
from .hardware import resolve_hardware
from .memory_estimate import estimate_run_memory
from .peak_flops import PeakFlops
from .settings import RunConfig, effective_batch_size

EVALUATION_METRICS = ("eval_loss", "eval_perplexity", "eval_bpb")  # what the summary keeps of an evaluation


@dataclass
class TrainingResult:
    """What a finished (or stopped) run produced."""

    output_dir: Path
    final_dir: Path | None  # <output_dir>/final, None when the run was stopped before the end
    global_step: int
    tokens_seen: int
    runtime_seconds: float
    final_metrics: dict[str, float]  # eval_loss, eval_perplexity, eval_bpb at the last step
    best_eval_bpb: float | None
    stopped: bool  # stopped by a signal or StopController.request_stop() (a checkpoint was saved)
    log_history: list[dict[str, Any]] = field(repr=False, default_factory=list)
    base_model: dict[str, Any] | None = None  # model.init_from as recorded (repo id + revision, or folder name)
    base_metrics: dict[str, float] = field(default_factory=dict)  # the base's eval_* at step 0
    page: Path | None = None  # <output_dir>/run.html (run_page.py), written last; None if that failed


def describe_run(
    run: RunConfig,
    model: nn.Module,
    args: TrainingArguments,
    data_description: str,
    peak_flops: PeakFlops | None = None,
) -> str:
    """The lines printed before training: model size, the data (`RunData.description`),
    effective batch, steps and tokens, MFU's peak and its source, and the memory a device needs (an
    estimate, memory_estimate.py)."""
    h = resolve_hardware(run.hardware)
    params = sum(p.numel() for p in model.parameters())
    batch = effective_batch_size(h, args.world_size)
    precision = "bf16" if h.bf16 else "fp16" if h.fp16 else "fp32"
    steps = run.training.max_steps
    lines = [
        f"model: {params / 1e6:.2f}M parameters ({run.model.num_hidden_layers} layers, hidden "
        f"{run.model.hidden_size}, vocab {model.config.vocab_size}, context {run.data.block_size})",
        data_description,
        f"effective batch: {h.per_device_train_batch_size} per device x {h.gradient_accumulation_steps} "
        f"accumulation x {args.world_size} process(es) = {batch} sequences = "
        f"{batch * run.data.block_size:,} tokens per step; {steps:,} steps = "
        f"{steps * batch * run.data.block_size / 1e6:.2f}M tokens",
        f"device: {args.device} | {precision} | attention {h.attn_implementation} | "
        f"compile {'on' if h.torch_compile else 'off'} | threads {torch.get_num_threads()}{_wait_policy()} "
        f"-> {run.training.output_dir}",
    ]
    if getattr(model.config, "model_type", None) == MiniGPTConfig.model_type:  # remote-code copies too
        lines.append(estimate_run_memory(run, model.config, args.device.type).describe())
    if peak_flops is not None:
        lines.append(f"MFU against {peak_flops.flops:.3g} FLOP/s per device ({peak_flops.source})")
    return "\n".join(lines)


def _wait_policy() -> str:
    """OpenMP's wait policy when one is set (scripts/train.py sets PASSIVE on busy cores)."""
    policy = os.environ.get("OMP_WAIT_POLICY")
    return f", OMP_WAIT_POLICY={policy}" if policy else ""


def base_record_of(run: RunConfig) -> dict[str, Any] | None:
    """The base of a run as its config records it (repo id + revision, or folder name), without
    reading the base: what a resumed run's summary says."""
    model = run.model
    if model.init_from is None:
        return None
    if model.init_revision is not None:  # set, at the start, for ORG/NAME only
        return {"repo_id": model.init_from, "revision": model.init_revision}
    return {"folder": model_folder_name(model.init_from)}


def summary_record(result: TrainingResult) -> dict[str, Any]:
    """The summary as JSON-ready values (written to <output_dir>/summary.json)."""
    record = {
        "global_step": result.global_step,
        "tokens_seen": result.tokens_seen,
        "runtime_seconds": round(result.runtime_seconds, 2),
        "stopped": result.stopped,
        "final_dir": str(result.final_dir) if result.final_dir else None,
        "best_eval_bpb": result.best_eval_bpb,
        **result.final_metrics,
    }
    if result.base_model is not None:
        record["base_model"] = result.base_model
        record.update({f"base_{key}": value for key, value in result.base_metrics.items()})
    return record


def describe_result(result: TrainingResult) -> str:
    """The line printed after the run: steps, tokens, time, final and best bits/byte, where the model is."""
    minutes, seconds = divmod(int(result.runtime_seconds), 60)
    parts = [
        f"{'stopped' if result.stopped else 'done'}: {result.global_step} steps",
        f"{result.tokens_seen / 1e6:.2f}M tokens",
        f"{minutes}m{seconds:02d}s",
    ]
    if "eval_bpb" in result.final_metrics:
        parts.append(
            f"final val loss {result.final_metrics['eval_loss']:.4f}, bits/byte {result.final_metrics['eval_bpb']:.4f}"
        )
    if result.best_eval_bpb is not None:
        parts.append(f"best bits/byte {result.best_eval_bpb:.4f}")
    if result.final_dir is not None:
        parts.append(f"model saved to {result.final_dir}")
    return " | ".join(parts)


def loss_curves(
    log_history: Iterable[Mapping[str, Any]],
) -> tuple[list[tuple[int, float]], list[tuple[int, float]]]:
    """(step, training loss) and (step, validation loss) points from Trainer's `state.log_history`."""
    train, validation = {}, {}
    for record in log_history:
        step = record.get("step")
        if step is None:
            continue
        if "loss" in record and math.isfinite(record["loss"]):
            train[step] = float(record["loss"])  # a resumed run re-logs steps: keep the latest
        if "eval_loss" in record and math.isfinite(record["eval_loss"]):
            validation[step] = float(record["eval_loss"])
    return sorted(train.items()), sorted(validation.items())


def plot_loss_curves(
    log_history: Iterable[Mapping[str, Any]], path: str | os.PathLike, title: str = "MiniGPT training"
) -> None:
    """Draw training and validation loss against steps into a PNG, written atomically."""
    train, validation = loss_curves(log_history)
    figure = Figure(figsize=(8, 5), dpi=100)  # matplotlib's object API: no pyplot, no backend to pick
    axes = figure.subplots()
    if train:
        axes.plot(*zip(*train, strict=True), label="training loss", color="tab:blue", linewidth=1.2)
    if validation:
        axes.plot(*zip(*validation, strict=True), label="validation loss", color="tab:orange", marker="o")
    axes.set_xlabel("optimizer step")
    axes.set_ylabel("cross-entropy (nats per token)")
    axes.set_title(title)
    axes.grid(True, alpha=0.3)
    if train or validation:
        axes.legend()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", bbox_inches="tight")
    with atomic_write_file(path, "wb") as handle:
        handle.write(buffer.getvalue())


__all__ = [
    "EVALUATION_METRICS",
    "TrainingResult",
    "base_record_of",
    "describe_result",
    "describe_run",
    "loss_curves",
    "plot_loss_curves",
    "summary_record",
]
