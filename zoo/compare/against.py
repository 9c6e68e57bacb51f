"""A metric against one grid axis, or against the sets a metric is split by: the shapes of
Zoology's Figure 2 (MQAR accuracy against the model's width, one line per mixer) and of Mamba's
extrapolation plot (accuracy against the test length), for any comparison.

``python -m zoo compare ... --grid model.attention=a,b --grid model.d_model=16,32,64
--plot_against model.d_model`` adds to the report a table (one row per combination of the other
axes, one column per value of ``model.d_model``, each cell the mean over seeds) and
``plot_d_model.png``, the same means as lines with their confidence intervals.
``--plot_against length`` (no dot: not a flag) reads the metric's split instead, the metrics
``<metric>/length_<L>`` a task logs per test set (``test/accuracy/length_4096``), one line per
combination. A numeric axis is drawn to scale (logarithmic where its values span a factor of 4 or
more, as widths, lengths and learning rates do); any other in the grid's order, and the table ends
on each line's mean over the axis's values: against ``data.setting``, with ``--sweep`` keeping
each setting's best run, that is MAD's score (the mean over a task's settings of the best run of
each).
"""

from __future__ import annotations

import difflib
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from zoo.bench.report import markdown_table
from zoo.compare.grid import axis_label
from zoo.compare.report import line_style, pyplot, save_plot
from zoo.compare.stats import CONFIDENCE, summarize
from zoo.errors import ConfigurationError

__all__ = ["against_lines", "against_section", "check_against"]

Lines = dict[str, dict[str, list[float]]]


def check_against(key: str, axes: Mapping[str, Sequence[str]]) -> str:
    """``key`` without its dashes: a ``--grid`` axis with two or more values, or a split's name
    (no dot); a flag that is not a grid axis is refused in one line."""
    key = key.removeprefix("--")
    if key in axes:
        if len(axes[key]) < 2:
            raise ConfigurationError(f"--plot_against {key!r}: the axis has one value; give it two or more in --grid.")
        return key
    if "." in key:
        close = difflib.get_close_matches(key, list(axes), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else f": add --grid {key}=V1,V2,..."
        raise ConfigurationError(f"--plot_against {key!r} is not a --grid axis of this comparison{hint}")
    return key


def against_lines(
    records: Sequence[dict[str, Any]], key: str, axes: Mapping[str, Sequence[str]], metric: str
) -> tuple[list[str], Lines]:
    """The values along ``key`` and, per line, the metric of each run at each value: for a grid
    axis one line per combination of the other axes; for a split, one per combination, read from
    the metrics ``<metric>/<key>_<value>``."""
    lines: Lines = {}
    if key in axes:
        others = [k for k in axes if k != key]
        for record in records:
            overrides = record.get("overrides", {})
            if key in overrides and metric in record["metrics"]:
                label = ", ".join(f"{axis_label(k, others)}={overrides.get(k)}" for k in others) or metric
                lines.setdefault(label, {}).setdefault(overrides[key], []).append(float(record["metrics"][metric]))
        return list(axes[key]), lines
    prefix = f"{metric}/{key}_"
    for record in records:
        for name, value in record["metrics"].items():
            if name.startswith(prefix):
                lines.setdefault(record["combination"], {}).setdefault(name[len(prefix) :], []).append(float(value))
    values = sorted({value for points in lines.values() for value in points})
    return (sorted(values, key=float) if _numbers(values) is not None else values), lines


def _numbers(values: Sequence[str]) -> list[float] | None:
    try:
        return [float(value) for value in values]
    except ValueError:
        return None


def against_section(
    records: Sequence[dict[str, Any]], key: str, axes: Mapping[str, Sequence[str]], metric: str, folder: Path
) -> list[str]:
    """The report's Markdown lines for ``--plot_against key``: ``metric``'s mean over seeds, one
    row per line and one column per value (``-`` where no run has one, the seeds counted where
    more than one), and ``folder/plot_<key's last part>.png`` drawn beside it; a line saying so
    when no record has the metric along ``key``."""
    values, lines = against_lines(records, key, axes, metric)
    short = key.rsplit(".", 1)[-1]
    title = f"## {metric} against `{key}`"
    if not lines:
        return [
            title,
            "",
            f"No record has {metric} along {key} (a split's metrics are named {metric}/{key}_<value>).",
            "",
        ]
    categorical = _numbers(values) is None
    rows = []
    for label, points in lines.items():
        cells, means = [], []
        for value in values:
            runs = points.get(value, [])
            if runs:
                means.append(summarize(runs).mean)
            mean = f"{means[-1]:.3f}" if runs else "-"
            cells.append(mean if len(runs) <= 1 else f"{mean} ({len(runs)} seeds)")
        if categorical:  # a mean over the values, where every value has runs
            cells.append(f"{statistics.fmean(means):.3f}" if len(means) == len(values) else "-")
        rows.append([label, *cells])
    path = _plot(values, lines, key, metric, folder / f"plot_{short}.png")
    return [
        title,
        "",
        markdown_table([f"{metric} \\ {short}", *values, *([f"mean over {short}"] if categorical else [])], rows),
        "",
        f"![{metric} against {short}]({path.name})",
        "",
    ]


def _plot(values: Sequence[str], lines: Lines, key: str, metric: str, path: Path) -> Path:
    """Each line's mean against ``values``, with its interval over seeds."""
    numbers = _numbers(values)
    positions = numbers if numbers is not None else list(range(len(values)))
    figure, axis = pyplot().subplots(figsize=(6, 4.5))
    for index, (label, points) in enumerate(lines.items()):
        xs, means, errors = [], [], [[], []]
        for position, value in zip(positions, values):
            if not points.get(value):
                continue
            summary = summarize(points[value])
            xs.append(position)
            means.append(summary.mean)
            errors[0].append(0.0 if summary.sd is None else summary.mean - summary.low)
            errors[1].append(0.0 if summary.sd is None else summary.high - summary.mean)
        axis.errorbar(xs, means, yerr=errors, capsize=3, label=label, **line_style(index))
    if numbers is not None and min(numbers) > 0 and max(numbers) >= 4 * min(numbers):
        axis.set_xscale("log", base=2)
    axis.set_xticks(positions, values)
    title = f"{metric} against {key.rsplit('.', 1)[-1]} ({CONFIDENCE:.0%} intervals over seeds)"
    return save_plot(figure, axis, path, xlabel=key, ylabel=metric, title=title)
