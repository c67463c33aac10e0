"""A run's report from its folder alone (loss.png, run.html; what the end of a run and
scripts/run_page.py call), and the closing line a run prints."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ConfigError
from ..run_layout import LOSS_PLOT_FILE, METRICS_FILE, RESOLVED_CONFIG_NAME, SUMMARY_FILE

if TYPE_CHECKING:  # annotations only: scripts/run_page.py redraws a folder without importing torch
    from ..training.run import TrainingResult
from .plots import write_loss_png
from .run_folder import read_run_folder, series
from .run_page import write_run_page


def write_report(output_dir: str | os.PathLike) -> Path:
    """loss.png and run.html of the run in `output_dir`; returns the page's path (ConfigError when
    `output_dir` holds no run)."""
    if not any((Path(output_dir) / name).is_file() for name in (RESOLVED_CONFIG_NAME, METRICS_FILE, SUMMARY_FILE)):
        raise ConfigError(f"{output_dir} is not a run folder: it has no {RESOLVED_CONFIG_NAME}, {METRICS_FILE} or {SUMMARY_FILE}")
    run = read_run_folder(output_dir)
    bpb = (run.summary or {}).get("eval_bpb")
    title = f"MiniGPT: {run.path.name}" + (f" (validation: {bpb:.3f} bits/byte)" if isinstance(bpb, float) else "")
    losses, evaluations = series(run.records, "loss"), series(run.records, "eval_loss")
    page = write_run_page(run)
    write_loss_png(losses, evaluations, run.path / LOSS_PLOT_FILE, title)
    return page


def report_after_training(result: TrainingResult) -> Path | None:
    """The report of a run just trained; None, said in one line, when it fails: a view of files
    already saved must not turn a trained run into a failed one."""
    try:
        return write_report(result.output_dir)
    except Exception as error:
        print(f"run page not written ({type(error).__name__}: {error}); the run's files are complete", flush=True)
        return None


def describe_result(result: TrainingResult) -> str:
    """The line printed after the run: steps, tokens, time, final and best bits/byte, where the model is."""
    minutes, seconds = divmod(int(result.runtime_seconds), 60)
    parts = [f"{'stopped' if result.stopped else 'done'}: {result.global_step} steps",
             f"{result.tokens_seen / 1e6:.2f}M tokens", f"{minutes}m{seconds:02d}s"]
    metrics = result.final_metrics  # the saved model's
    if "eval_bpb" in metrics:
        parts.append(f"final val loss {metrics['eval_loss']:.4f}, bits/byte {metrics['eval_bpb']:.4f}")
    if result.best_eval_bpb is not None:
        parts.append(f"best bits/byte {result.best_eval_bpb:.4f}")
    if result.final_dir is not None:
        later = result.final_step is not None and result.final_step != result.global_step
        worse = f" (step {result.final_step}'s: later evaluations were worse)" if later else ""
        parts.append(f"model saved to {result.final_dir}{worse}")
    return " | ".join(parts)
