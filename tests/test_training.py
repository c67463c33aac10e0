"""Training end to end: the real CLI (plain and under `accelerate launch`), the Python API,
gradient accumulation, weight-decay groups and the derived metrics. About 40 s on 2 cores."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch
import yaml
from conftest import child_env  # PYTHONPATH is this checkout: the CLI runs the code under test
from transformers import TrainerCallback

from minigpt.data.run_data import prepare_run_data
from minigpt.errors import ConfigError
from minigpt.pipeline import run_training
from minigpt.training.callbacks import MetricsFileCallback, format_log_line
from minigpt.training.flops import ThroughputMeter, flops_per_token, matmul_parameter_count
from minigpt.training.hardware import resolve_hardware, training_dtype
from minigpt.training.interrupt import StopController
from minigpt.training.run import build_model_config, new_model
from minigpt.training.run_config import load_run_config
from minigpt.training.trainer import build_trainer, training_arguments

REPO = Path(__file__).resolve().parent.parent
SMOKE = REPO / "configs" / "smoke.yaml"
TRAIN_SCRIPT = REPO / "scripts" / "train.py"
QUIET = ["tokenizer.show_progress=false", "data.show_progress=false"]


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory) -> Path:
    """One smoke tokenizer for the whole module (the first run trains it, the others reuse it)."""
    return tmp_path_factory.mktemp("smoke_tokenizer") / "tokenizer"


def smoke_run(tmp_path: Path, tokenizer_dir: Path, *overrides: str):
    return load_run_config(
        SMOKE,
        [f"training.output_dir={tmp_path / 'run'}", f"tokenizer.path={tokenizer_dir}", *QUIET, *overrides],
    )


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def assert_complete_run(output_dir: Path, max_steps: int) -> list[dict]:
    """Every output of a finished run exists and says what it should; returns metrics.jsonl records."""
    for name in ("metrics.jsonl", "samples.txt", "loss.png", "resolved_config.yaml", "summary.json", "run.html"):
        assert (output_dir / name).is_file(), name
    assert (output_dir / "loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    resolved = yaml.safe_load((output_dir / "resolved_config.yaml").read_text())
    assert resolved["training"]["max_steps"] == max_steps
    checkpoints = sorted(output_dir.glob("checkpoint-*"))
    assert checkpoints and all((c / "resolved_config.yaml").is_file() for c in checkpoints)

    records = read_jsonl(output_dir / "metrics.jsonl")
    train = [r for r in records if "loss" in r]
    evals = [r for r in records if "eval_loss" in r]
    for record in train[1:]:
        assert {
            "step",
            "loss",
            "learning_rate",
            "grad_norm",
            "tokens_per_second",
            "mfu",
            "tokens_seen",
        } <= set(record)
        assert record["tokens_per_second"] > 0 and 0 < record["mfu"] < 1
    assert train[-1]["step"] == max_steps
    (session,) = [r for r in records if "train_runtime" in r]  # the steps trained, over Trainer's runtime
    assert session["train_steps_per_second"] * session["train_runtime"] == pytest.approx(max_steps, rel=1e-3)
    assert train[-1]["loss"] < train[0]["loss"] - 0.3, "the training loss did not fall"
    assert evals[-1]["step"] == max_steps
    assert evals[-1]["eval_bpb"] < evals[0]["eval_bpb"] or len(evals) == 1
    assert math.isclose(evals[-1]["eval_perplexity"], math.exp(evals[-1]["eval_loss"]), rel_tol=1e-6)

    summary = json.loads((output_dir / "summary.json").read_text())
    assert summary["global_step"] == max_steps and summary["eval_bpb"] == evals[-1]["eval_bpb"]
    assert "--- step" in (output_dir / "samples.txt").read_text()
    return records


def assert_final_model_loads_and_generates(final_dir: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer, pipeline

    model = AutoModelForCausalLM.from_pretrained(final_dir, trust_remote_code=True)
    tokenizer = AutoTokenizer.from_pretrained(final_dir, trust_remote_code=True)
    inputs = tokenizer("ROMEO:", return_tensors="pt")
    output = model.generate(**inputs, max_new_tokens=8, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    assert output.shape == (1, inputs["input_ids"].shape[1] + 8)
    assert tokenizer.decode(output[0]).startswith("ROMEO:")
    assert model.config.use_cache is True

    # Used with defaults it must not run past the context: generation_config.json has the run's
    # sampling (smoke.yaml keeps temperature 0.8, top_k 50) and max_length = the 64 positions; the
    # tokenizer states the same context and none of the keys that only say how it was loaded.
    for folder in (final_dir, *sorted(final_dir.parent.glob("checkpoint-*"))):
        generation = json.loads((folder / "generation_config.json").read_text())
        assert {k: generation.get(k) for k in ("max_length", "do_sample", "temperature", "top_k")} == {
            "max_length": 64,
            "do_sample": True,
            "temperature": 0.8,
            "top_k": 50,
        }, folder
        tokenizer_config = json.loads((folder / "tokenizer_config.json").read_text())
        assert tokenizer_config["model_max_length"] == 64, folder
        assert not {"is_local", "local_files_only"} & tokenizer_config.keys(), folder
    generator = pipeline("text-generation", model=str(final_dir), trust_remote_code=True)
    generated = generator("ROMEO:", return_tensors=True)[0]["generated_token_ids"]
    assert inputs["input_ids"].shape[1] < len(generated) <= 64


def test_smoke_run_through_the_cli(tmp_path, tokenizer_dir):
    output_dir = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, str(TRAIN_SCRIPT), str(SMOKE), f"training.output_dir={output_dir}"]
        + [f"tokenizer.path={tokenizer_dir}", *QUIET],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=child_env(tmp_path),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "effective batch: 8 per device x 1 accumulation x 1 process(es) = 8 sequences" in proc.stdout
    assert "done: 30 steps" in proc.stdout and "bits/byte" in proc.stdout
    # Written to a pipe: log lines without progress bars, so no cursor code garbles the log (#48).
    assert "\x1b[" not in proc.stdout + proc.stderr and "\r" not in proc.stderr
    assert "eval step 30 | val loss" in proc.stdout and proc.stdout.rstrip().splitlines()[-1].startswith("run page: ")
    assert_complete_run(output_dir, max_steps=30)
    assert_final_model_loads_and_generates(output_dir / "final")


@pytest.mark.parametrize("processes", [1, 2])
def test_smoke_run_under_accelerate_launch(tmp_path, tokenizer_dir, processes):
    """One process asked, one run; two asked without a GPU or --multi_gpu: accelerate starts one
    alone, and the run says so (#48) before training as that one process."""
    output_dir = tmp_path / "run"
    launch = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--num_processes",
        str(processes),
        "--num_machines",
        "1",
    ]
    launch += ["--mixed_precision", "no", "--dynamo_backend", "no"]
    proc = subprocess.run(
        [*launch, str(TRAIN_SCRIPT), str(SMOKE), f"training.output_dir={output_dir}"]
        + [f"tokenizer.path={tokenizer_dir}", "training.max_steps=20", "training.eval_steps=10", *QUIET],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=child_env(tmp_path),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    warned = "warning: accelerate launch asked for 2 processes but started this one alone" in proc.stderr
    assert warned == (processes == 2), proc.stderr[-3000:]
    assert_complete_run(output_dir, max_steps=20)
    assert_final_model_loads_and_generates(output_dir / "final")


def train_losses(tmp_path: Path, tokenizer_dir: Path, *overrides: str) -> list[float]:
    run = smoke_run(
        tmp_path,
        tokenizer_dir,
        "training.max_steps=6",
        "training.warmup_steps=2",
        "training.logging_steps=1",
        "training.eval_steps=100",
        "training.save_steps=100",
        "training.sample_steps=0",
        *overrides,
    )
    result = run_training(run)
    return [r["loss"] for r in result.log_history if "loss" in r]


def test_accumulation_2_x_batch_4_equals_batch_8(tmp_path, tokenizer_dir, monkeypatch):
    monkeypatch.chdir(REPO)  # the smoke config names data/tinyshakespeare.txt relative to the repo
    optimizer = ["training.optim=adamw_torch_fused"]
    batch_8 = train_losses(
        tmp_path / "b8", tokenizer_dir, "hardware.per_device_train_batch_size=8", *optimizer
    )
    accumulated = train_losses(
        tmp_path / "b4x2",
        tokenizer_dir,
        "hardware.per_device_train_batch_size=4",
        "hardware.gradient_accumulation_steps=2",
        *optimizer,
    )
    assert len(batch_8) == len(accumulated) == 6
    # fp32 sums two micro-batches in another order than one batch: the curves start ~1e-7 apart and
    # the optimizer grows that to ~1e-5 by step 6 (the chat tokens' tokenizer showed 1.1e-5).
    for step, (a, b) in enumerate(zip(batch_8, accumulated, strict=True), start=1):
        assert a == pytest.approx(b, rel=5e-5), f"step {step}: {a} vs {b}"
    assert batch_8[-1] < batch_8[0]  # the steps did update the model


def tiny_trainer(tmp_path, tokenizer_dir, *overrides):
    from minigpt.data.sources import find_sources
    from minigpt.data.tokenizer import load_or_train_tokenizer

    run = smoke_run(tmp_path, tokenizer_dir, *overrides)
    sources = find_sources(run.data)
    tokenizer = load_or_train_tokenizer(run.tokenizer, sources)
    data = prepare_run_data(sources, tokenizer, seed=run.training.seed, eval_tokens=run.training.eval_tokens)
    hardware = resolve_hardware(run.hardware)
    model = new_model(build_model_config(run.model, tokenizer), run.training.seed, hardware.attn_implementation)
    args = training_arguments(run, hardware)
    return build_trainer(run, args, model, tokenizer, data, dtype=training_dtype(hardware))


def decayed_parameter_names(trainer) -> set[str]:
    optimizer = trainer.create_optimizer()
    names = {id(p): n for n, p in trainer.model.named_parameters()}
    decayed = {names[id(p)] for g in optimizer.param_groups if g["weight_decay"] > 0 for p in g["params"]}
    undecayed = {names[id(p)] for g in optimizer.param_groups if g["weight_decay"] == 0 for p in g["params"]}
    assert decayed.isdisjoint(undecayed) and decayed | undecayed == set(names.values())
    return decayed


MATRICES = {
    f"transformer.h.{i}.{m}.weight"
    for i in range(2)
    for m in ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")
}


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ((), MATRICES),  # tied head: embeddings (and so the head) are not decayed
        (
            ("training.decay_embeddings=true",),
            MATRICES | {"transformer.wte.weight", "transformer.wpe.weight"},
        ),
        (("model.tie_word_embeddings=false",), MATRICES | {"lm_head.weight"}),  # an untied head is a matrix
        (("model.bias=false",), MATRICES),
        # RMSNorm weights (ln_1, q_norm, ...) are vectors: Trainer's name patterns miss ln_1, shape does not
        (("model.norm_type=rmsnorm", "model.qk_norm=true", "model.mlp_type=gated"), MATRICES),
    ],
    ids=["default", "decay_embeddings", "untied_head", "no_bias", "llama_style"],
)
def test_weight_decay_lands_on_exactly_the_weight_matrices(
    tmp_path, tokenizer_dir, monkeypatch, overrides, expected
):
    monkeypatch.chdir(REPO)
    trainer = tiny_trainer(tmp_path, tokenizer_dir, *overrides)
    assert decayed_parameter_names(trainer) == expected
    assert all(g["weight_decay"] in (0.0, 0.1) for g in trainer.optimizer.param_groups)


