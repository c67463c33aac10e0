"""One training run from a RunConfig: tokenizer, data, model, `transformers.Trainer`, final model.

`run_training(run)` goes from raw corpus to `<output_dir>/final/` (loadable with
`from_pretrained`). Trainer owns the optimizer (AdamW), the schedule (linear warmup then cosine to
a floor), clipping, gradient accumulation (loss = mean over all tokens of the accumulated window,
through `num_items_in_batch`), precision and checkpoints; Accelerate owns devices and processes.
What is written here is only what those libraries cannot do: which parameters decay, derived
metrics (tokens/s, MFU, bits per byte), samples, the final save and the summary.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import yaml
from torch import nn
from transformers import (
    AutoModelForCausalLM,
    GenerationConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    TrainerCallback,
    TrainingArguments,
    default_data_collator,
    set_seed,
)
from transformers.trainer_callback import ProgressCallback
from transformers.training_args import OptimizerNames

from ..atomic import atomic_output_dir, atomic_write_file
from ..data.compatibility import check_compatible
from ..data.corpus import prepare_corpus
from ..data.tokenizer import check_existing_tokenizer, load_or_train_tokenizer, load_tokenizer
from ..data.training_blocks import TrainingBlocks
from ..distributed import is_main_process
from ..errors import ConfigError
from ..model import MiniGPTConfig
from ..progress import transformers_progress_bars
from ..run_layout import model_folder_name
from .base_model import (
    adopt_base_architecture,
    adopt_saved_settings,
    load_base_tokenizer,
    load_base_weights,
    read_base_model,
    record_base_location,
)
from .busy_cores import BusyCoresCallback
from .callbacks import (
    EpochOffsetCallback,
    LogLineProgressCallback,
    MetricsFileCallback,
    SampleTextCallback,
    StepTimerCallback,
)
from .checkpoints import AtomicCheckpointTrainer, check_resume_compatible, find_resume_checkpoint
from .cpu_kernels import cpu_training_kernels
from .hardware import cpu_run_settings, on_cpu, resolve_hardware, tf32_matmuls, training_dtype
from .interrupt import StopController
from .late_dropout import LateDropoutCallback
from .optimizers import AUX_ADAMW, MUON, muon_with_adamw
from .peak_flops import PeakFlops, resolve_peak_flops, store_peak_flops
from .plotting import plot_loss_curves
from .run_config import check_fits_model
from .run_folder import (
    FINAL_DIR,
    LOSS_PLOT_FILE,
    METRICS_FILE,
    RESOLVED_CONFIG_NAME,
    SAMPLES_FILE,
    SUMMARY_FILE,
    check_resume_target,
    claim_output_dir,
)
from .settings import (
    HardwareSettings,
    ModelSettings,
    RunConfig,
    TrainingSettings,
    effective_batch_size,
    require_choice,
)
from .throughput import ThroughputMeter, flops_per_token
from .time_budget import TimeBudgetCallback, WarmupStableDecay, planned_end

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


class _EvaluationStopped(Exception):
    """A stop was requested during an evaluation inside training: the rest of it is skipped."""


class MiniGPTTrainer(AtomicCheckpointTrainer):
    """Trainer with MiniGPT's weight-decay groups and derived metrics in every log record.

    Checkpoints are atomic and carry the resolved run config (AtomicCheckpointTrainer).
    """

    def __init__(
        self,
        *args: Any,
        decay_embeddings: bool = False,
        throughput: ThroughputMeter | None = None,
        bits_per_byte: Callable[[float], float] | None = None,
        schedule: WarmupStableDecay | None = None,
        muon_kwargs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.schedule = schedule  # warmup_stable_decay's multiplier; None: Trainer's own schedules
        self.decay_embeddings = decay_embeddings
        self.muon_kwargs = muon_kwargs  # torch.optim.Muon's keywords under training.optim muon, else None
        self.throughput = throughput
        self.bits_per_byte = bits_per_byte  # validation loss (nats/token) -> bits per UTF-8 byte
        self.peak_flops: PeakFlops | None = None  # MFU's peak and its source (build_trainer sets it)

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

    def create_scheduler(self, num_training_steps: int, optimizer: torch.optim.Optimizer | None = None):
        """warmup_stable_decay as `WarmupStableDecay`, whose end a time budget can move (Trainer's
        own takes a fixed decay length); every other schedule is Trainer's."""
        if self.schedule is None:
            return super().create_scheduler(num_training_steps, optimizer)
        if self.lr_scheduler is None:
            self.lr_scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer or self.optimizer, self.schedule)
        return self.lr_scheduler

    def create_optimizer(self, model: nn.Module | None = None) -> torch.optim.Optimizer:
        """Trainer's optimizer, or under `training.optim: muon` Muon on the hidden matrices and
        Trainer's AdamW on the rest (optimizers.py); Trainer schedules, clips, steps and saves it."""
        if self.muon_kwargs is None or self.optimizer is not None:
            return super().create_optimizer(model)
        if self.is_fsdp_enabled or self.is_deepspeed_enabled:  # they hand the optimizer shards of a matrix
            raise ConfigError("training.optim muon needs whole matrices: use DDP, not FSDP or DeepSpeed")
        model = self.model if model is None else model
        decayed = self.get_decay_parameter_names(model)
        self.optimizer = muon_with_adamw(model, self.args, decayed, self.muon_kwargs)
        return self.optimizer

    def prediction_step(
        self, model: nn.Module, inputs: Any, prediction_loss_only: bool, ignore_keys: Any = None
    ) -> Any:
        """Trainer's, but a stop requested mid-evaluation skips the rest (see `evaluate`)."""
        controller = self.stop_controller
        if controller is not None and controller.stop_requested and self.args.world_size == 1:
            raise _EvaluationStopped  # several processes would have to agree on the batch: not cut
        return super().prediction_step(model, inputs, prediction_loss_only, ignore_keys=ignore_keys)

    def evaluate(self, *args: Any, **kwargs: Any) -> dict[str, float]:
        """Trainer's, except that Ctrl-C during an evaluation inside training does not wait for the
        whole validation set: the evaluation is dropped (nothing logged) and the run saves and stops."""
        try:
            return super().evaluate(*args, **kwargs)
        except _EvaluationStopped:
            for callback in self.callback_handler.callbacks:  # the evaluation's progress bar
                if isinstance(callback, ProgressCallback) and callback.prediction_bar is not None:
                    callback.prediction_bar.close()
                    callback.prediction_bar = None
            self.control.should_save = True
            self.control.should_training_stop = True
            if self.stop_controller is not None:
                self.stop_controller.stopped_at_step = self.state.global_step
            return {}

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        """Add tokens/s, MFU and tokens seen to training records; perplexity and bits/byte to eval ones."""
        if "loss" in logs and self.throughput is not None:
            logs.update(self.throughput.take_window())
            logs["tokens_seen"] = self.state.global_step * self.throughput.tokens_per_step
        if "eval_loss" in logs:  # the validation split's mean loss per token, in nats
            logs["eval_perplexity"] = math.exp(min(logs["eval_loss"], 50.0))  # capped: exp overflows
            if self.bits_per_byte is not None:
                logs["eval_bpb"] = self.bits_per_byte(logs["eval_loss"])
        super().log(logs, start_time)


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


