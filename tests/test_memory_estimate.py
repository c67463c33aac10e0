"""The memory estimate (minigpt/training/memory_estimate.py) against what a CPU holds.

Three checks, each able to fail: the parameter count is the model's, built on the meta device, for
every architecture option; the bytes per token that a block and the head save for the backward are,
on a CPU, the bytes of the tensors autograd saves (counted with saved-tensor hooks, each storage
once), for every architecture option at fp32 and bf16 with sdpa and eager attention; and the whole
peak (weights, optimizer states, weight copies, activations and gradients) is within 10% of the peak
resident set a fresh process reaches over two training steps, and likewise for an evaluation forward
(tests/memory_worker.py says how that is measured). The CUDA side of the rules is tests/test_gpu.py's.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from pathlib import Path

import pytest
import torch
from conftest import ARCHITECTURES, PYTHON, QWEN3_BLOCK, tiny_model_config

from minigpt import MiniGPTConfig, MiniGPTForCausalLM
from minigpt.training.hardware import cpu_has_fast_bf16
from minigpt.training.memory_estimate import (
    MemoryEstimate,
    estimate_training_memory,
    head_activation_bytes,
    layer_activation_bytes,
    parameter_count,
    size,
)

WORKER = Path(__file__).with_name("memory_worker.py")
TOLERANCE = 0.10  # estimate / measured peak - 1: library workspaces are subtracted, allocator rounding is not


@pytest.mark.parametrize(
    "options",
    [*ARCHITECTURES, pytest.param(dict(tie_word_embeddings=False, bias=False), id="untied_no_bias"),
     pytest.param(dict(mlp_type="gated", intermediate_size=100, qk_norm=True), id="gated_qk_norm")],
)
def test_parameter_count_is_the_models_on_the_meta_device(options):
    config = tiny_model_config(**options)
    with torch.device("meta"):  # no memory, no init cost
        model = MiniGPTForCausalLM(config)
    assert parameter_count(config) == sum(p.numel() for p in model.parameters())


def saved_bytes(model: MiniGPTForCausalLM, batch: int, precision: str, attention: str) -> int:
    """Bytes of the storages autograd saves in one training forward with labels, weights excluded."""
    config = model.config
    model.set_attn_implementation(attention)
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()  # a view counts its whole storage, once
        saved[storage.data_ptr()] = storage.nbytes()
        return tensor  # kept alive until the forward ends, so no address is reused meanwhile

    ids = torch.randint(0, config.vocab_size, (batch, config.max_position_embeddings))  # (B, T)
    bf16 = torch.autocast("cpu", dtype=torch.bfloat16) if precision == "bf16" else contextlib.nullcontext()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        with bf16:
            model(input_ids=ids, labels=ids)
    # bf16: autocast's weight copies are saved too; they do not grow with the batch, so the
    # per-token differences below leave them out, as the estimate's activation terms do.
    return sum(n for address, n in saved.items() if address not in weights)


def per_token(model: MiniGPTForCausalLM, precision: str, attention: str) -> float:
    """Saved bytes per token: batch 4 less batch 2, what grows with the tokens. Batch 1 is left out:
    a single row lets eager attention's matmuls view q, k, v where any larger batch copies them."""
    four, two = (saved_bytes(model, batch, precision, attention) for batch in (4, 2))
    return (four - two) / (2 * model.config.max_position_embeddings)


@pytest.mark.parametrize(
    "options",
    [*ARCHITECTURES, pytest.param(dict(hidden_dropout=0.1, attention_dropout=0.1), id="dropout")],
)
def test_activation_bytes_per_token_are_the_saved_tensors_on_a_cpu(options):
    T = 16
    models = {}  # by layer count: one block's bytes are two blocks' less one's
    for layers in (1, 2):
        torch.manual_seed(0)
        config = tiny_model_config(
            hidden_size=32, num_attention_heads=4, num_hidden_layers=layers, max_position_embeddings=T,
            vocab_size=256, **options,
        )
        config.use_cache = False  # as Trainer trains: no KV cache
        models[layers] = MiniGPTForCausalLM(config).train()
    checked = []
    for precision, attention in [("fp32", "sdpa"), ("bf16", "sdpa"), ("bf16", "eager"), ("fp32", "eager")]:
        setting = (precision, attention)
        one, two = (per_token(models[layers], *setting) for layers in (1, 2))
        layer, head = two - one, one - (two - one)
        config = models[1].config
        expected = (
            layer_activation_bytes(config, precision, attention, "cpu", T),
            head_activation_bytes(config, precision, "cpu"),
        )
        checked.append((setting, (layer, head), expected))
    wrong = [c for c in checked if c[1] != pytest.approx(c[2], rel=0.01)]
    assert not wrong, f"(setting, measured (layer, head), estimated): {wrong}"


