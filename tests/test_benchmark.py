"""The benchmark runs end to end at a tiny shape and reports every row with consistent ratios."""

from __future__ import annotations

import json
import subprocess

import torch
from conftest import PYTHON, REPO_ROOT

TINY = "--layers 1 --heads 2 --hidden 32 --vocab 300 --context 16 --batch 2".split()


def test_benchmark_reports_every_row_with_medians_and_ratios(tmp_path):
    out = tmp_path / "bench.json"
    args = [*TINY, "--threads", "1", "--short-steps", "2", "--long-steps", "4", "--repeats", "1"]
    args += ["--contenders", "training_path", "gpt2_trainer", "--new-tokens", "8", "--gen-repeats", "1"]
    args += ["--workdir", str(tmp_path / "work"), "--json", str(out), "--markdown"]
    result = subprocess.run(
        [PYTHON, str(REPO_ROOT / "scripts" / "benchmark.py"), *args],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    results = json.loads(out.read_text())
    training = results["training"]
    assert set(training["rows"]) == {"training_path", "gpt2_trainer"}
    path, gpt2 = training["rows"]["training_path"], training["rows"]["gpt2_trainer"]
    assert path["tokens_per_s"] * path["ms_per_step"] / 1e3 == _approx(2 * 16)  # batch x context tokens
    assert training["ratios"]["speedup_over_gpt2_trainer"] == _approx(
        gpt2["ms_per_step"] / path["ms_per_step"]
    )
    for batch in ("batch_1", "batch_8"):
        rows = results["generation"][batch]
        assert {"gpt2", "minigpt", "minigpt_static"} <= set(rows)
        assert rows["minigpt"]["speedup_over_gpt2"] == _approx(
            rows["minigpt"]["tokens_per_s"] / rows["gpt2"]["tokens_per_s"]
        )
    data = results["data"]
    assert 0 <= data["tokens"] - data["raw_tokens"] <= 2  # the same lines, plus an EOS ending each split
    assert 0 < data["cached_s"] < data["prepare_s"]
    assert results["machine"]["threads"] == 1 and "load_before" in results
    assert "| training path speedup over gpt2_trainer |" in result.stdout
    assert "--layers 1" in results["command"]


def test_plain_loop_trains_the_run_model_with_its_optimizer_and_schedule(tmp_path):
    from minigpt.benchmarks.contenders import plain_loop, with_steps
    from minigpt.benchmarks.training_speed import TrainingBenchmark, prepare_inputs
    from minigpt.training.run_config import load_run_config

    bench = TrainingBenchmark(
        config=REPO_ROOT / "configs" / "shakespeare.yaml",
        workdir=tmp_path,
        layers=1,
        heads=2,
        hidden=32,
        context=16,
        batch=2,
        vocab=300,
        threads=1,
    )
    prepare_inputs(bench)
    run = load_run_config(bench.config, bench.overrides())
    assert with_steps(run, 10).training.warmup_steps == 5  # stays below max_steps
    torch.manual_seed(0)
    plain_loop(run)(3)  # three optimizer steps without error; the model is rebuilt per call


def _approx(value: float):
    import pytest

    return pytest.approx(value, rel=1e-6)
