"""MiniGPT's `transformers.Trainer`: `training_arguments` maps the `training` and `hardware` sections onto
`TrainingArguments`; `MiniGPTTrainer` overrides public extension points only (weight-decay groups, log
records, bits per byte through the metric hooks, FSDP2). Accelerate 1.15 leaves two FSDP2 things undone:
a CPU run launched with an FSDP config silently runs DDP (`shard_on_cpu` lifts that gate), and a
sharded model would save torch's `FSDP<Class>` as its code with a tied weight twice (`own_class`,
`without_tied_copies`).
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml
from accelerate import Accelerator, PartialState
from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin
from torch import nn
from torch.distributed.fsdp import FSDPModule
from transformers import (
    EvalPrediction,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)
from transformers.trainer_callback import ProgressCallback
from transformers.training_args import OptimizerNames

from ..console import transformers_progress_bars
from ..data.run_data import RunData
from ..data.token_bytes import bits_per_byte, block_targets, next_token_scores
from ..errors import ConfigError
from ..run_layout import METRICS_FILE, SAMPLES_FILE
from .callbacks import (
    EpochCallback,
    LogLineProgressCallback,
    MaxTimeCallback,
    MetricsFileCallback,
    ParameterLayoutCallback,
    SampleTextCallback,
    StopTrainingCallback,
)
from .checkpoints import CompleteCheckpointCallback
from .flops import ThroughputMeter, flops_per_token, resolve_peak_flops
from .hardware import tf32_matmuls
from .interrupt import StopController
from .settings import HardwareSettings, RunConfig, effective_batch_size, require_choice


def shard_on_cpu(accelerator: Accelerator) -> bool:
    """Make a CPU run that asked for FSDP an FSDP run (as accelerate does on GPUs); True if it did."""
    state = accelerator.state
    asked = os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true"  # `accelerate launch` with an FSDP config
    if not asked or state.distributed_type != DistributedType.MULTI_CPU:
        return False
    plugin = FullyShardedDataParallelPlugin()  # from the launcher's FSDP_* variables
    if state.mixed_precision != "no":
        plugin.set_mixed_precision(state.mixed_precision)
    state.fsdp_plugin = plugin
    # Both shared states: every later `AcceleratorState()` copies PartialState's type over its own.
    state.distributed_type = PartialState().distributed_type = DistributedType.FSDP
    return True


@contextlib.contextmanager
def own_class(model: nn.Module) -> Iterator[nn.Module]:
    """`model` with its own class (not FSDP2's `FSDP<Class>`) inside the block, for saving a gathered
    state dict (FSDP's methods are gone meanwhile); any other model passes through."""
    sharded_class = type(model)
    if not isinstance(model, FSDPModule):
        yield model
        return
    # fully_shard builds FSDP<Class> with bases (FSDPModule, Class): the first class past FSDP's.
    model.__class__ = next(cls for cls in sharded_class.__mro__ if not issubclass(cls, FSDPModule))
    try:
        yield model
    finally:
        model.__class__ = sharded_class


def without_tied_copies(model: nn.Module, state_dict: dict | None) -> dict | None:
    """`state_dict` without the weights tied to another (from_pretrained ties them again); None stays."""
    tied = set(getattr(model, "all_tied_weights_keys", None) or ())
    return None if state_dict is None else {name: tensor for name, tensor in state_dict.items() if name not in tied}


def training_arguments(run: RunConfig, hardware: HardwareSettings) -> TrainingArguments:
    """TrainingArguments from the Trainer keys of the `training` section and of `hardware` (the run's,
    `resolve_hardware`d: no "auto" left) and those MiniGPT sets itself (`save_total_limit` is
    `CompleteCheckpointCallback`'s)."""
    t, h = run.training, hardware
    kwargs = {key: getattr(section, key) for section in (t, h) for key in section.to_dict() if key in section.trainer_keys()}
    kwargs["save_total_limit"] = None
    # Trainer refuses load_best_model_at_end unless every save is at an evaluation: then it is off
    best = kwargs.pop("load_best_model_at_end", False) and t.save_steps % t.eval_steps == 0
    if kwargs.get("optim") is not None:
        require_choice(t.optim, [name.value for name in OptimizerNames], "training.optim")
    try:
        return TrainingArguments(
            **kwargs, output_dir=t.output_dir, lr_scheduler_kwargs=t.schedule_kwargs(), bf16=h.bf16,
            logging_strategy="steps", logging_first_step=True,  # the step-1 loss anchors the curve
            eval_strategy="steps", save_strategy="steps", disable_tqdm=False, load_best_model_at_end=best,
            prediction_loss_only=False,  # evaluation hands per-block sums to compute_metrics
            ddp_find_unused_parameters=False,  # every parameter gets a gradient: no search per step
        )
    except ValueError as err:  # what only the machine can tell, e.g. bf16 without a GPU
        raise ConfigError(f"hardware settings do not fit this machine: {err} (without a GPU use hardware.profile=cpu)") from None


def bits_per_byte_metric(prediction: EvalPrediction) -> dict[str, float]:
    """`compute_metrics` for `MiniGPTTrainer` with `token_bytes`: its predictions are the gathered (N, 5)
    `next_token_scores` rows of the evaluation."""
    return {"bpb": bits_per_byte(prediction.predictions)}


class MiniGPTTrainer(Trainer):
    """Trainer with MiniGPT's weight-decay groups, FSDP2 on CPU processes, one cross-entropy per
    evaluation and derived figures in every log record. `throughput`: a `ThroughputMeter`;
    `validation_blocks`: the split's blocks (an evaluation may read a sample); `stop_controller`: a stop
    cuts an evaluation short; `token_bytes`: (V,) bytes per token id, for bits per byte."""

    def __init__(
        self, *args: Any, decay_embeddings: bool = False, throughput: Any = None, validation_blocks: int | None = None,
        stop_controller: Any = None, token_bytes: np.ndarray | None = None, **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.token_bytes = None if token_bytes is None else torch.as_tensor(token_bytes)
        self.decay_embeddings, self.throughput = decay_embeddings, throughput
        self.validation_blocks, self.stop_controller = validation_blocks, stop_controller
        self.evaluation_cut = False  # the last evaluation ended early for a stop: not logged

    def create_accelerator_and_postprocess(self) -> None:
        """Trainer's, then FSDP for CPU processes launched with an FSDP config (the module doc, 1)."""
        super().create_accelerator_and_postprocess()
        if shard_on_cpu(self.accelerator):
            self.is_fsdp_enabled = True  # what Trainer sets from the state it has just read

    def get_decay_parameter_names(self, model: nn.Module) -> list[str]:
        """Weight matrices only (ndim >= 2: Trainer finds norms by class and name, and an RMSNorm named
        ln_1 passes both), and no embeddings (nor the tied head) unless `training.decay_embeddings`,
        as minGPT: decay would shrink the rows of rare tokens, which seldom get gradient."""
        embeddings = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
        decayed = {
            name for name, param in model.named_parameters()  # a tied weight once, by its first name
            if param.ndim >= 2 and (self.decay_embeddings or id(param) not in embeddings)
        }
        return [name for name in super().get_decay_parameter_names(model) if name in decayed]

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> None:
        """Trainer's, with a model sharded by FSDP2 saved as an unsharded one (the module doc, 2), and no
        progress bar (noise between log lines)."""
        if not self.is_fsdp_enabled:
            with transformers_progress_bars(False):
                super().save_model(output_dir, _internal_call=_internal_call)
            return
        output_dir = output_dir or self.args.output_dir
        state_dict = self.accelerator.get_state_dict(self.model)  # a collective: every process gathers
        if not self.args.should_save:
            return
        model = self.accelerator.unwrap_model(self.model, keep_torch_compile=False)
        with own_class(model), transformers_progress_bars(False):
            model.save_pretrained(output_dir, state_dict=without_tied_copies(model, state_dict))
        if self.processing_class is not None:
            self.processing_class.save_pretrained(output_dir)
        torch.save(self.args, os.path.join(output_dir, "training_args.bin"))

    def compute_loss(
        self, model: nn.Module, inputs: dict[str, Any], return_outputs: bool = False, num_items_in_batch: Any = None
    ) -> Any:
        """Training: the model's own loss. Evaluating with `token_bytes`: one cross-entropy per token
        (`next_token_scores`) gives both the batch's mean token loss and the (B, 5) sums bits per byte is
        made of, which Trainer gathers across processes as the predictions."""
        if model.training or self.token_bytes is None or not return_outputs:
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        logits = model(**{key: value for key, value in inputs.items() if key != "labels"}).logits  # (B, T, V)
        scores = next_token_scores(logits, block_targets(inputs["labels"]), self.token_bytes)  # (B, 5)
        loss = scores[:, 0].sum() / scores[:, 1].sum().clamp(min=1)  # nats per scored prediction
        return loss, {"loss": loss, "scores": scores}

    def get_eval_dataloader(self, eval_dataset: Any = None) -> Any:
        """Trainer's, ending early once a stop is asked (one process only: several would have to agree)."""
        loader = super().get_eval_dataloader(eval_dataset)
        return loader if self.stop_controller is None or self.args.world_size > 1 else StoppableLoader(loader, self)

    def evaluate(self, *args: Any, **kwargs: Any) -> dict[str, float]:
        """Trainer's; an evaluation a stop cut short is not logged and never ranks as the best (its
        metric is NaN: it may have read no batch at all, and a part of the rows is not the split)."""
        metrics = super().evaluate(*args, **kwargs)
        if self.evaluation_cut:
            self.evaluation_cut = False
            if self.args.metric_for_best_model:
                name = self.args.metric_for_best_model
                metrics[name if name.startswith("eval_") else f"eval_{name}"] = float("nan")
        return metrics

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        """Add tokens/s, MFU and tokens seen to training records; perplexity and blocks read to eval ones."""
        if self.evaluation_cut and any(key.startswith("eval_") for key in logs):  # a part of the rows
            return
        if "loss" in logs and self.throughput is not None:
            logs.update(self.throughput.take_window())
            logs["tokens_seen"] = self.state.global_step * self.throughput.tokens_per_step
        if "eval_loss" in logs:  # the validation blocks' mean loss per prediction, in nats
            logs["eval_perplexity"] = math.exp(min(logs["eval_loss"], 50.0))  # capped: exp overflows
            if self.validation_blocks is not None and self.eval_dataset is not None:  # blocks read, of the split's
                logs.update(eval_blocks=len(self.eval_dataset), validation_blocks=self.validation_blocks)
        if "train_runtime" in logs and self.throughput is not None:  # from the steps trained, not max_steps
            logs.update(self.throughput.session_rates(logs["train_runtime"]))
        super().log(logs, start_time)


class StoppableLoader:
    """An evaluation dataloader that ends at the first batch after a stop is asked; inside training
    the trainer then saves and stops."""

    def __init__(self, loader: Any, trainer: MiniGPTTrainer) -> None:
        self.loader, self.trainer = loader, trainer

    def __iter__(self):
        controller = self.trainer.stop_controller
        for batch in self.loader:
            if controller.stop_requested:
                self.trainer.evaluation_cut = True
                if self.trainer.is_in_train:  # inside training: save at this step, then stop
                    self.trainer.control.should_save = self.trainer.control.should_training_stop = True
                    controller.stopped_at_step = self.trainer.state.global_step
                return
            yield batch

    def __len__(self) -> int:
        return len(self.loader)

    def __getattr__(self, name: str) -> Any:  # dataset, batch_size, sampler: the loader's
        return getattr(self.loader, name)


def build_trainer(
    run: RunConfig, args: TrainingArguments, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, data: RunData,
    callbacks: Sequence[TrainerCallback] = (), stop_controller: StopController | None = None, *, dtype: torch.dtype,
) -> MiniGPTTrainer:
    """The run's Trainer with MiniGPT's callbacks: step timer and throughput, metrics.jsonl, samples,
    epochs, stops, complete checkpoints, log lines. `dtype`: what the matmuls run in (`training_dtype`),
    whose peak FLOP/s MFU divides by."""
    t, output_dir = run.training, Path(run.training.output_dir)
    stop_controller = stop_controller or StopController()
    tf32 = tf32_matmuls(run.hardware)
    with args.main_process_first(desc="peak FLOP/s"):  # one process measures, the others read the cache
        peak = resolve_peak_flops(run.hardware.peak_flops, args.device, dtype, tf32=tf32)
    block = run.data.block_size
    meter = ThroughputMeter(effective_batch_size(run.hardware, args.world_size), block,
                            flops_per_token(model, model.config, block), peak.flops, args.world_size)
    segment = {"hardware": run.hardware.to_dict(), "threads": torch.get_num_threads()}
    own: list[TrainerCallback] = [
        meter,  # first, so sampling at step end is not timed as training
        MetricsFileCallback(output_dir / METRICS_FILE, segment=segment),
        SampleTextCallback(
            tokenizer, t.sample_prompts, output_dir / SAMPLES_FILE, t.sample_steps, t.sample_max_new_tokens,
            t.sample_temperature, t.sample_top_k, t.seed, stop_controller,
        ),
        EpochCallback(data.start_epoch),
    ]
    if args.world_size > 1:  # whole copies or shards: the run says which
        own.append(ParameterLayoutCallback())
    if t.max_time is not None:
        own.append(MaxTimeCallback(t.max_time, t.warmup_steps, say=args.should_save))
    # Last the stop (it sees any other's at this step), then the checkpoint marker.
    stop, log_lines = StopTrainingCallback(stop_controller), LogLineProgressCallback(stop_controller)
    checkpoints = CompleteCheckpointCallback(yaml.safe_dump(run.to_dict(), sort_keys=False), t.save_total_limit)
    trainer = MiniGPTTrainer(
        model=model, args=args, train_dataset=data.train, eval_dataset=data.evaluation.blocks,
        processing_class=tokenizer, data_collator=data.collator,
        callbacks=[*own, *callbacks, stop, checkpoints],
        token_bytes=data.token_bytes, compute_metrics=bits_per_byte_metric,
        decay_embeddings=t.decay_embeddings, throughput=meter, validation_blocks=data.evaluation.total,
        stop_controller=stop_controller,
    )
    trainer.peak_flops = peak  # what MFU divides by, and where it came from (the run's first lines say)
    trainer.remove_callback(ProgressCallback)
    trainer.add_callback(log_lines)
    return trainer
