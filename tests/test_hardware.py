"""`auto` hardware settings become concrete ones for the machine, explicit ones stay as given, and a
run gives back the process settings it changed."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from minigpt.training import hardware
from minigpt.training.hardware import resolve_hardware, training_dtype
from minigpt.training.settings import HardwareSettings


@pytest.mark.parametrize("fast_bf16", [True, False])
def test_auto_precision_and_attention_follow_the_cpu(monkeypatch, fast_bf16):
    monkeypatch.setattr(hardware, "cpu_has_fast_bf16", lambda: fast_bf16)
    auto = HardwareSettings(use_cpu=True, bf16="auto", attn_implementation="auto")
    resolved = resolve_hardware(auto)
    assert resolved.bf16 is fast_bf16
    assert resolved.attn_implementation == ("eager" if fast_bf16 else "sdpa")  # sdpa is slow in bf16 on CPUs
    assert training_dtype(auto) == (torch.bfloat16 if fast_bf16 else torch.float32)
    assert auto.bf16 == "auto"  # the settings themselves are left as written


def test_explicit_settings_are_kept(monkeypatch):
    monkeypatch.setattr(hardware, "cpu_has_fast_bf16", lambda: True)
    explicit = HardwareSettings(use_cpu=True, bf16=False, attn_implementation="sdpa")
    assert resolve_hardware(explicit) == explicit
    fp32_auto_attention = HardwareSettings(use_cpu=True, bf16=False, attn_implementation="auto")
    assert resolve_hardware(fp32_auto_attention).attn_implementation == "sdpa"


def test_the_cpu_check_answers_a_bool():
    assert isinstance(hardware.cpu_has_fast_bf16(), bool)


@pytest.mark.parametrize(
    "flags, fast",
    [({"avx2", "amx_bf16", "amx_tile"}, True), ({"avx2", "avx512f", "avx512_bf16"}, True), ({"avx2", "fma"}, False)],
    ids=["amx", "avx512_bf16", "avx2_only"],
)
def test_bf16_is_fast_with_amx_or_avx512_bf16(monkeypatch, flags, fast):
    monkeypatch.setattr(hardware, "cpu_flags", lambda: flags)
    assert hardware.cpu_has_fast_bf16() is fast


@pytest.mark.parametrize(
    "amx, avx512_bf16, fast",
    [(True, False, True), (False, True, True), (False, False, False)],
    ids=["amx", "avx512_bf16", "avx2_only"],
)
def test_without_cpu_flags_torch_probes_decide(monkeypatch, amx, avx512_bf16, fast):
    monkeypatch.setattr(hardware, "cpu_flags", lambda: set())  # no /proc/cpuinfo (macOS, ...)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx, raising=False)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16, raising=False)
    assert hardware.cpu_has_fast_bf16() is fast


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/cpuinfo: Linux only")
def test_this_machines_flags_are_read():
    flags = hardware.cpu_flags()
    assert flags and ("sse2" in flags or "fp" in flags or "asimd" in flags), sorted(flags)[:10]


RESTORED_CODE = """
import torch
from minigpt.training.hardware import cpu_run_settings
from minigpt.training.settings import HardwareSettings
torch.set_num_threads(2)
with cpu_run_settings(HardwareSettings(torch_num_threads=1)):
    inside = torch.get_num_threads()
try:
    with cpu_run_settings(HardwareSettings(torch_num_threads=1)):
        raise KeyboardInterrupt
except KeyboardInterrupt:
    pass
print(inside, torch.get_num_threads())
"""


def test_a_run_gives_back_the_thread_count_it_set():
    # In a child, so nothing is left changed in pytest's process even if the code under test fails.
    result = subprocess.run([sys.executable, "-c", RESTORED_CODE], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["1", "2"]


def test_run_training_restores_the_process_settings(tmp_path, monkeypatch):
    """A whole (tiny) run from Python, as a notebook or the app calls it: the thread count is as it
    was when it returns."""
    from conftest import small_run, write_small_corpus

    from minigpt.pipeline import run_training

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        run = small_run(tmp_path / "run", write_small_corpus(tmp_path), "training.max_steps=3")
        assert run.hardware.torch_num_threads == 1
        run_training(run)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    assert (torch.full((4,), 1e-40) * 1.0).abs().max().item() > 0.0  # not flushing any more
