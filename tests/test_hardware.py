"""`auto` hardware settings become concrete ones for the machine, and explicit ones stay as given."""

from __future__ import annotations

import pytest
import torch

from minigpt.training import trainer
from minigpt.training.settings import HardwareSettings
from minigpt.training.trainer import resolve_hardware, training_dtype


@pytest.mark.parametrize("fast_bf16", [True, False])
def test_auto_precision_and_attention_follow_the_cpu(monkeypatch, fast_bf16):
    monkeypatch.setattr(trainer, "cpu_has_fast_bf16", lambda: fast_bf16)
    auto = HardwareSettings(use_cpu=True, bf16="auto", attn_implementation="auto")
    resolved = resolve_hardware(auto)
    assert resolved.bf16 is fast_bf16
    assert resolved.attn_implementation == ("eager" if fast_bf16 else "sdpa")  # sdpa is slow in bf16 on CPUs
    assert training_dtype(auto) == (torch.bfloat16 if fast_bf16 else torch.float32)
    assert auto.bf16 == "auto"  # the settings themselves are left as written


def test_explicit_settings_are_kept(monkeypatch):
    monkeypatch.setattr(trainer, "cpu_has_fast_bf16", lambda: True)
    explicit = HardwareSettings(use_cpu=True, bf16=False, attn_implementation="sdpa")
    assert resolve_hardware(explicit) == explicit
    fp32_auto_attention = HardwareSettings(use_cpu=True, bf16=False, attn_implementation="auto")
    assert resolve_hardware(fp32_auto_attention).attn_implementation == "sdpa"


def test_the_cpu_check_answers_a_bool():
    assert isinstance(trainer.cpu_has_fast_bf16(), bool)


@pytest.mark.parametrize(
    "amx, avx512_bf16, fast",
    [(True, False, True), (False, True, True), (False, False, False)],
    ids=["amx", "avx512_bf16", "avx2_only"],
)
def test_bf16_is_fast_with_amx_or_avx512_bf16(monkeypatch, amx, avx512_bf16, fast):
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx, raising=False)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16, raising=False)
    assert trainer.cpu_has_fast_bf16() is fast
