"""`hardware.peak_flops: auto`: measured once per machine, threads and dtype, then read from the cache."""

from __future__ import annotations

import json
import subprocess
import sys

import torch

from minigpt.training import throughput
from minigpt.training.throughput import measure_matmul_flops, peak_flops_key, resolve_peak_flops


def test_a_number_is_used_as_given(tmp_path):
    cache = tmp_path / "peak.json"
    assert resolve_peak_flops(1.5e11, torch.device("cpu"), torch.float32, cache) == 1.5e11
    assert not cache.exists()


def test_auto_measures_once_then_reads_the_cache(tmp_path, monkeypatch):
    calls = []

    def fake_measure(device, dtype):
        calls.append((device.type, dtype))
        return 2.5e11

    monkeypatch.setattr(throughput, "measure_matmul_flops", fake_measure)
    cache = tmp_path / "minigpt" / "peak.json"
    cpu = torch.device("cpu")
    assert resolve_peak_flops("auto", cpu, torch.float32, cache) == 2.5e11
    assert resolve_peak_flops("auto", cpu, torch.float32, cache) == 2.5e11
    assert calls == [("cpu", torch.float32)]
    stored = json.loads(cache.read_text())
    assert stored[peak_flops_key(cpu, torch.float32)]["flops"] == 2.5e11
    # Another dtype is another measurement; a corrupt cache is measured over, not trusted.
    assert resolve_peak_flops("auto", cpu, torch.bfloat16, cache) == 2.5e11
    assert len(calls) == 2
    cache.write_text("{not json")
    assert resolve_peak_flops("auto", cpu, torch.float32, cache) == 2.5e11
    assert len(calls) == 3


def test_the_default_cache_lives_under_xdg_cache_home(tmp_path, monkeypatch):
    monkeypatch.delenv("MINIGPT_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(throughput, "measure_matmul_flops", lambda device, dtype: 1e11)
    resolve_peak_flops("auto", torch.device("cpu"), torch.float32)
    assert (tmp_path / "minigpt" / "peak_flops.json").is_file()


def test_a_small_matmul_measures_a_plausible_rate():
    flops = measure_matmul_flops(torch.device("cpu"), torch.float32, size=128, repeats=2)
    assert 1e7 < flops < 1e14  # any CPU from the last 20 years, nothing absurd


def test_flush_denormal_reaches_torch_worker_threads():
    # In a child, so the mode is not left on in pytest's process.
    code = """
import torch
from minigpt.training.settings import HardwareSettings
from minigpt.training.trainer import apply_cpu_settings
apply_cpu_settings(HardwareSettings(torch_num_threads=2, flush_denormal=True))
tiny = torch.full((1 << 16,), 1e-40)  # denormal in float32; split across both threads below
assert torch.get_num_threads() == 2
assert (tiny * 1.0).abs().max().item() == 0.0, "a thread still computes denormals"
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
