"""The names of what a training run writes into its folder, and how to find its checkpoints.

Plain Python at the bottom of the package: training writes these files, and the hub stage (which
training now sits above, since a run can start from a published model) loads and publishes them.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import yaml

RESOLVED_CONFIG_NAME = "resolved_config.yaml"  # the run config, beside the outputs and in every checkpoint
METRICS_FILE = "metrics.jsonl"
SAMPLES_FILE = "samples.txt"
LOSS_PLOT_FILE = "loss.png"
SUMMARY_FILE = "summary.json"
CORPUS_REPORT_FILE = "corpus_report.json"  # the corpus report with the run's plan (data/corpus_report.py)
FINAL_DIR = "final"
CHECKPOINT_PREFIX = "checkpoint"  # Trainer's PREFIX_CHECKPOINT_DIR: `checkpoint-N`
STAGING_PREFIX = ".staging-"  # a save in progress; never matches Trainer's `checkpoint-*` globs
SET_ASIDE_PREFIX = "corrupt-"  # where a bad checkpoint is moved; also outside `checkpoint-*`
RUN_FILES = (RESOLVED_CONFIG_NAME, METRICS_FILE, SAMPLES_FILE, LOSS_PLOT_FILE, SUMMARY_FILE, CORPUS_REPORT_FILE)

_CHECKPOINT_RE = re.compile(rf"^{CHECKPOINT_PREFIX}-(\d+)$")


def checkpoint_step(path: str | os.PathLike) -> int | None:
    """N for a folder named `checkpoint-N`, else None."""
    match = _CHECKPOINT_RE.match(Path(path).name)
    return int(match.group(1)) if match else None


def list_checkpoints(output_dir: str | os.PathLike) -> list[Path]:
    """`checkpoint-N` folders in `output_dir`, newest (highest N) first."""
    output_dir = Path(output_dir)
    if not output_dir.is_dir():
        return []
    found = [p for p in output_dir.iterdir() if p.is_dir() and checkpoint_step(p) is not None]
    return sorted(found, key=checkpoint_step, reverse=True)


def read_run_config(model_dir: str | os.PathLike) -> dict[str, Any]:
    """The resolved training config saved beside a model (its `RESOLVED_CONFIG_NAME`), or {} when
    there is none (a model folder that training did not write)."""
    path = Path(model_dir) / RESOLVED_CONFIG_NAME
    return (yaml.safe_load(path.read_text()) or {}) if path.is_file() else {}


def model_folder_name(model: str | os.PathLike) -> str:
    """A model folder named without the path to it: a run (or its `final/`) by the run's name, a
    checkpoint as `<run>/checkpoint-N`, any other folder by its own name."""
    path = Path(os.path.abspath(model))
    if path.name == FINAL_DIR:
        return path.parent.name
    if checkpoint_step(path) is not None:
        return f"{path.parent.name}/{path.name}"
    return path.name


__all__ = [
    "CHECKPOINT_PREFIX",
    "CORPUS_REPORT_FILE",
    "FINAL_DIR",
    "LOSS_PLOT_FILE",
    "METRICS_FILE",
    "RESOLVED_CONFIG_NAME",
    "RUN_FILES",
    "SAMPLES_FILE",
    "SET_ASIDE_PREFIX",
    "STAGING_PREFIX",
    "SUMMARY_FILE",
    "checkpoint_step",
    "list_checkpoints",
    "model_folder_name",
    "read_run_config",
]