def test_a_run_schedules_its_groups_with_bf16_accumulation_and_clipping(tmp_path, tokenizer_dir, monkeypatch):
    """Through Trainer's loop (Accelerate's prepare() reloads the optimizer state, the scheduler steps
    it): every group follows warmup + cosine from the peak down to training.min_learning_rate."""
    monkeypatch.chdir(REPO)
    seen: list[tuple[float, float, float]] = []

    class RecordLearningRates(TrainerCallback):
        def on_step_end(self, args, state, control, optimizer=None, **kwargs):
            lrs = [g["lr"] for g in optimizer.optimizer.param_groups]  # Accelerate's wrapper around AdamW
            assert len(set(lrs)) == 1  # the decayed and undecayed groups move together
            seen.append((state.global_step, lrs[0]))

    steps = 8
    run = smoke_run(
        tmp_path,
        tokenizer_dir,
        *(f"training.max_steps={steps}", "training.warmup_steps=2", "training.logging_steps=1"),
        *("training.eval_steps=100", "training.save_steps=100", "training.sample_steps=0"),
        *("hardware.bf16=true", "hardware.gradient_accumulation_steps=2", "training.max_grad_norm=0.5"),
    )
    result = run_training(run, callbacks=[RecordLearningRates()])
    t = run.training
    assert [step for step, _ in seen] == list(range(1, steps + 1))
    for step, adamw_lr in seen:  # the LR after `step` optimizer steps, as the schedule sets it
        warmup = min(step / t.warmup_steps, 1.0)
        progress = max(step - t.warmup_steps, 0) / (steps - t.warmup_steps)
        floor = t.min_learning_rate / t.learning_rate
        factor = warmup * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress)))
        assert adamw_lr == pytest.approx(t.learning_rate * factor), step
    records = [r for r in result.log_history if "loss" in r]
    # Trainer logs the LR each step ran with (AdamW's: group 0), set by the scheduler one step before.
    assert [r["learning_rate"] for r in records] == pytest.approx([0.0] + [lr for _, lr in seen][:-1])
    assert max(r["grad_norm"] for r in records) > 0.5  # clipping had something to clip
    assert records[-1]["loss"] < records[0]["loss"] - 0.1  # 8 steps, 2 of them warmup


