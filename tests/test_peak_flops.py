"""MFU's peak: the datasheet for known GPUs; elsewhere one matmul measurement, bounded in time, at
most once per run, cached when the cores were quiet; an MFU above 100% never measures again."""

from __future__ import annotations

import json
import os
import time

import pytest
import torch
from conftest import busy_cores

from minigpt.training import flops as peak_flops
from minigpt.training.flops import (
    MEASURE_SECONDS,
    PeakMeasurement,
    datasheet_peak,
    measure_matmul_peak,
    peak_flops_key,
    precision_name,
    resolve_peak_flops,
)

CPU = torch.device("cpu")


def fake_measurement(flops: float, others: float = 0.0):
    calls = []

    def measure(device, dtype):
        calls.append((device.type, dtype))
        return PeakMeasurement(flops, size=256, seconds=0.1, others_cores=others)

    return measure, calls


def test_a_number_is_used_as_given(tmp_path):
    cache = tmp_path / "peak.json"
    peak = resolve_peak_flops(1.5e11, CPU, torch.float32, cache_file=cache)
    assert (peak.flops, peak.source, peak.trusted) == (1.5e11, "hardware.peak_flops", True)
    assert not cache.exists()


def test_auto_measures_once_then_reads_the_cache(tmp_path, monkeypatch):
    measure, calls = fake_measurement(2.5e11)
    monkeypatch.setattr(peak_flops, "measure_matmul_peak", measure)
    cache = tmp_path / "minigpt" / "peak.json"
    first = resolve_peak_flops("auto", CPU, torch.float32, cache_file=cache)
    assert first.flops == 2.5e11 and first.source.startswith("measured: fp32 256x256 matmul")
    second = resolve_peak_flops("auto", CPU, torch.float32, cache_file=cache)
    assert second.flops == 2.5e11 and second.source.startswith("measured: fp32 256x256 matmul")
    assert second.source.endswith(f", cached in {cache}") and first.measured and second.measured
    assert calls == [("cpu", torch.float32)]
    assert json.loads(cache.read_text())[peak_flops_key(CPU, torch.float32)]["flops"] == 2.5e11
    # Another dtype is another measurement; a corrupt cache is measured over, not trusted.
    assert resolve_peak_flops("auto", CPU, torch.bfloat16, cache_file=cache).flops == 2.5e11
    assert len(calls) == 2
    cache.write_text("{not json")
    assert resolve_peak_flops("auto", CPU, torch.float32, cache_file=cache).flops == 2.5e11
    assert len(calls) == 3


