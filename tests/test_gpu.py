"""CUDA paths: bf16 autocast training, attention kernels against eager, torch.compile, fused AdamW,
two-GPU DDP, MFU against the datasheet peak, the memory estimate, and GPT-2 small's speed.

Every test here is marked `gpu` and skipped, saying why, where no CUDA device exists (the two-GPU
test also where fewer than two are visible, flash-attn's where the package is missing). On a GPU
machine `python -m pytest -m gpu -s tests/test_gpu.py` runs them all in a few minutes; `-s` shows
the figures they print (tokens/s, MFU, memory). They were written without a GPU at hand: docs/gpu.md
says which have run where.

Tolerances, and why: fp32 comparisons run with TF32 off, and differ only by the kernels' summation
order (1e-4 relative); bf16 keeps 8 bits of mantissa, so a bf16 kernel may differ from eager
attention in bf16 by up to twice what bf16 moves eager attention from fp32, tensor by tensor, and
bf16 training curves agree to 2e-2.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import math
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from conftest import (
    PYTHON,
    QWEN3_BLOCK,
    REPO_ROOT,
    free_port,
    small_run_overrides,
    tiny_model_config,
    write_small_corpus,
)

from benchmarks.gpt2_small_speed import budget_check, measure_run
from minigpt import MiniGPTConfig, MiniGPTForCausalLM
from minigpt.training.flops import datasheet_peak, device_name, resolve_peak_flops
from minigpt.training.memory_estimate import estimate_training_memory, size

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (none is visible to torch)"),
]

CUDA = torch.device("cuda")
FP32_TOLERANCE = 1e-4  # relative, TF32 off: summation order only
BF16_TOLERANCE = 2e-2  # relative, bf16 autocast: 8 mantissa bits, two kernels' roundings
LEARNING_RATE = 1e-3  # of the short training loops here
# Steps of the GPT-2 small speed run (one pass of 32 x 1024 tokens each); the variable sets it.
SPEED_STEPS = int(os.environ.get("MINIGPT_GPU_SPEED_STEPS", "300"))


@pytest.fixture(autouse=True)
def exact_fp32_matmuls() -> Iterator[None]:
    """TF32 off unless a test turns it on, so fp32 comparisons measure kernels, not TF32's 10 bits."""
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    """|got - want| / |want| over the whole tensor (Frobenius norms), in fp32."""
    got, want = got.detach().float(), want.detach().float()
    return float((got - want).norm() / want.norm().clamp_min(1e-30))


def gpt2_block(**overrides) -> MiniGPTConfig:
    """GPT-2's block at a size where the kernels run their real tiling: 4 layers of 256, heads of 64."""
    values = dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, max_position_embeddings=256,
                  vocab_size=2048)
    values.update(overrides)
    return tiny_model_config(**values)


def fresh_model(config: MiniGPTConfig, attention: str = "sdpa", seed: int = 0) -> MiniGPTForCausalLM:
    """A model on the GPU, training as Trainer trains it: no KV cache (Trainer sets use_cache=False)."""
    torch.manual_seed(seed)
    model = MiniGPTForCausalLM(config).to(CUDA).train()
    model.config.use_cache = False
    model.set_attn_implementation(attention)
    return model