def test_stop_from_another_thread_saves_a_checkpoint_and_returns(tmp_path, tokenizer_dir, monkeypatch):
    monkeypatch.chdir(REPO)
    controller = StopController()

    class StopFromAThread(TrainerCallback):
        """Stands in for a UI: another thread asks the run to stop after step 4."""

        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == 4:
                thread = threading.Thread(target=controller.request_stop, args=("stop button",))
                thread.start()
                thread.join()

    seen_logs: list[dict] = []

    class Recorder(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            seen_logs.append(dict(logs))

    run = smoke_run(tmp_path, tokenizer_dir, "training.logging_steps=2")
    result = run_training(run, callbacks=[StopFromAThread(), Recorder()], stop_controller=controller)
    assert result.stopped and result.global_step == 4 and result.final_dir is None
    assert (tmp_path / "run" / "checkpoint-4" / "model.safetensors").is_file()
    assert not (tmp_path / "run" / "final").exists()
    assert [r["step"] for r in read_jsonl(tmp_path / "run" / "metrics.jsonl") if "loss" in r] == [1, 2, 4]
    assert any("tokens_per_second" in logs for logs in seen_logs)  # callbacks see the enriched records


def test_flops_per_token_counts_matmuls_and_attention(tmp_path, tokenizer_dir, monkeypatch):
    monkeypatch.chdir(REPO)
    trainer = tiny_trainer(tmp_path, tokenizer_dir)
    model, config = trainer.model, trainer.model.config
    C, L, V, T = config.hidden_size, config.num_hidden_layers, config.vocab_size, 32
    per_layer = (
        (3 * C * C + 3 * C) + (C * C + C) + (4 * C * C + 4 * C) + (4 * C * C + C) + 4 * C
    )  # attn, mlp, 2 ln
    n = L * per_layer + 2 * C + V * C  # blocks, final ln, head
    assert matmul_parameter_count(model, config) == n
    assert flops_per_token(model, config, T) == 6 * n + 12 * L * C * T


def test_throughput_meter_and_log_line():
    meter = ThroughputMeter(samples_per_step=10, block_size=100, flops_per_token=1e6, peak_flops=1e10, num_devices=2)
    meter.window_seconds, meter.window_steps = 2.0, 4  # 4 steps of 1000 tokens in 2 s
    window = meter.take_window()
    assert window == pytest.approx({"tokens_per_second": 2000.0, "mfu": 2000 * 1e6 / 2e10})
    assert meter.take_window() == {}
    meter.steps_timed = 6  # a run stopped (or resumed) after 6 of its max_steps: rates of the 6
    assert meter.session_rates(3.0) == pytest.approx(
        {"train_steps_per_second": 2.0, "train_samples_per_second": 20.0, "train_tokens_per_second": 2000.0}
    )
    line = format_log_line(
        {"loss": 2.5, "learning_rate": 1e-3, "grad_norm": 0.5, **window, "tokens_seen": 4000}, 4, 10
    )
    assert (
        line
        == "step 4/10 | loss 2.5000 | lr 1.00e-03 | grad norm 0.500 | 2,000 tok/s | MFU 10.0% | 4.0k tokens"
    )
    eval_line = format_log_line({"eval_loss": 1.0, "eval_perplexity": math.e, "eval_bpb": 2.0}, 10, 10)
    assert eval_line == "eval step 10 | val loss 1.0000 | ppl 2.72 | bits/byte 2.0000"


def test_metrics_file_drops_records_of_steps_a_resume_will_redo(tmp_path):
    from transformers import TrainerControl, TrainerState

    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps({"step": s, "loss": 1.0}) + "\n" for s in range(1, 11)))
    state = TrainerState(global_step=6)
    state.is_world_process_zero = True
    MetricsFileCallback(path).on_train_begin(None, state, TrainerControl())
    assert [r["step"] for r in read_jsonl(path)] == [1, 2, 3, 4, 5, 6]