def test_the_default_cache_lives_under_xdg_cache_home(tmp_path, monkeypatch):
    monkeypatch.delenv("MINIGPT_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(peak_flops, "measure_matmul_peak", fake_measurement(1e11)[0])
    resolve_peak_flops("auto", CPU, torch.float32)
    assert (tmp_path / "minigpt" / "peak_flops.json").is_file()


def test_a_peak_measured_on_busy_cores_serves_the_run_but_is_not_cached(tmp_path, monkeypatch):
    cache = tmp_path / "peak.json"
    monkeypatch.setattr(peak_flops, "measure_matmul_peak", fake_measurement(3.98e10, others=1.0)[0])
    busy = resolve_peak_flops("auto", CPU, torch.float32, cache_file=cache)
    assert busy.flops == 3.98e10 and not busy.trusted and "not cached" in busy.source
    assert not cache.exists()  # the next run measures again
    monkeypatch.setattr(peak_flops, "measure_matmul_peak", fake_measurement(1.5e11, others=0.1)[0])
    quiet = resolve_peak_flops("auto", CPU, torch.float32, cache_file=cache)
    assert quiet.flops == 1.5e11 and quiet.trusted
    assert json.loads(cache.read_text())[peak_flops_key(CPU, torch.float32)]["flops"] == 1.5e11


def test_a_real_measurement_is_plausible_and_keeps_to_its_time():
    measured = measure_matmul_peak(CPU, torch.float32, seconds=0.3)
    assert 1e8 < measured.flops < 1e14  # any CPU from the last 20 years, nothing absurd
    assert measured.seconds < 0.3 * 1.5 + 0.1
    assert measured.size >= peak_flops.START_SIZE


def test_an_emulated_bf16_matmul_is_measured_small_and_within_the_time(monkeypatch):
    """An AVX2-only CPU runs bf16 matmuls at about 1.3 GFLOP/s (they are emulated): the measurement
    must not grow to a 2048^3 multiply (13 s each there)."""
    monkeypatch.setattr(peak_flops, "_matmul", slow_matmul(1.3e9))
    started = time.perf_counter()
    measured = measure_matmul_peak(CPU, torch.bfloat16)
    took = time.perf_counter() - started
    assert took < 1.5 * MEASURE_SECONDS and measured.seconds <= took
    assert measured.size <= 512
    assert 0.5e9 < measured.flops < 1.4e9


def test_a_busy_core_shows_in_the_measurement():
    """Processes spinning on every core of the machine: the rate is not the machine's own."""
    with busy_cores(os.cpu_count() or 2):
        measured = measure_matmul_peak(CPU, torch.float32, seconds=0.3)
    assert measured.others_cores > 0.5 and not measured.quiet, measured


@pytest.mark.parametrize(
    "name, precision, expected",
    [
        ("NVIDIA H100 80GB HBM3", "bf16", ("NVIDIA H100 SXM", 989e12)),
        ("NVIDIA H100 PCIe", "bf16", ("NVIDIA H100 PCIe", 756e12)),
        ("NVIDIA H200", "bf16", ("NVIDIA H200 SXM", 989e12)),
        ("NVIDIA A100-SXM4-80GB", "tf32", ("NVIDIA A100", 156e12)),
        ("NVIDIA A100 80GB PCIe", "fp32", ("NVIDIA A100", 19.5e12)),
        ("NVIDIA L4", "bf16", ("NVIDIA L4", 121e12)),
        ("NVIDIA L40S", "bf16", ("NVIDIA L40S", 362e12)),
        ("NVIDIA GeForce RTX 4090", "bf16", ("NVIDIA GeForce RTX 4090", 165e12)),
        ("Tesla T4", "fp16", ("NVIDIA T4", 65e12)),
        ("Tesla T4", "bf16", None),  # no bf16 on Turing: measured instead
        ("NVIDIA Some Future GPU", "bf16", None),
    ],
)
def test_known_gpus_take_their_datasheet_peak(name, precision, expected):
    assert datasheet_peak(name, precision) == expected


def test_a_known_gpu_is_never_measured_and_an_unknown_one_is(tmp_path, monkeypatch):
    measure, calls = fake_measurement(5e13)
    monkeypatch.setattr(peak_flops, "measure_matmul_peak", measure)
    gpu = torch.device("cuda")
    monkeypatch.setattr(peak_flops, "device_name", lambda device: "NVIDIA H100 80GB HBM3")
    peak = resolve_peak_flops("auto", gpu, torch.bfloat16, cache_file=tmp_path / "peak.json")
    assert (peak.flops, peak.source, peak.trusted) == (989e12, "datasheet: NVIDIA H100 SXM, bf16 dense", True)
    assert not peak.measured  # a rate training beats it by is never cached as this GPU's peak
    tf32 = resolve_peak_flops("auto", gpu, torch.float32, tf32=True, cache_file=tmp_path / "peak.json")
    assert tf32.flops == 494e12 and "tf32" in tf32.source
    assert calls == []
    monkeypatch.setattr(peak_flops, "device_name", lambda device: "NVIDIA Some Future GPU")
    assert resolve_peak_flops("auto", gpu, torch.bfloat16, cache_file=tmp_path / "peak.json").flops == 5e13
    assert calls == [("cuda", torch.bfloat16)]


def test_precision_names():
    assert [precision_name(torch.bfloat16), precision_name(torch.float16)] == ["bf16", "fp16"]
    assert [precision_name(torch.float32), precision_name(torch.float32, tf32=True)] == ["fp32", "tf32"]


def slow_matmul(flops_per_second: float):
    """A matmul that takes as long as one at `flops_per_second` would (the real one is skipped)."""

    def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        time.sleep(2 * a.shape[0] * a.shape[1] * b.shape[1] / flops_per_second)
        return a

    return matmul


def test_a_slow_measured_peak_is_measured_once_within_its_time_and_kept_as_measured(tmp_path, monkeypatch):
    """The slow-peak case of an AVX2 CPU in bf16: a peak far below what training reaches. The run
    measures once, in at most a couple of seconds, and never again; MFU is reported against that
    measured peak (above 100% here, which says the peak is low), and the cache keeps the measurement."""
    from conftest import small_run, write_small_corpus

    from minigpt.pipeline import run_training

    monkeypatch.setenv("MINIGPT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(peak_flops, "_matmul", slow_matmul(2e8))  # 0.17 s a 256^3 multiply: no growth, about 5 runs
    # quiet cores, whatever else runs on this machine: a busy machine's peak is not cached (tested above)
    monkeypatch.setattr(peak_flops, "others_busy_cores", lambda start, end: 0.0)
    real_measure, spent = peak_flops.measure_matmul_peak, []

    def timed_measure(device, dtype):
        started = time.perf_counter()
        try:
            return real_measure(device, dtype)
        finally:
            spent.append(time.perf_counter() - started)

    monkeypatch.setattr(peak_flops, "measure_matmul_peak", timed_measure)
    run = small_run(tmp_path / "run", write_small_corpus(tmp_path), "training.max_steps=8")
    run_training(run)
    assert len(spent) == 1 and spent[0] < 2.5, spent
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    mfus = [r["mfu"] for r in records if "mfu" in r]
    assert len(mfus) >= 8 and min(mfus) > 1.0  # training beats the low peak in every window
    cached = json.loads((tmp_path / "cache" / "peak_flops.json").read_text())
    assert next(iter(cached.values()))["how"].startswith("measured")
