"""Muon + AdamW as one optimizer (minigpt/training/optimizers.py): which parameters each takes, what
a Muon step does to a matrix, and a state dict that restores both and keeps the LR schedule live."""

from __future__ import annotations

import pytest
import torch
from conftest import tiny_model
from transformers import TrainingArguments, get_cosine_schedule_with_warmup

from minigpt.training.optimizers import CompositeOptimizer, muon_parameter_names, muon_with_adamw

# Momentum and decay off: one step moves a matrix by exactly -lr x adjust x NS(gradient).
MUON = dict(lr=0.02, momentum=0.0, weight_decay=0.0, nesterov=False, adjust_lr_fn="match_rms_adamw")


def build(model, **muon) -> CompositeOptimizer:
    args = TrainingArguments(output_dir="unused", learning_rate=1e-3, weight_decay=0.1, use_cpu=True)
    matrices = [name for name, param in model.named_parameters() if param.ndim == 2]
    return muon_with_adamw(model, args, matrices, {**MUON, **muon})


def names_by_optimizer(optimizer: CompositeOptimizer) -> dict[str, set[str]]:
    return {
        name: {n for group in inner.param_groups for n in group["param_names"]}
        for name, inner in optimizer.optimizers.items()
    }


@pytest.mark.parametrize("tie", [True, False], ids=["tied_head", "untied_head"])
def test_muon_takes_the_block_matrices_and_adamw_the_rest(tie):
    model = tiny_model(tie_word_embeddings=tie)
    optimizer = build(model)
    names = names_by_optimizer(optimizer)
    matrices = ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")
    blocks = {f"transformer.h.{i}.{m}.weight" for i in range(2) for m in matrices}
    assert names["muon"] == set(muon_parameter_names(model)) == blocks
    expected_adamw = {n for n, _ in model.named_parameters()} - blocks
    assert names["adamw"] == expected_adamw and ("lm_head.weight" in expected_adamw) == (not tie)
    # The composite's groups are the inner optimizers' own dicts, AdamW's first (Trainer logs group 0).
    adamw, muon = optimizer.optimizers["adamw"], optimizer.optimizers["muon"]
    inner_groups = [*adamw.param_groups, *muon.param_groups]
    assert all(a is b for a, b in zip(optimizer.param_groups, inner_groups, strict=True))
    decayed = {n for g in adamw.param_groups if g["weight_decay"] > 0 for n in g["param_names"]}
    assert decayed == {n for n in expected_adamw if model.get_parameter(n).ndim == 2}  # as the caller listed


def test_a_muon_step_moves_each_matrix_by_an_orthogonalised_update():
    """With momentum and decay off, the update is NS(gradient): its singular values are all near 1
    (Jordan et al. 2024: S' within ~[0.5, 1.5]) while the gradient's span two decades, and its RMS
    is 0.2 x LR with match_rms_adamw (Liu et al. 2025)."""
    model = tiny_model()
    optimizer = build(model)
    weight = model.get_parameter("transformer.h.0.mlp.c_fc.weight")  # (128, 32)
    generator = torch.Generator().manual_seed(0)
    u, _ = torch.linalg.qr(torch.randn(128, 32, generator=generator))  # (128, 32), orthonormal columns
    v, _ = torch.linalg.qr(torch.randn(32, 32, generator=generator))
    # Singular values 1 ... 0.01: five quintic Newton-Schulz steps lift anything above ~1e-3 of
    # the Frobenius norm into [0.5, 1.5]; smaller ones (near-null directions) stay small.
    gradient = u @ torch.diag(torch.logspace(0, -2, 32)) @ v.T
    for param in model.parameters():
        param.grad = torch.zeros_like(param)
    weight.grad = gradient.clone()
    before = weight.detach().clone()
    optimizer.step()
    update = (before - weight.detach()) / MUON["lr"]  # (128, 32)

    singular = torch.linalg.svdvals(update / (0.2 * 128**0.5))  # undo match_rms_adamw's 0.2 sqrt(max)
    assert singular.min() > 0.5 and singular.max() < 1.5, singular
    assert torch.linalg.svdvals(gradient).max() / torch.linalg.svdvals(gradient).min() > 90
    assert update.pow(2).mean().sqrt().item() == pytest.approx(0.2, rel=0.35)
    # The update spans the gradient's row and column spaces: U V^T, not some other orthogonal matrix.
    assert torch.nn.functional.cosine_similarity(update.flatten(), (u @ v.T).flatten(), dim=0) > 0.95


def test_state_dict_round_trip_restores_both_and_the_schedule_still_reaches_them():
    model = tiny_model()
    optimizer = build(model, momentum=0.95)
    for param in model.parameters():
        param.grad = torch.randn_like(param)
    optimizer.step()
    saved = optimizer.state_dict()
    assert set(saved) == {"adamw", "muon"} and len(saved["muon"]["state"]) == 8  # a momentum per matrix

    fresh = build(tiny_model(), momentum=0.95)
    scheduler = get_cosine_schedule_with_warmup(fresh, num_warmup_steps=2, num_training_steps=10)
    fresh.load_state_dict(saved)  # Accelerate's prepare() and every resume do this after the scheduler exists
    for old, new in zip(optimizer.state.values(), fresh.state.values(), strict=True):  # both optimizers'
        assert old.keys() == new.keys() and all(torch.equal(old[k], new[k]) for k in old)

    fresh.step()
    scheduler.step()  # warmup step 1 of 2: every group at half its own peak
    for name, peak in (("adamw", 1e-3), ("muon", MUON["lr"])):
        for group in fresh.optimizers[name].param_groups:
            assert group["lr"] == pytest.approx(peak / 2), name
    with pytest.raises(ValueError, match="optimizer state holds"):
        fresh.load_state_dict({"adamw": saved["adamw"]})
