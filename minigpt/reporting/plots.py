"""The run's curves drawn with matplotlib's object API (no pyplot, no global backend): loss.png,
and the run page's inline SVGs, from the same series (`run_folder.series`).
"""

from __future__ import annotations

import io
import os
import re
from collections.abc import Sequence

import matplotlib
from matplotlib.figure import Figure
from matplotlib.ticker import EngFormatter

from ..atomic import atomic_write_file


def _figure_svg(figure: Figure, prefix: str) -> str:
    """`figure` as an inline <svg> element whose ids start with `prefix` (three drawings share the
    page's id space), text as text (smaller, and the browser's own font)."""
    buffer = io.BytesIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "minigpt-run-page"}):
        figure.savefig(buffer, format="svg", metadata={"Date": None})
    svg = buffer.getvalue().decode("utf-8")
    svg = svg[svg.index("<svg") :]
    svg = re.sub(r'\bid="([^"]+)"', rf'id="{prefix}-\1"', svg)
    svg = re.sub(r"url\(#([^)]+)\)", rf"url(#{prefix}-\1)", svg)
    return re.sub(r'href="#([^"]+)"', rf'href="#{prefix}-\1"', svg)


def _axes(size: tuple[float, float], ylabel: str):
    # The object API: no pyplot, no global backend. Sized so that the page shows the axes' text at
    # about the page's own size; the constrained layout keeps each drawing at exactly `size`.
    figure = Figure(figsize=size, layout="constrained")
    axes = figure.subplots()
    axes.set_xlabel("optimizer step")
    axes.set_ylabel(ylabel)
    axes.grid(True, alpha=0.3)
    for side in ("top", "right"):
        axes.spines[side].set_visible(False)
    return figure, axes


def _plot(axes, points: Sequence[tuple[int, float]], **style) -> None:
    axes.plot([p[0] for p in points], [p[1] for p in points], **style)


def loss_figure(
    train: Sequence[tuple[int, float]], validation: Sequence[tuple[int, float]], size: tuple[float, float] = (11, 3.8)
) -> Figure:
    """Training loss as a line, validation loss as dots on one: the page's curve and loss.png."""
    figure, axes = _axes(size, "loss (nats per token)")
    if train:
        _plot(axes, train, label="training", color="tab:blue", linewidth=1.0)
    if validation:
        _plot(axes, validation, label="validation", color="tab:orange", marker="o", markersize=4, linewidth=1.5)
    if train or validation:
        axes.legend(frameon=False)
    return figure


def loss_svg(train: Sequence[tuple[int, float]], validation: Sequence[tuple[int, float]]) -> str:
    return _figure_svg(loss_figure(train, validation), "loss")


def line_svg(points: Sequence[tuple[int, float]], ylabel: str, color: str, prefix: str, eng: bool = False) -> str:
    figure, axes = _axes((5.5, 3.2), ylabel)
    _plot(axes, points, color=color, linewidth=1.2)
    if eng:  # 52k, not 52000 or 5.2e4
        axes.yaxis.set_major_formatter(EngFormatter(sep=""))
    axes.ticklabel_format(axis="x", style="plain")
    return _figure_svg(figure, prefix)


def write_loss_png(
    train: Sequence[tuple[int, float]], validation: Sequence[tuple[int, float]], path: str | os.PathLike, title: str
) -> None:
    """loss.png: the page's loss curve with a title, written atomically."""
    figure = loss_figure(train, validation, size=(8, 5))
    figure.suptitle(title)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100)
    with atomic_write_file(path, "wb") as handle:
        handle.write(buffer.getvalue())
