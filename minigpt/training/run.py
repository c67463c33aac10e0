"""`train`: one training run from a RunConfig, from raw corpus to `<output_dir>/final/`: where it starts
(start.py), the tokenizer and data, the plan for `training.budget` (sizing.py), the model, the Trainer
(trainer.py, callbacks.py), then the final evaluation, model and summary.json. Trainer owns the
optimizer, schedule, clipping, accumulation, precision and checkpoints; Accelerate the devices.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import yaml
from transformers import (
    AutoModelForCausalLM,
    GenerationConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    TrainerCallback,
    TrainerState,
    TrainingArguments,
    set_seed,
)

from ..atomic import atomic_output_dir, atomic_write_file
from ..console import plural, transformers_progress_bars
from ..data.chat_ready import fit_embeddings
from ..data.run_data import RunData, prepare_run_data
from ..data.sources import Sources
from ..data.tokenizer import load_or_train_tokenizer, load_tokenizer
from ..distributed import is_main_process
from ..errors import ConfigError
from ..model import MiniGPTConfig
from ..run_layout import (
    CORPUS_REPORT_FILE,
    FINAL_DIR,
    PLAN_FILE,
    RESOLVED_CONFIG_NAME,
    SUMMARY_FILE,
    TRAINER_STATE_NAME,
    checkpoint_step,
    model_folder_name,
)
from .callbacks import MetricsFileCallback
from .checkpoints import full_disk_is_one_line
from .flops import matmul_parameter_count
from .hardware import cpu_run_settings, resolve_hardware, training_dtype
from .interrupt import StopController
from .memory_estimate import estimate_run_memory
from .settings import HardwareSettings, ModelSettings, RunConfig, TrainingSettings, effective_batch_size
from .sizing import FITTED_RULE, HEAD_SIZE, Plan, apply_settings, size_run
from .start import BaseStart, RunStart, check_shared_output_dir, choose_start
from .trainer import MiniGPTTrainer, build_trainer, own_class, training_arguments, without_tied_copies

EVALUATION_METRICS = ("eval_loss", "eval_perplexity", "eval_bpb")  # what the summary keeps of an evaluation


@dataclass
class TrainingResult:
    """What a finished (or stopped) run produced."""

    output_dir: Path
    final_dir: Path | None  # <output_dir>/final, None when the run was stopped before the end
    global_step: int
    tokens_seen: int
    runtime_seconds: float
    final_metrics: dict[str, float]  # eval_loss, eval_perplexity, eval_bpb of the model in final/
    best_eval_bpb: float | None
    stopped: bool  # stopped by a signal or StopController.request_stop() (a checkpoint was saved)
    log_history: list[dict[str, Any]] = field(repr=False, default_factory=list)
    base_model: dict[str, Any] | None = None  # model.init_from as recorded (repo id + revision, or folder name)
    base_metrics: dict[str, float] = field(default_factory=dict)  # the base's eval_* at step 0
    page: Path | None = None  # <output_dir>/run.html, once the reporting stage wrote it
    final_step: int | None = None  # the step final/'s model is from: the best evaluation's (load_best_model_at_end)

    def record(self) -> dict[str, Any]:
        """summary.json's content."""
        record = {
            "global_step": self.global_step,
            "tokens_seen": self.tokens_seen,
            "runtime_seconds": round(self.runtime_seconds, 2),
            "stopped": self.stopped,
            "final_dir": str(self.final_dir) if self.final_dir else None,
            "best_eval_bpb": self.best_eval_bpb,
            "final_step": self.final_step,
            **self.final_metrics,
        }
        if self.base_model is not None:
            record["base_model"] = self.base_model
            record.update({f"base_{key}": value for key, value in self.base_metrics.items()})
        return record


