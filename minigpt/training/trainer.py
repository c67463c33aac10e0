"""MiniGPT's `transformers.Trainer`: its arguments from the run config, and what arguments cannot say.

`training_arguments` maps the `training` and `hardware` sections onto `TrainingArguments` (the
same key names). `MiniGPTTrainer` overrides only public extension points: the weight-decay groups
(`get_decay_parameter_names`), derived figures in every
log record (`log`), FSDP2 for CPU processes (`create_accelerator_and_postprocess`) and saving a
sharded model as its own class (`save_model`). Bits per byte comes through Trainer's own metric
hooks (`preprocess_logits_for_metrics`, `compute_metrics`): per-block sums, gathered across
processes, so it counts the text's tokens and bytes only, never the separators between documents.

FSDP2 as accelerate runs it, plus the two things it leaves undone for MiniGPT:
1. Sharding on CPU processes. Accelerate 1.15 makes a run FSDP only from a GPU-like process type
   (`AcceleratorState` checks MULTI_GPU, MULTI_XPU, ...): under `accelerate launch --config_file
   configs/accelerate/fsdp.yaml` a CPU run stays MULTI_CPU, wraps the model in DDP and keeps every
   parameter whole on every process, without a word. Torch's FSDP2 (`fully_shard`) runs on CPU over
   gloo, so `shard_on_cpu` lifts that one gate once the Accelerator exists; from there accelerate
   shards the model, gathers state dicts and saves and loads checkpoints as it does on GPUs.
2. Saving a sharded model as an unsharded one would. `fully_shard` swaps the model's class for a
   subclass `FSDP<Class>` defined in torch; `save_pretrained` would copy torch's file as the
   model's code and name that class in config.json's auto_map, so the folder would not load:
   `own_class` gives the model its class back for the length of a save. And the gathered state
   dict holds a tied weight twice, as two tensors (`save_pretrained` drops only shared storage):
   `without_tied_copies` drops the copy, as an unsharded save does.
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
from .flops import StepTimerCallback, ThroughputMeter, flops_per_token, resolve_peak_flops
from .hardware import resolve_hardware, tf32_matmuls, training_dtype
from .interrupt import StopController
from .settings import RunConfig, TrainingSettings, effective_batch_size, require_choice

WSD = "warmup_stable_decay"


def fsdp_requested() -> bool:
    """True when the launcher was given an FSDP config (`accelerate launch` sets ACCELERATE_USE_FSDP)."""
    return os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true"


def shard_on_cpu(accelerator: Accelerator) -> bool:
    """Make a CPU run that asked for FSDP an FSDP run; True when it changed the accelerator's state.

    A no-op on GPUs (accelerate sets FSDP itself) and for runs that did not ask for it.
    """
    state = accelerator.state
    if not fsdp_requested() or state.distributed_type != DistributedType.MULTI_CPU:
        return False
    plugin = FullyShardedDataParallelPlugin()  # from the launcher's FSDP_* variables, as Accelerator builds it
    if state.mixed_precision != "no":  # what AcceleratorState does for a GPU FSDP run
        plugin.set_mixed_precision(state.mixed_precision)
    state.fsdp_plugin = plugin
    # Both shared states, as AcceleratorState's own upgrade does: every later `AcceleratorState()`
    # copies PartialState's type over its own.
    state.distributed_type = PartialState().distributed_type = DistributedType.FSDP
    return True


@contextlib.contextmanager
def own_class(model: nn.Module) -> Iterator[nn.Module]:
    """`model` with its own class (not FSDP2's `FSDP<Class>`) inside the block; any model passes through.

    Only for saving from a state dict already gathered: FSDP's own methods are not there meanwhile.
    """
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
    """`state_dict` without the weights tied to another one (the output head tied to the embedding),
    which `from_pretrained` ties again; None stays None (the model's own state dict is saved)."""
    if state_dict is None:
        return None
    tied = set(getattr(model, "all_tied_weights_keys", None) or ())
    return {name: tensor for name, tensor in state_dict.items() if name not in tied}


def training_arguments(run: RunConfig) -> TrainingArguments:
    """TrainingArguments from the Trainer keys of the `training` and `hardware` sections (written, or
    MiniGPT's defaults) and the ones MiniGPT sets itself.

    `save_total_limit` is left to `CompleteCheckpointCallback`, which rotates only once a new
    checkpoint is marked complete (Trainer rotates before: a kill then could leave none).
    """
    t, h = run.training, resolve_hardware(run.hardware)
    kwargs = {key: getattr(section, key) for section in (t, h) for key in section.to_dict() if key in section.trainer_keys()}
    kwargs["save_total_limit"] = None
    # Trainer refuses load_best_model_at_end unless every save is at an evaluation: then it is off
    best = kwargs.pop("load_best_model_at_end", False) and t.save_steps % t.eval_steps == 0
    if kwargs.get("optim") is not None:
        require_choice(t.optim, [name.value for name in OptimizerNames], "training.optim")
    try:
        return TrainingArguments(
            **kwargs,
            output_dir=t.output_dir,
            lr_scheduler_kwargs=_schedule_kwargs(t),
            logging_strategy="steps",
            logging_first_step=True,  # the step-1 loss anchors the curve
            eval_strategy="steps",
            save_strategy="steps",
            prediction_loss_only=False,  # evaluation hands per-block sums to compute_metrics
            disable_tqdm=False,
            bf16=h.bf16,
            # Every parameter gets a gradient each step; searching for unused ones costs DDP an extra
            # pass over the graph per step and a warning.
            ddp_find_unused_parameters=False,
            load_best_model_at_end=best,
        )
    except ValueError as err:  # what only the machine can tell, e.g. bf16 without a GPU
        raise ConfigError(
            f"hardware settings do not fit this machine: {err} (without a GPU use hardware.profile=cpu)"
        ) from None


def _schedule_kwargs(t: TrainingSettings) -> dict[str, Any]:
    """Trainer's scheduler keywords: the floor of cosine_with_min_lr; for warmup_stable_decay the
    decay over the last `decay_fraction` of the steps, cosine, to the same floor (Trainer gives it
    max_steps; the warmup starts from the floor)."""
    if t.lr_scheduler_type == "cosine_with_min_lr":
        return {"min_lr": t.min_learning_rate}
    if t.lr_scheduler_type == WSD:
        decay_steps = max(1, round(t.decay_fraction * t.max_steps))
        return {
            "num_decay_steps": decay_steps,
            "min_lr_ratio": t.min_learning_rate / t.learning_rate,
            "decay_type": "cosine",
        }
    return {}


class TextScores:
    """Trainer's metric hooks for bits per byte: `preprocess_logits_for_metrics` turns each batch's
    (B, T, V) logits into (B, 5) sums (`next_token_scores`), which Trainer gathers across processes
    (without the blocks repeated to even out the last batch); `compute_metrics` adds them up.

    token_bytes: (V,) UTF-8 bytes per token id (`minigpt.data.token_bytes`).
    """

    def __init__(self, token_bytes: np.ndarray) -> None:
        self.token_bytes = torch.as_tensor(token_bytes)

    def preprocess_logits_for_metrics(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return next_token_scores(logits, block_targets(labels), self.token_bytes)  # (B, 5)

    def compute_metrics(self, prediction: EvalPrediction) -> dict[str, float]:
        return {"bpb": bits_per_byte(prediction.predictions)}


class MiniGPTTrainer(Trainer):
    """Trainer with MiniGPT's weight-decay groups, FSDP2 on CPU processes and
    derived figures (tokens/s, MFU, tokens seen, perplexity) in every log record.

    Args beyond Trainer's: `decay_embeddings` (training.decay_embeddings), `throughput` (a
    `ThroughputMeter`, flops.py),
    `validation_blocks` (blocks in the split the evaluation's come from, said in each record) and
    `stop_controller`: a stop asked during an evaluation in one process cuts it short
    (`get_eval_dataloader`): nothing of it is logged, and the run saves and stops at once.
    """

    def __init__(
        self,
        *args: Any,
        decay_embeddings: bool = False,
        throughput: Any = None,
        validation_blocks: int | None = None,
        stop_controller: Any = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.decay_embeddings = decay_embeddings
        self.throughput = throughput
        self.validation_blocks = validation_blocks
        self.stop_controller = stop_controller
        self.evaluation_cut = False  # the last evaluation ended early for a stop: not logged

    def create_accelerator_and_postprocess(self) -> None:
        """Trainer's, then FSDP for CPU processes launched with an FSDP config, which accelerate
        alone runs unsharded (the module doc, 1)."""
        super().create_accelerator_and_postprocess()
        if shard_on_cpu(self.accelerator):
            self.is_fsdp_enabled = True  # what Trainer sets from the state it has just read

    def get_decay_parameter_names(self, model: nn.Module) -> list[str]:
        """Weight matrices only: no norm weights or biases (by shape, whatever their names), and no
        embeddings (and so the tied output head) unless `training.decay_embeddings` is set, as minGPT
        does: a row of an embedding table only gets gradient when its token occurs, so decay would
        steadily shrink rare tokens toward zero.
        """
        # Trainer finds norms by class and name; an RMSNorm named ln_1 passes both tests, so keep
        # matrices only (ndim >= 2), which leaves out every norm weight and bias whatever its name.
        matrices = {name for name, param in model.named_parameters() if param.ndim >= 2}
        names = [name for name in super().get_decay_parameter_names(model) if name in matrices]
        if self.decay_embeddings:
            return names
        embedding_params = {
            f"{module_name}.{param_name}" if module_name else param_name
            for module_name, module in model.named_modules()
            if isinstance(module, nn.Embedding)
            for param_name, _ in module.named_parameters(recurse=False)
        }
        return [name for name in names if name not in embedding_params]

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> None:
        """Trainer's, except that a model sharded by FSDP2 is saved as an unsharded one is (the module doc, 2):
        as its own class, not FSDP2's wrapper from torch (the folder's code and auto_map), and a
        tied weight once. No progress bar: one small weights file is noise between log lines."""
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

    def get_eval_dataloader(self, eval_dataset: Any = None) -> Any:
        """Trainer's, ending early once a stop is asked (Ctrl-C need not wait for the whole
        validation sample). Several processes would have to agree on the batch: not cut there."""
        loader = super().get_eval_dataloader(eval_dataset)
        if self.stop_controller is None or self.args.world_size > 1:
            return loader
        return StoppableLoader(loader, self)

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        """Add tokens/s, MFU and tokens seen to training records; perplexity and blocks read to eval ones."""
        if self.evaluation_cut and any(key.startswith("eval_") for key in logs):  # a part of the rows: no result
            self.evaluation_cut = False
            return
        if "loss" in logs and self.throughput is not None:
            logs.update(self.throughput.take_window())
            logs["tokens_seen"] = self.state.global_step * self.throughput.tokens_per_step
        if "eval_loss" in logs:  # the validation blocks' mean loss per prediction, in nats
            logs["eval_perplexity"] = math.exp(min(logs["eval_loss"], 50.0))  # capped: exp overflows
            if self.validation_blocks is not None and self.eval_dataset is not None:
                logs["eval_blocks"] = len(self.eval_dataset)  # read by the evaluation, of ...
                logs["validation_blocks"] = self.validation_blocks  # ... the split's
        if "train_runtime" in logs and self.throughput is not None:  # from the steps trained, not max_steps
            logs.update(self.throughput.session_rates(logs["train_runtime"]))
        super().log(logs, start_time)


class StoppableLoader:
    """An evaluation dataloader that ends at the first batch after a stop is asked, and then has the
    trainer save and stop (the step's training is done; only the evaluation is cut)."""

    def __init__(self, loader: Any, trainer: MiniGPTTrainer) -> None:
        self.loader, self.trainer = loader, trainer

    def __iter__(self):
        controller = self.trainer.stop_controller
        for batch in self.loader:
            if controller.stop_requested:
                self.trainer.evaluation_cut = True
                if self.trainer.is_in_train:  # inside training: save at this step, then stop
                    self.trainer.control.should_save = True
                    self.trainer.control.should_training_stop = True
                    controller.stopped_at_step = self.trainer.state.global_step
                return
            yield batch

    def __len__(self) -> int:
        return len(self.loader)

    def __getattr__(self, name: str) -> Any:  # dataset, batch_size, sampler: the loader's
        return getattr(self.loader, name)


def build_trainer(
    run: RunConfig,
    args: TrainingArguments,
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    data: RunData,
    callbacks: Sequence[TrainerCallback] = (),
    stop_controller: StopController | None = None,
) -> MiniGPTTrainer:
    """The run's Trainer and MiniGPT's callbacks: step timer and throughput (MFU against the
    device's peak), metrics.jsonl, samples, complete checkpoints, stops, epochs, log lines."""
    t, output_dir = run.training, Path(run.training.output_dir)
    stop_controller = stop_controller or StopController()
    with args.main_process_first(desc="peak FLOP/s"):  # one process measures, the others read the cache
        peak = resolve_peak_flops(
            run.hardware.peak_flops, args.device, training_dtype(run.hardware), tf32=tf32_matmuls(run.hardware)
        )
    meter = ThroughputMeter(
        samples_per_step=effective_batch_size(run.hardware, args.world_size),
        block_size=run.data.block_size,
        flops_per_token=flops_per_token(model, model.config, run.data.block_size),
        peak_flops=peak.flops,
        num_devices=args.world_size,
    )
    own: list[TrainerCallback] = [
        StepTimerCallback(meter),  # first, so sampling at step end is not timed as training
        MetricsFileCallback(
            output_dir / METRICS_FILE,
            segment={"hardware": run.hardware.to_dict(), "threads": torch.get_num_threads()},
        ),
        SampleTextCallback(
            tokenizer,
            prompts=t.sample_prompts,
            path=output_dir / SAMPLES_FILE,
            every=t.sample_steps,
            max_new_tokens=t.sample_max_new_tokens,
            temperature=t.sample_temperature,
            top_k=t.sample_top_k,
            seed=t.seed,
            stop_controller=stop_controller,
        ),
        EpochCallback(data.start_epoch),
    ]
    if args.world_size > 1:  # whole copies or shards: the run says which
        own.append(ParameterLayoutCallback())
    if t.max_time is not None:
        own.append(MaxTimeCallback(t.max_time, t.warmup_steps, say=args.should_save))
    scores = TextScores(data.token_bytes)
    trainer = MiniGPTTrainer(
        model=model,
        args=args,
        train_dataset=data.train,
        eval_dataset=data.evaluation.blocks,
        processing_class=tokenizer,
        data_collator=data.collator,
        # Last the stop (it sees a stop any other callback asked for at this step), then the
        # checkpoint marker (it prepares the folder of a save the others decided on).
        callbacks=[
            *own,
            *callbacks,
            StopTrainingCallback(stop_controller),
            CompleteCheckpointCallback(yaml.safe_dump(run.to_dict(), sort_keys=False), t.save_total_limit),
        ],
        preprocess_logits_for_metrics=scores.preprocess_logits_for_metrics,
        compute_metrics=scores.compute_metrics,
        decay_embeddings=t.decay_embeddings,
        throughput=meter,
        validation_blocks=data.evaluation.total,
        stop_controller=stop_controller,
    )
    trainer.peak_flops = peak  # what MFU divides by, and where it came from (the run's first lines say)
    trainer.remove_callback(ProgressCallback)
    trainer.add_callback(LogLineProgressCallback(stop_controller))
    return trainer
