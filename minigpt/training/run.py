"""`run_training`: one training run from a RunConfig, from raw corpus to `<output_dir>/final/`.

The steps, in order, each fed by the one before:
1. where the run starts (`choose_start`): new, resumed from its newest complete checkpoint, or
   from a base model (`model.init_from`); every check that can refuse the run, before anything is
   written;
2. the tokenizer, and the data as training reads it (`prepare_run_data`: one call, any format);
3. the model: new, the base's weights, or a resumed run's architecture (the checkpoint brings the
   weights), fitted to the tokenizer;
4. the Trainer (`build_trainer`: trainer.py's `MiniGPTTrainer` with callbacks.py's callbacks);
5. training, or finishing a run stopped after its last step; then the final evaluation, the final
   model, the loss plot, the summary and, last, the run's page (run_page.py).

Trainer owns the optimizer, the schedule, clipping, gradient accumulation (loss = mean over all
tokens of the accumulated window, through `num_items_in_batch`), precision and checkpoints
(checkpoints.py marks them complete); Accelerate owns devices and processes. The final model loads
with `from_pretrained`.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
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
from transformers.trainer_callback import ProgressCallback

from ..atomic import atomic_output_dir, atomic_write_file
from ..console import plural, transformers_progress_bars
from ..data.chat_ready import fit_embeddings
from ..data.corpus import check_compatible
from ..data.run_data import RunData, prepare_run_data
from ..data.sources import Sources, find_sources
from ..data.tokenizer import check_existing_tokenizer, load_or_train_tokenizer, load_tokenizer
from ..distributed import is_main_process
from ..errors import ConfigError
from ..model import MiniGPTConfig
from ..run_layout import PLAN_FILE
from .base_model import (
    BaseModel,
    adopt_base_architecture,
    adopt_saved_settings,
    load_base_tokenizer,
    load_base_weights,
    read_base_model,
    record_base_location,
)
from .callbacks import (
    EpochCallback,
    LogLineProgressCallback,
    MaxTimeCallback,
    MetricsFileCallback,
    ParameterLayoutCallback,
    SampleTextCallback,
    StepTimerCallback,
    StopTrainingCallback,
    ThroughputMeter,
    flops_per_token,
    matmul_parameter_count,
)
from .checkpoints import (
    CompleteCheckpointCallback,
    check_resume_compatible,
    find_resume_checkpoint,
    full_disk_is_one_line,
)
from .corpus_plan import report_corpus
from .hardware import cpu_run_settings, resolve_hardware, tf32_matmuls, training_dtype
from .interrupt import StopController
from .peak_flops import resolve_peak_flops
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
from .run_page import write_run_page
from .settings import ModelSettings, RunConfig, TrainingSettings, effective_batch_size
from .shared_folder import check_shared_output_dir
from .sizing import HEAD_SIZE, Plan, apply_settings, size_run
from .summary import (
    EVALUATION_METRICS,
    TrainingResult,
    base_record_of,
    describe_result,
    describe_run,
    plot_loss_curves,
    summary_record,
)
from .trainer import (
    MiniGPTTrainer,
    TextScores,
    muon_kwargs,
    own_class,
    training_arguments,
    without_tied_copies,
)


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
    The thread count the run sets is as it was again when it returns.
    """
    started = time.perf_counter()
    stop_controller = stop_controller or StopController()
    with cpu_run_settings(run.hardware):
        args = training_arguments(run)  # also sets up the process group under `accelerate launch`
        check_shared_output_dir(run.training.output_dir)  # several machines: one folder for all of them
        start = choose_start(run, resume, main=args.should_save)
        run = start.run
        tokenizer, data = _tokenizer_and_data(start, args)
        if run.training.budget is not None:  # a new run sized for its corpus and budget
            start.plan = _size_for_budget(start, tokenizer, data, args)
        if start.plan is not None or start.plan_adopted:
            args = training_arguments(run)  # the plan's steps, warmup and learning rates
        model = _model_to_train(start, tokenizer, data)
        args.eval_on_start = start.base_weights is not None  # step 0: a base on the new validation data
        trainer = build_trainer(run, args, model, tokenizer, data, callbacks, stop_controller)
        if args.should_save:  # the one process that prints and writes run files
            _announce(start, model, args, data, trainer)
        with full_disk_is_one_line(run.training.output_dir, stop_controller.resume_hint):
            if start.finishing:
                _restore_last_step(trainer, start.checkpoint)
            else:
                with stop_controller.install_signal_handlers():
                    trainer.train(resume_from_checkpoint=start.checkpoint)
            result = _finish(trainer, tokenizer, run, start, stop_controller.stop_requested, started)
    if args.should_save and stop_controller.signum is None:  # a signal's one line has said what happened
        print(describe_result(result), flush=True)
        if result.page is not None:  # last: the one file to open
            print(f"run page: {result.page}", flush=True)
    return result