def train(
    run: RunConfig,
    callbacks: Sequence[TrainerCallback] = (),
    stop_controller: StopController | None = None,
    resume: bool = False,
    load_base: Callable[[RunConfig], BaseStart] | None = None,
    sources: Sources | None = None,
) -> TrainingResult:
    """Train a model end to end as the run config says (docs/training.md); returns what it produced.

    `callbacks` are extra `TrainerCallback`s; a `StopController`'s `request_stop()` saves a checkpoint
    at the next step and returns with `stopped=True`. `load_base` loads `model.init_from` for a new run
    (minigpt.hub.base_model.load_base); `sources` are the data files as the caller found them.
    """
    started = time.perf_counter()
    stop_controller = stop_controller or StopController()
    with cpu_run_settings(run.hardware):
        # The `auto` precision and attention decided once, for this machine (a start leaves the
        # hardware section as configured); what follows reads these values.
        hardware = resolve_hardware(run.hardware)
        dtype = training_dtype(hardware)
        args = training_arguments(run, hardware)  # also sets up the process group under `accelerate launch`
        check_shared_output_dir(run.training.output_dir)  # several machines: one folder for all of them
        start = choose_start(run, resume, main=args.should_save, load_base=load_base, sources=sources)
        run = start.run
        tokenizer, data = _tokenizer_and_data(start, args)
        if run.training.budget is not None:  # a new run sized for its corpus and budget
            start.plan = _size_for_budget(run, tokenizer, data, args, dtype)
        model = _model_to_train(start, tokenizer, data, hardware.attn_implementation)
        if start.plan is not None or start.plan_adopted:
            args = training_arguments(run, hardware)  # the plan's steps, warmup and learning rates
        args.eval_on_start = start.base is not None  # step 0: a base on the new validation data
        trainer = build_trainer(run, args, model, tokenizer, data, callbacks, stop_controller, dtype=dtype)
        if args.should_save:  # the one process that prints and writes run files
            _announce(start, model, args, data, trainer, hardware)
        with full_disk_is_one_line(run.training.output_dir, stop_controller.resume_hint):
            if start.finishing:
                _restore_last_step(trainer, start.checkpoint)
            else:
                with stop_controller.install_signal_handlers():
                    trainer.train(resume_from_checkpoint=start.checkpoint)
            return _finish(trainer, tokenizer, start, stop_controller.stop_requested, started)


# ---- tokenizer, data and plan ------------------------------------------------------------------------


def _tokenizer_and_data(start: RunStart, args: TrainingArguments) -> tuple[PreTrainedTokenizerBase, RunData]:
    """The run's tokenizer (trained, loaded, or the base's) and its data as training reads it."""
    run = start.run
    # The global main process first (it trains and caches, into shared folders), then the first
    # process of each machine (a cache on a machine's own disk), then the rest load.
    with args.main_process_first(local=False, desc="tokenizer and data"), args.main_process_first(desc="data"):
        if run.model.init_from is None:
            tokenizer = load_or_train_tokenizer(
                run.tokenizer, start.sources, new_path=start.own_tokenizer, checked=start.checked_tokenizer
            )
        else:  # the base's tokenizer (a checkpoint carries the same one): the blocks are keyed by it
            tokenizer = start.base.tokenizer if start.base is not None else load_tokenizer(start.checkpoint)
            if args.should_save:
                print(f"tokenizer: the base model's ({run.model.init_from}), {len(tokenizer)} tokens", flush=True)
        data = prepare_run_data(
            start.sources,
            tokenizer,
            seed=run.training.seed,
            eval_tokens=run.training.eval_tokens,
        )
    if run.training.sample_prompts is None:  # the run's resolved config says the prompts it used
        run.training.sample_prompts = data.sample_prompts
        data.notes.append(
            f"samples continue {plural(len(data.sample_prompts), 'opening')} of the validation split: "
            f"{', '.join(map(repr, data.sample_prompts))} (training.sample_prompts to choose)"
        )
    if args.should_save:
        for note in data.notes:
            print(note, flush=True)
    return tokenizer, data


