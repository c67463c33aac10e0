"""configs/gpt2-small.yaml: GPT-2 small's architecture at 124M parameters, batch layouts that fit the
GPUs docs/gpu.md names, and two training steps of the real model on a CPU.

The two steps prove that the shipped config, as written, trains through `run_training`: its
architecture at full size (124.48M parameters, context 1024), its 50304-token vocabulary, its
optimizer (fused AdamW), schedule and clipping, on this CPU's precision; then it evaluates, samples,
checkpoints and saves `final/`. Overridden, and only these: the data (a 6 KB text, as the config's
corpus is a placeholder), the tokenizer's origin (one of exactly 50304 tokens, made rather than
trained: benchmarks/gpt2_small_speed.py), the blocks' length (128 tokens: the model's 1024 positions
and so its parameters are unchanged), the batch layout (1 block, no accumulation), the hardware
profile (cpu) and the schedule's length (2 steps, 1 of warmup), the validation share (of so small a
text) and MFU's peak (given, not measured).
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import torch
from transformers import GPT2Config, GPT2LMHeadModel

from benchmarks.gpt2_small_speed import GPT2_SMALL, exact_size_tokenizer, gpt2_small_overrides, small_text
from minigpt import MiniGPTConfig, MiniGPTForCausalLM
from minigpt.training.hardware import resolve_hardware
from minigpt.training.memory_estimate import estimate_run_memory, parameter_count, size
from minigpt.training.run_config import load_run_config

GPU_PAGE = Path(__file__).resolve().parents[1] / "docs" / "gpu.md"
GIB = 1024**3
# The layout docs/gpu.md gives a 24 GB GPU, as command-line overrides of the shipped (80 GB) one.
LAYOUT_24GB = [
    "hardware.per_device_train_batch_size=8",
    "hardware.gradient_accumulation_steps=64",
    "hardware.per_device_eval_batch_size=8",
]
HEADROOM = 0.6  # the estimate's tensors may fill this share of a GPU: the rest is the CUDA context,
# the caching allocator's slack and torch.compile's workspaces


def gpt2_small_config(overrides: list[str] = ()) -> tuple[object, MiniGPTConfig]:
    run = load_run_config(GPT2_SMALL, list(overrides))
    return run, MiniGPTConfig(**run.model.architecture(), vocab_size=run.tokenizer.vocab_size)


def test_the_config_is_gpt2_small_with_124m_parameters_built_on_the_meta_device():
    run, config = gpt2_small_config()
    with torch.device("meta"):  # the shapes only: no memory, no init
        ours = MiniGPTForCausalLM(config)
        stock = GPT2LMHeadModel(GPT2Config(vocab_size=config.vocab_size))  # GPT-2 small's defaults
    count = sum(p.numel() for p in ours.parameters())
    assert count == sum(p.numel() for p in stock.parameters()) == parameter_count(config)
    assert round(count / 1e6) == 124
    assert (config.num_hidden_layers, config.hidden_size, config.num_attention_heads) == (12, 768, 12)
    assert config.max_position_embeddings == run.data.block_size == 1024
    assert config.vocab_size % 128 == 0 and config.vocab_size >= 50257  # GPT-2's, padded for the head's matmul
    assert run.hardware.bf16 is True and run.hardware.profile == "gpu-bf16"


def estimate(overrides: list[str] = ()):
    """The memory a run of the config (with `overrides`) would print on a GPU, and the run config."""
    run, config = gpt2_small_config(overrides)
    return estimate_run_memory(resolve_hardware(run.hardware), run.data.block_size, config, "cuda"), run


def test_both_batch_layouts_fit_their_gpu_with_room_and_train_the_same_batch():
    page = GPU_PAGE.read_text(encoding="utf-8")
    assert " ".join(LAYOUT_24GB) in page  # the page gives the layout this test checks
    assert estimate()[0].describe() in page  # the line a run of the shipped config prints on a GPU
    for overrides, gpu_gib in (([], 80), (LAYOUT_24GB, 24)):
        memory, run = estimate(overrides)
        h = run.hardware
        assert memory.training_peak <= HEADROOM * gpu_gib * GIB, (gpu_gib, memory.describe())
        assert memory.evaluation_peak <= HEADROOM * gpu_gib * GIB, (gpu_gib, memory.describe())
        assert h.per_device_train_batch_size * h.gradient_accumulation_steps * run.data.block_size == 524_288
        row = f"| {size(memory.training_peak)} | {size(memory.evaluation_peak)} |"
        assert row in page, f"docs/gpu.md's table lacks {row}"  # its figures are the estimate's
        # Not needlessly small: twice the blocks a pass would not leave that room.
        doubled, _ = estimate([*overrides, f"hardware.per_device_train_batch_size={2 * h.per_device_train_batch_size}"])
        assert doubled.training_peak > HEADROOM * gpu_gib * GIB, (gpu_gib, doubled.describe())


def test_the_124m_config_trains_two_steps_on_a_cpu(tmp_path, capsys):
    from minigpt.pipeline import run_training

    run_config = load_run_config(GPT2_SMALL)
    tokenizer = exact_size_tokenizer(tmp_path / "tokenizer", run_config.tokenizer.vocab_size)
    corpus = small_text(tmp_path, 6000)
    run = load_run_config(
        GPT2_SMALL,
        gpt2_small_overrides(
            tmp_path,
            corpus,
            tokenizer,
            "hardware.profile=cpu",
            "hardware.per_device_train_batch_size=1",
            "hardware.gradient_accumulation_steps=1",
            "hardware.per_device_eval_batch_size=4",
            "hardware.peak_flops=1.0e12",
            "data.block_size=128",
            "data.validation_fraction=0.1",
            "training.max_steps=2",
            "training.warmup_steps=1",
            "training.logging_steps=1",
            "training.sample_max_new_tokens=2",
        ),
    )
    assert run.model == run_config.model and run.training.optim == run_config.training.optim
    result = run_training(run)
    out = capsys.readouterr().out
    assert result.global_step == 2 and not result.stopped
    assert "model: 124.48M parameters (12 layers, hidden 768, vocab 50304, context 128)" in out
    assert re.search(r"^memory: about [\d.]+ GiB per device to train", out, re.M)
    losses = [record["loss"] for record in result.log_history if "loss" in record]
    assert len(losses) == 2
    # A fresh GPT-2-style init predicts nearly uniformly: the first loss is about ln(vocabulary).
    assert abs(losses[0] - math.log(50304)) < 0.5
    assert all(math.isfinite(loss) for loss in losses) and math.isfinite(result.final_metrics["eval_loss"])
    saved = MiniGPTConfig.from_pretrained(result.final_dir)
    assert parameter_count(saved) == parameter_count(gpt2_small_config()[1])
    assert (result.output_dir / "checkpoint-2" / "optimizer.pt").is_file()