# ---- 1. where the run starts -----------------------------------------------------------------------


@dataclass
class RunStart:
    """Where a run starts from, and what deciding that has already read."""

    run: RunConfig  # the config as the run uses it (a base's architecture adopted, say)
    own_tokenizer: str  # <output_dir>/tokenizer: suggested when the one at tokenizer.path does not fit
    checkpoint: str | None = None  # the checkpoint a resume continues from; None for a new run
    finishing: bool = False  # the checkpoint is the run's last step: only its final model is missing
    sources: Sources | None = None  # the data files, found, checked and fingerprinted once
    checked_tokenizer: str | None = None  # check_existing_tokenizer's answer (a run without a base)
    base: BaseModel | None = None  # the base model a new run starts from (model.init_from)
    base_tokenizer: PreTrainedTokenizerBase | None = None
    base_weights: PreTrainedModel | None = None
    plan: Plan | None = None  # what training.budget chose (a new run with a budget)
    plan_adopted: bool = False  # resumed with a budget: the plan its checkpoint recorded


def choose_start(run: RunConfig, resume: bool, main: bool) -> RunStart:
    """Decide where `run` starts and make its folder ready; `main` is the process that writes files.

    Every check that can refuse the run comes before anything is written or removed.
    """
    output_dir = Path(run.training.output_dir)
    start = RunStart(run, own_tokenizer=str(output_dir / "tokenizer"), sources=find_sources(run.data))
    start.checkpoint = find_resume_checkpoint(output_dir) if resume else None
    if run.model.init_from is None:
        start.checked_tokenizer = check_existing_tokenizer(run.tokenizer, start.sources, new_path=start.own_tokenizer)
    elif start.checkpoint is not None:  # resuming a run that started from a base: its own checkpoint only
        start.run = adopt_saved_settings(run, start.checkpoint)
    else:  # a new run from a base: read it, and fit the config to it, before anything is written
        base = read_base_model(start.run.model)
        adopted, model_config = adopt_base_architecture(start.run, base.config, base.name)
        start.base_tokenizer = load_base_tokenizer(adopted, base)  # checks the config's own tokenizer.path
        adopted = record_base_location(adopted, base.location)
        check_fits_model(adopted, whose="the base model's ")
        attention = resolve_hardware(adopted.hardware).attn_implementation
        start.base_weights = load_base_weights(base, model_config, attention)
        start.base, start.run = base, adopted
    if start.checkpoint is not None and start.run.training.budget is not None:
        # resumed: the plan the run chose at its start, not a new one from today's step times
        saved = yaml.safe_load((Path(start.checkpoint) / RESOLVED_CONFIG_NAME).read_text(encoding="utf-8"))
        apply_settings(start.run, saved)
        start.plan_adopted = True
    run = start.run
    if start.checkpoint is not None:
        check_resume_compatible(run.to_dict(), start.checkpoint)
        start.finishing = check_resume_target(start.checkpoint, run.training.max_steps)
    elif main or not run.training.overwrite_output_dir:  # every process refuses; only the main one removes
        removed = claim_output_dir(output_dir, overwrite=run.training.overwrite_output_dir)
        if removed:
            print(f"training.overwrite_output_dir: removed the previous run's {', '.join(removed)}", flush=True)
    return start


