"""What a published model's card states, read from the model folder and its training run.

The card itself is written by `minigpt.export.model_card` (one writer for published and exported
folders); this module reads the facts only a run folder holds: the parameter count of the weights,
the validation metrics training logged (the latest, and the base model's at step 0) and the
hardware of each start and resume.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from safetensors import safe_open

from ..export.model_card import EVAL_METRICS


def count_parameters(weights_files: list[Path]) -> int:
    """Parameters stored in safetensors files (a tied head is stored once, so counted once)."""
    total = 0
    for path in weights_files:
        with safe_open(str(path), framework="numpy") as handle:
            for name in handle.keys():
                total += math.prod(handle.get_slice(name).get_shape())
    return total


def read_eval_metrics(run_dir: Path | None, model_dir: Path) -> tuple[dict[str, float], int | None]:
    """The latest validation metrics training logged, and their step.

    Reads the run's `metrics.jsonl` (one JSON record per log line) and `summary.json`, and
    `trainer_state.json` in a checkpoint folder; the record with the highest step wins.
    """
    records: list[Mapping[str, Any]] = []
    for folder in [d for d in (run_dir, model_dir) if d is not None]:
        jsonl = folder / "metrics.jsonl"
        if jsonl.is_file():
            records += [json.loads(line) for line in jsonl.read_text().splitlines() if line.strip()]
        summary = folder / "summary.json"
        if summary.is_file():
            record = json.loads(summary.read_text())
            records.append({"step": record.get("global_step", -1), **record})
        state = folder / "trainer_state.json"
        if state.is_file():
            records += json.loads(state.read_text()).get("log_history", [])
    evals = [r for r in records if isinstance(r.get("eval_loss"), int | float)]
    if not evals:
        return {}, None
    latest = max(evals, key=lambda r: r.get("step", -1))  # max() keeps the first of equal steps
    metrics = {key: float(latest[key]) for key in EVAL_METRICS if isinstance(latest.get(key), int | float)}
    metrics.setdefault("eval_perplexity", math.exp(min(metrics["eval_loss"], 50.0)))
    step = latest.get("step")
    return metrics, int(step) if isinstance(step, int | float) and step >= 0 else None


def read_base_metrics(run_dir: Path | None, model_dir: Path) -> dict[str, float]:
    """The validation metrics logged at step 0 (a run started from a base evaluates it first)."""
    for folder in [d for d in (run_dir, model_dir) if d is not None]:
        jsonl = folder / "metrics.jsonl"
        if jsonl.is_file():
            for line in jsonl.read_text().splitlines():
                record = json.loads(line) if line.strip() else {}
                if record.get("step") == 0 and isinstance(record.get("eval_loss"), int | float):
                    return {key: float(record[key]) for key in EVAL_METRICS if key in record}
    return {}


def read_segments(run_dir: Path | None) -> list[tuple[int, dict[str, Any]]]:
    """(first step, hardware section) of each start and resume of the run, in step order."""
    jsonl = run_dir / "metrics.jsonl" if run_dir is not None else None
    if jsonl is None or not jsonl.is_file():
        return []
    segments = []
    for line in jsonl.read_text().splitlines():
        record = json.loads(line) if line.strip() else {}
        if isinstance(record.get("segment"), Mapping) and isinstance(record["segment"].get("hardware"), Mapping):
            segments.append((int(record.get("step", 0)), dict(record["segment"]["hardware"])))
    return sorted(segments, key=lambda s: s[0])


__all__ = ["count_parameters", "read_base_metrics", "read_eval_metrics", "read_segments"]