def build_model_config(model: ModelSettings, tokenizer: PreTrainedTokenizerBase) -> MiniGPTConfig:
    """The model's MiniGPTConfig: the `model:` section plus the tokenizer's vocabulary and special ids."""
    try:
        return MiniGPTConfig(
            **model.architecture(),
            vocab_size=len(tokenizer),
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
        )
    except ValueError as err:  # MiniGPTConfig names the field: say it as the YAML key
        raise ConfigError(str(err).replace("MiniGPTConfig.", "model.")) from None


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


def build_model(run: RunConfig, tokenizer: PreTrainedTokenizerBase) -> PreTrainedModel:
    """A freshly initialised MiniGPT sized to the tokenizer (len(tokenizer) tokens, its special ids)."""
    return fresh_model(build_model_config(run.model, tokenizer), run)


def build_model_from_folder(folder: str | Path, run: RunConfig) -> PreTrainedModel:
    """A MiniGPT with the architecture of a saved model folder (its config.json), freshly initialised:
    for resuming a run that started from a base, whose checkpoint then supplies the weights."""
    return fresh_model(MiniGPTConfig.from_pretrained(folder), run)


def fresh_model(config: MiniGPTConfig, run: RunConfig) -> PreTrainedModel:
    """A newly initialised model of `config`, with the run's attention and generation defaults."""
    attention = resolve_hardware(run.hardware).attn_implementation
    model = AutoModelForCausalLM.from_config(config, attn_implementation=attention)
    model.generation_config = generation_defaults(config, run.training)  # saved with every checkpoint
    return model


