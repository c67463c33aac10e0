"""The names of what a training run writes into its folder, how to find its checkpoints, and how to
read its logs back: training writes these files, the hub, the app and the run page read them.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

RESOLVED_CONFIG_NAME = "resolved_config.yaml"  # the run config, beside the outputs and in every checkpoint
METRICS_FILE = "metrics.jsonl"
SAMPLES_FILE = "samples.txt"
LOSS_PLOT_FILE = "loss.png"
SUMMARY_FILE = "summary.json"
RUN_PAGE_FILE = "run.html"  # one self-contained page of the run, written last (reporting/)
CORPUS_REPORT_FILE = "corpus_report.json"  # the corpus report of the run's data, and its plan's epochs
PLAN_FILE = "plan.json"  # what training.budget chose, and the shapes it weighed
FINAL_DIR = "final"
COMPLETE_MARKER = "checkpoint_complete.json"  # written last into a checkpoint: its files and their sizes
TRAINER_STATE_NAME = "trainer_state.json"  # Trainer's, in every checkpoint
CHECKPOINT_PREFIX = "checkpoint"  # Trainer's PREFIX_CHECKPOINT_DIR: `checkpoint-N`
STAGING_PREFIX = ".staging-"  # a save in progress; never matches Trainer's `checkpoint-*` globs
SET_ASIDE_PREFIX = "corrupt-"  # where a bad checkpoint is moved; also outside `checkpoint-*`
RUN_FILES = (
    RESOLVED_CONFIG_NAME, METRICS_FILE, SAMPLES_FILE, LOSS_PLOT_FILE, SUMMARY_FILE, RUN_PAGE_FILE, CORPUS_REPORT_FILE, PLAN_FILE
)

_CHECKPOINT_RE = re.compile(rf"^{CHECKPOINT_PREFIX}-(\d+)$")


def checkpoint_step(path: str | os.PathLike) -> int | None:
    """N for a folder named `checkpoint-N`, else None."""
    match = _CHECKPOINT_RE.match(Path(path).name)
    return int(match.group(1)) if match else None


def list_checkpoints(output_dir: str | os.PathLike) -> list[Path]:
    """`checkpoint-N` folders in `output_dir`, newest (highest N) first."""
    output_dir = Path(output_dir)
    found = [p for p in output_dir.iterdir() if p.is_dir() and checkpoint_step(p) is not None] if output_dir.is_dir() else []
    return sorted(found, key=checkpoint_step, reverse=True)


def read_run_config(model_dir: str | os.PathLike) -> dict[str, Any]:
    """The resolved training config saved beside a model, or {} when there is none."""
    path = Path(model_dir) / RESOLVED_CONFIG_NAME
    return (yaml.safe_load(path.read_text()) or {}) if path.is_file() else {}


def model_folder_name(model: str | os.PathLike) -> str:
    """A model folder's name: a run's `final/` by the run's, a checkpoint as `<run>/checkpoint-N`."""
    path = Path(os.path.abspath(model))
    if path.name == FINAL_DIR:
        return path.parent.name
    if checkpoint_step(path) is not None:
        return f"{path.parent.name}/{path.name}"
    return path.name


# The header SampleTextCallback writes above each sample in samples.txt.
SAMPLE_HEADER = re.compile(r"^--- step (\d+), prompt (.*) ---$", re.MULTILINE)


@dataclass
class Sample:
    step: int
    prompt: str  # as written in samples.txt: a Python repr, e.g. 'ROMEO:'
    text: str  # the prompt and its continuation


def format_sample(step: int, prompt: str, text: str) -> str:
    """One block of samples.txt, as `read_samples` reads it back."""
    return f"--- step {step}, prompt {prompt!r} ---\n{text}\n"


def read_samples(path: Path, offset: int = 0) -> list[Sample]:
    """The sample blocks of a run's samples.txt from byte `offset` on, oldest first ([] when none yet)."""
    try:
        with path.open("rb") as handle:
            handle.seek(offset)
            text = handle.read().decode("utf-8")
    except (FileNotFoundError, UnicodeDecodeError):
        return []
    headers = list(SAMPLE_HEADER.finditer(text))
    ends = [header.start() for header in headers[1:]] + [len(text)]
    return [  # a body starts after its header's newline
        Sample(int(header.group(1)), header.group(2), text[header.end() + 1 : end].removesuffix("\n"))
        for header, end in zip(headers, ends, strict=True)
    ]


def is_number(value: Any) -> bool:
    """A JSON number (not a bool); metrics.jsonl writes NaN and infinity as strings."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def read_log_records(path: Path, up_to_step: float = math.inf) -> list[dict[str, Any]]:
    """A run's metrics.jsonl records up to a step (all of them by default), oldest first."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []
    records = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a line cut short by a kill
        if isinstance(record, dict) and is_number(record.get("step")) and record["step"] <= up_to_step:
            records.append(record)
    return records

