"""The loss-curve picture written at the end of a run (`<output_dir>/loss.png`)."""

from __future__ import annotations

import io
import math
import os
from collections.abc import Iterable, Mapping
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display needed; must precede pyplot
import matplotlib.pyplot as plt  # noqa: E402

from ..atomic import atomic_write_file  # noqa: E402


def loss_curves(
    log_history: Iterable[Mapping[str, Any]],
) -> tuple[list[tuple[int, float]], list[tuple[int, float]]]:
    """(step, training loss) and (step, validation loss) points from Trainer's `state.log_history`."""
    train, validation = {}, {}
    for record in log_history:
        step = record.get("step")
        if step is None:
            continue
        if "loss" in record and math.isfinite(record["loss"]):
            train[step] = float(record["loss"])  # a resumed run re-logs steps: keep the latest
        if "eval_loss" in record and math.isfinite(record["eval_loss"]):
            validation[step] = float(record["eval_loss"])
    return sorted(train.items()), sorted(validation.items())


def plot_loss_curves(
    log_history: Iterable[Mapping[str, Any]], path: str | os.PathLike, title: str = "MiniGPT training"
) -> None:
    """Draw training and validation loss against steps into a PNG, written atomically."""
    train, validation = loss_curves(log_history)
    figure, axes = plt.subplots(figsize=(8, 5), dpi=100)
    if train:
        axes.plot(*zip(*train, strict=True), label="training loss", color="tab:blue", linewidth=1.2)
    if validation:
        axes.plot(*zip(*validation, strict=True), label="validation loss", color="tab:orange", marker="o")
    axes.set_xlabel("optimizer step")
    axes.set_ylabel("cross-entropy (nats per token)")
    axes.set_title(title)
    axes.grid(True, alpha=0.3)
    if train or validation:
        axes.legend()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", bbox_inches="tight")
    plt.close(figure)
    with atomic_write_file(path, "wb") as handle:
        handle.write(buffer.getvalue())