def _size_for_budget(
    run: RunConfig, tokenizer: PreTrainedTokenizerBase, data: RunData, args: TrainingArguments, dtype: torch.dtype
) -> Plan:
    """Choose the model and steps for training.budget on this corpus, set them on the run, say them.
    Every process measures (the machine as loaded as it will train); the main one's plan is taken."""

    def config_for(layers: int, width: int) -> MiniGPTConfig:
        shape = dataclasses.replace(run.model, num_hidden_layers=layers, hidden_size=width, num_attention_heads=width // HEAD_SIZE)
        return build_model_config(shape, tokenizer)

    plan = size_run(
        run,
        config_for,
        corpus_tokens=data.corpus.train_stats.tokens,
        tokens_per_step=effective_batch_size(run.hardware, args.world_size) * run.data.block_size,
        accumulation=run.hardware.gradient_accumulation_steps,
        dtype=dtype,
        device=args.device,  # the step times of the device the run trains on
        eval_tokens=len(data.evaluation.blocks) * run.data.block_size,  # what each evaluation reads
    )
    if args.world_size > 1:
        chosen = [plan]
        torch.distributed.broadcast_object_list(chosen, src=0)
        plan = chosen[0]
    apply_settings(run, plan.overrides())
    if args.should_save:
        for line in plan.lines():
            print(line, flush=True)
    return plan


# ---- the model -------------------------------------------------------------------------------------


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


def new_model(config: MiniGPTConfig, seed: int, attention: str) -> PreTrainedModel:
    """A newly initialised model of `config` (weights from `seed`, the run's `training.seed`) with the
    attention kernel `attention` (resolved: never "auto")."""
    set_seed(seed)  # the model's initial weights depend only on the seed
    return AutoModelForCausalLM.from_config(config, attn_implementation=attention)


def generation_defaults(
    model_config: MiniGPTConfig, training: TrainingSettings, stop_token_ids: Sequence[int] | None = None
) -> GenerationConfig:
    """What `generate()`, `pipeline("text-generation")` and servers use when the caller sets nothing:
    the run's sample settings (greedy when training.sample_temperature is 0), the data's stop tokens
    (the end of text; a chat reply's end of turn), and sequences no longer than the model's context."""
    sampling = (
        {"do_sample": True, "temperature": training.sample_temperature, "top_k": training.sample_top_k or 0}
        if training.sample_temperature > 0
        else {"do_sample": False}
    )
    stops = list(stop_token_ids or [])
    eos = stops if len(stops) > 1 else (stops[0] if stops else model_config.eos_token_id)
    return GenerationConfig(
        max_length=model_config.max_position_embeddings,  # prompt + new tokens
        bos_token_id=model_config.bos_token_id,
        eos_token_id=eos,
        pad_token_id=model_config.pad_token_id,
        **sampling,
    )


def _model_to_train(start: RunStart, tokenizer: PreTrainedTokenizerBase, data: RunData, attention: str) -> PreTrainedModel:
    """The base's weights, a resumed run's architecture (its weights come from the checkpoint), or a
    new model with the attention kernel `attention`; its embeddings fitted to the tokenizer (the
    role tokens the data added), its vocabulary and special ids checked against the tokenizer's."""
    run = start.run
    if start.base is not None:
        model = start.base.model
        note = fit_embeddings(model, tokenizer, data.added_token_ids)  # role tokens the data added
        if note and is_main_process():
            print(f"the base model: {note}", flush=True)
    elif start.checkpoint is not None and start.finishing:  # the run's last step: its weights, no training
        model = AutoModelForCausalLM.from_pretrained(start.checkpoint, attn_implementation=attention)
    elif run.model.init_from is not None:  # resuming: the checkpoint's architecture, its weights later
        model = new_model(MiniGPTConfig.from_pretrained(start.checkpoint), run.training.seed, attention)
    else:
        model = new_model(build_model_config(run.model, tokenizer), run.training.seed, attention)
    model.generation_config = generation_defaults(model.config, run.training, data.stop_token_ids)
    # The tokenizer saved beside the model states its context, so `truncation=True` and pipelines
    # cut prompts to what the model takes.
    tokenizer.model_max_length = model.config.max_position_embeddings
    config = model.config
    # The model's vocabulary and special ids agree with the tokenizer's. (The blocks were prepared
    # for this tokenizer, keyed by its fingerprint; the run config has checked they fit the model.)
    check_matches_tokenizer(config, tokenizer, allow_larger_vocab=run.model.init_from is not None)  # a stock base may pad
    return model


def check_matches_tokenizer(config: MiniGPTConfig, tokenizer: PreTrainedTokenizerBase, allow_larger_vocab: bool) -> None:
    """A one-line `ConfigError` unless the model's vocabulary (larger only with `allow_larger_vocab`:
    padded) and its special ids (those set) are the tokenizer's."""
    size = len(tokenizer)  # added special tokens included, unlike tokenizer.vocab_size
    if config.vocab_size < size or (config.vocab_size > size and not allow_larger_vocab):
        raise ConfigError(f"the model's vocab_size is {config.vocab_size} but the tokenizer has {size} tokens")
    for name in ("bos", "eos", "pad"):
        model_id, token_id = getattr(config, f"{name}_token_id"), getattr(tokenizer, f"{name}_token_id")
        if model_id is not None and model_id != token_id:
            raise ConfigError(f"the model's {name}_token_id is {model_id} but the tokenizer's is {token_id}")


def _announce(
    start: RunStart, model: PreTrainedModel, args: TrainingArguments, data: RunData, trainer: MiniGPTTrainer,
    hardware: HardwareSettings,
) -> None:
    """The resolved config (and plan) written to the run's folder, and the run's opening lines: model,
    data, batch and steps, device, memory, MFU's peak, the corpus report with this run's plan."""
    run, h = start.run, start.run.hardware  # precision, attention and compile as in effect: args, the model
    output_dir = Path(run.training.output_dir)
    # Only now that the run can start: a start refused for its data or settings leaves no run file.
    output_dir.mkdir(parents=True, exist_ok=True)
    with atomic_write_file(output_dir / RESOLVED_CONFIG_NAME) as handle:
        handle.write(run.to_yaml())
    if start.plan is not None:
        with atomic_write_file(output_dir / PLAN_FILE) as handle:
            json.dump(start.plan.record(), handle, indent=2)
    batch, block, steps = effective_batch_size(h, args.world_size), run.data.block_size, run.training.max_steps
    policy = os.environ.get("OMP_WAIT_POLICY")  # scripts/train.py sets PASSIVE on busy cores
    lines = [
        f"model: {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters ({run.model.num_hidden_layers} "
        f"layers, hidden {run.model.hidden_size}, vocab {model.config.vocab_size}, context {block})",
        data.description,
        f"effective batch: {h.per_device_train_batch_size} per device x {h.gradient_accumulation_steps} "
        f"accumulation x {args.world_size} process(es) = {batch} sequences = {batch * block:,} tokens per step; "
        f"{steps:,} steps = {steps * batch * block / 1e6:.2f}M tokens",
        f"device: {args.device} | {'bf16' if args.bf16 else 'fp16' if args.fp16 else 'fp32'} | attention "
        f"{model.config._attn_implementation} | compile {'on' if args.torch_compile else 'off'} | threads {torch.get_num_threads()}"
        f"{f', OMP_WAIT_POLICY={policy}' if policy else ''} -> {run.training.output_dir}",
    ]
    if getattr(model.config, "model_type", None) == MiniGPTConfig.model_type:  # remote-code copies too
        lines.append(estimate_run_memory(hardware, run.data.block_size, model.config, args.device.type).describe())
    lines.append(f"MFU against {trainer.peak_flops.flops:.3g} FLOP/s per device ({trainer.peak_flops.source})")
    print("\n".join(lines), flush=True)
    if data.report is not None:  # the corpus, and the epochs and tokens per parameter this plan makes of it
        parameters = matmul_parameter_count(model, model.config)
        tokens = batch * block * steps
        ratio = FITTED_RULE.tokens_per_parameter(parameters, tokens, data.report.train["tokens"])
        report = data.report.with_plan(tokens, parameters, ratio, FITTED_RULE.ratio)
        with atomic_write_file(output_dir / CORPUS_REPORT_FILE) as handle:  # the page shows its warnings first
            json.dump({**report.to_dict(), "warnings": report.warnings()}, handle, indent=2)
        print("\n".join(report.lines()), flush=True)
    if start.base is not None:
        print(f"starting from {start.base.name}: evaluating it on the new validation data first", flush=True)


# ---- the end of the run ----------------------------------------------------------------------------


def _restore_last_step(trainer: MiniGPTTrainer, checkpoint: str) -> None:
    """A run stopped while evaluating or saving its final model: its last checkpoint's weights (the
    model was loaded from it) and state, no step trained; an evaluation the stop cut short is redone."""
    if trainer.args.should_save:
        print(
            f"{Path(checkpoint).name} is the run's last step and its final model was never saved: "
            "evaluating and saving it, no step trained",
            flush=True,
        )
    trainer.state = TrainerState.load_from_json(str(Path(checkpoint) / TRAINER_STATE_NAME))
    step, history = trainer.state.global_step, trainer.state.log_history
    evaluated = any(r.get("step") == step and "eval_loss" in r for r in history)
    if trainer.args.should_save:  # drop the records the stopped run wrote after its checkpoint
        metrics_file = next(c for c in trainer.callback_handler.callbacks if isinstance(c, MetricsFileCallback))
        metrics_file.keep_through(step, evaluation_at_step=evaluated)


def _finish(
    trainer: MiniGPTTrainer, tokenizer: PreTrainedTokenizerBase, start: RunStart, stopped: bool, started: float
) -> TrainingResult:
    """After training: the final evaluation and model (unless stopped), then summary.json."""
    run = start.run
    output_dir = Path(run.training.output_dir)
    final_metrics, final_dir, final_step = {}, None, None
    if not stopped:
        history, state = trainer.state.log_history, trainer.state
        last = next((r for r in reversed(history) if "eval_loss" in r), None)
        if last is None or last["step"] != state.global_step:  # none logged at the last step
            trainer.evaluate()
            last = history[-1]
        final_step = state.global_step
        if trainer.args.load_best_model_at_end and state.best_model_checkpoint:  # Trainer loaded it at the end
            final_step = checkpoint_step(state.best_model_checkpoint)
            last = next(r for r in reversed(history) if "eval_loss" in r and r["step"] == final_step)
        final_metrics = {k: v for k, v in last.items() if k in EVALUATION_METRICS}
        # Under FSDP / ZeRO-3 this gathers the shards, a collective: every process takes part.
        state_dict = trainer.accelerator.get_state_dict(trainer.model)
        if trainer.args.should_save:
            final_dir = save_final_model(trainer, tokenizer, run, output_dir / FINAL_DIR, state_dict)
    history = trainer.state.log_history
    bpbs = [r["eval_bpb"] for r in history if "eval_bpb" in r]
    first = next((r for r in history if "eval_loss" in r and r.get("step") == 0), {})  # a base's, on start
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
        base_model=start.base.record if start.base is not None else _base_record(run),
        base_metrics={k: v for k, v in first.items() if k in EVALUATION_METRICS} if run.model.init_from else {},
        final_step=final_step,
    )
    if trainer.args.should_save:
        with atomic_write_file(output_dir / SUMMARY_FILE) as handle:
            json.dump(result.record(), handle, indent=2)
    return result