def test_a_redone_evaluation_is_dropped_and_later_records_too(tmp_path):
    path = tmp_path / "metrics.jsonl"
    records = [{"step": 7, "loss": 1.0}, {"step": 8, "loss": 1.0}, {"step": 8, "eval_loss": 2.0}, {"step": 9}]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    MetricsFileCallback(path).keep_through(8, evaluation_at_step=False)
    assert read_jsonl(path) == records[:2]


def test_log_lines_go_above_the_progress_bar_and_a_stop_silences_them(capsys):
    from transformers import TrainerControl, TrainerState

    from minigpt.training.callbacks import LogLineProgressCallback
    from minigpt.training.interrupt import StopController

    controller = StopController()
    callback = LogLineProgressCallback(controller, bars=True)  # a terminal's
    state = TrainerState(global_step=0, max_steps=3000)
    state.is_world_process_zero = True
    args = type("Args", (), {"disable_tqdm": False})()
    callback.on_train_begin(args, state, TrainerControl())
    state.global_step = 25
    callback.on_step_end(args, state, TrainerControl())
    assert callback.training_bar.total == 3000 and callback.training_bar.n == 25
    callback.on_log(args, state, TrainerControl(), logs={"loss": 1.0})
    assert "step 25/3000" in capsys.readouterr().out
    controller.request_stop()
    callback.on_log(args, state, TrainerControl(), logs={"loss": 1.0})
    assert "step 25" not in capsys.readouterr().out
    callback.on_train_end(args, state, TrainerControl())