# ---- 2. tokenizer and data -------------------------------------------------------------------------


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
            tokenizer = start.base_tokenizer or load_tokenizer(start.checkpoint)
            if args.should_save:
                print(f"tokenizer: the base model's ({run.model.init_from}), {len(tokenizer)} tokens", flush=True)
        data = prepare_run_data(
            start.sources,
            tokenizer,
            seed=run.training.seed,
            eval_tokens=run.training.eval_tokens,
            max_position_embeddings=run.model.max_position_embeddings,
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


def _size_for_budget(start: RunStart, tokenizer: PreTrainedTokenizerBase, data: RunData, args: TrainingArguments) -> Plan:
    """Choose the model and steps for training.budget on this corpus, set them on the run, say them.

    Every process measures (the machine as loaded as it will train), the main one's plan is taken.
    """
    run = start.run

    def config_for(layers: int, width: int) -> MiniGPTConfig:
        shaped = dataclasses.replace(
            run.model, num_hidden_layers=layers, hidden_size=width, num_attention_heads=width // HEAD_SIZE
        )
        return build_model_config(shaped, tokenizer)

    plan = size_run(
        run,
        config_for,
        corpus_tokens=data.corpus.train_stats.tokens,
        tokens_per_step=effective_batch_size(run.hardware, args.world_size) * run.data.block_size,
        accumulation=run.hardware.gradient_accumulation_steps,
        dtype=training_dtype(run.hardware),
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


# ---- 3. the model ----------------------------------------------------------------------------------


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


def new_model(config: MiniGPTConfig, run: RunConfig) -> PreTrainedModel:
    """A newly initialised model of `config` (weights from `training.seed`), with the run's attention."""
    set_seed(run.training.seed)  # the model's initial weights depend only on the seed
    attention = resolve_hardware(run.hardware).attn_implementation
    return AutoModelForCausalLM.from_config(config, attn_implementation=attention)


def generation_defaults(
    model_config: MiniGPTConfig, training: TrainingSettings, stop_token_ids: Sequence[int] | None = None
) -> GenerationConfig:
    """What `generate()` and `pipeline("text-generation")` use when the caller sets nothing.

    The run's sample settings (greedy when training.sample_temperature is 0; top_k 0 is no top-k
    cut), the data's stop tokens (the end of text; a chat reply's end of turn), and sequences no
    longer than the model's context: with no length of its own, the pipeline would add 256 new
    tokens, past the last learned position.
    """
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


def _model_to_train(start: RunStart, tokenizer: PreTrainedTokenizerBase, data: RunData) -> PreTrainedModel:
    """The model to train: the base's weights, a resumed run's architecture (its weights come from
    the checkpoint), or a new one; its embeddings fitted to the tokenizer, checked against the data."""
    run = start.run
    if start.base_weights is not None:
        model = start.base_weights
        note = fit_embeddings(model, tokenizer, data.added_token_ids)  # role tokens the data added
        if note and is_main_process():
            print(f"the base model: {note}", flush=True)
    elif start.checkpoint is not None and start.finishing:  # the run's last step: its weights, no training
        attention = resolve_hardware(run.hardware).attn_implementation
        model = AutoModelForCausalLM.from_pretrained(start.checkpoint, attn_implementation=attention)
    elif run.model.init_from is not None:  # resuming: the checkpoint's architecture, its weights later
        model = new_model(MiniGPTConfig.from_pretrained(start.checkpoint), run)
    else:
        model = new_model(build_model_config(run.model, tokenizer), run)
    model.generation_config = generation_defaults(model.config, run.training, data.stop_token_ids)
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
        corpus=data.corpus,
        allow_larger_vocab=run.model.init_from is not None,  # a stock base may pad its embedding
    )
    return model


# ---- 4. the Trainer --------------------------------------------------------------------------------


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
    t = run.training
    output_dir = Path(t.output_dir)
    stop_controller = stop_controller or StopController()
    dtype = training_dtype(run.hardware)
    with args.main_process_first(desc="peak FLOP/s"):  # one process measures, the others read the cache
        peak = resolve_peak_flops(run.hardware.peak_flops, args.device, dtype, tf32=tf32_matmuls(run.hardware))
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
            segment={"hardware": dataclasses.asdict(run.hardware), "threads": torch.get_num_threads()},
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
        muon_kwargs=muon_kwargs(t),
        throughput=meter,
        validation_blocks=data.evaluation.total,
        stop_controller=stop_controller,
    )
    trainer.peak_flops = peak  # what MFU divides by, and where it came from (the run's first lines say)
    trainer.remove_callback(ProgressCallback)
    trainer.add_callback(LogLineProgressCallback(stop_controller))
    return trainer