def _base_record(run: RunConfig) -> dict[str, Any] | None:
    """A resumed run's base as its config records it (repo id + revision, or folder name), unread."""
    model = run.model
    if model.init_from is None:
        return None
    if model.init_revision is not None:  # set, at the start, for ORG/NAME only
        return {"repo_id": model.init_from, "revision": model.init_revision}
    return {"folder": model_folder_name(model.init_from)}


def save_final_model(
    trainer: MiniGPTTrainer,
    tokenizer: PreTrainedTokenizerBase,
    run: RunConfig,
    final_dir: Path,
    state_dict: dict[str, torch.Tensor] | None = None,
) -> Path:
    """Model, tokenizer and resolved config to `final_dir`, which appears whole or not at all;
    `state_dict` is the full (gathered) one when the model is sharded, None saves the model's own."""
    model = trainer.accelerator.unwrap_model(trainer.model)  # no DDP wrapper, no compiled module
    model.config.use_cache = True  # Trainer turned the KV cache off for training; generation wants it
    state_dict = without_tied_copies(model, state_dict)  # a gathered one holds a tied weight twice
    with atomic_output_dir(final_dir) as staging, transformers_progress_bars(False), own_class(model):
        model.save_pretrained(staging, state_dict=state_dict)  # as its own class, not FSDP2's wrapper
        tokenizer.save_pretrained(staging)
        (staging / RESOLVED_CONFIG_NAME).write_text(yaml.safe_dump(run.to_dict(), sort_keys=False))
    return final_dir
