"""Run settings -> `TrainingArguments`: the `training` and `hardware` sections under Trainer's own names.

Also what only transformers can check or build from those settings: the optimizer name
(`check_optimizer_name`) and torch.optim.Muon's keywords (`muon_kwargs`).
"""

from __future__ import annotations

from typing import Any

from transformers import TrainingArguments
from transformers.training_args import OptimizerNames

from ..errors import ConfigError
from .hardware import resolve_hardware
from .optimizers import AUX_ADAMW, MUON
from .settings import HardwareSettings, RunConfig, TrainingSettings, require_choice


def build_training_arguments(run: RunConfig) -> TrainingArguments:
    """TrainingArguments from the `training` and `hardware` sections (same key names)."""
    t, h = run.training, resolve_hardware(run.hardware)
    optional = {"tf32": h.tf32} if h.tf32 is not None else {}
    try:
        return _training_arguments(t, h, optional)
    except ValueError as err:  # what only the machine can tell, e.g. bf16 without a GPU
        raise ConfigError(
            f"hardware settings do not fit this machine: {err} (without a GPU use hardware.profile=cpu)"
        ) from None


def _training_arguments(
    t: TrainingSettings, h: HardwareSettings, optional: dict[str, Any]
) -> TrainingArguments:
    return TrainingArguments(
        output_dir=t.output_dir,
        max_steps=t.max_steps,
        learning_rate=t.learning_rate,
        lr_scheduler_type=t.lr_scheduler_type,
        lr_scheduler_kwargs={"min_lr": t.min_learning_rate}
        if t.lr_scheduler_type == "cosine_with_min_lr"
        else {},
        warmup_steps=t.warmup_steps,
        weight_decay=t.weight_decay,
        adam_beta1=t.adam_beta1,
        adam_beta2=t.adam_beta2,
        adam_epsilon=t.adam_epsilon,
        optim=AUX_ADAMW if t.optim == MUON else t.optim,  # muon: the AdamW for what Muon does not take
        max_grad_norm=t.max_grad_norm,
        seed=t.seed,
        logging_strategy="steps",
        logging_steps=t.logging_steps,
        logging_first_step=True,  # the step-1 loss anchors the curve
        eval_strategy="steps",
        eval_steps=t.eval_steps,
        save_strategy="steps",
        save_steps=t.save_steps,
        save_total_limit=t.save_total_limit,
        report_to=t.report_to,
        prediction_loss_only=True,  # evaluation needs the loss only, not gathered logits
        disable_tqdm=False,
        use_cpu=h.use_cpu,
        bf16=h.bf16,
        fp16=h.fp16,
        torch_compile=h.torch_compile,
        torch_compile_mode=h.torch_compile_mode,
        activation_checkpointing=h.activation_checkpointing,
        per_device_train_batch_size=h.per_device_train_batch_size,
        gradient_accumulation_steps=h.gradient_accumulation_steps,
        per_device_eval_batch_size=h.per_device_eval_batch_size,
        dataloader_num_workers=h.dataloader_num_workers,
        # Every parameter gets a gradient each step; searching for unused ones costs DDP an extra
        # pass over the graph per step and a warning.
        ddp_find_unused_parameters=False,
        **optional,
    )


def check_optimizer_name(training: TrainingSettings) -> None:
    """`training.optim` must be one of Trainer's optimizer names (known only once transformers is
    imported) or "muon"."""
    require_choice(training.optim, [*(name.value for name in OptimizerNames), MUON], "training.optim")


def muon_kwargs(training: TrainingSettings) -> dict[str, Any] | None:
    """torch.optim.Muon's keywords from the `training.muon_*` keys, or None unless training.optim is muon."""
    if training.optim != MUON:
        return None
    return {
        "lr": training.muon_learning_rate,
        "momentum": training.muon_momentum,
        "nesterov": training.muon_nesterov,
        "weight_decay": training.muon_weight_decay,
        "ns_steps": training.muon_ns_steps,
        "adjust_lr_fn": training.muon_adjust_lr,
    }


__all__ = ["build_training_arguments", "check_optimizer_name", "muon_kwargs"]
