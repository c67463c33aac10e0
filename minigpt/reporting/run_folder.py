"""A run folder read back from its files alone (no torch): config, summary, log records, samples and
model size, and the curves drawn from them (`series`, `evaluations`) for loss.png and run.html alike.
"""

from __future__ import annotations

import json
import math
import os
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..run_layout import (
    CORPUS_REPORT_FILE,
    FINAL_DIR,
    METRICS_FILE,
    PLAN_FILE,
    RESOLVED_CONFIG_NAME,
    SAMPLES_FILE,
    SUMMARY_FILE,
    Sample,
    is_number,
    list_checkpoints,
    read_log_records,
    read_samples,
)

MAX_CURVE_POINTS = 2000  # per curve; longer ones keep each span's lowest and highest point


@dataclass
class RunFolder:
    """What a run folder holds; a part is empty (None, {}, []) when its file is missing."""

    path: Path
    config: dict[str, Any] = field(default_factory=dict)  # resolved_config.yaml
    config_text: str | None = None
    summary: dict[str, Any] | None = None  # summary.json: written at the end of a run only
    records: list[dict[str, Any]] = field(default_factory=list)  # metrics.jsonl
    samples: list[Sample] = field(default_factory=list)  # samples.txt, this run's (`run_samples`)
    model_config: dict[str, Any] = field(default_factory=dict)  # config.json of final/ or the newest checkpoint
    model_folder: str | None = None  # which of the two it came from
    parameters: int | None = None
    corpus_report: Any = None  # corpus_report.json, any JSON value
    plan: Any = None  # plan.json, any JSON value
    problems: list[str] = field(default_factory=list)  # files there that could not be read


def read_run_folder(output_dir: str | os.PathLike) -> RunFolder:
    """Everything the page shows, read from `output_dir` alone."""
    path = Path(output_dir)
    found = RunFolder(path, records=read_log_records(path / METRICS_FILE))
    found.samples = run_samples(read_samples(path / SAMPLES_FILE))
    if (path / RESOLVED_CONFIG_NAME).is_file():
        found.config_text = (path / RESOLVED_CONFIG_NAME).read_text(encoding="utf-8", errors="replace")
        try:
            loaded = yaml.safe_load(found.config_text)
            found.config = loaded if isinstance(loaded, dict) else {}
        except yaml.YAMLError as error:
            found.problems.append(f"{RESOLVED_CONFIG_NAME}: {error}")
    summary = _read_json(path / SUMMARY_FILE, found.problems)
    found.summary = summary if isinstance(summary, dict) else None
    # The model as saved: final/ once the run finished, else its newest checkpoint.
    for folder in [path / FINAL_DIR, *list_checkpoints(path)]:
        config = _read_json(folder / "config.json", found.problems)
        if isinstance(config, dict):
            found.model_config, found.model_folder = config, folder.name
            found.parameters = count_parameters(folder)
            break
    found.corpus_report = _read_json(path / CORPUS_REPORT_FILE, found.problems)
    found.plan = _read_json(path / PLAN_FILE, found.problems)
    return found


def _read_json(path: Path, problems: list[str]) -> Any:
    """The JSON value in `path` (None when missing); one that does not parse is said in `problems`."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        problems.append(f"{path.parent.name}/{path.name}: {error}")
        return None


def run_samples(samples: Iterable[Sample]) -> list[Sample]:
    """The samples of the run that wrote the folder last, oldest first: samples.txt is only appended
    to, so a step sampled again (a resume) replaces the earlier sample, and a lower step than the one
    before (a new run) starts over from there."""
    kept: dict[tuple[int, str], Sample] = {}
    previous = -1
    for sample in samples:
        if sample.step < previous:
            kept = {key: s for key, s in kept.items() if key[0] < sample.step}
        kept.pop((sample.step, sample.prompt), None)
        kept[(sample.step, sample.prompt)] = sample
        previous = sample.step
    return list(kept.values())


def count_parameters(model_dir: Path) -> int | None:
    """The parameters in `model_dir`'s safetensors headers; None when there are none or one is unreadable."""
    total, files = 0, sorted(model_dir.glob("*.safetensors"))
    for path in files:
        try:
            with path.open("rb") as handle:
                (length,) = struct.unpack("<Q", handle.read(8))  # the format: a u64 header size, then JSON
                if length > 100_000_000:
                    return None
                header = json.loads(handle.read(length))
            total += sum(math.prod(entry["shape"]) for name, entry in header.items() if name != "__metadata__")
        except (OSError, ValueError, struct.error, KeyError, TypeError, AttributeError):
            return None
    return total if files else None


def series(records: Iterable[Mapping[str, Any]], key: str) -> list[tuple[int, float]]:
    """(step, value) of every record with a finite `key` (NaN, inf arrive as strings), by step; a step
    logged twice keeps its last."""
    points = {int(r["step"]): float(r[key]) for r in records if is_number(r.get(key)) and math.isfinite(r[key])}
    return sorted(points.items())


def thin(points: Sequence[tuple[int, float]], limit: int = MAX_CURVE_POINTS) -> list[tuple[int, float]]:
    """At most `limit` of `points`: each of limit/2 spans keeps its lowest and highest, so a spike or a
    dip still shows; the first and last are kept."""
    if len(points) <= limit:
        return list(points)
    span = math.ceil(len(points) / (limit // 2))
    kept = []
    for start in range(0, len(points), span):
        chunk = points[start : start + span]
        low = min(range(len(chunk)), key=lambda i: chunk[i][1])
        high = max(range(len(chunk)), key=lambda i: chunk[i][1])
        kept.extend(chunk[i] for i in sorted({low, high}))
    kept[0], kept[-1] = points[0], points[-1]
    return kept


@dataclass
class Evaluation:
    step: int
    loss: float | None
    perplexity: float | None
    bpb: float | None


def evaluations(records: Iterable[Mapping[str, Any]]) -> list[Evaluation]:
    """The run's evaluations by step (an evaluation redone at a step keeps the last)."""
    by_step = {int(record["step"]): record for record in records if "eval_loss" in record}
    keys = ("eval_loss", "eval_perplexity", "eval_bpb")
    return [Evaluation(step, *(_finite(by_step[step].get(key)) for key in keys)) for step in sorted(by_step)]


def _finite(value: Any) -> float | None:
    return float(value) if is_number(value) and math.isfinite(value) else None

