"""`run_training`: one training run from a RunConfig, from raw corpus to `<output_dir>/final/`.

Its steps, in order: where the run starts (run_start.py: new, resumed, or from a base model); the
tokenizer and the data; the model; the Trainer (assembly.py); training, or finishing a run that
stopped at its last step; then the final evaluation, the final model, the loss plot and the summary.

Trainer owns the optimizer, the schedule, clipping, gradient accumulation (loss = mean over all
tokens of the accumulated window, through `num_items_in_batch`), precision and checkpoints;
Accelerate owns devices and processes. The final model loads with `from_pretrained`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import (
    PreTrainedModel,
    PreTrainedTokenizerBase,
    TrainerCallback,
    TrainingArguments,
    set_seed,
)

from ..atomic import atomic_write_file
from ..chat.chat_format import make_chat_ready
from ..chat.corpus import prepare_chat_corpus
from ..data.chat_template import IM_END
from ..data.compatibility import check_compatible
from ..data.corpus import PreparedCorpus, prepare_corpus
from ..data.token_bytes import token_byte_lengths
from ..data.tokenizer import load_or_train_tokenizer, load_tokenizer
from ..distributed import is_main_process
from .arguments import build_training_arguments, check_optimizer_name
from .assembly import build_trainer
from .callbacks import MetricsFileCallback
from .cpu_kernels import cpu_training_kernels
from .final_model import save_final_model
from .hardware import cpu_run_settings, on_cpu
from .interrupt import StopController
from .new_model import build_model, build_model_from_folder, generation_defaults
from .plotting import plot_loss_curves
from .run_folder import FINAL_DIR, LOSS_PLOT_FILE, RESOLVED_CONFIG_NAME, SUMMARY_FILE
from .run_start import RunStart, choose_start
from .settings import RunConfig
from .shared_folder import check_shared_output_dir
from .summary import (
    EVALUATION_METRICS,
    TrainingResult,
    base_record_of,
    describe_result,
    describe_run,
    summary_record,
)
from .trainer import MiniGPTTrainer
from .validation_sample import ValidationSample, validation_sample


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
    args = build_training_arguments(run)  # also sets up the process group under `accelerate launch`
    check_shared_output_dir(run.training.output_dir)  # several machines: one folder for all of them
    # New, resumed or from a base: every check that can refuse the run, before anything is written.
    start = choose_start(run, resume, main=args.should_save)
    tokenizer, corpus = _tokenizer_and_data(start, args)
    model = _model_to_train(start, args, tokenizer, corpus)
    # Every evaluation reads these blocks: all, or a seeded sample within training.eval_tokens.
    t = start.run.training
    evaluation = validation_sample(corpus.validation, t.eval_tokens, start.run.data.block_size, t.seed)
    trainer = build_trainer(
        start.run,
        args,
        model,
        tokenizer,
        corpus.train,
        evaluation.blocks,
        token_bytes=torch.as_tensor(token_byte_lengths(tokenizer)),  # bits per byte counts text bytes only
        validation_blocks=evaluation.total,
        callbacks=callbacks,
        stop_controller=stop_controller,
        max_threads=max_threads,
    )
    if args.should_save:  # the one process that prints and writes run files
        _announce(start, model, args, corpus, trainer, evaluation)
    _train_or_finish(trainer, model, start, stop_controller)
    stopped = stop_controller.stop_requested
    result = _finish(trainer, tokenizer, start, stopped, started)
    if args.should_save and stop_controller.signum is None:  # a signal's one line has said what happened
        print(describe_result(result), flush=True)
    return result


def _tokenizer_and_data(
    start: RunStart, args: TrainingArguments
) -> tuple[PreTrainedTokenizerBase, PreparedCorpus]:
    """The run's tokenizer (trained, loaded, or the base's) and its corpus as training blocks."""
    run = start.run
    # The global main process first (it trains and caches, into shared folders), then the first
    # process of each machine (a cache on a machine's own disk), then the rest load.
    with args.main_process_first(local=False, desc="tokenizer and data"), args.main_process_first(desc="data"):
        if run.model.init_from is None:
            tokenizer = load_or_train_tokenizer(
                run.tokenizer, run.data, new_path=start.own_tokenizer, checked=start.checked_tokenizer
            )
        else:  # the base's tokenizer (a checkpoint carries the same one): the blocks are keyed by it
            tokenizer = start.base_tokenizer
            if tokenizer is None:  # a resume: the checkpoint's copy
                tokenizer = load_tokenizer(start.checkpoint)
            elif run.data.format == "chat":  # a base without role tokens gets them, and rows for them
                note = make_chat_ready(start.base_weights, tokenizer)
                if note and args.should_save:
                    print(note, flush=True)
            if args.should_save:
                print(
                    f"tokenizer: the base model's ({run.model.init_from}), {len(tokenizer)} tokens", flush=True
                )
        prepare = prepare_chat_corpus if run.data.format == "chat" else prepare_corpus  # conversations or blocks
        corpus = prepare(run.data, tokenizer, max_position_embeddings=run.model.max_position_embeddings)
    return tokenizer, corpus


def _model_to_train(
    start: RunStart, args: TrainingArguments, tokenizer: PreTrainedTokenizerBase, corpus: PreparedCorpus
) -> PreTrainedModel:
    """The model to train: the base's weights, a resumed run's architecture (its weights come from
    the checkpoint), or a new one; checked against the tokenizer and the blocks."""
    run = start.run
    set_seed(run.training.seed)  # the model's initial weights depend only on the seed
    if start.base_weights is not None:
        model = start.base_weights
        model.generation_config = generation_defaults(model.config, run.training)
        if run.data.format == "chat":  # a reply ends at the end of its turn
            model.generation_config.eos_token_id = [model.config.eos_token_id, tokenizer.convert_tokens_to_ids(IM_END)]
        args.eval_on_start = True  # step 0: the base on the new validation data starts the curve
    elif run.model.init_from is not None:  # resuming: the checkpoint's architecture, its weights later
        model = build_model_from_folder(start.checkpoint, run)
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
    return model


def _announce(
    start: RunStart,
    model: PreTrainedModel,
    args: TrainingArguments,
    corpus: PreparedCorpus,
    trainer: MiniGPTTrainer,
    evaluation: ValidationSample,
) -> None:
    """The resolved config written to the run's folder, and the run's opening lines."""
    run = start.run
    output_dir = Path(run.training.output_dir)
    # Only now that the run can start: a start refused for its data or settings leaves no run file.
    output_dir.mkdir(parents=True, exist_ok=True)
    with atomic_write_file(output_dir / RESOLVED_CONFIG_NAME) as handle:
        handle.write(run.to_yaml())
    blocks = len(corpus.train), len(corpus.validation)
    print(describe_run(run, model, args, *blocks, trainer.peak_flops, evaluation.describe()), flush=True)
    if start.base is not None:
        print(
            f"starting from {start.base.name} ({start.base.model_type}): "
            "evaluating it on the new validation data first",
            flush=True,
        )


def _train_or_finish(
    trainer: MiniGPTTrainer, model: PreTrainedModel, start: RunStart, stop_controller: StopController
) -> None:
    """Train until max_steps or a stop; or, for a checkpoint at the run's end, only restore it."""
    if start.finishing:
        _restore_last_step(trainer, start.checkpoint)
        return
    # The hand-written RMSNorm backward pays on a CPU (cpu_kernels.py); compile fuses its own.
    hardware = start.run.hardware
    cheaper_cpu_backward = on_cpu(hardware) and not hardware.torch_compile
    with stop_controller.install_signal_handlers(), cpu_training_kernels(model, cheaper_cpu_backward):
        trainer.train(resume_from_checkpoint=start.checkpoint)


