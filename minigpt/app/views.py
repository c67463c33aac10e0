"""What the page shows, as plain text and tables from a `RunSnapshot` (no Gradio here)."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from minigpt.training.callbacks import format_count

from .live_state import FAILED, FINISHED, IDLE, STOPPED, RunSnapshot

CURVE_COLUMNS = ["step", "loss", "curve"]  # the plot's x, y and colour
TRAIN_CURVE, EVAL_CURVE = "training", "validation"
CURVE_COLOURS = {TRAIN_CURVE: "#2563eb", EVAL_CURVE: "#f97316"}  # blue, orange


def format_duration(seconds: float | None) -> str:
    """73 -> "1:13", 3725 -> "1:02:05"; "?" when unknown."""
    if seconds is None:
        return "?"
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def status_markdown(snap: RunSnapshot) -> str:
    """Two lines: the run's numbers (status, step, loss, lr, tokens/s, ETA) and what happened last."""
    if snap.status == IDLE:
        return "No run yet: choose a config, add overrides if you like, press **Start**."
    parts = [f"**{snap.status}**", f"step {snap.step}/{snap.max_steps}"]
    if snap.loss is not None:
        parts.append(f"loss {snap.loss:.4f}")
    if snap.learning_rate is not None:
        parts.append(f"lr {snap.learning_rate:.2e}")
    if snap.tokens_per_second is not None:
        parts.append(f"{format_count(snap.tokens_per_second)} tokens/s")
    if snap.status not in (STOPPED, FINISHED, FAILED):
        parts.append(f"ETA {format_duration(snap.eta_seconds)}")
    if snap.eval_loss is not None:
        bpb = f", {snap.eval_bpb:.3f} bits/byte" if snap.eval_bpb is not None else ""
        parts.append(f"val loss {snap.eval_loss:.4f}{bpb}")
    lines = [" · ".join(parts), f"`{snap.output_dir}`"]
    if snap.message:
        lines.append(snap.message)
    return "\n\n".join(lines)


def curve_frame(snap: RunSnapshot) -> pd.DataFrame | None:
    """Long-format loss curves for a line plot (one row per point, `curve` says which); None before
    the first point.

    Gradio's plot fixes its axes and colours from the first frame it draws: an empty frame would
    leave it blank for good, and a curve missing from the first frame would never get a colour.
    So the plot starts from None, columns are typed, and a curve with no point yet is named by a
    row with no loss (NaN), which the plot skips.
    """
    rows = [(step, loss, TRAIN_CURVE) for step, loss in snap.train_curve]
    rows += [(step, loss, EVAL_CURVE) for step, loss in snap.eval_curve]
    if not rows:
        return None
    first_step = min(step for step, _, _ in rows)
    for name, points in ((TRAIN_CURVE, snap.train_curve), (EVAL_CURVE, snap.eval_curve)):
        if not points:
            rows.append((first_step, math.nan, name))
    return pd.DataFrame(rows, columns=CURVE_COLUMNS).astype(
        {"step": "int64", "loss": "float64", "curve": "str"}
    )


def samples_text(snap: RunSnapshot) -> str:
    """The newest samples first, each under a `step N, prompt P` line."""
    if not snap.samples:
        return ""
    return "\n\n".join(f"[step {s.step}, prompt {s.prompt}]\n{s.text}" for s in reversed(snap.samples))


def display_path(path: Path) -> str:
    """A path relative to the working folder when it is inside it (shorter in a dropdown)."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def config_choices(config_dir: Path) -> list[str]:
    """The run configs shipped in `config_dir` (not its hardware/ and accelerate/ profiles)."""
    return [display_path(p) for p in sorted(config_dir.glob("*.yaml"))]


__all__ = [
    "config_choices",
    "curve_frame",
    "display_path",
    "format_duration",
    "samples_text",
    "status_markdown",
]