def test_samples_leave_the_training_rng_and_mode_and_repeat_by_seed(tmp_path, tokenizer_dir, monkeypatch):
    import random

    import numpy as np

    from minigpt.training.callbacks import SampleTextCallback

    monkeypatch.chdir(REPO)
    trainer = tiny_trainer(tmp_path, tokenizer_dir)
    long_prompt = "ROMEO: " * 100  # longer than the context: its tail is continued
    prompts = ["ROMEO:", "", long_prompt]
    callback = SampleTextCallback(trainer.processing_class, prompts, tmp_path / "samples.txt", 1, 8, 1.0, 5, seed=0)
    modes = []
    trainer.model.register_forward_pre_hook(lambda module, args: modes.append(module.training))

    def draws():
        return torch.rand(3).tolist(), random.random(), np.random.rand()

    torch.manual_seed(123), random.seed(123), np.random.seed(123)
    expected = draws()
    torch.manual_seed(123), random.seed(123), np.random.seed(123)
    trainer.model.train()
    texts = callback.texts_at(trainer.model, step=10)
    assert draws() == expected  # no RNG consumed: a resumed run draws the same dropout masks
    assert trainer.model.training and modes and not any(modes)  # sampled in eval mode, then restored
    assert len(texts) == 3 and texts[0].startswith("ROMEO:")
    assert "ROMEO: ROMEO:" in texts[2] and len(texts[2]) < len(long_prompt)
    assert callback.texts_at(trainer.model, step=10) == texts  # the same seed, the same samples
    assert callback.texts_at(trainer.model, step=11) != texts  # the seed moves with the step


def test_gpu_config_says_clearly_when_the_machine_has_no_gpu():
    run = load_run_config(REPO / "configs" / "gpu.yaml")
    if torch.cuda.is_available():
        args = training_arguments(run, resolve_hardware(run.hardware))
        assert args.bf16 and args.torch_compile
    else:
        with pytest.raises(
            ConfigError, match=r"hardware settings do not fit this machine: .*hardware.profile=cpu"
        ):
            training_arguments(run, resolve_hardware(run.hardware))


def test_max_time_ends_the_run_with_its_model_and_says_when_the_warmup_does_not_fit(
    tmp_path, tokenizer_dir, monkeypatch, capsys
):
    """training.max_time stops a run of fixed work early: a checkpoint at the stop step, its final
    model and summary, and one line when the steps that fit are fewer than the warmup."""
    monkeypatch.chdir(REPO)
    run = smoke_run(
        tmp_path,
        tokenizer_dir,
        "training.max_steps=100000",
        "training.warmup_steps=50000",
        "training.max_time=2",
        "training.eval_steps=100000",
        "training.save_steps=100000",
        "training.sample_steps=0",
    )
    result = run_training(run)
    assert not result.stopped and result.final_dir is not None and "eval_bpb" in result.final_metrics
    assert 5 <= result.global_step < 50000
    checkpoint = tmp_path / "run" / f"checkpoint-{result.global_step}"
    assert (checkpoint / "checkpoint_complete.json").is_file()
    err = capsys.readouterr().err
    assert err.count("training.max_time=2 fits about") == 1
    assert "fewer than training.warmup_steps=50000: the learning rate never reaches its peak" in err


