"""The benchmark script runs end to end at a tiny shape and reports every figure."""

from __future__ import annotations

import json
import subprocess

from conftest import PYTHON, REPO_ROOT


def test_benchmark_reports_medians_and_ratios(tmp_path):
    out = tmp_path / "bench.json"
    args = ["--layers", "1", "--hidden", "32", "--vocab", "64", "--context", "48", "--batch", "2"]
    args += ["--new-tokens", "16", "--repeats", "1", "--no-cache-repeats", "1", "--json", str(out)]
    result = subprocess.run(
        [PYTHON, str(REPO_ROOT / "scripts" / "benchmark.py"), *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    results = json.loads(out.read_text())["results"]
    for task in ("train_tokens_per_s", "cached_sample_tokens_per_s", "uncached_sample_tokens_per_s"):
        assert results[task]["minigpt"] > 0 and results[task]["gpt2"] > 0
        ratio = results[task]["minigpt"] / results[task]["gpt2"]
        assert abs(results[task]["ratio_minigpt_over_gpt2"] - ratio) < 1e-9
    assert "ratio" in result.stdout and "KV cache speedup" in result.stdout
