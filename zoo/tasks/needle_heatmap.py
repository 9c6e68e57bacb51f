"""Accuracy by context length and needle depth, drawn as the needle-in-a-haystack test (Kamradt,
2023) and RULER (Hsieh et al., 2024) draw it: one cell per (length, depth), the context length
along x, the needle's depth down y (0% at the top, as the haystack is read), one colour scale from
0 to 1 for every figure so that two models' figures compare at a glance, each cell's value written
in it.

The values are the per-set accuracies the ``recall`` task logs on the needle data
(:mod:`zoo.datamodules.recall.needles`): ``<metric>/length_<L>_depth_<D>``, ``D`` in percent.
They come from a run's metrics (``zoo fit ... --test_after_fit true`` prints them; a CSVLogger's
``metrics.csv`` holds them) or from ``zoo compare``'s records (``<out>/records.jsonl``, one dict of
``metrics`` per run): given several runs' metrics, a cell is their mean (the seeds of one
combination). The colours are red through yellow to green (matplotlib's ``RdYlGn``), the scale of
the needle-in-a-haystack figures; a cell no run measured stays blank.

The figure is a :class:`matplotlib.figure.Figure` built without ``pyplot``, as
:mod:`zoo.tasks.figures` builds the tasks' other figures.
"""

from __future__ import annotations

import math
import re
import textwrap
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from zoo.errors import DataError

__all__ = ["depth_accuracies", "needle_heatmap", "save_needle_heatmap"]

_SET = re.compile(r"/length_(\d+)_depth_(\d+)$")
_TITLE_CHARACTERS_PER_INCH = 14
"""Characters of a 10-point title per inch of the heatmap's width: a longer title wraps onto more
lines (and the figure grows to hold them), so that a title naming a row's whole setting never runs
past the figure's edges."""


def depth_accuracies(
    metrics: Mapping[str, float] | Iterable[Mapping[str, float]], metric: str = "test/accuracy"
) -> dict[tuple[int, int], float]:
    """``{(length, depth percent): accuracy}`` from the metrics ``<metric>/length_<L>_depth_<D>``
    of one run's metrics, or the mean over several runs' (each a dict of metric names to values).

    Raises:
        DataError: no metric of that form.
    """
    runs = [metrics] if isinstance(metrics, Mapping) else list(metrics)
    values: dict[tuple[int, int], list[float]] = {}
    for run in runs:
        for name, value in run.items():
            found = _SET.search(name)
            if found and name[: found.start()] == metric:
                values.setdefault((int(found[1]), int(found[2])), []).append(float(value))
    if not values:
        raise DataError(
            f"No metric {metric}/length_<L>_depth_<D> among the metrics given: test a recall model on the needle data."
        )
    return {cell: sum(points) / len(points) for cell, points in values.items()}


def _tokens(length: int) -> str:
    """A length as the heatmaps label it: ``1k``, ``16k`` for whole thousands of 1,024, else the number."""
    return f"{length // 1024}k" if length % 1024 == 0 else str(length)


def needle_heatmap(accuracies: Mapping[tuple[int, int], float], *, title: str = "Needle retrieval accuracy") -> Figure:
    """The heatmap of ``{(length, depth percent): accuracy}`` (:func:`depth_accuracies`)."""
    lengths = sorted({length for length, _ in accuracies})
    depths = sorted({depth for _, depth in accuracies})
    grid = np.full((len(depths), len(lengths)), np.nan)
    for (length, depth), value in accuracies.items():
        grid[depths.index(depth), lengths.index(length)] = value
    width = max(4.0, 1.2 + 0.9 * len(lengths))
    title = textwrap.fill(title, int(_TITLE_CHARACTERS_PER_INCH * (width - 1.0)))  # the colour bar's inch aside
    figure = Figure(figsize=(width, 1.4 + 0.5 * len(depths) + 0.2 * title.count("\n")), layout="constrained")
    axes = figure.subplots()
    image = axes.imshow(grid, cmap="RdYlGn", vmin=0.0, vmax=1.0, aspect="auto")
    for row, column in np.ndindex(grid.shape):
        value = grid[row, column]
        if not math.isnan(value):
            axes.text(column, row, f"{value:.2f}", ha="center", va="center", fontsize=8)
    axes.set_xticks(range(len(lengths)), [_tokens(length) for length in lengths])
    axes.set_yticks(range(len(depths)), [f"{depth}%" for depth in depths])
    axes.set_xlabel("Context length (tokens)")
    axes.set_ylabel("Needle depth")
    axes.set_title(title, fontsize=10)
    figure.colorbar(image, ax=axes, label="Accuracy")
    return figure


def save_needle_heatmap(
    metrics: Mapping[str, float] | Iterable[Mapping[str, float]],
    path: str | Path,
    *,
    metric: str = "test/accuracy",
    title: str | None = None,
) -> Path:
    """Draw the heatmap of ``metrics`` (:func:`depth_accuracies`) to the PNG ``path``, titled
    ``title`` or the metric's name; returns the path."""
    figure = needle_heatmap(depth_accuracies(metrics, metric), title=title or f"{metric} by length and needle depth")
    path = Path(path)
    figure.savefig(path, dpi=120)
    return path