def generation_defaults(model_config: MiniGPTConfig, training: TrainingSettings) -> GenerationConfig:
    """What `generate()` and `pipeline("text-generation")` use when the caller sets nothing.

    The run's sample settings (greedy when training.sample_temperature is 0; top_k 0 is no top-k
    cut), and sequences no longer than the model's context: with no length of its own, the
    pipeline would add 256 new tokens, past the last learned position.
    """
    sampling = (
        {"do_sample": True, "temperature": training.sample_temperature, "top_k": training.sample_top_k or 0}
        if training.sample_temperature > 0
        else {"do_sample": False}
    )
    return GenerationConfig(
        max_length=model_config.max_position_embeddings,  # prompt + new tokens
        bos_token_id=model_config.bos_token_id,
        eos_token_id=model_config.eos_token_id,
        pad_token_id=model_config.pad_token_id,
        **sampling,
    )


def build_trainer(
    run: RunConfig,
    args: TrainingArguments,
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    train_dataset: Any,
    eval_dataset: Any,
    bits_per_byte: Callable[[float], float] | None = None,
    callbacks: Sequence[TrainerCallback] = (),
    stop_controller: StopController | None = None,
    max_threads: int | None = None,
) -> MiniGPTTrainer:
    """The run's Trainer, with MiniGPT's callbacks: step timer, log lines, metrics.jsonl, samples.

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
        data_collator=default_data_collator,  # blocks are equal length: stack, no padding or mask
        callbacks=[*own_callbacks, *callbacks],
        resolved_config=run.to_dict(),
        stop_controller=stop_controller,
        decay_embeddings=run.training.decay_embeddings,
        muon_kwargs=muon_kwargs(run.training),
        throughput=meter,
        bits_per_byte=bits_per_byte,
        schedule=schedule,
    )
    trainer.peak_flops = peak  # what MFU divides by, and where it came from (the run's first lines say)
    trainer.remove_callback(ProgressCallback)
    trainer.add_callback(LogLineProgressCallback(stop_controller))
    return trainer


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
        measured = self.peak.source.startswith(("measured", "cached"))
        if measured and self.say:
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
    """One evaluation in training-step equivalents: its forward passes over the validation blocks
    against a step's forward and backward (about 3 forwards) over a training batch."""
    hardware = run.hardware
    train_blocks = hardware.per_device_train_batch_size * hardware.gradient_accumulation_steps
    return len(eval_dataset) / (3.0 * train_blocks) if eval_dataset is not None else 0.0