def estimate_for(case: dict) -> MemoryEstimate:
    return estimate_training_memory(
        MiniGPTConfig(eos_token_id=0, pad_token_id=1, **case["model"]),
        batch_size=case["batch_size"],
        block_size=case["block_size"],
        precision=case["precision"],
        attention=case["attention"],
        device="cpu",
        activation_checkpointing=case["activation_checkpointing"],
        gradient_accumulation_steps=case["gradient_accumulation_steps"],
        eval_batch_size=case["eval_batch_size"],
    )


# Sizes where every term is a tenth of the peak or more, so leaving one out fails the check.
PEAK_CASES = [
    # GPT-2's block in fp32 with sdpa, as configs/gpt2-small.yaml trains on a CPU without bf16.
    dict(
        model=dict(hidden_size=384, num_hidden_layers=4, num_attention_heads=6, vocab_size=2048,
                   max_position_embeddings=64),
        batch_size=8, block_size=64, precision="fp32", attention="sdpa",
        activation_checkpointing=False, gradient_accumulation_steps=1, eval_batch_size=8,
    ),
    # The default run's Qwen3 block with eager attention, in bf16 where the CPU has bf16 matmuls (as
    # bf16: auto picks; elsewhere bf16 is emulated, with workspaces of its own), plus activation
    # checkpointing and accumulation.
    dict(
        model=dict(hidden_size=384, num_hidden_layers=4, num_attention_heads=6, vocab_size=2048,
                   max_position_embeddings=128, **QWEN3_BLOCK),
        batch_size=4, block_size=128, precision="bf16" if cpu_has_fast_bf16() else "fp32", attention="eager",
        activation_checkpointing=True, gradient_accumulation_steps=2, eval_batch_size=4,
    ),
]


def test_estimated_peaks_are_within_ten_percent_of_the_measured_resident_set(subprocess_env):
    if not os.access("/proc/self/clear_refs", os.W_OK):
        pytest.skip("needs Linux's /proc/self/clear_refs to reset the peak resident set")
    env = dict(subprocess_env, MALLOC_MMAP_THRESHOLD_="65536")  # see tests/memory_worker.py
    result = subprocess.run(
        [PYTHON, str(WORKER), json.dumps(PEAK_CASES)], env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    measured = json.loads(result.stdout.splitlines()[-1])
    report = []
    for case, got in zip(PEAK_CASES, measured, strict=True):
        estimate = estimate_for(case)
        for what, estimated in (("training", estimate.training_peak), ("evaluation", estimate.evaluation_peak)):
            ratio = estimated / got[f"{what}_peak"]
            report.append((case["precision"], case["attention"], what, size(estimated), size(got[f"{what}_peak"]), ratio))
    assert all(abs(r[-1] - 1) <= TOLERANCE for r in report), report


def test_the_peak_is_the_largest_moment_of_a_step():
    config = MiniGPTConfig(vocab_size=50304, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                           max_position_embeddings=1024)
    base = dict(batch_size=8, block_size=1024, precision="bf16", attention="sdpa", device="cuda")
    plain = estimate_training_memory(config, **base)
    # Accumulation keeps the gradients through the next micro-batch's backward: exactly 4 bytes a
    # parameter more at the same moment.
    accumulating = estimate_training_memory(config, **base, gradient_accumulation_steps=4)
    assert accumulating.peak_dynamic - plain.peak_dynamic == plain.gradients == 4 * plain.parameters
    # Checkpointing keeps one fp32 hidden state per block instead of every saved tensor.
    checkpointed = estimate_training_memory(config, **base, activation_checkpointing=True)
    layer = layer_activation_bytes(config, "bf16", "sdpa", "cuda", 1024)
    blocks = config.num_hidden_layers * (layer - 4 * config.hidden_size)
    assert plain.activations_per_token - checkpointed.activations_per_token == blocks
    assert checkpointed.training_peak < plain.training_peak
    # With almost no tokens the end of the backward, every gradient, is the peak.
    tiny = estimate_training_memory(config, **dict(base, batch_size=1, block_size=8))
    assert tiny.peak_dynamic == tiny.gradients + 4 * config.vocab_size * config.hidden_size  # + the tied head's
    assert estimate_training_memory(config, **dict(base, precision="fp32")).weight_copies == 0
    line = plain.describe()
    assert line.startswith(f"memory: about {size(plain.training_peak)} per device to train")
    assert "8,192 tokens a pass" in line and "AdamW states" in line and "bf16 weight copies" in line
