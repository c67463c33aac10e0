"""The default training run from nothing: wall time and validation bits per byte.

Runs `scripts/train.py CONFIG` in a child process with a fresh output folder, tokenizer folder
and data cache under the work folder, so tokenizer training and data preparation are included,
as a new user's first run. Reports the child's wall time (imports included), the run's own
runtime (`run_training`), its `Trainer.train()` time (`train_runtime`, the budget of the quality
row), its final validation bits/byte and the load average before and after.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.machine import load_average
from minigpt.run_layout import METRICS_FILE, SUMMARY_FILE

REPO_ROOT = Path(__file__).resolve().parents[1]


def time_default_run(config: Path, workdir: Path, overrides: list[str] | None = None) -> dict[str, Any]:
    """Train `config` from nothing in a child process; its wall time, bits/byte and the load."""
    workdir = Path(workdir)
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    output_dir = workdir / "run"
    command = [
        sys.executable,
        str(REPO_ROOT / "scripts" / "train.py"),
        str(config),
        f"training.output_dir={output_dir}",
        f"tokenizer.path={workdir / 'tokenizer'}",
        f"data.cache_dir={workdir / 'data'}",
        *(overrides or []),
    ]
    load_before = load_average()
    start = time.perf_counter()
    with (workdir / "train.log").open("w") as log:
        result = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, cwd=REPO_ROOT)
    wall = time.perf_counter() - start
    if result.returncode != 0:
        tail = (workdir / "train.log").read_text()[-3000:]
        raise RuntimeError(f"the default run failed (exit {result.returncode}):\n{tail}")
    summary = json.loads((output_dir / SUMMARY_FILE).read_text())
    records = [json.loads(line) for line in (output_dir / METRICS_FILE).read_text().splitlines() if line]
    train_runtime = next((r["train_runtime"] for r in reversed(records) if "train_runtime" in r), None)
    return {
        "config": str(config),
        "wall_s": wall,
        "runtime_s": summary["runtime_seconds"],
        "train_runtime_s": train_runtime,  # Trainer.train() alone: the quality row's budget
        "tokenizer_path": str(workdir / "tokenizer"),
        "data_cache_dir": str(workdir / "data"),
        "eval_bpb": summary.get("eval_bpb"),
        "global_step": summary["global_step"],
        "load_before": load_before,
        "load_after": load_average(),
    }


__all__ = ["time_default_run"]