def run_training(
    run: RunConfig,
    callbacks: Sequence[TrainerCallback] = (),
    stop_controller: StopController | None = None,
    resume: bool = False,
) -> TrainingResult:
    """Train a model end to end as the run config says; returns what it produced.

    `callbacks` are extra `TrainerCallback`s (a UI reads `logs` in `on_log`). To stop from another
    thread, pass a `StopController` and call its `request_stop()`: the run saves a checkpoint at
    the next step and returns with `stopped=True`. SIGINT/SIGTERM do the same when this runs in
    the main thread. `resume=True` continues from the newest complete checkpoint in output_dir.
    The thread count and denormal flushing the run sets are as they were again when it returns.
    """
    # Before any torch work (the main process says what it chose).
    with cpu_run_settings(run.hardware, say=is_main_process()) as max_threads:
        return _run_training(run, callbacks, stop_controller, resume, max_threads)


def _run_training(
    run: RunConfig,
    callbacks: Sequence[TrainerCallback],
    stop_controller: StopController | None,
    resume: bool,
    max_threads: int | None,
) -> TrainingResult:
    started = time.perf_counter()
    check_optimizer_name(run.training)
    stop_controller = stop_controller or StopController()
    output_dir = Path(run.training.output_dir)
    args = build_training_arguments(run)  # also sets up the process group under `accelerate launch`
    main = args.should_save  # the one process that prints and writes run files
    # Before anything is written: a tokenizer already at tokenizer.path must fit this run's data,
    # then continue this folder's run, or claim the folder for a new one.
    own_tokenizer = str(output_dir / "tokenizer")  # suggested if the existing one does not fit
    checkpoint = find_resume_checkpoint(output_dir) if resume else None
    base, base_tokenizer, base_weights, checked_tokenizer = None, None, None, None
    if run.model.init_from is None:
        checked_tokenizer = check_existing_tokenizer(run.tokenizer, run.data, new_path=own_tokenizer)
    elif checkpoint is not None:  # resuming a run that started from a base: its own checkpoint only
        run = adopt_saved_settings(run, checkpoint)
    else:  # a new run from a base: read it, and fit the config to it, before anything is written
        base = read_base_model(run.model)
        run, model_config = adopt_base_architecture(run, base.config, base.name)
        base_tokenizer = load_base_tokenizer(run, base)  # checks the config's own tokenizer.path
        run = record_base_location(run, base.location)
        check_fits_model(run, whose="the base model's ")
        attention = resolve_hardware(run.hardware).attn_implementation
        base_weights = load_base_weights(base, model_config, attention)
    finishing = False  # True: the checkpoint is the run's last step, only its final model is missing
    if checkpoint is not None:
        check_resume_compatible(run.to_dict(), checkpoint)
        finishing = check_resume_target(checkpoint, run.training.max_steps, planned_end(checkpoint))
    elif main or not run.training.overwrite_output_dir:  # every process refuses; only the main one removes
        removed = claim_output_dir(output_dir, overwrite=run.training.overwrite_output_dir)
        if removed:
            print(f"training.overwrite_output_dir: removed the previous run's {', '.join(removed)}", flush=True)

    with args.main_process_first(desc="tokenizer and data"):  # one process trains and caches, others load
        if run.model.init_from is None:
            tokenizer = load_or_train_tokenizer(
                run.tokenizer, run.data, new_path=own_tokenizer, checked=checked_tokenizer
            )
        else:  # the base's tokenizer (a checkpoint carries the same one): the blocks are keyed by it
            tokenizer = base_tokenizer if base_tokenizer is not None else load_tokenizer(checkpoint)
            if main:
                print(f"tokenizer: the base model's ({run.model.init_from}), {len(tokenizer)} tokens", flush=True)
        corpus = prepare_corpus(
            run.data, tokenizer, max_position_embeddings=run.model.max_position_embeddings
        )

    set_seed(run.training.seed)  # the model's initial weights depend only on the seed
    if base_weights is not None:
        model = base_weights
        model.generation_config = generation_defaults(model.config, run.training)
        args.eval_on_start = True  # step 0: the base on the new validation data starts the curve
    elif run.model.init_from is not None:  # resuming: the checkpoint's architecture, its weights later
        model = build_model_from_folder(checkpoint, run)
    else:
        model = build_model(run, tokenizer)
    # The tokenizer saved beside the model (checkpoints, final/) states the model's context, so
    # `truncation=True` and pipelines cut prompts to what the model takes (not 1e30 tokens).
    tokenizer.model_max_length = model.config.max_position_embeddings
    check_compatible(  # vocabulary, special ids, block size and the blocks' tokenizer all agree
        tokenizer,
        model.config.vocab_size,
        max_position_embeddings=model.config.max_position_embeddings,
        bos_token_id=model.config.bos_token_id,
        eos_token_id=model.config.eos_token_id,
        pad_token_id=model.config.pad_token_id,
        corpus=corpus,
        allow_larger_vocab=run.model.init_from is not None,  # a stock base may pad its embedding
    )
    trainer = build_trainer(
        run,
        args,
        model,
        tokenizer,
        corpus.train,
        corpus.validation,
        bits_per_byte=corpus.validation_stats.bits_per_byte,  # loss x tokens / bytes / ln 2
        callbacks=callbacks,
        stop_controller=stop_controller,
        max_threads=max_threads,
    )
    if main:
        # Only now that the run can start: a start refused for its data or settings leaves no run file.
        output_dir.mkdir(parents=True, exist_ok=True)
        with atomic_write_file(output_dir / RESOLVED_CONFIG_NAME) as handle:
            handle.write(run.to_yaml())
        print(describe_run(run, model, args, len(corpus.train), len(corpus.validation), trainer.peak_flops), flush=True)
        if base is not None:
            print(f"starting from {base.name} ({base.model_type}): evaluating it on the new validation data first", flush=True)

    if finishing:
        if main:
            print(
                f"{Path(checkpoint).name} is the run's last step and its final model was never saved: "
                "evaluating and saving it, no step trained",
                flush=True,
            )
        trainer.restore_without_training(checkpoint)
        step, history = trainer.state.global_step, trainer.state.log_history
        evaluated = any(r.get("step") == step and "eval_loss" in r for r in history)
        if main:  # an evaluation the stop cut short is redone: drop its record
            metrics_file = next(c for c in trainer.callback_handler.callbacks if isinstance(c, MetricsFileCallback))
            metrics_file.keep_through(step, evaluation_at_step=evaluated)
    else:
        # The hand-written RMSNorm backward pays on a CPU (cpu_kernels.py); compile fuses its own.
        cheaper_cpu_backward = on_cpu(run.hardware) and not run.hardware.torch_compile
        with stop_controller.install_signal_handlers(), cpu_training_kernels(model, cheaper_cpu_backward):
            trainer.train(resume_from_checkpoint=checkpoint)
    stopped = stop_controller.stop_requested

    history = trainer.state.log_history
    final_metrics = {}
    if not stopped:
        last_eval = next((r for r in reversed(history) if "eval_loss" in r), None)
        if last_eval is None or last_eval["step"] != trainer.state.global_step:
            trainer.evaluate()
            last_eval = history[-1]
        final_metrics = {k: v for k, v in last_eval.items() if k in EVALUATION_METRICS}

    final_dir = None
    if not stopped:
        # Under FSDP / ZeRO-3 this gathers the shards, a collective: every process takes part.
        state_dict = trainer.accelerator.get_state_dict(trainer.model)
        if main:
            final_dir = save_final_model(trainer, tokenizer, run, output_dir / FINAL_DIR, state_dict)
    if main:
        title = f"MiniGPT: {output_dir.name}"
        if "eval_bpb" in final_metrics:
            title += f" (validation: {final_metrics['eval_bpb']:.3f} bits/byte)"
        plot_loss_curves(history, output_dir / LOSS_PLOT_FILE, title=title)
    bpbs = [r["eval_bpb"] for r in history if "eval_bpb" in r]
    base_metrics = {}
    if run.model.init_from is not None:  # the eval on start, logged at step 0 (kept by a resume)
        first = next((r for r in history if "eval_loss" in r and r.get("step") == 0), {})
        base_metrics = {k: v for k, v in first.items() if k in EVALUATION_METRICS}
    result = TrainingResult(
        output_dir=output_dir,
        final_dir=final_dir,
        global_step=trainer.state.global_step,
        tokens_seen=trainer.state.global_step * trainer.throughput.tokens_per_step,
        runtime_seconds=time.perf_counter() - started,
        final_metrics=final_metrics,
        best_eval_bpb=min(bpbs) if bpbs else None,
        stopped=stopped,
        log_history=list(history),
        base_model=base.record() if base is not None else base_record_of(run),
        base_metrics=base_metrics,
    )
    if main:
        with atomic_write_file(output_dir / SUMMARY_FILE) as handle:
            json.dump(summary_record(result), handle, indent=2)
        if stop_controller.signum is None:  # a signal's one line has said what happened
            print(describe_result(result), flush=True)
    return result