def logits_and_grads(
    config: MiniGPTConfig, attention: str, bf16: bool, seed: int = 0
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """One forward and backward on CUDA with `attention`: the logits and every parameter's gradient."""
    model = fresh_model(config, attention, seed)
    ids = torch.randint(0, config.vocab_size, (4, config.max_position_embeddings), device=CUDA)  # (B, T)
    autocast = torch.autocast(CUDA.type, dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
    with autocast:
        output = model(input_ids=ids, labels=ids)
    output.loss.backward()
    return output.logits.detach(), {n: p.grad.detach() for n, p in model.named_parameters()}


def assert_close(got, want, tolerance: float) -> None:
    """Logits and every gradient of `got` within `tolerance` (relative) of `want`'s."""
    (logits, grads), (want_logits, want_grads) = got, want
    errors = {"logits": relative_error(logits, want_logits)}
    errors.update({n: relative_error(g, want_grads[n]) for n, g in grads.items()})
    assert all(e < tolerance for e in errors.values()), {n: e for n, e in errors.items() if e >= tolerance}


def assert_close_as_bf16(got, eager_bf16, eager_fp32) -> None:
    """A bf16 kernel's logits and gradients differ from eager attention's in bf16 by no more than
    twice what bf16 itself moves eager attention from fp32, tensor by tensor (at least 1e-3)."""
    (logits, grads), (e16_logits, e16_grads), (e32_logits, e32_grads) = got, eager_bf16, eager_fp32
    pairs = {"logits": (logits, e16_logits, e32_logits)}
    pairs.update({n: (g, e16_grads[n], e32_grads[n]) for n, g in grads.items()})
    too_far = {}
    for name, (kernel, e16, e32) in pairs.items():
        error, bf16_noise = relative_error(kernel, e16), relative_error(e16, e32)
        if error > max(2 * bf16_noise, 1e-3):
            too_far[name] = (error, bf16_noise)
    assert not too_far, f"(kernel vs eager in bf16, eager bf16 vs fp32): {too_far}"


# ---- attention kernels -------------------------------------------------------------------------


@pytest.mark.parametrize("block", [{}, QWEN3_BLOCK], ids=["gpt2_block", "qwen3_block"])
@pytest.mark.parametrize("backend", ["FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION", "MATH"])
def test_sdpa_kernels_match_eager_attention(block, backend):
    """Each of torch's sdpa kernels, forced, gives eager attention's logits and gradients: in bf16
    (flash and cuDNN take no fp32) and, where the kernel takes it, in fp32."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    config = gpt2_block(**block)
    eager_fp32, eager_bf16 = (logits_and_grads(config, "eager", bf16) for bf16 in (False, True))
    for bf16 in (True, False):
        try:
            with sdpa_kernel(getattr(SDPBackend, backend)):
                kernel = logits_and_grads(config, "sdpa", bf16)
        except RuntimeError as error:  # "No available kernel": this GPU or dtype lacks it
            if bf16:
                pytest.skip(f"sdpa {backend} does not run here in bf16: {error}")
            continue  # flash and cuDNN attention are half-precision kernels
        if bf16:
            assert_close_as_bf16(kernel, eager_bf16, eager_fp32)
        else:
            assert_close(kernel, eager_fp32, FP32_TOLERANCE)


def test_flash_attention_2_matches_eager_attention():
    if importlib.util.find_spec("flash_attn") is None:
        pytest.skip("flash_attention_2 needs the flash-attn package (pip install flash-attn), not installed")
    config = gpt2_block()
    eager_fp32, eager_bf16 = (logits_and_grads(config, "eager", bf16) for bf16 in (False, True))
    assert_close_as_bf16(logits_and_grads(config, "flash_attention_2", bf16=True), eager_bf16, eager_fp32)


# ---- training steps ------------------------------------------------------------------------------


def train_steps(
    model: torch.nn.Module,
    steps: int,
    bf16: bool = True,
    fused: bool = True,
    optimizer: torch.optim.Optimizer | None = None,
) -> list[float]:
    """`steps` AdamW steps on one fixed batch (the loss must fall), as Trainer takes them; with
    `optimizer`, that one (its states then outlive the call, as Trainer's do)."""
    torch.manual_seed(1)
    config = model.config
    ids = torch.randint(0, config.vocab_size, (8, config.max_position_embeddings), device=CUDA)
    if optimizer is None:
        optimizer = torch.optim.AdamW(
            model.parameters(), lr=LEARNING_RATE, fused=fused, foreach=None if fused else False
        )
    losses = []
    for _ in range(steps):
        with torch.autocast(CUDA.type, dtype=torch.bfloat16) if bf16 else contextlib.nullcontext():
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return losses


def test_bf16_autocast_trains_with_fp32_master_weights_and_follows_fp32():
    config = gpt2_block()
    model = fresh_model(config)
    with torch.autocast(CUDA.type, dtype=torch.bfloat16):
        ids = torch.randint(0, config.vocab_size, (2, 16), device=CUDA)
        assert model(input_ids=ids).logits.dtype == torch.bfloat16  # the matmuls ran in bf16
    bf16 = train_steps(model, 30)
    assert all(p.dtype == torch.float32 for p in model.parameters())  # master weights stay fp32
    fp32 = train_steps(fresh_model(config), 30, bf16=False)
    assert bf16[-1] < bf16[0] - 1.0  # it learns the batch
    assert bf16[0] == pytest.approx(fp32[0], rel=BF16_TOLERANCE)  # same model, same batch
    assert abs(bf16[-1] - fp32[-1]) < 0.1 * (fp32[0] - fp32[-1])  # the same descent, to a tenth of it


def test_a_wall_clock_budget_measures_its_step_times_on_the_gpu(tmp_path):
    """training.budget=2m on a GPU (benchmarks/gpt2_small_speed.py's budget part, whose checks
    scripts/gpu_check.py reports): the shapes' step times are measured on the GPU the run trains on
    (a CPU's would plan a fraction of the steps the budget buys), choosing takes at most 5% of the
    budget, and the run ends by the budget: a tiny model logging every step runs far slower than its
    measured steps on a GPU (2026-12-04, H200: 4,434 of 9,837 planned steps in 216 s), so the plan's
    max_time must end it."""
    result = budget_check(tmp_path, "2m", "cuda")
    print("\n" + "\n".join(result["lines"]))
    assert any(line.startswith("plan for 120 s: ") for line in result["lines"]), result["lines"]
    failed = [check for check in result["checks"] if not check["passed"]]
    assert len(result["checks"]) == 4 and not failed, failed


def test_torch_compile_trains_like_eager():
    config = gpt2_block()
    eager = train_steps(fresh_model(config), 5, bf16=False)
    compiled_model = torch.compile(fresh_model(config))
    compiled = train_steps(compiled_model, 5, bf16=False)
    assert hasattr(compiled_model, "_orig_mod")  # a compiled module, not the model itself
    assert compiled == pytest.approx(eager, rel=1e-3)  # fp32: Inductor's fused kernels sum in another order
    with_bf16 = train_steps(torch.compile(fresh_model(config)), 5)
    assert with_bf16 == pytest.approx(train_steps(fresh_model(config), 5), rel=BF16_TOLERANCE)


def test_fused_adamw_on_cuda_matches_the_reference_loop():
    """torch's fused CUDA AdamW (training.optim adamw_torch_fused) takes the for-loop AdamW's steps."""
    config = gpt2_block()
    fused_model, loop_model = fresh_model(config), fresh_model(config)
    fused = train_steps(fused_model, 10, bf16=False, fused=True)
    loop = train_steps(loop_model, 10, bf16=False, fused=False)
    assert fused == pytest.approx(loop, rel=FP32_TOLERANCE)
    # Every weight within a hundredth of one step (an AdamW step moves a weight by about the learning
    # rate): not relative, since the keys' bias has no gradient but rounding noise, which Adam scales up.
    for (name, a), (_, b) in zip(fused_model.named_parameters(), loop_model.named_parameters(), strict=True):
        assert float((a - b).detach().abs().max()) <= 1e-2 * LEARNING_RATE, name


# ---- whole runs ------------------------------------------------------------------------------------


def read_losses(output_dir: Path) -> list[tuple[int, float]]:
    lines = (output_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines]
    return [(r["step"], r["loss"]) for r in records if "loss" in r]


def test_the_gpu_profile_trains_the_smoke_config_and_mfu_names_the_datasheet_peak(tmp_path, capsys):
    """configs/smoke.yaml under hardware.profile=gpu-bf16 (bf16, TF32, sdpa, fused AdamW, loader
    workers; compile is the next test's) through run_training on the GPU."""
    from minigpt.pipeline import run_training
    from minigpt.training.run_config import load_run_config

    overrides = small_run_overrides(tmp_path / "run", write_small_corpus(tmp_path))
    overrides += ["hardware.profile=gpu-bf16", "hardware.bf16=true", "hardware.torch_compile=false",
                  "hardware.torch_num_threads=null", "hardware.peak_flops=auto"]
    run = load_run_config(str(REPO_ROOT / "configs" / "smoke.yaml"), overrides)
    result = run_training(run)
    out = capsys.readouterr().out
    assert "device: cuda" in out and "| bf16 |" in out and "attention sdpa" in out
    losses = [loss for _, loss in read_losses(result.output_dir)]
    assert losses[-1] < losses[0] and all(math.isfinite(x) for x in losses)
    known = datasheet_peak(device_name(CUDA), "bf16")
    if known is None:
        pytest.skip(f"{device_name(CUDA)} is not in peak_flops.DATASHEET_PEAKS: MFU's peak was measured")
    assert f"(datasheet: {known[0]}, bf16 dense)" in out


def test_mfu_peak_is_the_datasheet_figure_at_the_training_precision():
    name = device_name(CUDA)
    known = datasheet_peak(name, "bf16")
    if known is None:
        pytest.skip(f"{name} is not in peak_flops.DATASHEET_PEAKS")
    peak = resolve_peak_flops("auto", CUDA, torch.bfloat16)
    assert peak.flops == known[1] and peak.source == f"datasheet: {known[0]}, bf16 dense" and peak.trusted




def test_two_gpu_ddp_gives_the_one_gpu_loss_curve(tmp_path, subprocess_env):
    if torch.cuda.device_count() < 2:
        pytest.skip(f"needs two CUDA GPUs, {torch.cuda.device_count()} visible")
    corpus = write_small_corpus(tmp_path)
    fp32 = ["hardware.bf16=false", "hardware.tf32=false", "hardware.torch_compile=false", "training.max_steps=20"]

    def train(name: str, launcher: list[str], batch: int) -> list[tuple[int, float]]:
        overrides = small_run_overrides(tmp_path / name, corpus, "hardware.profile=multi-gpu", *fp32,
                                        f"hardware.per_device_train_batch_size={batch}")
        command = [*launcher, "scripts/train.py", "configs/smoke.yaml", *overrides]
        done = subprocess.run(command, cwd=REPO_ROOT, env=subprocess_env, capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        return read_losses(tmp_path / name)

    one = train("1x8", [PYTHON], 8)
    two = train("2x4", [PYTHON, "-m", "accelerate.commands.launch", "--config_file",
                        "configs/accelerate/ddp.yaml", "--num_processes", "2",
                        "--main_process_port", str(free_port())], 4)
    assert [s for s, _ in one] == [s for s, _ in two]
    assert one[-1][1] < one[0][1]
    for (step, a), (_, b) in zip(one, two, strict=True):
        assert b == pytest.approx(a, rel=1e-3), f"2 GPUs x 4 differ from 1 x 8 at step {step}"


# ---- memory -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "options, attention",
    [({}, "sdpa"), (dict(position_embedding_type="rope"), "sdpa"), (dict(hidden_dropout=0.1), "eager"),
     (QWEN3_BLOCK, "sdpa")],
    ids=["gpt2_sdpa", "rope_sdpa", "dropout_eager", "qwen3_sdpa"],
)
def test_memory_estimate_matches_the_cuda_allocator(options, attention):
    """The estimate's CUDA rules (sdpa keeps q, k, v as given, bool dropout masks, autograd RMSNorm)
    against `torch.cuda.max_memory_allocated` over two bf16 training steps and an evaluation
    forward; the cuBLAS workspaces that stay allocated afterwards are subtracted, as the CPU test
    subtracts library buffers."""
    config = gpt2_block(hidden_size=512, num_attention_heads=8, max_position_embeddings=512, vocab_size=8192,
                        **options)
    batch = 8
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    model = fresh_model(config, attention)
    # Trainer's optimizer, and so its states, lives through the evaluations between steps
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, fused=True)
    torch.cuda.reset_peak_memory_stats()
    train_steps(model, 2, optimizer=optimizer)  # batch 8 x 512, fused AdamW, bf16 autocast
    training = torch.cuda.max_memory_allocated() - base
    model.eval()
    torch.cuda.reset_peak_memory_stats()
    with torch.no_grad(), torch.autocast(CUDA.type, dtype=torch.bfloat16):
        ids = torch.randint(0, config.vocab_size, (batch, config.max_position_embeddings), device=CUDA)
        model(input_ids=ids, labels=ids)
    evaluation = torch.cuda.max_memory_allocated() - base
    del model, ids, optimizer
    library = torch.cuda.memory_allocated() - base
    estimate = estimate_training_memory(config, batch_size=batch, block_size=config.max_position_embeddings,
                                        precision="bf16", attention=attention, device="cuda",
                                        eval_batch_size=batch)
    report = (size(estimate.training_peak), size(training - library), size(estimate.evaluation_peak),
              size(evaluation - library))
    print(f"memory {options or 'gpt2'} {attention}: estimated / allocated training {report[0]} / {report[1]}, "
          f"evaluation {report[2]} / {report[3]}")
    assert estimate.training_peak == pytest.approx(training - library, rel=0.10), report
    assert estimate.evaluation_peak == pytest.approx(evaluation - library, rel=0.10), report


# ---- GPT-2 small's speed -----------------------------------------------------------------------------


def test_gpt2_small_speed_and_mfu_against_the_datasheet_peak(tmp_path):
    """configs/gpt2-small.yaml as shipped (bf16, sdpa, torch.compile, fused AdamW, 32 blocks of 1024
    a pass) for SPEED_STEPS steps of one pass each (no accumulation: the speed is the pass's) on
    Tiny Shakespeare with a 50304-token tokenizer, through benchmarks/gpt2_small_speed.py's run part
    (scripts/gpu_check.py reports it); prints tokens/s, MFU and the peak memory beside the estimate."""
    run = measure_run(tmp_path, SPEED_STEPS)
    print(f"\n{device_name(CUDA)}: GPT-2 small, {SPEED_STEPS} steps of 32 x 1024 tokens: "
          f"{run['tokens_per_second']:,.0f} tokens/s, MFU {run['mfu']:.1%} against {run['peak']} | peak allocated "
          f"{size(run['peak_allocated_bytes'])} | {run['memory_line']}")
    assert 0 < run["mfu"] <= 1 and run["tokens_per_second"] > 0
    assert run["model_line"].startswith("model: 124.48M parameters")
    if datasheet_peak(device_name(CUDA), "bf16") is not None:
        assert "(datasheet: " in run["peak"]
