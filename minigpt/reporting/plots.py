"""The run's curves drawn with matplotlib's object API (no pyplot, no global backend): loss.png and
the run page's inline SVGs."""

from __future__ import annotations

import io
import os
import re
from collections.abc import Sequence

import matplotlib
from matplotlib.figure import Figure
from matplotlib.ticker import EngFormatter

from ..atomic import atomic_write_file


def figure_svg(figure: Figure, prefix: str) -> str:
    """`figure` as an inline <svg> whose ids start with `prefix` (drawings share the page's ids), text as text."""
    buffer = io.BytesIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "minigpt-run-page"}):
        figure.savefig(buffer, format="svg", metadata={"Date": None})
    svg = buffer.getvalue().decode("utf-8")
    svg = svg[svg.index("<svg") :]
    svg = re.sub(r'\bid="([^"]+)"', rf'id="{prefix}-\1"', svg)
    svg = re.sub(r"url\(#([^)]+)\)", rf"url(#{prefix}-\1)", svg)
    return re.sub(r'href="#([^"]+)"', rf'href="#{prefix}-\1"', svg)


def _axes(size: tuple[float, float], ylabel: str):
    # Sized so that the axes' text shows at about the page's own size.
    figure = Figure(figsize=size, layout="constrained")
    axes = figure.subplots()
    axes.set(xlabel="optimizer step", ylabel=ylabel)
    axes.grid(True, alpha=0.3)
    axes.spines[["top", "right"]].set_visible(False)
    return figure, axes


def loss_figure(
    train: Sequence[tuple[int, float]], validation: Sequence[tuple[int, float]], size: tuple[float, float] = (11, 3.8)
) -> Figure:
    """Training loss as a line, validation loss as dots on one: the page's curve and loss.png."""
    figure, axes = _axes(size, "loss (nats per token)")
    if train:
        axes.plot(*zip(*train, strict=True), label="training", color="tab:blue", linewidth=1.0)
    if validation:
        style = {"color": "tab:orange", "marker": "o", "markersize": 4, "linewidth": 1.5}
        axes.plot(*zip(*validation, strict=True), label="validation", **style)
    if train or validation:
        axes.legend(frameon=False)
    return figure


def line_svg(points: Sequence[tuple[int, float]], ylabel: str, color: str, prefix: str, eng: bool = False) -> str:
    figure, axes = _axes((5.5, 3.2), ylabel)
    axes.plot(*zip(*points, strict=True), color=color, linewidth=1.2)
    if eng:  # 52k, not 52000 or 5.2e4
        axes.yaxis.set_major_formatter(EngFormatter(sep=""))
    axes.ticklabel_format(axis="x", style="plain")
    return figure_svg(figure, prefix)


def write_loss_png(
    train: Sequence[tuple[int, float]], validation: Sequence[tuple[int, float]], path: str | os.PathLike, title: str
) -> None:
    """loss.png: the page's loss curve with a title, written atomically."""
    figure = loss_figure(train, validation, size=(8, 5))
    figure.suptitle(title)
    with atomic_write_file(path, "wb") as handle:
        figure.savefig(handle, format="png", dpi=100)