def save_final_model(
    trainer: MiniGPTTrainer,
    tokenizer: PreTrainedTokenizerBase,
    run: RunConfig,
    final_dir: Path,
    state_dict: dict[str, torch.Tensor] | None = None,
) -> Path:
    """Model, tokenizer and resolved config to `final_dir`, which appears whole or not at all.

    `state_dict` is the full (gathered) one when the model is sharded; None saves the model's own.
    """
    model = trainer.accelerator.unwrap_model(trainer.model)  # no DDP wrapper, no compiled module
    model.config.use_cache = True  # Trainer turned the KV cache off for training; generation wants it
    with atomic_output_dir(final_dir) as staging, transformers_progress_bars(False):
        model.save_pretrained(staging, state_dict=state_dict)
        tokenizer.save_pretrained(staging)
        (staging / RESOLVED_CONFIG_NAME).write_text(yaml.safe_dump(run.to_dict(), sort_keys=False))
    return final_dir


def describe_run(
    run: RunConfig,
    model: nn.Module,
    args: TrainingArguments,
    train_blocks: int,
    val_blocks: int,
    peak_flops: PeakFlops | None = None,
) -> str:
    """The lines printed before training: model size, data, effective batch, MFU's peak and its source."""
    h = resolve_hardware(run.hardware)
    params = sum(p.numel() for p in model.parameters())
    batch = effective_batch_size(h, args.world_size)
    precision = "bf16" if h.bf16 else "fp16" if h.fp16 else "fp32"
    lines = [
        f"model: {params / 1e6:.2f}M parameters ({run.model.num_hidden_layers} layers, hidden "
        f"{run.model.hidden_size}, vocab {model.config.vocab_size}, context {run.data.block_size})",
        f"data: {train_blocks:,} training blocks, {val_blocks:,} validation blocks of {run.data.block_size} tokens",
        f"effective batch: {h.per_device_train_batch_size} per device x {h.gradient_accumulation_steps} "
        f"accumulation x {args.world_size} process(es) = {batch} sequences = "
        f"{batch * run.data.block_size:,} tokens per step",
        f"device: {args.device} | {precision} | attention {h.attn_implementation} | "
        f"compile {'on' if h.torch_compile else 'off'} | {run.training.max_steps} steps -> {run.training.output_dir}",
    ]
    if peak_flops is not None:
        lines.append(f"MFU against {peak_flops.flops:.3g} FLOP/s per device ({peak_flops.source})")
    return "\n".join(lines)


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


__all__ = [
    "MiniGPTTrainer",
    "TrainingResult",
    "build_model",
    "build_trainer",
    "build_training_arguments",
    "generation_defaults",
    "run_training",
    "save_final_model",
]