def test_a_full_disk_during_a_save_is_one_line_with_what_to_do(tmp_path, tokenizer_dir, monkeypatch):
    """ENOSPC while checkpoint-30 is written (simulated): the unfinished folder is removed, the
    message names the folder, the space a checkpoint takes, the last complete one and the resume
    command; checkpoint-15 stays whole."""
    import errno

    import transformers.modeling_utils

    from minigpt.training.checkpoints import DiskFullError, checkpoint_problems

    monkeypatch.chdir(REPO)
    real_save = transformers.modeling_utils.safe_save_file

    def save_file(tensors, filename, *args, **kwargs):
        if "checkpoint-30" in str(filename):
            raise OSError(errno.ENOSPC, "No space left on device", str(filename))
        return real_save(tensors, filename, *args, **kwargs)

    monkeypatch.setattr(transformers.modeling_utils, "safe_save_file", save_file)
    run = smoke_run(tmp_path, tokenizer_dir)
    stop = StopController(resume_hint="python scripts/train.py configs/smoke.yaml --resume")
    with pytest.raises(DiskFullError) as raised:
        run_training(run, stop_controller=stop)
    message = str(raised.value)
    output_dir = tmp_path / "run"
    assert message.startswith(f"no space left on device in {output_dir} (a checkpoint takes ")
    assert "removed the unfinished checkpoint-30; the last complete checkpoint is checkpoint-15" in message
    assert message.endswith("resume with: python scripts/train.py configs/smoke.yaml --resume")
    assert sorted(p.name for p in output_dir.glob("checkpoint-*")) == ["checkpoint-15"]
    assert checkpoint_problems(output_dir / "checkpoint-15") == []


def test_final_holds_the_best_evaluations_model_when_later_ones_are_worse(tmp_path, monkeypatch, capsys):
    """845 bytes trained for 50 epochs at a high constant rate overfit: validation loss turns up, and
    final/ is the model of the best evaluation (its checkpoint, kept by rotation), said in the last line."""
    from conftest import small_run, write_small_corpus
    from safetensors.torch import load_file

    run = small_run(
        tmp_path / "run", write_small_corpus(tmp_path),
        *("training.max_steps=150", "training.eval_steps=10", "training.save_steps=10", "training.save_total_limit=1"),
        *("training.learning_rate=1e-2", "training.lr_scheduler_type=constant", "model.hidden_dropout=0.0"),
    )
    result = run_training(run)
    evaluations = {r["step"]: r["eval_loss"] for r in result.log_history if "eval_loss" in r}
    best = min(evaluations, key=evaluations.get)
    assert best < result.global_step == 150 and evaluations[150] > evaluations[best]  # it did overfit
    assert result.final_step == best and result.final_metrics["eval_loss"] == evaluations[best]
    saved, kept = load_file(tmp_path / "run" / "final" / "model.safetensors"), load_file(
        tmp_path / "run" / f"checkpoint-{best}" / "model.safetensors"
    )
    assert saved.keys() == kept.keys() and all(torch.equal(saved[k], kept[k]) for k in saved)
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["final_step"] == best
    assert f"(step {best}'s: later evaluations were worse)" in capsys.readouterr().out


@pytest.mark.parametrize("content", [b"", b"\xff\xfe not text"], ids=["empty", "not-utf8"])
def test_a_bad_data_file_is_one_line_before_anything_heavy(tmp_path, content):
    """Found and checked before torch or datasets load (#48): one `error:` line, exit 2, nothing else
    printed or written."""
    bad = tmp_path / "corpus.txt"
    bad.write_bytes(content)
    blocker = (
        "import sys\nclass B:\n    def find_spec(self, name, *a):\n        if name.split('.')[0] in ('torch', 'datasets'):\n"
        "            raise ImportError(name)\nsys.meta_path.insert(0, B())\n"
    )
    argv = [str(TRAIN_SCRIPT), str(SMOKE), f"data.train_files=[{bad}]", f"training.output_dir={tmp_path / 'run'}"]
    code = blocker + f"import runpy; sys.argv = {argv!r}; runpy.run_path(sys.argv[0], run_name='__main__')"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("error: ") and str(bad) in proc.stderr
    assert not (tmp_path / "run").exists()