def _restore_last_step(trainer: MiniGPTTrainer, checkpoint: str) -> None:
    """A run stopped while evaluating or saving its final model: its last checkpoint, no step trained."""
    main = trainer.args.should_save
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
        callbacks = trainer.callback_handler.callbacks
        metrics_file = next(c for c in callbacks if isinstance(c, MetricsFileCallback))
        metrics_file.keep_through(step, evaluation_at_step=evaluated)


def _finish(
    trainer: MiniGPTTrainer,
    tokenizer: PreTrainedTokenizerBase,
    start: RunStart,
    stopped: bool,
    started: float,
) -> TrainingResult:
    """After training: the final evaluation and model (unless stopped), the loss plot and summary.json."""
    run, main = start.run, trainer.args.should_save
    output_dir = Path(run.training.output_dir)
    final_metrics = {} if stopped else _final_evaluation(trainer)
    final_dir = None
    if not stopped:
        # Under FSDP / ZeRO-3 this gathers the shards, a collective: every process takes part.
        state_dict = trainer.accelerator.get_state_dict(trainer.model)
        if main:
            final_dir = save_final_model(trainer, tokenizer, run, output_dir / FINAL_DIR, state_dict)
    history = trainer.state.log_history
    if main:
        title = f"MiniGPT: {output_dir.name}"
        if "eval_bpb" in final_metrics:
            title += f" (validation: {final_metrics['eval_bpb']:.3f} bits/byte)"
        plot_loss_curves(history, output_dir / LOSS_PLOT_FILE, title=title)
    bpbs = [r["eval_bpb"] for r in history if "eval_bpb" in r]
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
        base_model=start.base.record() if start.base is not None else base_record_of(run),
        base_metrics=_base_metrics(run, history),
    )
    if main:
        with atomic_write_file(output_dir / SUMMARY_FILE) as handle:
            json.dump(summary_record(result), handle, indent=2)
    return result


def _final_evaluation(trainer: MiniGPTTrainer) -> dict[str, float]:
    """The metrics of an evaluation at the last step: the one logged there, else a new one."""
    history = trainer.state.log_history
    last_eval = next((r for r in reversed(history) if "eval_loss" in r), None)
    if last_eval is None or last_eval["step"] != trainer.state.global_step:
        trainer.evaluate()
        last_eval = history[-1]
    return {k: v for k, v in last_eval.items() if k in EVALUATION_METRICS}


def _base_metrics(run: RunConfig, history: list[dict[str, Any]]) -> dict[str, float]:
    """A run from a base: the base's metrics, from the evaluation on start logged at step 0 (a resume
    keeps it); {} for a run without a base."""
    if run.model.init_from is None:
        return {}
    first = next((r for r in history if "eval_loss" in r and r.get("step") == 0), {})
    return {k: v for k, v in first.items() if k in EVALUATION_METRICS}


__all__ = ["run_training"]
