"""A metric against one grid axis: the shape of Zoology's Figure 2 (MQAR accuracy against the
model's width, one line per mixer), for any comparison.

``python -m zoo compare ... --grid model.attention=a,b --grid model.d_model=16,32,64
--plot_against model.d_model`` adds to the report a table (one row per combination of the other
axes, one column per value of ``model.d_model``, each cell the mean over seeds) and
``plot_d_model.png``, the same means as lines with their confidence intervals. A numeric axis is
drawn to scale (logarithmic where its values span a factor of 4 or more, as widths and learning
rates do); any other axis in the grid's order.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from zoo.bench.report import markdown_table
from zoo.compare.stats import CONFIDENCE, summarize
from zoo.errors import ConfigurationError

__all__ = ["against_table", "check_against", "plot_against"]

Lines = dict[str, dict[str, list[float]]]


def check_against(key: str, axes: Mapping[str, Sequence[str]]) -> str:
    """``key`` without its dashes, refused in one line unless it is a ``--grid`` axis with two or more values."""
    key = key.removeprefix("--")
    if key not in axes:
        close = difflib.get_close_matches(key, list(axes), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else f": add --grid {key}=V1,V2,..."
        raise ConfigurationError(f"--plot_against {key!r} is not a --grid axis of this comparison{hint}")
    if len(axes[key]) < 2:
        raise ConfigurationError(f"--plot_against {key!r}: the axis has one value; give it two or more in --grid.")
    return key


def _lines(records: Sequence[dict[str, Any]], key: str, axes: Mapping[str, Sequence[str]], metric: str) -> Lines:
    """Line label (the other axes' values) -> ``key``'s value -> the metric of each run there."""
    others = [k for k in axes if k != key]
    lines: Lines = {}
    for record in records:
        overrides = record.get("overrides", {})
        if key not in overrides or metric not in record["metrics"]:
            continue
        label = ", ".join(f"{k.rsplit('.', 1)[-1]}={overrides.get(k)}" for k in others) or metric
        lines.setdefault(label, {}).setdefault(overrides[key], []).append(float(record["metrics"][metric]))
    return lines


def _numbers(values: Sequence[str]) -> list[float] | None:
    try:
        return [float(value) for value in values]
    except ValueError:
        return None


def against_table(
    records: Sequence[dict[str, Any]], key: str, axes: Mapping[str, Sequence[str]], metric: str
) -> list[str]:
    """Markdown lines: ``metric``'s mean over seeds, one row per line, one column per value of ``key``
    (``-`` where no run finished), the seeds counted in brackets where they differ from one."""
    values = list(axes[key])
    rows = []
    for label, points in _lines(records, key, axes, metric).items():
        cells = []
        for value in values:
            runs = points.get(value, [])
            mean = f"{summarize(runs).mean:.3f}" if runs else "-"
            cells.append(mean if len(runs) <= 1 else f"{mean} ({len(runs)} seeds)")
        rows.append([label, *cells])
    short = key.rsplit(".", 1)[-1]
    return [
        f"## {metric} against `{key}`",
        "",
        markdown_table([f"{metric} \\ {short}", *values], rows),
        "",
        f"![{metric} against {short}](plot_{short}.png)",
        "",
    ]


def plot_against(
    records: Sequence[dict[str, Any]], key: str, axes: Mapping[str, Sequence[str]], metric: str, folder: Path
) -> Path:
    """``folder/plot_<key's last part>.png``: each line's mean against ``key``'s values, with its interval."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    values = list(axes[key])
    numbers = _numbers(values)
    positions = numbers if numbers is not None else list(range(len(values)))
    figure, axis = plt.subplots(figsize=(6, 4.5))
    for label, points in _lines(records, key, axes, metric).items():
        xs, means, errors = [], [], [[], []]
        for position, value in zip(positions, values):
            if not points.get(value):
                continue
            summary = summarize(points[value])
            xs.append(position)
            means.append(summary.mean)
            errors[0].append(0.0 if summary.sd is None else summary.mean - summary.low)
            errors[1].append(0.0 if summary.sd is None else summary.high - summary.mean)
        axis.errorbar(xs, means, yerr=errors, marker="o", capsize=3, label=label)
    if numbers is not None and min(numbers) > 0 and max(numbers) >= 4 * min(numbers):
        axis.set_xscale("log", base=2)
    axis.set_xticks(positions, values)
    axis.set_xlabel(key)
    axis.set_ylabel(metric)
    axis.set_title(f"{metric} against {key.rsplit('.', 1)[-1]} ({CONFIDENCE:.0%} intervals over seeds)")
    axis.legend(fontsize="small")
    figure.tight_layout()
    path = folder / f"plot_{key.rsplit('.', 1)[-1]}.png"
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path