def _announce(
    start: RunStart, model: PreTrainedModel, args: TrainingArguments, data: RunData, trainer: MiniGPTTrainer
) -> None:
    """The resolved config written to the run's folder, and the run's opening lines."""
    run = start.run
    output_dir = Path(run.training.output_dir)
    # Only now that the run can start: a start refused for its data or settings leaves no run file.
    output_dir.mkdir(parents=True, exist_ok=True)
    with atomic_write_file(output_dir / RESOLVED_CONFIG_NAME) as handle:
        handle.write(run.to_yaml())
    if start.plan is not None:
        with atomic_write_file(output_dir / PLAN_FILE) as handle:
            json.dump(start.plan.record(), handle, indent=2)
    print(describe_run(run, model, args, data.description, trainer.peak_flops), flush=True)
    if data.report is not None:  # the corpus, and the epochs and tokens per parameter this plan makes of it
        report_corpus(data.report, run, matmul_parameter_count(model, model.config), args.world_size)
    if start.base is not None:
        print(
            f"starting from {start.base.name} ({start.base.model_type}): "
            "evaluating it on the new validation data first",
            flush=True,
        )


# ---- 5. the end of the run -------------------------------------------------------------------------


def _restore_last_step(trainer: MiniGPTTrainer, checkpoint: str) -> None:
    """A run stopped while evaluating or saving its final model: its last checkpoint's weights (the
    model was loaded from it) and state, no step trained; an evaluation the stop cut short is redone."""
    if trainer.args.should_save:
        print(
            f"{Path(checkpoint).name} is the run's last step and its final model was never saved: "
            "evaluating and saving it, no step trained",
            flush=True,
        )
    trainer.state = TrainerState.load_from_json(str(Path(checkpoint) / "trainer_state.json"))
    step, history = trainer.state.global_step, trainer.state.log_history
    evaluated = any(r.get("step") == step and "eval_loss" in r for r in history)
    if trainer.args.should_save:  # drop the records the stopped run wrote after its checkpoint
        metrics_file = next(c for c in trainer.callback_handler.callbacks if isinstance(c, MetricsFileCallback))
        metrics_file.keep_through(step, evaluation_at_step=evaluated)


def _finish(
    trainer: MiniGPTTrainer,
    tokenizer: PreTrainedTokenizerBase,
    run: RunConfig,
    start: RunStart,
    stopped: bool,
    started: float,
) -> TrainingResult:
    """After training: the final evaluation and model (unless stopped), the loss plot, summary.json
    and, last, run.html."""
    main = trainer.args.should_save
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
        result.page = _write_page(output_dir)
    return result


def _write_page(output_dir: Path) -> Path | None:
    """The run's page, from the files just written; None, said in one line, when it fails.

    The page is a view of files already saved: a failure to draw it must not turn a trained run
    into a failed one (the model and summary.json are in place; scripts/run_page.py redraws it).
    """
    try:
        return write_run_page(output_dir)
    except Exception as error:
        print(f"run page not written ({type(error).__name__}: {error}); the run's files are complete", flush=True)
        return None


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
    state_dict = without_tied_copies(model, state_dict)  # a gathered one holds a tied weight twice
    with atomic_output_dir(final_dir) as staging, transformers_progress_bars(False), own_class(model):
        model.save_pretrained(staging, state_dict=state_dict)  # as its own class, not FSDP2's wrapper
        tokenizer.save_pretrained(staging)
        (staging / RESOLVED_CONFIG_NAME).write_text(yaml.safe_dump(run.to_dict(), sort_keys=False))
    return final_dir


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


__all__ = [
    "RunStart",
    "build_model_config",
    "build_trainer",
    "choose_start",
    "generation_defaults",
    "new_model",
    "run_training",
    "save_final_model",
]
